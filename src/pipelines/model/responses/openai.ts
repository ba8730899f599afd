/**
 * Responses client -> OpenAI-kind provider. A provider that serves the Responses API
 * (`responses_api: true`, and Azure) gets the request forwarded as sent (model id replaced, the
 * output cap applied, the fields Azure refuses left out for Azure) and its events forwarded as received. Any other OpenAI-compatible provider (and echo)
 * gets it translated to Chat Completions, and the answer and stream translated back
 * (src/wire/translate/responses-request-to-chat.ts and friends).
 */
import { Effect, Stream } from "effect"
import type { OpenAIClient } from "../../../services/providers/clients.ts"
import type { ResponsesPassthroughRequest } from "../../../wire/openai-responses.ts"
import { ResponsesPassthroughStream } from "../../../wire/responses-stream.ts"
import { auditUsageFromResponses, chatResponseToResponses } from "../../../wire/translate/chat-response-to-responses.ts"
import { ChatToResponsesStream } from "../../../wire/translate/chat-to-responses-stream.ts"
import { auditUsageFromChat } from "../../../wire/translate/usage.ts"
import type { Adapter, AdapterContext, ClientEvent } from "../adapter.ts"
import { recordDropped } from "../dropped.ts"
import { recordAuditUsage } from "../usage.ts"
import { responsesAsChat } from "./translate.ts"
import { flattenEach } from "../stream-chunks.ts"

/**
 * Fields OpenAI's Responses API takes and Azure's refuses (`400 Unknown parameter`), which clients
 * send on their own: Codex tags every request with `client_metadata`. They only label the request,
 * so an Azure deployment gets the request without them, named in `x-modelgate-dropped`.
 */
const AZURE_REFUSES = ["client_metadata"] as const

const passthroughBody = ({ raw, resolved, state }: AdapterContext): Record<string, unknown> => {
  const body: Record<string, unknown> = { ...raw, model: resolved.model.id }
  if (resolved.provider.kind === "azure") {
    const dropped = AZURE_REFUSES.filter((field) => field in body)
    for (const field of dropped) delete body[field]
    recordDropped(state, dropped)
  }
  const cap = resolved.model.max_tokens
  // Always a limit (issue 22, finding 2): none named, or one above the cap, is the cap.
  if (typeof raw.max_output_tokens !== "number" || raw.max_output_tokens > cap) body.max_output_tokens = cap
  return body
}

const forwarded = (responses: NonNullable<OpenAIClient["responses"]>): Adapter<ResponsesPassthroughRequest, OpenAIClient> => ({
  complete: (_, __, context) =>
    Effect.map(responses.complete(passthroughBody(context)), (response) => {
      recordAuditUsage(context.state, auditUsageFromResponses(response.usage))
      return response
    }),
  stream: (_, request, context) =>
    Effect.map(responses.stream(passthroughBody(context)), (upstream) => {
      const followed = new ResponsesPassthroughStream({ model: context.resolved.model.id })
      return upstream.pipe(
        Stream.map((item): ClientEvent => {
          followed.observe(item.event)
          return { event: item.event.type, data: item.raw, value: item.event }
        }),
        Stream.ensuring(Effect.sync(() => recordAuditUsage(context.state, followed.usage())))
      )
    })
})

const translated: Adapter<ResponsesPassthroughRequest, OpenAIClient> = {
  complete: Effect.fnUntraced(function*(client, _, context) {
    const { request, chat } = yield* responsesAsChat(context)
    const completion = yield* client.complete(chat)
    if (completion.usage) recordAuditUsage(context.state, auditUsageFromChat(completion.usage))
    return chatResponseToResponses(completion, { model: context.resolved.model.id, request })
  }),
  stream: Effect.fnUntraced(function*(client, _, context) {
    const { request, chat } = yield* responsesAsChat(context)
    const upstream = yield* client.stream(chat)
    const machine = new ChatToResponsesStream({ model: context.resolved.model.id, request })
    const events = (list: ReadonlyArray<{ readonly type: string }>) =>
      list.map((event): ClientEvent => ({ event: event.type, data: JSON.stringify(event), value: event }))
    return upstream.pipe(
      Stream.map((item) => events(machine.push(item.chunk))),
      Stream.concat(Stream.suspend(() => Stream.make(events(machine.end())))),
      flattenEach,
      Stream.ensuring(Effect.sync(() => recordAuditUsage(context.state, machine.usage())))
    )
  })
}

export const responsesToOpenAI: Adapter<ResponsesPassthroughRequest, OpenAIClient> = {
  complete: (client, request, context) =>
    (client.responses === undefined ? translated : forwarded(client.responses)).complete(client, request, context),
  stream: (client, request, context) =>
    (client.responses === undefined ? translated : forwarded(client.responses)).stream(client, request, context)
}

