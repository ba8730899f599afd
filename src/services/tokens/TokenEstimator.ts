/**
 * Input-token estimates for providers that cannot count them (`POST /v1/messages/count_tokens`
 * toward an OpenAI-kind or echo model), with `gpt-tokenizer`'s o200k_base encoding (the
 * encoding of current OpenAI models; pure JavaScript, no native code).
 *
 * It is an estimate, and it says so in the README: the text of the system prompt, every message
 * (text, tool calls' inputs, tool results, thinking) and the tool definitions is counted, plus a
 * small overhead per message and a flat count per image or document, whose real cost depends on
 * their size. Work is bounded: at most `EXACT_CHARS` characters are tokenized exactly, the rest
 * is extrapolated at the ratio measured on that part, so a 1 MiB body costs the event loop a few
 * milliseconds, not hundreds. The encoding (several MB) is loaded on first use, not at start.
 *
 * Work is also linear by construction (issue 22, finding 1): byte-pair encoding costs the square
 * of a pre-tokenized piece's length, and a run with no break (32,768 repetitions of one CJK
 * character) is one piece: 9.6 s of event loop on this machine. The text is therefore handed to
 * the tokenizer in slices of at most `SLICE_CHARS` characters, cut at whitespace where there is
 * some, so no piece is longer and the cost is at most (length / SLICE_CHARS) * SLICE_CHARS²:
 * the same 98 KB request takes about 3 ms. A cut in the middle of a word can add a token at the
 * cut; on ordinary prose the count moves by under 1 % (whitespace cuts), which an estimate bears.
 */
import { Context, Effect, Layer } from "effect"

const EXACT_CHARS = 32_768
/** The longest piece the tokenizer ever sees: 512 measured fastest (3 ms for 32,768 CJK characters). */
export const SLICE_CHARS = 512
const PER_MESSAGE = 3
const PER_IMAGE = 1_600
const PER_DOCUMENT = 3_000

type Counter = (text: string) => number

/** Collects the countable text of a Messages-format request, and the media it references. */
const collect = (body: Record<string, unknown>) => {
  const parts: Array<string> = []
  let media = 0
  let documents = 0
  let messages = 0
  const visitBlock = (block: unknown): void => {
    if (typeof block === "string") return void parts.push(block)
    if (typeof block !== "object" || block === null) return
    const b = block as Record<string, unknown>
    switch (b.type) {
      case "image":
        media++
        return
      case "document":
        documents++
        return
      case "tool_use":
      case "server_tool_use":
        parts.push(String(b.name ?? ""), JSON.stringify(b.input ?? {}))
        return
      case "tool_result":
        if (Array.isArray(b.content)) b.content.forEach(visitBlock)
        else visitBlock(b.content)
        return
      default:
        for (const key of ["text", "thinking"]) if (typeof b[key] === "string") parts.push(b[key] as string)
    }
  }
  const system = body.system
  if (typeof system === "string") parts.push(system)
  else if (Array.isArray(system)) system.forEach(visitBlock)
  if (Array.isArray(body.messages)) {
    for (const message of body.messages) {
      messages++
      const content = (message as { content?: unknown })?.content
      if (Array.isArray(content)) content.forEach(visitBlock)
      else visitBlock(content)
    }
  }
  if (Array.isArray(body.tools)) for (const tool of body.tools) parts.push(JSON.stringify(tool))
  return { text: parts.join("\n"), media, documents, messages }
}

const isSpace = (code: number) => code === 32 || code === 10 || code === 9 || code === 13
const isHighSurrogate = (code: number) => code >= 0xd800 && code <= 0xdbff

/**
 * Counts `text` in slices of at most SLICE_CHARS characters. A slice ends after the last
 * whitespace of its second half when there is one (tokens rarely span whitespace), else at the
 * limit, never between the two halves of a surrogate pair.
 */
export const countSliced = (count: Counter, text: string): number => {
  let total = 0
  let start = 0
  while (text.length - start > SLICE_CHARS) {
    let end = start + SLICE_CHARS
    let cut = end
    while (cut > start + SLICE_CHARS / 2 && !isSpace(text.charCodeAt(cut - 1))) cut--
    if (cut > start + SLICE_CHARS / 2) end = cut
    else if (isHighSurrogate(text.charCodeAt(end - 1))) end--
    total += count(text.slice(start, end))
    start = end
  }
  return total + (start < text.length ? count(text.slice(start)) : 0)
}

export const estimateWith = (count: Counter, body: Record<string, unknown>): number => {
  const { text, media, documents, messages } = collect(body)
  let tokens: number
  if (text.length <= EXACT_CHARS) {
    tokens = countSliced(count, text)
  } else {
    const sample = countSliced(count, text.slice(0, EXACT_CHARS))
    tokens = Math.ceil(sample * (text.length / EXACT_CHARS))
  }
  return tokens + messages * PER_MESSAGE + media * PER_IMAGE + documents * PER_DOCUMENT
}

/**
 * Tokens of a text known by its first characters (`sample`, at most EXACT_CHARS of them are
 * counted) and its whole length in characters: the sample is counted exactly, the rest
 * extrapolated at the sample's ratio. The gateway's own count of a stream cut before the
 * provider's usage (issue 33: the text relayed, and the request's text).
 */
export const textTokensWith = (count: Counter, sample: string, totalChars: number): number => {
  const exact = sample.length <= EXACT_CHARS ? sample : sample.slice(0, EXACT_CHARS)
  if (exact.length === 0) return 0
  const tokens = countSliced(count, exact)
  return totalChars <= exact.length ? tokens : Math.ceil(tokens * (totalChars / exact.length))
}

/** How many characters of a text `textTokens` counts exactly; a caller keeps no more than this of it. */
export const TEXT_SAMPLE_CHARS = EXACT_CHARS

export class TokenEstimator extends Context.Service<TokenEstimator, {
  /** Estimated input tokens of a Messages-format request body. */
  readonly messagesInput: (body: Record<string, unknown>) => Effect.Effect<number>
  /** Estimated tokens of a text of `totalChars` characters whose first ones are `sample` (see textTokensWith). */
  readonly textTokens: (sample: string, totalChars: number) => Effect.Effect<number>
}>()("modelgate/TokenEstimator") {
  static readonly layer = Layer.sync(TokenEstimator, () => {
    let counter: Promise<Counter> | undefined
    const load = () => (counter ??= import("gpt-tokenizer/encoding/o200k_base").then((m) => m.countTokens as Counter))
    return TokenEstimator.of({
      messagesInput: (body) => Effect.map(Effect.promise(load), (count) => estimateWith(count, body)),
      textTokens: (sample, totalChars) => Effect.map(Effect.promise(load), (count) => textTokensWith(count, sample, totalChars))
    })
  })
}
