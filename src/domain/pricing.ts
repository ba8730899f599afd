/**
 * What a request costs from its tokens (issue 33), in integer micro-credits (src/domain/money.ts).
 *
 * A model's `price` is written in credits per 1,000,000 tokens for each kind of token: uncached
 * input, cache reads, cache writes (both default to `input`) and output (thinking and reasoning
 * included). A request's **cost** is its flat `credits` plus
 *
 *     ceil((input x price.input + cache_read x price.cache_read + cache_write x price.cache_write
 *           + output x price.output) / 1,000,000)
 *
 * micros: the sum is rounded up once, to the next micro-credit, never each kind on its own. With
 * prices in micros per million tokens, a product reaches 10^9 tokens x 9 x 10^15 micros, past
 * 2^53: such sums are done with BigInt, ordinary ones with numbers (they are exact while the
 * largest product is a safe integer).
 *
 * Before the provider is called the gateway reserves the request's **bound**, what it can cost at
 * most: the estimated input (`estimateInput`: an over-estimate) at the highest of the three
 * input-side prices, plus the effective output limit at the output price, plus `credits`. After
 * the answer it keeps the cost (never above the bound) and gives the rest back.
 */
import { MAX_MICROS, toMicros } from "./money.ts"

/** `price` as configured: credits per 1,000,000 tokens, decimals of at most six fractional digits. */
export interface PriceConfig {
  readonly input: number
  readonly output: number
  readonly cache_read?: number | undefined
  readonly cache_write?: number | undefined
}

/** A price in micro-credits per 1,000,000 tokens of each kind (cache prices resolved). */
export interface PriceMicros {
  readonly input: number
  readonly output: number
  readonly cache_read: number
  readonly cache_write: number
}

/** What a model charges: its flat credits per request, in micros, and its token price, if it has one. */
export interface ModelPricing {
  readonly credits_micros: number
  readonly price?: PriceMicros | undefined
}

/** Token counts as disjoint kinds: `input` is the uncached input only (what wire/translate/usage.ts `AuditUsage` holds). */
export interface TokenCounts {
  readonly input: number
  readonly cache_read: number
  readonly cache_write: number
  readonly output: number
}

export const TOKENS_PER_PRICE_UNIT = 1_000_000

/** A configured price in micros, or undefined when one of its amounts is not a valid decimal of credits. */
export const priceMicros = (price: PriceConfig): PriceMicros | undefined => {
  const input = toMicros(price.input)
  const output = toMicros(price.output)
  const cacheRead = price.cache_read === undefined ? input : toMicros(price.cache_read)
  const cacheWrite = price.cache_write === undefined ? input : toMicros(price.cache_write)
  if (input === undefined || output === undefined || cacheRead === undefined || cacheWrite === undefined) return undefined
  return { input, output, cache_read: cacheRead, cache_write: cacheWrite }
}

/** Micros the model charges per request whatever its tokens (`credits`). */
export const creditsMicros = (credits: number): number => toMicros(credits) ?? MAX_MICROS

const BIG_UNIT = BigInt(TOKENS_PER_PRICE_UNIT)

/**
 * ceil(sum of tokens x micros-per-million / 1,000,000), exactly, clamped to MAX_MICROS. Numbers
 * while every partial sum stays a safe integer (the common case: a 200,000-token request at 15
 * credits per million is 3 x 10^12), BigInt otherwise.
 */
export const tokenMicros = (terms: ReadonlyArray<readonly [tokens: number, microsPerMillion: number]>): number => {
  let total = 0
  let safe = true
  for (const [tokens, price] of terms) {
    const product = tokens * price
    total += product
    if (!Number.isSafeInteger(product) || !Number.isSafeInteger(total)) {
      safe = false
      break
    }
  }
  if (safe) {
    // Exact in floating point: `%` of integers is exact, and (total - rest) is a multiple of
    // 10^6 below 2^53, so its quotient is an exact integer (a plain division could round
    // k - 0.000001 up to k for totals near 2^53).
    const rest = total % TOKENS_PER_PRICE_UNIT
    return (total - rest) / TOKENS_PER_PRICE_UNIT + (rest > 0 ? 1 : 0)
  }
  let big = 0n
  for (const [tokens, price] of terms) big += BigInt(tokens) * BigInt(price)
  const quotient = (big + BIG_UNIT - 1n) / BIG_UNIT
  return quotient > BigInt(MAX_MICROS) ? MAX_MICROS : Number(quotient)
}

const addMicros = (a: number, b: number): number => Math.min(a + b, MAX_MICROS)

/** The cost of a request in micros: credits + its tokens at the model's price (see the file header). */
export const costMicros = (pricing: ModelPricing, tokens: TokenCounts): number => {
  const price = pricing.price
  if (price === undefined) return pricing.credits_micros
  return addMicros(pricing.credits_micros, tokenMicros([
    [tokens.input, price.input],
    [tokens.cache_read, price.cache_read],
    [tokens.cache_write, price.cache_write],
    [tokens.output, price.output]
  ]))
}

/**
 * The most a request can cost: `inputTokens` (an over-estimate, `estimateInput`) at the highest
 * input-side price (the provider decides which of them are cache reads or writes), plus
 * `maxOutputTokens` at the output price, plus credits.
 */
export const boundMicros = (pricing: ModelPricing, inputTokens: number, maxOutputTokens: number): number => {
  const price = pricing.price
  if (price === undefined) return pricing.credits_micros
  const inputSide = Math.max(price.input, price.cache_read, price.cache_write)
  return addMicros(pricing.credits_micros, tokenMicros([[inputTokens, inputSide], [maxOutputTokens, price.output]]))
}

