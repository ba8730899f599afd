/**
 * What this process could not keep (issue 21): records a stop could neither write to the store
 * nor spool (no data directory, a full or read-only one), and audit records dropped from a full
 * buffer. The `serve` command's exit reads it: a stop that lost anything exits non-zero and says
 * how many, so a supervisor can tell (it used to log a line and exit 0).
 *
 * Process-wide on purpose: it is about this process's exit status, whatever layers ran in it.
 */
let total = 0
const parts = new Map<string, number>()

/** Counts `count` items of `what` (e.g. "audit records") as lost. */
export const reportLoss = (what: string, count: number): void => {
  if (count <= 0) return
  total += count
  parts.set(what, (parts.get(what) ?? 0) + count)
}

/** How many were lost, and a sentence that says of what. */
export const losses = (): { readonly count: number; readonly summary: string } => ({
  count: total,
  summary: [...parts].map(([what, count]) => `${count} ${what}`).join(", ")
})
