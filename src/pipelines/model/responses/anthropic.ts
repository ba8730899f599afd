/**
 * Responses client -> Anthropic-kind provider: Responses -> Chat Completions -> Messages on the
 * way up, and Messages -> Chat -> Responses on the way back (stream included), composing the
 * wire package's pairwise translators through Chat Completions (see ../adapter.ts).
 */
import { Effect, Result, Stream } from "effect"
import { modelReasons } from "../../../services/catalog/reasoning.ts"
import type { AnthropicClient } from "../../../services/providers/clients.ts"
import { newChatCompletionId } from "../../../wire/ids.ts"
import type { ResponsesPassthroughRequest } from "../../../wire/openai-responses.ts"
import { AnthropicToChatStream } from "../../../wire/translate/anthropic-to-chat-stream.ts"
import { chatRequestToAnthropic } from "../../../wire/translate/chat-request-to-anthropic.ts"
import { chatResponseToResponses } from "../../../wire/translate/chat-response-to-responses.ts"
import { ChatToResponsesStream } from "../../../wire/translate/chat-to-responses-stream.ts"
import { jsonModeOf } from "../../../wire/translate/json-mode.ts"
import { anthropicResponseToChat, nowSeconds } from "../../../wire/translate/responses.ts"
import { auditUsageFromAnthropic } from "../../../wire/translate/usage.ts"
import type { ChatChunk } from "../../../wire/openai-chat.ts"
import type { Adapter, AdapterContext, ClientEvent } from "../adapter.ts"
import { recordAuditUsage, untranslatable } from "../usage.ts"
import { responsesAsChat } from "./translate.ts"
import { flattenEach } from "../stream-chunks.ts"

const asMessages = Effect.fnUntraced(function*(context: AdapterContext) {
  const { request, chat } = yield* responsesAsChat(context)
  const translated = chatRequestToAnthropic(chat, {
    model: context.resolved.model.id,
    maxTokensCap: context.resolved.model.max_tokens,
    reasoning: modelReasons(context.resolved.model)
  })
  if (Result.isFailure(translated)) return yield* untranslatable(translated.failure)
  return { request, chat, body: translated.success as unknown as Record<string, unknown> }
})

export const responsesToAnthropic: Adapter<ResponsesPassthroughRequest, AnthropicClient> = {
  complete: Effect.fnUntraced(function*(client, _, context) {
    const { request, chat, body } = yield* asMessages(context)
    const response = yield* client.complete(body)
    recordAuditUsage(context.state, auditUsageFromAnthropic(response.usage))
    const completion = anthropicResponseToChat(response, { model: context.resolved.model.id, jsonMode: jsonModeOf(chat) })
    return chatResponseToResponses(completion, { model: context.resolved.model.id, request })
  }),
  stream: Effect.fnUntraced(function*(client, _, context) {
    const { request, chat, body } = yield* asMessages(context)
    const upstream = yield* client.stream(body)
    const toChat = new AnthropicToChatStream({
      id: newChatCompletionId(),
      model: context.resolved.model.id,
      created: nowSeconds(),
      includeUsage: true,
      jsonMode: jsonModeOf(chat)
    })
    const toResponses = new ChatToResponsesStream({ model: context.resolved.model.id, request })
    const events = (chunks: ReadonlyArray<unknown>) =>
      chunks.flatMap((chunk) => toResponses.push(chunk as ChatChunk)).map((event): ClientEvent => ({
        event: event.type,
        data: JSON.stringify(event),
        value: event
      }))
    const finalEvents = () => [
      ...events(toChat.end()),
      ...toResponses.end().map((event): ClientEvent => ({ event: event.type, data: JSON.stringify(event), value: event }))
    ]
    return upstream.pipe(
      Stream.map((event) => events(toChat.push(event))),
      Stream.concat(Stream.suspend(() => Stream.make(finalEvents()))),
      flattenEach,
      Stream.ensuring(Effect.sync(() => recordAuditUsage(context.state, toChat.usage())))
    )
  })
}
