/**
 * POST /v1/messages: the Anthropic Messages format (decisions section 6). An `anthropic`-kind
 * provider gets the request passed through; an `openai`-kind (or echo) provider gets it
 * translated to Chat Completions, its answer and stream translated back.
 */
import { Effect, Result, Stream } from "effect"
import { type ApiError, toEnvelope } from "../domain/errors.ts"
import { CurrentRequest, type RequestState } from "../http/request-context.ts"
import { json } from "../http/responses.ts"
import { namedFrame, sseResponse } from "../http/sse.ts"
import {
  type AnthropicStreamEvent,
  decodeMessagesRequest,
  type MessageDeltaEvent,
  type MessageDeltaUsage,
  type MessagesRequest
} from "../wire/anthropic-messages.ts"
import { ChatToAnthropicStream } from "../wire/translate/chat-to-anthropic-stream.ts"
import { messagesRequestToChat } from "../wire/translate/messages-request-to-chat.ts"
import { chatResponseToAnthropic } from "../wire/translate/responses.ts"
import { type AuditUsage, auditUsageFromAnthropic, auditUsageFromChat, emptyAuditUsage } from "../wire/translate/usage.ts"
import type { ResolvedModel } from "../services/catalog/ModelCatalog.ts"
import type { AnthropicClient, OpenAIClient } from "../services/providers/clients.ts"
import { admitModelRequest } from "./admission.ts"
import { recordAuditUsage, untranslatable } from "./chat-via-anthropic.ts"
import { guardedStream } from "./streaming.ts"

/** After the 200, a failure is an `event: error` frame carrying the envelope; the stream then ends. */
const messagesFailureFrame = (state: RequestState) => (error: ApiError) =>
  namedFrame("error", JSON.stringify({ type: "error", ...toEnvelope(error, state.requestId) }))

const eventFrame = (event: AnthropicStreamEvent) => namedFrame(event.type, JSON.stringify(event))

const overwriteUsage = (usage: AuditUsage, delta: MessageDeltaUsage): AuditUsage => ({
  input_tokens: delta.input_tokens ?? usage.input_tokens,
  output_tokens: delta.output_tokens,
  cache_read_tokens: delta.cache_read_input_tokens ?? usage.cache_read_tokens,
  cache_write_tokens: delta.cache_creation_input_tokens ?? usage.cache_write_tokens
})

/** Later values win where present, as in the SDKs' own accumulators. */
const mergeDeltas = (held: MessageDeltaEvent, next: MessageDeltaEvent): MessageDeltaEvent => {
  const delta = { ...held.delta }
  for (const [key, value] of Object.entries(next.delta)) if (value != null) Object.assign(delta, { [key]: value })
  const usage = { ...held.usage }
  for (const [key, value] of Object.entries(next.usage)) if (value != null) Object.assign(usage, { [key]: value })
  return { ...next, delta, usage }
}

const viaAnthropic = (client: AnthropicClient, request: MessagesRequest, resolved: ResolvedModel) =>
  Effect.gen(function*() {
    const state = yield* CurrentRequest
    const body: Record<string, unknown> = {
      ...request,
      model: resolved.model.id,
      max_tokens: Math.min(request.max_tokens, resolved.model.max_tokens)
    }
    if (request.stream !== true) {
      const response = yield* client.complete(body)
      recordAuditUsage(state, auditUsageFromAnthropic(response.usage))
      const id = typeof response.id === "string" && response.id.startsWith("msg_") ? response.id : `msg_${response.id}`
      return json({ ...response, id })
    }
    const upstream = yield* client.stream(body)
    let usage = emptyAuditUsage
    // Some Anthropic-compatible upstreams send message_delta more than once. Clients are owed the
    // documented sequence (one message_delta, right before message_stop), and a client that adds
    // up the deltas would count tokens twice, so they are merged and sent once.
    let heldDelta: MessageDeltaEvent | undefined
    const releaseDelta = () => {
      const frame = heldDelta === undefined ? "" : eventFrame(heldDelta)
      heldDelta = undefined
      return frame
    }
    const frames = upstream.pipe(
      Stream.tap((event) =>
        Effect.sync(() => {
          // message_start carries input and cache counts; message_delta the cumulative output,
          // and overwrites any input count it repeats (the SDK's own accumulator does the same).
          if (event.type === "message_start") usage = auditUsageFromAnthropic(event.message.usage)
          else if (event.type === "message_delta") usage = overwriteUsage(usage, event.usage)
          else return
          recordAuditUsage(state, usage)
        })
      ),
      Stream.map((event) => {
        if (event.type === "message_delta") {
          heldDelta = heldDelta === undefined ? event : mergeDeltas(heldDelta, event)
          return ""
        }
        // The provider client fails any stream that ends without message_stop, so this always comes.
        return event.type === "message_stop" ? releaseDelta() + eventFrame(event) : eventFrame(event)
      }),
      Stream.filter((frame) => frame !== "")
    )
    return sseResponse(yield* guardedStream(frames, messagesFailureFrame(state)))
  })

const viaChat = (client: OpenAIClient, request: MessagesRequest, resolved: ResolvedModel) =>
  Effect.gen(function*() {
    const state = yield* CurrentRequest
    const translated = messagesRequestToChat(request, { model: resolved.model.id, maxTokensCap: resolved.model.max_tokens })
    if (Result.isFailure(translated)) return yield* untranslatable(translated.failure)
    const body = translated.success as unknown as Record<string, unknown>
    if (request.stream !== true) {
      const completion = yield* client.complete(body)
      const message = chatResponseToAnthropic(completion, { model: request.model })
      if (completion.usage) recordAuditUsage(state, auditUsageFromChat(completion.usage))
      return json(message)
    }
    const upstream = yield* client.stream(body)
    const machine = new ChatToAnthropicStream({ model: request.model })
    const frames = upstream.pipe(
      Stream.map((item) => machine.push(item.chunk).map(eventFrame).join("")),
      Stream.concat(Stream.suspend(() => Stream.make(machine.end().map(eventFrame).join("")))),
      Stream.filter((frame) => frame !== ""),
      Stream.ensuring(Effect.sync(() => recordAuditUsage(state, machine.usage())))
    )
    return sseResponse(yield* guardedStream(frames, messagesFailureFrame(state)))
  })

export const messagesPipeline = Effect.gen(function*() {
  const { request, resolved, client } = yield* admitModelRequest(decodeMessagesRequest)
  return yield* (client.kind === "anthropic" ? viaAnthropic(client, request, resolved) : viaChat(client, request, resolved))
})
