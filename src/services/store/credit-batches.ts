/**
 * One group commit of a replica's credit movements (issue 14, docs/decisions.md section 10): the
 * budget counts, block charges, reservation endings, block returns and at most one block lease
 * that accumulated since its previous commit, in one transaction that holds the workspace row
 * from its first statement, so every ledger row's `balance_after` follows the previous one in
 * `seq` order across replicas. Each movement is still checked in order: a budget never passes its
 * maximum, a block never pays more than it holds, a lease never takes more than the pool has free.
 * A charge may be conditional on a budget count of the same batch (a budgeted paid request's
 * count and charge go in one commit): it is written only when that count admitted its request.
 *
 * Written once for both dialects over a small statement interface (`$n` placeholders; SQLite runs
 * them on its raw connection, synchronously, Postgres through the SqlClient).
 */
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import type { SqlError } from "effect/sql/SqlError"
import type { Reservation } from "../../domain/records.ts"
import { microsToDecimalString } from "../../domain/money.ts"
import { DEFAULT_WORKSPACE } from "./rows.ts"

/**
 * One budget a request is counted against (issue 33): the usage row of `holder` (a key, an
 * identity subject or a team id) for `period` (budget-periods.ts `periodKey`: '' never resets),
 * with the maximums the holder's budget has now (micro-credits for `max_credits`).
 */
export interface BudgetHold {
  readonly holder: string
  readonly period: string
  readonly max_requests?: number | undefined
  readonly max_credits?: number | undefined
  /** An identity-provider subject's: its `identity_subjects` row is made by its first count, as by its first sighting. */
  readonly subject?: { readonly issuer: string; readonly subject: string } | undefined
}

/** Where a reservation's credits were counted: [holder, period] pairs, as `credit_reservations.budgets` holds them (JSON). */
export type BudgetRows = ReadonlyArray<readonly [string, string]>

export const rowsOfHolds = (holds: ReadonlyArray<BudgetHold>): BudgetRows => holds.map((h) => [h.holder, h.period] as const)

export const encodeBudgetRows = (rows: BudgetRows | undefined): string | null =>
  rows === undefined || rows.length === 0 ? null : JSON.stringify(rows)

export const decodeBudgetRows = (text: unknown): BudgetRows => {
  if (typeof text !== "string" || text === "") return []
  try {
    const parsed = JSON.parse(text) as unknown
    return Array.isArray(parsed)
      ? parsed.filter((p): p is [string, string] => Array.isArray(p) && typeof p[0] === "string" && typeof p[1] === "string")
      : []
  } catch {
    return []
  }
}

/** A request's budget check: one more request and `amount` micro-credits against every hold, all or none. */
export interface BudgetCheck {
  /** Names the check in the batch's result (unique within the batch). */
  readonly id: string
  readonly holds: ReadonlyArray<BudgetHold>
  readonly amount: number
  /** Requests it counts: 1 (absent), or 0 for a request already counted (a fallback's price taking over its reservation). */
  readonly requests?: number | undefined
}

/** Why a check was refused: the first hold, in order, that it would pass. */
export interface BudgetRefusal {
  readonly holder: string
  readonly period: string
  readonly limit: "max_requests" | "max_credits"
  readonly max: number
  readonly used: number
}

export type BudgetVerdict = { readonly _tag: "Counted" } | { readonly _tag: "Refused"; readonly refusal: BudgetRefusal }

/**
 * A statement whose result nobody reads (with `check`: only how many rows it returned), or rows
 * to insert (each store inserts them its own way).
 */
export type BatchWrite =
  | { readonly text: string; readonly params: ReadonlyArray<unknown>; readonly check?: boolean | undefined }
  | { readonly table: string; readonly columns: ReadonlyArray<string>; readonly rows: ReadonlyArray<ReadonlyArray<unknown>> }

/**
 * An optimistic batch (Postgres) found a block that could not pay what it assumed: its
 * transaction is rolled back and the batch run again the careful way.
 */
