/**
 * `POST /v1/embeddings` on a Gemini-kind model: the inputs as `:batchEmbedContents` calls of up
 * to 100 (src/wire/translate/gemini-embeddings.ts), a few at a time, joined in input order.
 * Gemini counts no tokens for embeddings, so the usage is the gateway's estimate.
 */
import { Effect, Result } from "effect"
import { ProviderError } from "../../domain/errors.ts"
import type { ResolvedModel } from "../../services/catalog/ModelCatalog.ts"
import type { GeminiClient } from "../../services/providers/clients.ts"
import { TokenEstimator } from "../../services/tokens/TokenEstimator.ts"
import { embeddingInputs, type EmbeddingsRequest } from "../../wire/openai-embeddings.ts"
import { geminiEmbeddingsBatches, geminiEmbeddingsResponse } from "../../wire/translate/gemini-embeddings.ts"
import { untranslatable } from "./usage.ts"

const CONCURRENT_CALLS = 4

export const geminiEmbeddings = Effect.fnUntraced(function*(
  client: GeminiClient,
  batchEmbed: NonNullable<GeminiClient["batchEmbed"]>,
  request: EmbeddingsRequest,
  resolved: ResolvedModel
) {
  const batches = geminiEmbeddingsBatches(request, resolved.model.id)
  if (Result.isFailure(batches)) return yield* untranslatable(batches.failure)
  const answers = yield* Effect.forEach(batches.success, (body) => batchEmbed(resolved.model.id, body), { concurrency: CONCURRENT_CALLS })
  const texts = embeddingInputs(request.input) as ReadonlyArray<string>
  const estimated = yield* (yield* TokenEstimator).messagesInput({ messages: texts.map((content) => ({ role: "user", content })) })
  const response = geminiEmbeddingsResponse(request, answers, texts.length, estimated)
  if (response === undefined) {
    return yield* new ProviderError({
      message: `provider "${client.name}" answered with no embeddings the gateway could read`,
      details: { provider: client.name, upstream_status: 200, upstream_error: { message: "not a batchEmbedContents answer for every input" } }
    })
  }
  return response
})
