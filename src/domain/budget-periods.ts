/**
 * The periods a budget resets on (issue 33): UTC calendar days, weeks from Monday, months. A
 * budget's usage is kept per holder (a key, a subject, a team) and period, under the period's
 * key: `day:2026-11-28`, `week:2026-11-23` (its Monday), `month:2026-11-01`; a budget without a
 * period is counted under '' and never resets. A new period starts a new row from zero, so a
 * reset is no write at all: the first request of the period counts into a row of its own.
 */
import type { BudgetPeriod } from "./records.ts"

const DAY_MS = 86_400_000

const isoDay = (ms: number) => new Date(ms).toISOString().slice(0, 10)

/** The first instant (epoch ms) of the period that holds `nowMs`. */
export const periodStartMs = (period: BudgetPeriod, nowMs: number): number => {
  const day = Math.floor(nowMs / DAY_MS) * DAY_MS
  switch (period) {
    case "day":
      return day
    case "week": {
      // 1970-01-01 was a Thursday: getUTCDay is 0 on Sunday, so Monday is (day + 6) % 7 days back.
      const weekday = (new Date(day).getUTCDay() + 6) % 7
      return day - weekday * DAY_MS
    }
    case "month": {
      const at = new Date(day)
      return Date.UTC(at.getUTCFullYear(), at.getUTCMonth(), 1)
    }
  }
}

/** The first instant (epoch ms) of the next period. */
export const periodEndMs = (period: BudgetPeriod, nowMs: number): number => {
  const start = periodStartMs(period, nowMs)
  switch (period) {
    case "day":
      return start + DAY_MS
    case "week":
      return start + 7 * DAY_MS
    case "month": {
      const at = new Date(start)
      return Date.UTC(at.getUTCFullYear(), at.getUTCMonth() + 1, 1)
    }
  }
}

/** The key a budget's usage is counted under now: '' for a budget that never resets. */
export const periodKey = (period: BudgetPeriod | null | undefined, nowMs: number): string =>
  period === undefined || period === null ? "" : `${period}:${isoDay(periodStartMs(period, nowMs))}`

/** When the period that holds `nowMs` ends (ISO 8601), or null for a budget that never resets. */
export const resetsAt = (period: BudgetPeriod | null | undefined, nowMs: number): string | null =>
  period === undefined || period === null ? null : new Date(periodEndMs(period, nowMs)).toISOString()

export const BUDGET_PERIODS: ReadonlyArray<BudgetPeriod> = ["day", "week", "month"]