export class OptimisticMiss extends Data.TaggedError("OptimisticMiss")<{}> {}

export interface BatchTx {
  readonly dialect: "sqlite" | "postgres"
  readonly all: (text: string, params: ReadonlyArray<unknown>) => Effect.Effect<ReadonlyArray<Record<string, unknown>>, SqlError>
  /**
   * Writes whose results nobody reads, in order (Postgres sends them as one statement of
   * data-modifying CTEs, one round trip instead of one each: they touch different rows; SQLite
   * runs them one by one, rows through one prepared statement). Returns, for each write with
   * `check`, in order, how many rows it returned.
   */
  readonly writeAll: (writes: ReadonlyArray<BatchWrite>) => Effect.Effect<ReadonlyArray<number>, SqlError>
}

export interface BatchCharge {
  readonly block: string
  readonly request_id: string
  readonly amount: number
  readonly key_id: string
  readonly model: string | null
  /** The request is still in flight: the charge is held open as a reservation owned by the batch's owner. */
  readonly open: { readonly method: string | null; readonly endpoint: string | null } | undefined
  /** The request already ended with a refund: its refund row follows the charge. */
  readonly refundNote: string | undefined
  /** A failed or abandoned commit carried it: it may be written already, so look first. */
  readonly retried: boolean
  /**
   * The charge of a request whose budget check is in this batch too (one commit for both): it is
   * written only if that check admitted the request.
   */
  readonly check?: string | undefined
  /** The budget rows its amount was counted against (kept on its reservation; released for what it does not spend). */
  readonly budgets?: BudgetRows | undefined
  /** The request already ended with a settlement keeping this much (micros, < amount): the rest is refunded after the charge. */
  readonly keep?: number | undefined
}

export interface CreditBatch {
  readonly owner: string
  /** Requests to count against their budgets, in arrival order. */
  readonly checks: ReadonlyArray<BudgetCheck>
  /** Credits counted against budgets by an earlier commit whose request was then not charged (402, or a failed spend). */
  readonly releases: ReadonlyArray<{ readonly budgets: BudgetRows; readonly amount: number }>
  readonly charges: ReadonlyArray<BatchCharge>
  /** Reservations (written by an earlier commit) whose requests ended and keep their charge. */
  readonly settles: ReadonlyArray<string>
  /** Reservations whose requests ended keeping only `keep` micros: the rest goes back to the pool and their budgets. */
  readonly partialSettles: ReadonlyArray<{ readonly request_id: string; readonly actor: string; readonly keep: number }>
  /** Reservations whose requests ended with a refund. */
  readonly refunds: ReadonlyArray<{ readonly request_id: string; readonly actor: string; readonly note: string }>
  /** Blocks of this owner (or of its previous start, from a spool) whose unspent rest goes back to the pool (after the charges above). */
  readonly returns: ReadonlyArray<string>
  /** Return every block of this owner except `keep`: a failed commit may have leased one unseen. */
  readonly strays: { readonly keep: string | undefined } | undefined
  /** Lease a block of at least `min` credits (at most `size`, less as the pool nears empty). */
  readonly lease: { readonly min: number; readonly size: number } | undefined
  /** The lease came up short while other replicas held blocks: ask them to return theirs. */
  readonly reclaim: boolean
  /** Epoch ms by this replica's clock, when the batch was taken (the live count that sizes a block uses the store's). */
  readonly now: number
}

export type LeaseResult =
  | { readonly _tag: "Leased"; readonly id: string; readonly amount: number }
  | {
    readonly _tag: "Short"
    readonly free: number
    /** Credits in blocks, whoever holds them (a dead replica's too, until a sweep returns them). */
    readonly held: number
    /**
     * Credits in blocks of other replicas whose lease is valid now (issue 39): what a reclaim can
     * still bring back soon. A dead replica's block comes back only after its lease lapsed and a
     * sweep ran, which no request waits for.
     */
    readonly heldLive: number
  }

