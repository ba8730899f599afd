/**
 * Messages client -> Gemini-kind provider: the request is translated to Chat Completions as for
 * an OpenAI-kind model, then to Gemini; the answer and the stream come back the same way.
 */
import { Effect, Result, Stream } from "effect"
import { decodedOrFail } from "../../../domain/validation.ts"
import type { GeminiClient } from "../../../services/providers/clients.ts"
import { decodeMessagesRequest, type MessagesPassthroughRequest } from "../../../wire/anthropic-messages.ts"
import type { ChatRequest } from "../../../wire/openai-chat.ts"
import { ChatToAnthropicStream } from "../../../wire/translate/chat-to-anthropic-stream.ts"
import { messagesRequestToChat } from "../../../wire/translate/messages-request-to-chat.ts"
import { chatResponseToAnthropic } from "../../../wire/translate/responses.ts"
import type { Adapter, AdapterContext } from "../adapter.ts"
import { geminiChatStream, geminiComplete } from "../gemini.ts"
import { flattenEach } from "../stream-chunks.ts"
import { untranslatable } from "../usage.ts"
import { recordDropped } from "../dropped.ts"
import { MESSAGES_TO_CHAT_DROPS, presentFields } from "../../../wire/translate/dropped-fields.ts"
import { eventOf } from "./anthropic.ts"

const asChat = ({ raw, resolved, state }: AdapterContext) =>
  Effect.flatMap(decodedOrFail(decodeMessagesRequest(raw)), (request) => {
    recordDropped(state, presentFields(raw, MESSAGES_TO_CHAT_DROPS))
    const result = messagesRequestToChat(request, { model: resolved.model.id, maxTokensCap: resolved.model.max_tokens })
    return Result.isFailure(result) ? Effect.fail(untranslatable(result.failure)) : Effect.succeed(result.success as unknown as ChatRequest)
  })

export const messagesToGemini: Adapter<MessagesPassthroughRequest, GeminiClient> = {
  complete: (client, request, context) =>
    asChat(context).pipe(
      Effect.flatMap((chat) => geminiComplete(client, chat, context, request.model)),
      Effect.map((completion) => chatResponseToAnthropic(completion, { model: request.model }))
    ),
  stream: (client, request, context) =>
    asChat(context).pipe(
      Effect.flatMap((chat) => geminiChatStream(client, chat, context, { model: request.model, includeUsage: true })),
      Effect.map((chunks) => {
        const machine = new ChatToAnthropicStream({ model: request.model })
        return chunks.pipe(
          Stream.map((chunk) => machine.push(chunk).map(eventOf)),
          Stream.concat(Stream.suspend(() => Stream.make(machine.end().map(eventOf)))),
          flattenEach
        )
      })
    )
}
