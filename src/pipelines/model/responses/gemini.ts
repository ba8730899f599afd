/**
 * Responses client -> Gemini-kind provider: Responses -> Chat Completions -> Gemini on the way
 * up, and back the same way (stream included), as for the other translated kinds.
 */
import { Effect, Stream } from "effect"
import type { GeminiClient } from "../../../services/providers/clients.ts"
import type { ChatRequest } from "../../../wire/openai-chat.ts"
import type { ResponsesPassthroughRequest } from "../../../wire/openai-responses.ts"
import { chatResponseToResponses } from "../../../wire/translate/chat-response-to-responses.ts"
import { ChatToResponsesStream } from "../../../wire/translate/chat-to-responses-stream.ts"
import type { Adapter, ClientEvent } from "../adapter.ts"
import { geminiChatStream, geminiComplete } from "../gemini.ts"
import { flattenEach } from "../stream-chunks.ts"
import { responsesAsChat } from "./translate.ts"

const framed = (event: { readonly type: string }): ClientEvent => ({ event: event.type, data: JSON.stringify(event), value: event })

export const responsesToGemini: Adapter<ResponsesPassthroughRequest, GeminiClient> = {
  complete: Effect.fnUntraced(function*(client, _, context) {
    const { request, chat } = yield* responsesAsChat(context)
    const completion = yield* geminiComplete(client, chat as ChatRequest, context, request.model)
    return chatResponseToResponses(completion, { model: request.model, request })
  }),
  stream: Effect.fnUntraced(function*(client, _, context) {
    const { request, chat } = yield* responsesAsChat(context)
    const chunks = yield* geminiChatStream(client, chat as ChatRequest, context, { model: request.model, includeUsage: true })
    const toResponses = new ChatToResponsesStream({ model: request.model, request })
    return chunks.pipe(
      Stream.map((chunk) => toResponses.push(chunk).map(framed)),
      Stream.concat(Stream.suspend(() => Stream.make(toResponses.end().map(framed)))),
      flattenEach
    )
  })
}