export interface BatchResult {
  /** Each check's verdict, by its id. */
  readonly checks: ReadonlyMap<string, BudgetVerdict>
  /** Charges this commit wrote. */
  readonly written: ReadonlySet<string>
  /** Retried charges an earlier, abandoned commit had written after all. */
  readonly found: ReadonlySet<string>
  /** Charges whose block was gone (swept after this replica's lease lapsed): not charged. */
  readonly dropped: ReadonlySet<string>
  /** Charges whose budget count in the same batch was refused: not charged (the request is answered 429). */
  readonly unbudgeted: ReadonlySet<string>
  readonly refunded: ReadonlyArray<Reservation>
  readonly lease: LeaseResult | undefined
  readonly reclaim: number
  readonly live: number
  /**
   * The budget rows this commit raised, with what they hold after it and the credit maximum the
   * checks counted them against (issue 33: alerts watch them; no read of its own).
   */
  readonly budgetUsage: ReadonlyArray<BudgetUsageAfter>
  /** The pool's balance after this commit (micros). */
  readonly balance: number
}

/** A budget row after a commit counted against it. */
export interface BudgetUsageAfter {
  readonly holder: string
  /** `''` (never resets) or `day:`/`week:`/`month:` and the period's first UTC date. */
  readonly period: string
  readonly credits: number
  readonly max_credits: number
}

const n = (value: unknown) => Number(value)

/**
 * The store's clock in epoch milliseconds, as SQL (issue 21): leases are written and judged by
 * the one clock every replica shares, never by a replica's own (one running two minutes ahead
 * refunded the others' charges and took their blocks).
 */
export const storeNowMs = (dialect: "sqlite" | "postgres") =>
  dialect === "postgres"
    ? "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"
    : "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"

const placeholders = (from: number, count: number) => Array.from({ length: count }, (_, i) => `$${from + i}`).join(", ")

const usageKey = (holder: string, period: string) => `${period}\u0000${holder}`

/** A budget row as a batch holds it: `dirty` once changed, `max_credits` once a check raised it. */
interface UsageRow {
  readonly holder: string
  readonly period: string
  requests: number
  credits: number
  dirty: boolean
  max_credits?: number
}

/** A batch's budget rows, made if missing, locked and read into `rows` (budgetUsage's `load`). */
const loadUsageRows = Effect.fnUntraced(function*(tx: BatchTx, rows: Map<string, UsageRow>, holds: ReadonlyArray<readonly [string, string]>) {
  const wanted = [...new Map(holds.map(([holder, period]) => [usageKey(holder, period), [holder, period] as const])).values()]
    .sort((a, b) => a[1] === b[1] ? (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0) : a[1] < b[1] ? -1 : 1)
  for (let i = 0; i < wanted.length; i += 500) {
    const part = wanted.slice(i, i + 500)
    const params = part.flat()
    const values = part.map((_, j) => `($${2 * j + 1}, $${2 * j + 2}, 0, 0)`).join(", ")
    // Made if missing and read in one statement (issue 38: one round trip less per commit on
    // Postgres): the no-op update of a row that exists locks it as FOR UPDATE would, in
    // the sorted order of the values, as every commit takes them.
    const found = yield* tx.all(
      `INSERT INTO budget_usage (holder, period_start, requests, credits) VALUES ${values}
        ON CONFLICT (holder, period_start) DO UPDATE SET requests = budget_usage.requests
        RETURNING holder, period_start, requests, credits`,
      params
    )
    for (const r of found) {
      const holder = String(r.holder)
      const period = String(r.period_start)
      rows.set(usageKey(holder, period), { holder, period, requests: n(r.requests), credits: n(r.credits), dirty: false })
    }
  }
})

/**
 * The budget rows of a batch, locked (after the workspace row, as every commit and sweep takes
 * them) and read once; checks and releases change them in memory, and `flush` writes the ones
 * that changed. A row a release names that the batch did not load (no check of this batch counts
 * against it) is released by a statement of its own.
 */
