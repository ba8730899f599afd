/**
 * OpenAI embeddings on Bedrock's embedding models, through `InvokeModel` with each model's own
 * body. Two families fit the OpenAI shape (text in, one float vector per input out):
 *
 * - Amazon Titan Text Embeddings (`amazon.titan-embed-text-v1`, `-v2:0`): one input per call
 *   (`inputText`), so a request fans out, bounded by `MAX_TITAN_INPUTS`; `dimensions` is Titan
 *   v2's `dimensions` (256, 512 or 1024, Bedrock judges).
 * - Cohere Embed (`cohere.embed-english-v3`, `cohere.embed-multilingual-v3`, `cohere.embed-v4:0`):
 *   up to 96 texts per call (`texts`), with `input_type: "search_document"` (OpenAI has no such
 *   notion; documents being embedded for search is the common use); `dimensions` is v4's
 *   `output_dimension`.
 *
 * Refused by name: token-array inputs (Bedrock's models take text), `dimensions` where the model
 * has none, any other Bedrock model. Dropped: `user`. `encoding_format: "base64"` is applied by
 * the gateway to the floats Bedrock returns.
 */
import { encodeEmbeddingBase64, type EmbeddingObject, type EmbeddingsRequest, type EmbeddingsResponse, embeddingInputs } from "../openai-embeddings.ts"
import { refuse, type Translation, translating } from "./untranslatable.ts"

/** One Titan call per input: a request may not ask for more than this. */
export const MAX_TITAN_INPUTS = 128
/** Cohere's limit on texts per call. */
export const COHERE_BATCH = 96

export type BedrockEmbeddingFamily = "titan" | "cohere"

export interface BedrockEmbeddingsPlan {
  readonly family: BedrockEmbeddingFamily
  /** The InvokeModel bodies, in input order. */
  readonly calls: ReadonlyArray<Record<string, unknown>>
}

export const bedrockEmbeddingFamily = (modelId: string): BedrockEmbeddingFamily | undefined =>
  /(^|[.:/])amazon\.titan-embed-text-/.test(modelId) ? "titan" : /(^|[.:/])cohere\.embed-/.test(modelId) ? "cohere" : undefined

export const bedrockEmbeddingsPlan = (request: EmbeddingsRequest, modelId: string): Translation<BedrockEmbeddingsPlan> =>
  translating(() => {
    const family = bedrockEmbeddingFamily(modelId)
    if (family === undefined) {
      return refuse("model", `"${request.model}" is not a Bedrock embedding model the gateway speaks (Amazon Titan Text Embeddings, Cohere Embed)`)
    }
    const texts = embeddingInputs(request.input).map((input, index) =>
      typeof input === "string" ? input : refuse(typeof request.input[0] === "number" ? "input" : `input.${index}`, "Bedrock embedding models take text, not token ids")
    )
    if (family === "titan") {
      if (texts.length > MAX_TITAN_INPUTS) refuse("input", `at most ${MAX_TITAN_INPUTS} inputs per request for Titan models (Bedrock embeds one text per call)`)
      const v1 = /titan-embed-text-v1/.test(modelId)
      if (request.dimensions !== undefined && v1) refuse("dimensions", "Titan Text Embeddings v1 has a fixed size; remove it")
      return {
        family,
        calls: texts.map((inputText) => ({ inputText, ...(request.dimensions === undefined ? {} : { dimensions: request.dimensions }) }))
      }
    }
    const v4 = /embed-v4/.test(modelId)
    if (request.dimensions !== undefined && !v4) refuse("dimensions", "Cohere Embed v3 has a fixed size; remove it")
    const calls: Array<Record<string, unknown>> = []
    for (let start = 0; start < texts.length; start += COHERE_BATCH) {
      calls.push({
        texts: texts.slice(start, start + COHERE_BATCH),
        input_type: "search_document",
        ...(v4 ? { embedding_types: ["float"] } : {}),
        ...(request.dimensions === undefined ? {} : { output_dimension: request.dimensions })
      })
    }
    return { family, calls }
  })

export interface BedrockEmbeddingAnswer {
  readonly body: unknown
  /** `x-amzn-bedrock-input-token-count`, where Bedrock sent it. */
  readonly inputTokens: number | undefined
}

const isVector = (value: unknown): value is Array<number> => Array.isArray(value) && value.every((n) => typeof n === "number")

/** The vectors of one answer, in order; `undefined` when the answer is not the family's shape. */
const vectorsOf = (family: BedrockEmbeddingFamily, body: unknown): Array<Array<number>> | undefined => {
  if (typeof body !== "object" || body === null) return undefined
  const record = body as Record<string, unknown>
  if (family === "titan") return isVector(record.embedding) ? [record.embedding] : undefined
  const embeddings = record.embeddings
  // v3 answers `embeddings: [[...]]`; v4 (with embedding_types) `embeddings: {float: [[...]]}`.
  const list = Array.isArray(embeddings) ? embeddings : typeof embeddings === "object" && embeddings !== null ? (embeddings as Record<string, unknown>).float : undefined
  return Array.isArray(list) && list.every(isVector) ? list as Array<Array<number>> : undefined
}

/** The OpenAI answer from Bedrock's, in input order; `undefined` when an answer is malformed. */
export const bedrockEmbeddingsResponse = (
  plan: BedrockEmbeddingsPlan,
  answers: ReadonlyArray<BedrockEmbeddingAnswer>,
  request: EmbeddingsRequest,
  model: string
): EmbeddingsResponse | undefined => {
  const vectors: Array<Array<number>> = []
  let tokens = 0
  for (const answer of answers) {
    const found = vectorsOf(plan.family, answer.body)
    if (found === undefined) return undefined
    vectors.push(...found)
    const counted = plan.family === "titan"
      ? (answer.body as { inputTextTokenCount?: unknown }).inputTextTokenCount
      : answer.inputTokens
    if (typeof counted === "number" && Number.isFinite(counted)) tokens += counted
  }
  if (vectors.length !== embeddingInputs(request.input).length) return undefined
  return {
    object: "list",
    data: vectors.map((vector, index): EmbeddingObject => ({
      object: "embedding",
      index,
      embedding: request.encoding_format === "base64" ? encodeEmbeddingBase64(vector) : vector
    })),
    model,
    usage: { prompt_tokens: tokens, total_tokens: tokens }
  }
}
