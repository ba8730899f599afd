/**
 * The OpenAI embeddings wire format (`POST /v1/embeddings`): the request schema (fields from the
 * `openai` SDK's `EmbeddingCreateParams`), the response, and the deterministic vectors of the
 * offline echo provider.
 *
 * `encoding_format: "base64"` is what openai-node asks for by default: each vector is sent as
 * the base64 of its float32 values, little-endian, and the SDK decodes it back to numbers.
 */
import { createHash } from "node:crypto"
import { Schema } from "effect"
import { type DecodeResult, makeDecoder, NonEmptyString, PositiveInt } from "./decode.ts"
import { refuse, type Translation, translating } from "./translate/untranslatable.ts"
import type { AuditUsage } from "./translate/usage.ts"

/** OpenAI's limit on the number of inputs in one request. */
export const MAX_EMBEDDING_INPUTS = 2048

const Token = Schema.Number.check(
  Schema.makeFilter((n: number) => Number.isInteger(n) && n >= 0, { expected: "a token id (an integer >= 0)" })
)

/** A list of inputs: OpenAI takes 1 to 2048 per request. */
const inputList = <S extends Schema.Top>(item: S, what: string) =>
  Schema.Array(item).check(
    Schema.makeFilter((items: ReadonlyArray<unknown>) => items.length >= 1 && items.length <= MAX_EMBEDDING_INPUTS, {
      expected: `an array of 1 to ${MAX_EMBEDDING_INPUTS} ${what}`
    })
  )

/** One tokenised input; its length limit is the model's, which the provider checks. */
const TokenArray = Schema.Array(Token).check(
  Schema.makeFilter((tokens: ReadonlyArray<unknown>) => tokens.length >= 1, { expected: "a non-empty array of token ids" })
)

const EmbeddingInput = Schema.Union([
  NonEmptyString,
  inputList(NonEmptyString, "non-empty strings"),
  TokenArray,
  inputList(TokenArray, "token arrays")
]).annotate({ expected: "a string, an array of strings, an array of token ids or an array of token arrays" })

export const EmbeddingsRequestSchema = Schema.Struct({
  model: NonEmptyString,
  input: EmbeddingInput,
  dimensions: Schema.optionalKey(PositiveInt),
  encoding_format: Schema.optionalKey(Schema.Literals(["float", "base64"])),
  user: Schema.optionalKey(Schema.String)
})

export type EmbeddingsRequest = typeof EmbeddingsRequestSchema.Type

const decodeRequest = makeDecoder(EmbeddingsRequestSchema)

/** Validates a `/v1/embeddings` body; a failure names the offending field's path. */
export const decodeEmbeddingsRequest = (body: unknown): DecodeResult<EmbeddingsRequest> => decodeRequest(body)

export interface EmbeddingObject {
  readonly object: "embedding"
  readonly index: number
  /** Numbers, or their float32 little-endian bytes in base64 with `encoding_format: "base64"`. */
  readonly embedding: ReadonlyArray<number> | string
}

export interface EmbeddingsResponse {
  readonly object: "list"
  readonly data: ReadonlyArray<EmbeddingObject>
  readonly model: string
  readonly usage: { readonly prompt_tokens: number; readonly total_tokens: number }
}

/** One entry per vector the request asks for: strings, or token arrays. */
export const embeddingInputs = (input: EmbeddingsRequest["input"]): ReadonlyArray<string | ReadonlyArray<number>> => {
  if (typeof input === "string") return [input]
  const first = input[0]
  if (typeof first === "number") return [input as ReadonlyArray<number>]
  return input as ReadonlyArray<string | ReadonlyArray<number>>
}

/** Embeddings bill input only. */
export const auditUsageFromEmbeddings = (usage: { readonly prompt_tokens?: number | null } | null | undefined): AuditUsage => ({
  input_tokens: typeof usage?.prompt_tokens === "number" && Number.isFinite(usage.prompt_tokens) ? usage.prompt_tokens : 0,
  output_tokens: 0,
  cache_read_tokens: 0,
  cache_write_tokens: 0
})

/** Float32 little-endian bytes, base64: OpenAI's `encoding_format: "base64"`. */
export const encodeEmbeddingBase64 = (vector: ReadonlyArray<number>): string => {
  const bytes = new DataView(new ArrayBuffer(vector.length * 4))
  vector.forEach((value, index) => bytes.setFloat32(index * 4, value, true))
  return Buffer.from(bytes.buffer).toString("base64")
}

/** The inverse of `encodeEmbeddingBase64`. */
export const decodeEmbeddingBase64 = (text: string): Array<number> => {
  const buffer = Buffer.from(text, "base64")
  const view = new DataView(buffer.buffer, buffer.byteOffset, buffer.byteLength)
  return Array.from({ length: Math.floor(buffer.byteLength / 4) }, (_, index) => view.getFloat32(index * 4, true))
}

export const ECHO_EMBEDDING_DIMENSIONS = 256
/**
 * The echo provider computes vectors on the request path. Like a vendor's model it makes at most
 * its own dimension count (issue 22, finding 4: 2,048 inputs x 4,096 dimensions made a 171 MiB
 * answer and stalled the loop 3-4 s); with the 2,048-input bound an answer is at most ~6 MB,
 * and it is streamed (services/providers/echo.ts).
 */