const budgetUsage = (tx: BatchTx) =>
  Effect.sync(() => {
    const rows = new Map<string, UsageRow>()
    // Postgres sends the writes as one statement, where a row may be updated once: one release per row.
    const direct = new Map<string, { holder: string; period: string; amount: number }>()
    return {
      load: (holds: ReadonlyArray<readonly [string, string]>) => loadUsageRows(tx, rows, holds),
      check: (check: BudgetCheck): BudgetVerdict => {
        const counted = check.requests ?? 1
        for (const hold of check.holds) {
          const row = rows.get(usageKey(hold.holder, hold.period))
          const requests = row?.requests ?? 0
          const credits = row?.credits ?? 0
          if (hold.max_requests !== undefined && counted > 0 && requests + counted > hold.max_requests) {
            return { _tag: "Refused", refusal: { holder: hold.holder, period: hold.period, limit: "max_requests", max: hold.max_requests, used: requests } }
          }
          if (hold.max_credits !== undefined && credits + check.amount > hold.max_credits) {
            return { _tag: "Refused", refusal: { holder: hold.holder, period: hold.period, limit: "max_credits", max: hold.max_credits, used: credits } }
          }
        }
        for (const hold of check.holds) {
          const row = rows.get(usageKey(hold.holder, hold.period))
          if (row === undefined) continue
          row.requests += counted
          row.credits += check.amount
          row.dirty = true
          if (hold.max_credits !== undefined && check.amount > 0) row.max_credits = hold.max_credits
        }
        return { _tag: "Counted" }
      },
      release: (budgets: BudgetRows, amount: number) => {
        if (amount <= 0) return
        for (const [holder, period] of budgets) {
          const row = rows.get(usageKey(holder, period))
          if (row !== undefined) {
            row.credits = Math.max(0, row.credits - amount)
            row.dirty = true
          } else {
            const key = usageKey(holder, period)
            const pending = direct.get(key)
            if (pending !== undefined) pending.amount += amount
            else direct.set(key, { holder, period, amount })
          }
        }
      },
      raised: (): Array<BudgetUsageAfter> =>
        [...rows.values()].flatMap((r) =>
          r.max_credits === undefined ? [] : [{ holder: r.holder, period: r.period, credits: r.credits, max_credits: r.max_credits }]
        ),
      writes: (): Array<BatchWrite> => [
        ...[...rows.values()].filter((r) => r.dirty).map((r) => ({
          text: `UPDATE budget_usage SET requests = $1, credits = $2 WHERE holder = $3 AND period_start = $4`,
          params: [r.requests, r.credits, r.holder, r.period]
        })),
        ...[...direct.values()].map((r) => ({
          text: `UPDATE budget_usage SET credits = CASE WHEN credits > $1 THEN credits - $1 ELSE 0 END WHERE holder = $2 AND period_start = $3`,
          params: [r.amount, r.holder, r.period]
        }))
      ]
    }
  })

/**
 * `optimistic` (Postgres, issue 25): each block's charge is not sent on its own and awaited
 * before the ledger rows are computed, but goes in the one statement of every write, assumed to
 * pay (a block only fails to when another replica reclaimed it after this one's lease lapsed);
 * should one not pay, the batch fails with OptimisticMiss (its transaction rolled back) and is
 * run again without this. One round trip less per commit.
 */
