/**
 * `count_tokens` for a Gemini model (the Gemini API's, or Vertex's): Gemini's `:countTokens`
 * counts the request as the model will see it, translated exactly as a Messages request would be
 * (Messages -> Chat Completions -> Gemini). Where the translation refuses something, the answer
 * is `undefined` and the caller estimates.
 */
import { Effect, Result } from "effect"
import type { ResolvedModel } from "../../../services/catalog/ModelCatalog.ts"
import type { GeminiClient } from "../../../services/providers/clients.ts"
import { decodeMessagesRequest } from "../../../wire/anthropic-messages.ts"
import type { ChatRequest } from "../../../wire/openai-chat.ts"
import { chatRequestToGemini } from "../../../wire/translate/chat-to-gemini.ts"
import { messagesRequestToChat } from "../../../wire/translate/messages-request-to-chat.ts"

export const geminiCountTokens = (
  client: GeminiClient,
  raw: Record<string, unknown>,
  resolved: ResolvedModel
): Effect.Effect<number | undefined, Effect.Error<ReturnType<GeminiClient["countTokens"]>>> => {
  // A count has no output limit; the translation wants one, and it is not counted.
  const decoded = decodeMessagesRequest({ ...raw, max_tokens: resolved.model.max_tokens })
  if (!decoded.ok) return Effect.succeed(undefined)
  const chat = messagesRequestToChat(decoded.value, { model: resolved.model.id, maxTokensCap: resolved.model.max_tokens })
  if (Result.isFailure(chat)) return Effect.succeed(undefined)
  const request = chatRequestToGemini(chat.success as unknown as ChatRequest, { maxTokensCap: resolved.model.max_tokens })
  if (Result.isFailure(request)) return Effect.succeed(undefined)
  return Effect.map(client.countTokens(resolved.model.id, request.success), (counted) => (typeof counted.totalTokens === "number" ? counted.totalTokens : undefined))
}
