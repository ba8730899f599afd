/** A budget as the admin API shows it: limits, what its current period used, and when it resets (issue 33). */
import { resetsAt } from "./budget-periods.ts"
import { fromMicros } from "./money.ts"
import type { BudgetLimits } from "./records.ts"

/** A key's or team's budget in its current period; `used` / `remaining` count requests (a key's view before issue 33). */
export interface KeyBudgetView {
  readonly max_requests: number | null
  readonly max_credits: number | null
  readonly period: "day" | "week" | "month" | null
  readonly used_requests: number
  readonly used_credits: number
  readonly remaining_requests: number | null
  readonly remaining_credits: number | null
  readonly resets_at: string | null
  readonly used: number
  readonly remaining: number | null
}

export const budgetView = (budget: BudgetLimits, usedRequests: number, usedMicros: number, nowMs: number): KeyBudgetView => {
  const remainingRequests = budget.max_requests === undefined ? null : Math.max(0, budget.max_requests - usedRequests)
  return {
    max_requests: budget.max_requests ?? null,
    max_credits: budget.max_credits_micros === undefined ? null : fromMicros(budget.max_credits_micros),
    period: budget.period ?? null,
    used_requests: usedRequests,
    used_credits: fromMicros(usedMicros),
    remaining_requests: remainingRequests,
    remaining_credits: budget.max_credits_micros === undefined ? null : fromMicros(Math.max(0, budget.max_credits_micros - usedMicros)),
    resets_at: resetsAt(budget.period, nowMs),
    used: budget.max_requests === undefined ? usedRequests : Math.min(usedRequests, budget.max_requests),
    remaining: remainingRequests
  }
}