/**
 * The most output tokens the request can get: the limit it names (`max_tokens`,
 * `max_completion_tokens`, `max_output_tokens`; the largest when it names several) clamped to the
 * model's cap, else the cap. The gateway always sends a limit no larger than the cap upstream
 * (issue 22, finding 2), so the provider cannot write more, reasoning and thinking included.
 */
export const effectiveMaxOutputTokens = (body: Readonly<Record<string, unknown>>, cap: number): number => {
  let named: number | undefined
  for (const field of ["max_tokens", "max_completion_tokens", "max_output_tokens"]) {
    const value = body[field]
    if (typeof value === "number" && Number.isFinite(value) && value > 0) named = Math.max(named ?? 0, Math.ceil(value))
  }
  return named === undefined ? cap : Math.min(named, cap)
}

/**
 * Input tokens of a request, over-estimated cheaply from its JSON body, in any client format
 * (Chat Completions, Messages, Responses, legacy completions).
 *
 * Why bytes: every tokenizer the gateway's vendors use (byte-level BPE for OpenAI and Anthropic,
 * SentencePiece with byte fallback for Gemini) makes a token of at least one byte of text, so
 * the UTF-8 length of the text is at least its token count whatever the language or the text,
 * even text made to tokenize badly. Counting it is one pass over strings the JSON parser already
 * made (1.5 ms for a 1 MiB chat body, 6 µs for a 2 KB one, where the tokenizer, even sampled as
 * TokenEstimator does, takes 20 ms for the 1 MiB body: `npx node bench/pricing-estimate.ts`), and
 * a tokenizer's count is still not the vendor's; the bound must not be below the cost, or the
 * cost would be cut to it. The price of that certainty: on English text the estimate is about
 * five times the token count, so the bound holds more of a budget while the request runs. Keys, numbers and the structure count
 * too (the vendors wrap each message and tool in tokens of their own), plus
 * `PROVIDER_OVERHEAD_TOKENS` for the prompt a vendor adds around tools.
 *
 * Media is not text: base64 data (a `data:` URL, Anthropic's `{type: "base64", data}` source,
 * Chat's `input_audio.data` and `file.file_data`) is never counted by its characters. An image
 * counts `IMAGE_TOKENS` (every vendor scales an image down to a bounded size first: Anthropic to
 * about 1,600 tokens, OpenAI's high detail to under 2,700, Gemini to 258 a tile); a document,
 * audio or other file counts its decoded bytes, at least `DOCUMENT_TOKENS`.
 *
 * `texts` are the text strings found (references, nothing copied), for the gateway's own count
 * of a stream cut before its usage arrived (TokenEstimator).
 */
export interface InputEstimate {
  /** The over-estimate the bound reserves for. */
  readonly tokens: number
  /** Tokens counted for media (images, documents, audio), included in `tokens`. */
  readonly mediaTokens: number
  readonly texts: ReadonlyArray<string>
}

export const PROVIDER_OVERHEAD_TOKENS = 512
export const IMAGE_TOKENS = 3_000
export const DOCUMENT_TOKENS = 3_000

const DATA_URL = /^data:([^;,]{0,100})(?:;[^,]{0,100})?;base64,/

/** UTF-8 length of a string without encoding it (native: a 1 MiB text in about 0.1 ms). */
export const utf8Length = (text: string): number => Buffer.byteLength(text, "utf8")

const mediaTokens = (mediaType: string, base64Chars: number): number =>
  mediaType.startsWith("image/") ? IMAGE_TOKENS : Math.max(DOCUMENT_TOKENS, Math.ceil(base64Chars * 3 / 4))

export const estimateInput = (body: unknown): InputEstimate => {
  let tokens = PROVIDER_OVERHEAD_TOKENS
  let media = 0
  const texts: Array<string> = []
  const visitString = (text: string) => {
    if (text.length > 16 && text.charCodeAt(0) === 100 /* d */ && text.startsWith("data:")) {
      const found = DATA_URL.exec(text.slice(0, 256))
      if (found !== null) {
        const cost = mediaTokens(found[1] ?? "", text.length - found[0].length)
        tokens += cost
        media += cost
        return
      }
    }
    tokens += utf8Length(text)
    texts.push(text)
  }
  const visit = (value: unknown, depth: number): void => {
    if (typeof value === "string") return visitString(value)
    if (typeof value === "number" || typeof value === "boolean") {
      tokens += 1
      return
    }
    if (typeof value !== "object" || value === null || depth > 128) return
    tokens += 1
    if (Array.isArray(value)) {
      for (const item of value) visit(item, depth + 1)
      return
    }
    const object = value as Record<string, unknown>
    // Anthropic's base64 source: { type: "base64", media_type, data }.
    if (object.type === "base64" && typeof object.data === "string") {
      const cost = mediaTokens(typeof object.media_type === "string" ? object.media_type : "", object.data.length)
      tokens += cost
      media += cost
      return
    }
    for (const key in object) {
      const item = object[key]
      tokens += key.length
      // Chat's audio ({ data, format }) and file ({ file_data }) parts carry base64 without a data: prefix.
      if (typeof item === "string" && ((key === "data" && typeof object.format === "string") || key === "file_data") && !item.startsWith("data:")) {
        const cost = mediaTokens(key === "data" ? "audio/" : "application/", item.length)
        tokens += cost
        media += cost
        continue
      }
      visit(item, depth + 1)
    }
  }
  visit(body, 0)
  return { tokens, mediaTokens: media, texts }
}
