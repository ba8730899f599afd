/** Chat Completions client -> Gemini-kind provider: translated both ways (src/pipelines/model/gemini.ts). */
import { Effect, Stream } from "effect"
import type { GeminiClient } from "../../../services/providers/clients.ts"
import type { ChatRequest } from "../../../wire/openai-chat.ts"
import type { Adapter, ClientEvent } from "../adapter.ts"
import { geminiChatStream, geminiComplete } from "../gemini.ts"

export const chatToGemini: Adapter<ChatRequest, GeminiClient> = {
  complete: (client, chat, context) => geminiComplete(client, chat, context, chat.model),
  stream: (client, chat, context) =>
    Effect.map(
      geminiChatStream(client, chat, context, { model: chat.model, includeUsage: chat.stream_options?.include_usage === true }),
      Stream.map((chunk): ClientEvent => ({ data: JSON.stringify(chunk) }))
    )
}
