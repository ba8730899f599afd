/**
 * OpenAI embeddings <-> Gemini's `:batchEmbedContents`: each input text one request of the batch
 * (Gemini takes up to 100 a call), `dimensions` as `outputDimensionality`; the vectors come back
 * in input order, base64 when asked. Token-array inputs are refused (Gemini embeds text), and
 * Gemini reports no token counts, so the usage is the gateway's word count estimate's job: the
 * caller supplies it.
 */
import type { GeminiBatchEmbedRequest, GeminiBatchEmbedResponse } from "../gemini.ts"
import { embeddingInputs, encodeEmbeddingBase64, type EmbeddingsRequest, type EmbeddingsResponse } from "../openai-embeddings.ts"
import { refuse, type Translation, translating } from "./untranslatable.ts"

/** Gemini's limit of requests in one `:batchEmbedContents` call. */
export const GEMINI_EMBED_BATCH = 100

export const geminiEmbeddingsBatches = (request: EmbeddingsRequest, model: string): Translation<ReadonlyArray<GeminiBatchEmbedRequest>> =>
  translating(() => {
    const texts = embeddingInputs(request.input).map((input, index) =>
      typeof input === "string" ? input : refuse(`input.${index}`, "Gemini embeds text; token arrays cannot be sent to Gemini models")
    )
    const batches: Array<GeminiBatchEmbedRequest> = []
    for (let start = 0; start < texts.length; start += GEMINI_EMBED_BATCH) {
      batches.push({
        requests: texts.slice(start, start + GEMINI_EMBED_BATCH).map((text) => ({
          model: `models/${model}`,
          content: { parts: [{ text }] },
          ...(request.dimensions == null ? {} : { outputDimensionality: request.dimensions })
        }))
      })
    }
    return batches
  })

/** The answers in input order as OpenAI's list, or `undefined` when one is not a whole answer. */
export const geminiEmbeddingsResponse = (
  request: EmbeddingsRequest,
  answers: ReadonlyArray<GeminiBatchEmbedResponse>,
  expected: number,
  promptTokens: number
): EmbeddingsResponse | undefined => {
  const vectors = answers.flatMap((answer) => answer.embeddings ?? [])
  if (vectors.length !== expected || vectors.some((vector) => !Array.isArray(vector.values))) return undefined
  return {
    object: "list",
    data: vectors.map((vector, index) => ({
      object: "embedding" as const,
      index,
      embedding: request.encoding_format === "base64" ? encodeEmbeddingBase64(vector.values!) : vector.values!
    })),
    model: request.model,
    usage: { prompt_tokens: promptTokens, total_tokens: promptTokens }
  }
}
