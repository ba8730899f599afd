/**
 * The Gemini leg every client format shares: a Chat Completions request (the client's own, or
 * its translation) goes up as `generateContent` (src/wire/translate/chat-to-gemini.ts) and comes
 * back as a chat completion or chat chunks, which each client format's adapter turns into its
 * own answer with the translators it already uses for OpenAI-kind models.
 */
import { Effect, Result, Stream } from "effect"
import type { GeminiClient } from "../../services/providers/clients.ts"
import type { UpstreamFailure } from "../../services/providers/upstream-http.ts"
import type { GenerateContentRequest } from "../../wire/gemini.ts"
import { newChatCompletionId } from "../../wire/ids.ts"
import type { ChatChunk, ChatRequest, ChatResponse } from "../../wire/openai-chat.ts"
import { auditUsageFromGemini, chatRequestToGemini, geminiResponseToChat, GeminiToChatStream } from "../../wire/translate/chat-to-gemini.ts"
import { nowSeconds } from "../../wire/translate/responses.ts"
import type { ApiError } from "../../domain/errors.ts"
import type { AdapterContext } from "./adapter.ts"
import { flattenEach } from "./stream-chunks.ts"
import { recordAuditUsage, untranslatable } from "./usage.ts"

/** What the translation may build from the request: four times the body limit it was admitted under (issue 32). */
const EXPANSION_FACTOR = 4

const translated = (chat: ChatRequest, { resolved, state }: AdapterContext): Effect.Effect<GenerateContentRequest, ApiError> => {
  // The limits the request was admitted under when it has them; else the default body limit's multiple.
  const expansionBytes = state.limits === undefined ? undefined : EXPANSION_FACTOR * state.limits.max_body_bytes
  const result = chatRequestToGemini(chat, { maxTokensCap: resolved.model.max_tokens, expansionBytes })
  return Result.isFailure(result) ? Effect.fail(untranslatable(result.failure)) : Effect.succeed(result.success)
}

/** The whole answer as a chat completion named `model` (the name the client asked for). */
export const geminiComplete = (client: GeminiClient, chat: ChatRequest, context: AdapterContext, model: string): Effect.Effect<ChatResponse, ApiError> =>
  translated(chat, context).pipe(
    Effect.flatMap((body) => client.generate(context.resolved.model.id, body)),
    Effect.map((response) => {
      recordAuditUsage(context.state, auditUsageFromGemini(response.usageMetadata))
      return geminiResponseToChat(response, { id: newChatCompletionId(), model, created: nowSeconds() })
    })
  )

/** The answer as chat chunks, a usage chunk last when `includeUsage`; the audit usage is recorded when the stream ends. */
export const geminiChatStream = (
  client: GeminiClient,
  chat: ChatRequest,
  context: AdapterContext,
  options: { readonly model: string; readonly includeUsage: boolean }
): Effect.Effect<Stream.Stream<ChatChunk, UpstreamFailure>, ApiError> =>
  translated(chat, context).pipe(
    Effect.flatMap((body) => client.streamGenerate(context.resolved.model.id, body)),
    Effect.map((upstream) => {
      const machine = new GeminiToChatStream({ id: newChatCompletionId(), model: options.model, created: nowSeconds(), includeUsage: options.includeUsage })
      return upstream.pipe(
        Stream.map((event) => machine.push(event)),
        Stream.concat(Stream.suspend(() => Stream.make(machine.end()))),
        flattenEach,
        Stream.ensuring(Effect.sync(() => recordAuditUsage(context.state, machine.usage())))
      )
    })
  )
