/**
 * The output limit an upstream gets: `max_tokens` clamped to the model's cap, with an Anthropic
 * thinking budget kept below it. Anthropic refuses `thinking.budget_tokens >= max_tokens`, so
 * clamping only `max_tokens` turns a valid request into one the provider refuses (Claude Code
 * sends max_tokens 32000 with budget_tokens 31999; a model capped at 8192 would get 8192/31999).
 */
import type { DecodeResult } from "./decode.ts"

/** Anthropic's smallest thinking budget. */
export const MIN_THINKING_BUDGET = 1024

export interface OutputBudget {
  readonly max_tokens: number
  /** `thinking.budget_tokens`, when thinking is enabled with a budget. */
  readonly budget_tokens?: number | undefined
}

/**
 * Clamps `max_tokens` to `cap`. A budget that the clamp left at or above `max_tokens` is lowered
 * to `max_tokens - 1`; when that is below Anthropic's minimum budget (1024) no valid budget is
 * left and the request is refused naming both fields. A budget the client itself set at or above
 * its own `max_tokens` is not repaired here: that request is invalid as sent, and whoever judges
 * it (the strict decoder, or the vendor on passthrough) says so.
 */
export const clampOutputBudget = (requested: OutputBudget, cap: number): DecodeResult<OutputBudget> => {
  const maxTokens = Math.min(requested.max_tokens, cap)
  const budget = requested.budget_tokens
  if (budget === undefined) return { ok: true, value: { max_tokens: maxTokens } }
  if (budget < maxTokens || budget >= requested.max_tokens) {
    return { ok: true, value: { max_tokens: maxTokens, budget_tokens: budget } }
  }
  const lowered = maxTokens - 1
  if (lowered < MIN_THINKING_BUDGET) {
    return {
      ok: false,
      path: "thinking.budget_tokens",
      message: `thinking.budget_tokens: this model allows at most ${cap} output tokens (max_tokens is clamped to ${maxTokens}), ` +
        `which leaves no room for a thinking budget of at least ${MIN_THINKING_BUDGET} below max_tokens; ` +
        "lower max_tokens and thinking.budget_tokens or disable thinking"
    }
  }
  return { ok: true, value: { max_tokens: maxTokens, budget_tokens: lowered } }
}
