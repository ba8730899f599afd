/** Chat Completions client -> Gemini-kind provider: translated both ways (src/pipelines/model/gemini.ts). */
import { Effect, Stream } from "effect"
import type { GeminiClient } from "../../../services/providers/clients.ts"
import type { ChatRequest } from "../../../wire/openai-chat.ts"
import type { Adapter, AdapterContext, ClientEvent } from "../adapter.ts"
import { recordDropped } from "../dropped.ts"
import { CHAT_TO_GEMINI_DROPS, presentFields } from "../../../wire/translate/dropped-fields.ts"
import { geminiChatStream, geminiComplete } from "../gemini.ts"

/** What Gemini has no place for is named (x-modelgate-dropped); the translation leaves it out. */
const named = (context: AdapterContext) => recordDropped(context.state, presentFields(context.raw, CHAT_TO_GEMINI_DROPS))

export const chatToGemini: Adapter<ChatRequest, GeminiClient> = {
  complete: (client, chat, context) => Effect.suspend(() => {
    named(context)
    return geminiComplete(client, chat, context, chat.model)
  }),
  stream: (client, chat, context) =>
    Effect.map(
      Effect.andThen(Effect.sync(() => named(context)), geminiChatStream(client, chat, context, { model: chat.model, includeUsage: chat.stream_options?.include_usage === true })),
      Stream.map((chunk): ClientEvent => ({ data: JSON.stringify(chunk) }))
    )
}