export const runCreditBatch = Effect.fnUntraced(function*(tx: BatchTx, batch: CreditBatch, newBlockId: () => string, optimistic = false) {
  const lock = tx.dialect === "postgres" ? " FOR UPDATE" : ""
  const [ws] = yield* tx.all(`SELECT credits, leased, reclaim FROM workspaces WHERE id = $1${lock}`, [DEFAULT_WORKSPACE])
  let credits = n(ws!.credits)
  let leased = n(ws!.leased)
  let reclaim = n(ws!.reclaim)
  const ts = new Date().toISOString()
  const ledger: Array<ReadonlyArray<unknown>> = []
  const reservations: Array<ReadonlyArray<unknown>> = []
  const row = (kind: "charge" | "refund", amount: number, actor: string, keyId: string | null, requestId: string, model: string | null, note: string | null) =>
    ledger.push([ts, DEFAULT_WORKSPACE, kind, amount, credits, actor, keyId, requestId, model, note])

  // Budgets (issue 33): every row a check counts against, locked once; each check in order, all its holds or none.
  const usage = yield* budgetUsage(tx)
  // A subject counted before its sighting was written is recorded by its count. No conflict
  // target: a racing first sighting conflicts on (issuer, subject) as well as on id.
  const subjects = new Map<string, { issuer: string; subject: string }>()
  for (const check of batch.checks) for (const hold of check.holds) if (hold.subject !== undefined) subjects.set(hold.holder, hold.subject)
  for (const [id, subject] of subjects) {
    yield* tx.all(
      `INSERT INTO identity_subjects (id, issuer, subject, budget_used, first_seen_at, last_seen_at) VALUES ($1, $2, $3, 0, $4, $4) ON CONFLICT DO NOTHING`,
      [id, subject.issuer, subject.subject, ts]
    )
  }
  if (batch.checks.length > 0) yield* usage.load(batch.checks.flatMap((c) => c.holds.map((h) => [h.holder, h.period] as const)))
  const checks = new Map<string, BudgetVerdict>()
  for (const check of batch.checks) checks.set(check.id, usage.check(check))
  for (const released of batch.releases) usage.release(released.budgets, released.amount)

  // Retried charges an abandoned commit wrote after all are not written again.
  const found = new Set<string>()
  const retried = batch.charges.filter((c) => c.retried).map((c) => c.request_id)
  for (let i = 0; i < retried.length; i += 500) {
    const ids = retried.slice(i, i + 500)
    const rows = yield* tx.all(`SELECT request_id FROM credit_ledger WHERE kind = 'charge' AND request_id IN (${placeholders(1, ids.length)})`, ids)
    for (const r of rows) found.add(String(r.request_id))
  }

  const written = new Set<string>()
  const dropped = new Set<string>()
  const unbudgeted = new Set<string>()
  const byBlock = new Map<string, Array<BatchCharge>>()
  for (const charge of batch.charges) {
    if (found.has(charge.request_id)) continue
    // Checked above, in order: a refused check leaves its charge unwritten (not charged, not served).
    if (charge.check !== undefined && checks.get(charge.check)?._tag === "Refused") {
      unbudgeted.add(charge.request_id)
      continue
    }
    const list = byBlock.get(charge.block)
    if (list === undefined) byBlock.set(charge.block, [charge])
    else list.push(charge)
  }
  const blockCharges: Array<BatchWrite> = []
  for (const [block, charges] of byBlock) {
    const total = charges.reduce((sum, c) => sum + c.amount, 0)
    // By id alone: a spool taken back at start charges the blocks of the previous start.
    const charge = `UPDATE credit_blocks SET remaining = remaining - $1 WHERE id = $2 AND remaining >= $1 RETURNING remaining`
    if (optimistic) blockCharges.push({ text: charge, params: [total, block], check: true })
    const paid = optimistic ? [true] : yield* tx.all(charge, [total, block])
    if (paid.length === 0) {
      for (const c of charges) {
        dropped.add(c.request_id)
        // Not charged: what its budgets counted for it goes back.
        if (c.budgets !== undefined) usage.release(c.budgets, c.amount)
      }
      continue
    }
    leased -= total
    for (const c of charges) {
      credits -= c.amount
      row("charge", -c.amount, c.key_id, c.key_id, c.request_id, c.model, null)
      written.add(c.request_id)
      if (c.refundNote !== undefined) {
        credits += c.amount
        row("refund", c.amount, c.key_id, c.key_id, c.request_id, c.model, c.refundNote)
        if (c.budgets !== undefined) usage.release(c.budgets, c.amount)
      } else if (c.keep !== undefined && c.keep < c.amount) {
        const rest = c.amount - Math.max(0, c.keep)
        credits += rest
        row("refund", rest, c.key_id, c.key_id, c.request_id, c.model, settledNote(c.amount - rest, c.amount))
        if (c.budgets !== undefined) usage.release(c.budgets, rest)
      } else if (c.open !== undefined) {
        reservations.push([c.request_id, batch.owner, c.amount, c.key_id, c.model, c.open.method, c.open.endpoint, ts, encodeBudgetRows(c.budgets)])
      }
    }
  }

  const refunded: Array<Reservation> = []
  const ended = (r: Record<string, unknown>): Reservation => ({
    request_id: String(r.request_id),
    owner: String(r.owner),
    amount: n(r.amount),
    key_id: (r.key_id as string | null) ?? null,
    model: (r.model as string | null) ?? null,
    method: (r.method as string | null) ?? null,
    endpoint: (r.endpoint as string | null) ?? null,
    created_at: String(r.created_at)
  })
  for (const refund of batch.refunds) {
    // The delete decides who refunds (this owner's end, or a sweeper that thought it dead).
    const [r] = yield* tx.all(`DELETE FROM credit_reservations WHERE request_id = $1 RETURNING *`, [refund.request_id])
    if (r === undefined) continue
    const reservation = ended(r)
    credits += reservation.amount
    row("refund", reservation.amount, refund.actor, reservation.key_id, reservation.request_id, reservation.model, refund.note)
    usage.release(decodeBudgetRows(r.budgets), reservation.amount)
    refunded.push(reservation)
  }
  for (const settle of batch.partialSettles) {
    // As a refund: the delete decides (a sweeper may have refunded the whole of it already).
    const [r] = yield* tx.all(`DELETE FROM credit_reservations WHERE request_id = $1 RETURNING *`, [settle.request_id])
    if (r === undefined) continue
    const reservation = ended(r)
    const kept = Math.min(reservation.amount, Math.max(0, settle.keep))
    const rest = reservation.amount - kept
    if (rest <= 0) continue
    credits += rest
    row("refund", rest, settle.actor, reservation.key_id, reservation.request_id, reservation.model, settledNote(kept, reservation.amount))
    usage.release(decodeBudgetRows(r.budgets), rest)
  }

  for (const block of batch.returns) {
    const [r] = yield* tx.all(`DELETE FROM credit_blocks WHERE id = $1 RETURNING remaining`, [block])
    if (r !== undefined) leased -= n(r.remaining)
  }
  if (batch.strays !== undefined) {
    const rows = yield* tx.all(`DELETE FROM credit_blocks WHERE owner = $1 AND id <> $2 RETURNING remaining`, [batch.owner, batch.strays.keep ?? ""])
    for (const r of rows) leased -= n(r.remaining)
  }

  let lease: LeaseResult | undefined
  let live = 1
  if (batch.lease !== undefined) {
    const free = credits - leased
    if (free >= batch.lease.min) {
      const [count] = yield* tx.all(`SELECT COUNT(*) AS live FROM replicas WHERE lease_until >= ${storeNowMs(tx.dialect)} OR id = $1`, [batch.owner])
      live = Math.max(1, n(count!.live))
      // Half the free pool shared by the live replicas, so a block never strands much near empty.
      const amount = Math.min(batch.lease.size, free, Math.max(batch.lease.min, Math.floor(free / (2 * live))))
      const id = newBlockId()
      yield* tx.all(`INSERT INTO credit_blocks (id, owner, remaining, created_at) VALUES ($1, $2, $3, $4)`, [id, batch.owner, amount, ts])
      leased += amount
      lease = { _tag: "Leased", id, amount }
    } else {
      // Near empty only (a lease that comes up short), so the extra read costs nothing on the hot path.
      const [live] = leased <= 0 ? [{ held: 0 }] : yield* tx.all(
        `SELECT COALESCE(SUM(b.remaining), 0) AS held FROM credit_blocks b JOIN replicas r ON r.id = b.owner
          WHERE b.owner <> $1 AND r.lease_until >= ${storeNowMs(tx.dialect)}`,
        [batch.owner]
      )
      lease = { _tag: "Short", free, held: leased, heldLive: n(live!.held) }
      if (batch.reclaim && leased > 0) reclaim++
    }
  }

  const writes: Array<BatchWrite> = [...blockCharges, ...usage.writes()]
  for (let i = 0; i < batch.settles.length; i += 30_000) {
    const ids = batch.settles.slice(i, i + 30_000)
    writes.push({ text: `DELETE FROM credit_reservations WHERE request_id IN (${placeholders(1, ids.length)})`, params: ids })
  }
  if (ledger.length > 0) {
    writes.push({
      table: "credit_ledger",
      columns: ["ts", "workspace_id", "kind", "amount", "balance_after", "actor", "key_id", "request_id", "model", "note"],
      rows: ledger
    })
  }
  if (reservations.length > 0) {
    writes.push({
      table: "credit_reservations",
      columns: ["request_id", "owner", "amount", "key_id", "model", "method", "endpoint", "created_at", "budgets"],
      rows: reservations
    })
  }
  if (credits !== n(ws!.credits) || leased !== n(ws!.leased) || reclaim !== n(ws!.reclaim)) {
    writes.push({ text: `UPDATE workspaces SET credits = $1, leased = $2, reclaim = $3 WHERE id = $4`, params: [credits, leased, reclaim, DEFAULT_WORKSPACE] })
  }
  if (writes.length > 0) {
    const paid = yield* tx.writeAll(writes)
    if (paid.some((rows) => rows === 0)) return yield* new OptimisticMiss()
  }
  return { checks, written, found, dropped, unbudgeted, refunded, lease, reclaim, live, budgetUsage: usage.raised(), balance: credits } satisfies BatchResult
})

