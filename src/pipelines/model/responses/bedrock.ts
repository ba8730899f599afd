/**
 * Responses client -> Bedrock-kind provider: Responses -> Chat Completions -> Converse on the way
 * up, and Converse -> Chat -> Responses on the way back (stream included), composing the wire
 * package's translators through Chat Completions (see ../adapter.ts).
 */
import { Effect, Result, Stream } from "effect"
import type { BedrockClient } from "../../../services/providers/clients.ts"
import { newChatCompletionId } from "../../../wire/ids.ts"
import type { ChatChunk } from "../../../wire/openai-chat.ts"
import type { ResponsesPassthroughRequest } from "../../../wire/openai-responses.ts"
import { chatResponseToResponses } from "../../../wire/translate/chat-response-to-responses.ts"
import { chatRequestToConverse, ConverseToChatStream, converseResponseToChat } from "../../../wire/translate/chat-to-converse.ts"
import { ChatToResponsesStream } from "../../../wire/translate/chat-to-responses-stream.ts"
import { auditUsageFromConverse } from "../../../wire/translate/converse-to-anthropic.ts"
import { jsonModeOf } from "../../../wire/translate/json-mode.ts"
import { nowSeconds } from "../../../wire/translate/responses.ts"
import type { Adapter, AdapterContext, ClientEvent } from "../adapter.ts"
import { flattenEach } from "../stream-chunks.ts"
import { recordAuditUsage, untranslatable } from "../usage.ts"
import { responsesAsChat } from "./translate.ts"

const asConverse = Effect.fnUntraced(function*(context: AdapterContext) {
  const { request, chat } = yield* responsesAsChat(context)
  const translated = chatRequestToConverse(chat, { maxTokensCap: context.resolved.model.max_tokens })
  if (Result.isFailure(translated)) return yield* untranslatable(translated.failure)
  return { request, chat, body: translated.success }
})

export const responsesToBedrock: Adapter<ResponsesPassthroughRequest, BedrockClient> = {
  complete: Effect.fnUntraced(function*(client, _, context) {
    const { request, chat, body } = yield* asConverse(context)
    const response = yield* client.converse(context.resolved.model.id, body)
    recordAuditUsage(context.state, auditUsageFromConverse(response.usage))
    const completion = converseResponseToChat(response, { model: context.resolved.model.id, jsonMode: jsonModeOf(chat) })
    return chatResponseToResponses(completion, { model: context.resolved.model.id, request })
  }),
  stream: Effect.fnUntraced(function*(client, _, context) {
    const { request, chat, body } = yield* asConverse(context)
    const upstream = yield* client.converseStream(context.resolved.model.id, body)
    const toChat = new ConverseToChatStream({
      id: newChatCompletionId(),
      model: context.resolved.model.id,
      created: nowSeconds(),
      includeUsage: true,
      jsonMode: jsonModeOf(chat)
    })
    const toResponses = new ChatToResponsesStream({ model: context.resolved.model.id, request })
    const events = (chunks: ReadonlyArray<ChatChunk>) =>
      chunks.flatMap((chunk) => toResponses.push(chunk)).map((event): ClientEvent => ({ event: event.type, data: JSON.stringify(event), value: event }))
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
