/**
 * A priced request's meter (issue 33): what admission reserved for it (the bound) and, when it
 * ends, what it cost, from the answering model's price and the token counts the adapters put in
 * the audit draft (src/domain/pricing.ts for the arithmetic).
 *
 * Where the provider's usage is missing, the gateway counts for itself:
 * - a stream that did not end with the provider's usage (the client left, the upstream was cut,
 *   an in-band error, or a continuation took over) is charged for the text it relayed, counted
 *   by TokenEstimator, and for the input the provider reported (Anthropic and Gemini say it
 *   first), else the gateway's count of the request's text, never above the bound's estimate;
 * - a whole answer without usage (an OpenAI-compatible upstream that reports none) is charged
 *   the bound: the gateway did not see what it wrote counted;
 * - a request that failed before any answer (a refused request, a translation the provider
 *   cannot take) is charged its flat `credits` only.
 * The cost is never more than the bound, which is all that was reserved.
 */
import { Effect, type Scope } from "effect"
import {
  boundMicros,
  costMicros,
  effectiveMaxOutputTokens,
  estimateInput,
  type InputEstimate,
  type ModelPricing,
  type TokenCounts
} from "../domain/pricing.ts"
import type { TokenEstimator } from "../services/tokens/TokenEstimator.ts"
import { TEXT_SAMPLE_CHARS } from "../services/tokens/TokenEstimator.ts"
import type { RequestState } from "./request.ts"

export interface Meter {
  readonly stream: boolean
  /** The request's body, as the client sent it (for the output limit of a fallback's cap). */
  readonly body: Readonly<Record<string, unknown>>
  /** The input estimate: made once, when a token price first needs it (a flat model with fallbacks may never). */
  readonly input: InputEstimate
  /** The answering model's price; a fallback of another price replaces it (repriceCharge). */
  pricing: ModelPricing
  /** What is reserved: the bound for `pricing`. */
  bound: number
  /** Characters of output text relayed to the client, and the first TEXT_SAMPLE_CHARS of them. */
  relayedChars: number
  relayedSample: string
  /** The stream reached its end as the provider ended it (the framer's end was sent). */
  completed: boolean
  /** A continuation took over a cut stream (routing.stream_continuation): the cut part has no usage of its own. */
  continued: boolean
  /** What the request cost, once it ended. */
  cost?: MeteredCost | undefined
}

/** Whether a model's price depends on the request's tokens (a flat `credits` price does not). */
export const isTokenPriced = (pricing: ModelPricing): boolean => pricing.price !== undefined

const meters = new WeakMap<Scope.Scope, Meter>()

/** The bound of a request on a model with this price and output cap. */
export const boundFor = (meter: Pick<Meter, "body" | "input">, pricing: ModelPricing, cap: number): number =>
  isTokenPriced(pricing) ? boundMicros(pricing, meter.input.tokens, effectiveMaxOutputTokens(meter.body, cap)) : pricing.credits_micros

/** Starts the meter of a request to a token-priced model; the input estimate is made once, here. */
export const startMeter = (options: {
  readonly scope: Scope.Scope
  readonly stream: boolean
  readonly body: Readonly<Record<string, unknown>>
  readonly pricing: ModelPricing
  readonly cap: number
}): Meter => {
  let input: InputEstimate | undefined
  const meter: Meter = {
    stream: options.stream,
    body: options.body,
    get input() {
      return (input ??= estimateInput(options.body))
    },
    pricing: options.pricing,
    bound: 0,
    relayedChars: 0,
    relayedSample: "",
    completed: false,
    continued: false
  }
  meter.bound = boundFor(meter, options.pricing, options.cap)
  meters.set(options.scope, meter)
  return meter
}

export const meterOf = (scope: Scope.Scope): Meter | undefined => meters.get(scope)