export const ECHO_MAX_DIMENSIONS = ECHO_EMBEDDING_DIMENSIONS

/**
 * A deterministic unit vector for `input`: SHA-256 in counter mode, seeded by the input, gives
 * uniform values in [-1, 1), which are normalised. The same input always gives the same vector,
 * different inputs unrelated ones. Values are rounded to float32 so the float and base64
 * encodings carry the same numbers.
 */
export const echoEmbedding = (input: string | ReadonlyArray<number>, dimensions = ECHO_EMBEDDING_DIMENSIONS): Array<number> => {
  const seed = typeof input === "string" ? `text:${input}` : `tokens:${input.join(",")}`
  // The input is hashed once; each block continues a copy of that state (same vectors as
  // hashing seed + block afresh, without re-reading a long input per block).
  const seeded = createHash("sha256").update(seed)
  const raw = new Array<number>(dimensions)
  for (let block = 0; block * 8 < dimensions; block++) {
    const digest = seeded.copy().update(`#${block}`).digest()
    for (let j = 0; j < 8 && block * 8 + j < dimensions; j++) {
      raw[block * 8 + j] = digest.readUInt32LE(j * 4) / 2 ** 31 - 1
    }
  }
  const norm = Math.sqrt(raw.reduce((sum, value) => sum + value * value, 0)) || 1
  return raw.map((value) => Math.fround(value / norm))
}

/** Words of a string, or the length of a token array: the echo provider's token count. */
const echoTokens = (input: string | ReadonlyArray<number>): number =>
  typeof input === "string" ? Math.max(1, input.trim().split(/\s+/).filter((word) => word !== "").length) : input.length

/**
 * The echo provider's answer as JSON text in pieces, each vector computed only when its piece is
 * taken, so the caller can stream it and yield between pieces; the same JSON as
 * `echoEmbeddingsResponse`. `dimensions` above `ECHO_MAX_DIMENSIONS` is refused by name.
 */
export const echoEmbeddingsPieces = (
  request: EmbeddingsRequest,
  model: string
): Translation<{ readonly pieces: Iterable<string>; readonly promptTokens: number }> =>
  translating(() => {
    const dimensions = request.dimensions ?? ECHO_EMBEDDING_DIMENSIONS
    if (dimensions > ECHO_MAX_DIMENSIONS) refuse("dimensions", `the echo provider makes at most ${ECHO_MAX_DIMENSIONS} dimensions`)
    const inputs = embeddingInputs(request.input)
    const tokens = inputs.reduce((sum, input) => sum + echoTokens(input), 0)
    const base64 = request.encoding_format === "base64"
    function* pieces(): Generator<string> {
      yield `{"object":"list","data":[`
      for (let index = 0; index < inputs.length; index++) {
        const vector = echoEmbedding(inputs[index]!, dimensions)
        const item: EmbeddingObject = { object: "embedding", index, embedding: base64 ? encodeEmbeddingBase64(vector) : vector }
        yield (index === 0 ? "" : ",") + JSON.stringify(item)
      }
      yield `],"model":${JSON.stringify(model)},"usage":${JSON.stringify({ prompt_tokens: tokens, total_tokens: tokens })}}`
    }
    return { pieces: { [Symbol.iterator]: pieces }, promptTokens: tokens }
  })

/**
 * `usage.prompt_tokens` from the last bytes of a relayed embeddings answer (OpenAI puts `usage`
 * last), when it is there and a non-negative safe integer; otherwise undefined.
 */
export const promptTokensFromTail = (tail: string): number | undefined => {
  const at = tail.lastIndexOf(`"usage"`)
  if (at === -1) return undefined
  const open = tail.indexOf("{", at)
  const close = open === -1 ? -1 : tail.indexOf("}", open)
  if (close === -1) return undefined
  try {
    const usage = JSON.parse(tail.slice(open, close + 1)) as { prompt_tokens?: unknown }
    const tokens = usage.prompt_tokens
    return typeof tokens === "number" && Number.isSafeInteger(tokens) && tokens >= 0 ? tokens : undefined
  } catch {
    return undefined
  }
}

/** The echo provider's whole answer; `dimensions` above `ECHO_MAX_DIMENSIONS` is refused by name. */
export const echoEmbeddingsResponse = (request: EmbeddingsRequest, model: string): Translation<EmbeddingsResponse> =>
  translating(() => {
    const dimensions = request.dimensions ?? ECHO_EMBEDDING_DIMENSIONS
    if (dimensions > ECHO_MAX_DIMENSIONS) refuse("dimensions", `the echo provider makes at most ${ECHO_MAX_DIMENSIONS} dimensions`)
    const inputs = embeddingInputs(request.input)
    const tokens = inputs.reduce((sum, input) => sum + echoTokens(input), 0)
    return {
      object: "list",
      data: inputs.map((input, index): EmbeddingObject => {
        const vector = echoEmbedding(input, dimensions)
        return {
          object: "embedding",
          index,
          embedding: request.encoding_format === "base64" ? encodeEmbeddingBase64(vector) : vector
        }
      }),
      model,
      usage: { prompt_tokens: tokens, total_tokens: tokens }
    }
  })
