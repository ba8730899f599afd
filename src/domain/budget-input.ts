/**
 * Credits and budgets as clients and operators write them (issue 33): decimals of at most six
 * fractional digits, turned into micro-credits once (money.ts). Shared by the admin API, the CLI
 * and the config, so every edge refuses the same inputs with the same words.
 */
import * as Schema from "effect/Schema"
import { toMicros } from "./money.ts"
import type { BudgetLimits } from "./records.ts"

const PositiveInt = Schema.Int.check(Schema.isGreaterThan(0))

/** Credits as a client writes them: a non-negative decimal of at most six fractional digits. */
export const DecimalCredits = Schema.Finite.check(
  Schema.makeFilter((n: number) => toMicros(n) !== undefined, {
    expected: "a non-negative number of credits with at most 6 fractional digits"
  })
)

/** A budget: at least one maximum, an optional UTC calendar period (none: it never resets). */
export const BudgetInput = Schema.Struct({
  max_requests: Schema.optional(PositiveInt),
  max_credits: Schema.optional(DecimalCredits.check(Schema.makeFilter((n: number) => n > 0, { expected: "more than 0 credits" }))),
  period: Schema.optional(Schema.Literals(["day", "week", "month"]))
}).check(
  Schema.makeFilter((b: { readonly max_requests?: number | undefined; readonly max_credits?: number | undefined }) =>
    b.max_requests !== undefined || b.max_credits !== undefined, { expected: "a budget with max_requests or max_credits" })
)
export type BudgetInput = typeof BudgetInput.Type

/** A budget as given -> as kept (micro-credits). */
export const budgetLimits = (input: BudgetInput): BudgetLimits => ({
  ...(input.max_requests === undefined ? {} : { max_requests: input.max_requests }),
  ...(input.max_credits === undefined ? {} : { max_credits_micros: toMicros(input.max_credits)! }),
  ...(input.period === undefined ? {} : { period: input.period })
})