/** Output text the client was sent (a stream's deltas), for the gateway's own count. */
export const relayOutput = (meter: Meter, text: string): void => {
  if (text.length === 0) return
  meter.relayedChars += text.length
  if (meter.relayedSample.length < TEXT_SAMPLE_CHARS) meter.relayedSample += text.slice(0, TEXT_SAMPLE_CHARS - meter.relayedSample.length)
}

/** The audit draft's counts as disjoint kinds; null when the provider reported none. */
const reportedCounts = (state: RequestState): TokenCounts | null => {
  const { prompt_tokens, completion_tokens } = state.audit
  if (prompt_tokens === null || completion_tokens === null) return null
  const cacheRead = state.audit.cache_read_tokens ?? 0
  const cacheWrite = state.audit.cache_write_tokens ?? 0
  return { input: Math.max(prompt_tokens - cacheRead - cacheWrite, 0), cache_read: cacheRead, cache_write: cacheWrite, output: completion_tokens }
}

/** The gateway's own count of the request's input: its text by the estimator, its media as the estimate counts them. */
const ownInputTokens = (meter: Meter, estimator: TokenEstimator["Service"]) => {
  let sample = ""
  let chars = 0
  for (const text of meter.input.texts) {
    chars += text.length + 1
    if (sample.length < TEXT_SAMPLE_CHARS) sample += text.slice(0, TEXT_SAMPLE_CHARS - sample.length) + "\n"
  }
  return Effect.map(estimator.textTokens(sample, chars), (tokens) => Math.min(tokens + meter.input.mediaTokens, meter.input.tokens))
}

export interface MeteredCost {
  readonly micros: number
  /** How the counts were known: the provider's usage, the gateway's own count, the bound, or none (credits only). */
  readonly basis: "usage" | "counted" | "bound" | "credits"
}

/**
 * What the request cost when it ends. `answered`: the request got an answer (a stream's 200, a
 * whole answer), so tokens were spent. Writes the counts it charged into the audit draft when
 * they are the gateway's own.
 */
export const meteredCost: (
  state: RequestState,
  meter: Meter,
  answered: boolean,
  estimator: TokenEstimator["Service"]
) => Effect.Effect<MeteredCost> = Effect.fnUntraced(function*(
  state: RequestState,
  meter: Meter,
  answered: boolean,
  estimator: TokenEstimator["Service"]
) {
  const reported = reportedCounts(state)
  const capped = (micros: number) => Math.min(micros, meter.bound)
  if (!meter.stream) {
    if (reported !== null) return { micros: capped(costMicros(meter.pricing, reported)), basis: "usage" }
    return answered ? { micros: meter.bound, basis: "bound" } : { micros: capped(meter.pricing.credits_micros), basis: "credits" }
  }
  if (meter.completed && !meter.continued && reported !== null) return { micros: capped(costMicros(meter.pricing, reported)), basis: "usage" }
  if (!answered && meter.relayedChars === 0 && reported === null) return { micros: capped(meter.pricing.credits_micros), basis: "credits" }
  const relayed = yield* estimator.textTokens(meter.relayedSample, meter.relayedChars)
  const output = Math.max(state.audit.completion_tokens ?? 0, relayed)
  const prompt = state.audit.prompt_tokens
  const cacheRead = prompt === null ? 0 : state.audit.cache_read_tokens ?? 0
  const cacheWrite = prompt === null ? 0 : state.audit.cache_write_tokens ?? 0
  const counts: TokenCounts = {
    // The input the provider reported before the cut (Anthropic's message_start, Gemini's every chunk), else the gateway's count.
    input: prompt === null ? yield* ownInputTokens(meter, estimator) : Math.max(prompt - cacheRead - cacheWrite, 0),
    cache_read: cacheRead,
    cache_write: cacheWrite,
    output
  }
  state.audit.prompt_tokens = counts.input + counts.cache_read + counts.cache_write
  state.audit.cache_read_tokens = counts.cache_read
  state.audit.cache_write_tokens = counts.cache_write
  state.audit.completion_tokens = counts.output
  return { micros: capped(costMicros(meter.pricing, counts)), basis: "counted" }
})