/** The ledger note of a settlement's refund: what the request kept of what it reserved. */
export const settledNote = (kept: number, reserved: number) =>
  `settled: the request cost ${microsToDecimalString(kept)} of the ${microsToDecimalString(reserved)} credits reserved`

/**
 * Gives `amount` micros counted against `budgets` back (a reservation refunded by a sweeper, or
 * a settlement's rest), never below zero (a budget reset meanwhile starts from nothing).
 */
export const releaseBudgets = Effect.fnUntraced(function*(tx: BatchTx, budgets: BudgetRows, amount: number) {
  if (amount <= 0) return
  for (const [holder, period] of budgets) {
    yield* tx.all(
      `UPDATE budget_usage SET credits = CASE WHEN credits > $1 THEN credits - $1 ELSE 0 END WHERE holder = $2 AND period_start = $3`,
      [amount, holder, period]
    )
  }
})

/** Returns the blocks of replicas whose lease lapsed (they died holding them); the rest of each goes back to the pool. */
export const returnOrphanedBlocks = Effect.fnUntraced(function*(tx: BatchTx, self: string) {
  const lock = tx.dialect === "postgres" ? " FOR UPDATE" : ""
  yield* tx.all(`SELECT leased FROM workspaces WHERE id = $1${lock}`, [DEFAULT_WORKSPACE])
  const rows = yield* tx.all(
    `DELETE FROM credit_blocks WHERE owner <> $1 AND owner NOT IN (SELECT id FROM replicas WHERE lease_until >= ${storeNowMs(tx.dialect)}) RETURNING owner, remaining`,
    [self]
  )
  const total = rows.reduce((sum, r) => sum + n(r.remaining), 0)
  if (rows.length > 0) yield* tx.all(`UPDATE workspaces SET leased = leased - $1 WHERE id = $2`, [total, DEFAULT_WORKSPACE])
  return { blocks: rows.length, credits: total }
})
