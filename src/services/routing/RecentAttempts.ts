/**
 * One deployment's attempts over the last hour, for the admin API's view of routing (issue 31):
 * how many, how many failed, and why. Sixty one-minute buckets reused in a ring, each with at
 * most MAX_REASONS reasons (the rest counted as "other"), so the memory of a deployment is fixed
 * whatever the traffic, and recording an attempt is a few increments on the request path.
 *
 * The counts are this process's: every replica keeps its own (they are not shared through Redis).
 */

const MINUTES = 60
const MINUTE_MS = 60_000
/** Distinct reasons kept per minute; more fold into OTHER_REASON. */
const MAX_REASONS = 8
export const OTHER_REASON = "other"

interface Bucket {
  /** The minute (ms / 60000) the counts belong to; a bucket of an older minute is reset before use. */
  minute: number
  attempts: number
  errors: number
  readonly reasons: Map<string, number>
}

/** The counts of a window, as the admin API shows them. */
export interface RecentSummary {
  readonly attempts: number
  readonly errors: number
  /** Errors by reason: `upstream <status>` when the upstream answered one, else the error's slug. */
  readonly by_error: Record<string, number>
}

export class RecentAttempts {
  /** Created on first use of each slot: a deployment used once an hour holds one bucket. */
  private readonly buckets: Array<Bucket | undefined> = []

  /** One attempt ended at `at` (ms); `error` is its reason when it failed, undefined when it did not. */
  record(at: number, error: string | undefined): void {
    const minute = Math.floor(at / MINUTE_MS)
    const slot = minute % MINUTES
    let bucket = this.buckets[slot]
    if (bucket === undefined) {
      bucket = { minute, attempts: 0, errors: 0, reasons: new Map() }
      this.buckets[slot] = bucket
    } else if (bucket.minute !== minute) {
      bucket.minute = minute
      bucket.attempts = 0
      bucket.errors = 0
      bucket.reasons.clear()
    }
    bucket.attempts++
    if (error === undefined) return
    bucket.errors++
    const reason = bucket.reasons.has(error) || bucket.reasons.size < MAX_REASONS ? error : OTHER_REASON
    bucket.reasons.set(reason, (bucket.reasons.get(reason) ?? 0) + 1)
  }

  /** The counts of the minute of `at` and the `minutes - 1` before it (at most 60). */
  summary(at: number, minutes: number): RecentSummary {
    const newest = Math.floor(at / MINUTE_MS)
    const oldest = newest - Math.min(minutes, MINUTES) + 1
    let attempts = 0
    let errors = 0
    const byError: Record<string, number> = {}
    for (const bucket of this.buckets) {
      if (bucket === undefined || bucket.minute < oldest || bucket.minute > newest) continue
      attempts += bucket.attempts
      errors += bucket.errors
      for (const [reason, count] of bucket.reasons) byError[reason] = (byError[reason] ?? 0) + count
    }
    return { attempts, errors, by_error: byError }
  }
}
