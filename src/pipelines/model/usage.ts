/** Token counts from any format's usage, recorded in the request's audit draft. */
import type { ChatUsage } from "../../wire/openai-chat.ts"
import type { AuditUsage } from "../../wire/translate/usage.ts"
import { ValidationFailed } from "../../domain/errors.ts"
import type { Untranslatable } from "../../wire/translate/untranslatable.ts"
import type { RequestState } from "../request.ts"

/** More tokens than any model reads or writes in one request: a count above it is not believed. */
export const MAX_TOKEN_COUNT = 1_000_000_000

/**
 * A provider's token count as the gateway books it (issue 22, finding 9): a non-negative safe
 * integer up to MAX_TOKEN_COUNT, else null (unknown). A negative count used to throw in the
 * metrics after the answer was charged, turning it into a 500 or cutting a stream.
 */
export const tokenCount = (value: unknown): number | null =>
  typeof value === "number" && Number.isSafeInteger(value) && value >= 0 && value <= MAX_TOKEN_COUNT ? value : null

/** The sum of counts, null when any of them is not believable. */
const sumOf = (...values: ReadonlyArray<unknown>): number | null => {
  let total = 0
  for (const value of values) {
    const count = tokenCount(value)
    if (count === null) return null
    total += count
  }
  return tokenCount(total)
}

/**
 * OpenAI's usage (Chat Completions): `prompt_tokens` is the whole input, of which
 * `prompt_tokens_details.cached_tokens` were cache reads (and, on the compatible upstreams that
 * report it, `cache_write_tokens` cache writes); reasoning tokens are inside `completion_tokens`.
 */
export const recordChatUsage = (state: RequestState, usage: ChatUsage | null | undefined) => {
  if (!usage) return
  state.audit.prompt_tokens = tokenCount(usage.prompt_tokens)
  state.audit.cache_read_tokens = tokenCount(usage.prompt_tokens_details?.cached_tokens ?? 0)
  state.audit.cache_write_tokens = tokenCount(usage.prompt_tokens_details?.cache_write_tokens ?? 0)
  state.audit.completion_tokens = tokenCount(usage.completion_tokens)
}

/** Usage in disjoint kinds (every vendor's, wire/translate): the audit's `prompt_tokens` is their whole input. */
export const recordAuditUsage = (state: RequestState, usage: AuditUsage) => {
  state.audit.prompt_tokens = sumOf(usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens)
  state.audit.cache_read_tokens = tokenCount(usage.cache_read_tokens)
  state.audit.cache_write_tokens = tokenCount(usage.cache_write_tokens)
  state.audit.completion_tokens = tokenCount(usage.output_tokens)
}

/** A field the provider's format has no equivalent for: a 400 naming it, never silently dropped. */
export const untranslatable = (error: Untranslatable) =>
  new ValidationFailed({
    message: `cannot be translated for this model's provider: ${error.message}`,
    details: { field: error.path, reason: "untranslatable", ...(error.maxBytes === undefined ? {} : { max_bytes: error.maxBytes }) }
  })
