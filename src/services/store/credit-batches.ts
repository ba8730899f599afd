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
import { DEFAULT_WORKSPACE } from "./rows.ts"

/**
 * An identity-provider subject's budget: counted on its `identity_subjects` row (created by the
 * count if the subject was not recorded yet), against the maximum its policy gives.
 */
export interface SubjectBudget {
  readonly max_requests: number
  readonly issuer: string
  readonly subject: string
}

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
   * The charge of a request whose budget count is in this batch too (one commit for both): it is
   * written only if that count admitted the request, the `index`-th (from 0) of `keyId`'s counts.
   */
  readonly budget?: { readonly keyId: string; readonly index: number } | undefined
}

export interface CreditBatch {
  readonly owner: string
  /** Requests to count against each key's (or subject's) budget, in arrival order. */
  readonly budgets: ReadonlyArray<{ readonly keyId: string; readonly count: number; readonly subject?: SubjectBudget | undefined }>
  readonly charges: ReadonlyArray<BatchCharge>
  /** Reservations (written by an earlier commit) whose requests ended and keep their charge. */
  readonly settles: ReadonlyArray<string>
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
  | { readonly _tag: "Short"; readonly free: number; readonly held: number }

export interface BatchResult {
  /** How many of each key's requests its budget admitted (the first ones, in order). */
  readonly budgets: ReadonlyMap<string, number>
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

/**
 * Postgres: counts `count` (a placeholder) requests against the budget of the key locked by the
 * CTE `k`, from the locked (latest) values, so the count is exactly what a locking read and an
 * update would make it.
 */
const countKey = (count: string) =>
  `u AS (UPDATE api_keys a SET budget_used = a.budget_used + LEAST(${count}::bigint, GREATEST(0, k.budget_max_requests - k.budget_used))
   FROM k WHERE a.id = k.id AND k.budget_max_requests IS NOT NULL RETURNING 1)`

const placeholders = (from: number, count: number) => Array.from({ length: count }, (_, i) => `$${from + i}`).join(", ")

/**
 * `optimistic` (Postgres, issue 25): each block's charge is not sent on its own and awaited
 * before the ledger rows are computed, but goes in the one statement of every write, assumed to
 * pay (a block only fails to when another replica reclaimed it after this one's lease lapsed);
 * should one not pay, the batch fails with OptimisticMiss (its transaction rolled back) and is
 * run again without this. One round trip less per commit.
 */
export const runCreditBatch = (tx: BatchTx, batch: CreditBatch, newBlockId: () => string, optimistic = false) =>
  Effect.gen(function*() {
    const lock = tx.dialect === "postgres" ? " FOR UPDATE" : ""
    // Postgres: the first key's budget is counted by the statement that locks the workspace row
    // (one round trip less); its row is locked only after the workspace's (`EXISTS (SELECT 1 FROM
    // ws)` is evaluated before `k` locks a row), the order every commit takes them in.
    const first = tx.dialect === "postgres" && batch.budgets[0]?.subject === undefined ? batch.budgets[0] : undefined
    const [ws] = first === undefined
      ? yield* tx.all(`SELECT credits, leased, reclaim FROM workspaces WHERE id = $1${lock}`, [DEFAULT_WORKSPACE])
      : yield* tx.all(
        `WITH ws AS MATERIALIZED (SELECT credits, leased, reclaim FROM workspaces WHERE id = $1 FOR UPDATE),
         k AS MATERIALIZED (SELECT id, budget_used, budget_max_requests FROM api_keys WHERE id = $2 AND EXISTS (SELECT 1 FROM ws) FOR UPDATE),
         ${countKey("$3")}
         SELECT ws.credits, ws.leased, ws.reclaim, k.id AS key_id, k.budget_used, k.budget_max_requests FROM ws LEFT JOIN k ON true`,
        [DEFAULT_WORKSPACE, first.keyId, first.count]
      )
    let credits = n(ws!.credits)
    let leased = n(ws!.leased)
    let reclaim = n(ws!.reclaim)
    const ts = new Date().toISOString()
    const ledger: Array<ReadonlyArray<unknown>> = []
    const reservations: Array<ReadonlyArray<unknown>> = []
    const row = (kind: "charge" | "refund", amount: number, actor: string, keyId: string | null, requestId: string, model: string | null, note: string | null) =>
      ledger.push([ts, DEFAULT_WORKSPACE, kind, amount, credits, actor, keyId, requestId, model, note])

    const budgets = new Map<string, number>()
    const admittedOf = (key: Record<string, unknown> | undefined, count: number) =>
      key === undefined || key.budget_max_requests === null || key.budget_max_requests === undefined
        ? 0
        : Math.max(0, Math.min(count, n(key.budget_max_requests) - n(key.budget_used)))
    if (first !== undefined) budgets.set(first.keyId, ws!.key_id === null ? 0 : admittedOf(ws, first.count))
    for (const [index, { count, keyId, subject }] of batch.budgets.entries()) {
      if (index === 0 && first !== undefined) continue
      if (subject !== undefined) {
        // A subject's row is made by its first count; its maximum is its policy's, not stored. No
        // conflict target: a racing first insert conflicts on (issuer, subject) as well as on id.
        yield* tx.all(
          `INSERT INTO identity_subjects (id, issuer, subject, budget_used, first_seen_at, last_seen_at)
           VALUES ($1, $2, $3, 0, $4, $4) ON CONFLICT DO NOTHING`,
          [keyId, subject.issuer, subject.subject, ts]
        )
        const [row] = yield* tx.all(`SELECT budget_used FROM identity_subjects WHERE id = $1${lock}`, [keyId])
        const admitted = Math.max(0, Math.min(count, subject.max_requests - n(row!.budget_used)))
        budgets.set(keyId, admitted)
        if (admitted > 0) yield* tx.all(`UPDATE identity_subjects SET budget_used = budget_used + $1 WHERE id = $2`, [admitted, keyId])
        continue
      }
      if (tx.dialect === "postgres") {
        // One round trip instead of two: the row is locked by `k` and counted by `u` from the
        // locked (latest) values, so the count is exactly what the two statements would make it.
        const [key] = yield* tx.all(
          `WITH k AS MATERIALIZED (SELECT id, budget_used, budget_max_requests FROM api_keys WHERE id = $1 FOR UPDATE), ${countKey("$2")}
           SELECT budget_used, budget_max_requests FROM k`,
          [keyId, count]
        )
        budgets.set(keyId, admittedOf(key, count))
        continue
      }
      const [key] = yield* tx.all(`SELECT budget_used, budget_max_requests FROM api_keys WHERE id = $1${lock}`, [keyId])
      if (key === undefined || key.budget_max_requests === null) {
        budgets.set(keyId, 0)
        continue
      }
      const admitted = Math.max(0, Math.min(count, n(key.budget_max_requests) - n(key.budget_used)))
      budgets.set(keyId, admitted)
      if (admitted > 0) yield* tx.all(`UPDATE api_keys SET budget_used = budget_used + $1 WHERE id = $2`, [admitted, keyId])
    }

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
      // Counted above, in order: a refused count leaves its charge unwritten (not charged, not served).
      if (charge.budget !== undefined && charge.budget.index >= (budgets.get(charge.budget.keyId) ?? 0)) {
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
        for (const c of charges) dropped.add(c.request_id)
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
        } else if (c.open !== undefined) {
          reservations.push([c.request_id, batch.owner, c.amount, c.key_id, c.model, c.open.method, c.open.endpoint, ts])
        }
      }
    }

    const refunded: Array<Reservation> = []
    for (const refund of batch.refunds) {
      // The delete decides who refunds (this owner's end, or a sweeper that thought it dead).
      const [r] = yield* tx.all(`DELETE FROM credit_reservations WHERE request_id = $1 RETURNING *`, [refund.request_id])
      if (r === undefined) continue
      const reservation: Reservation = {
        request_id: String(r.request_id),
        owner: String(r.owner),
        amount: n(r.amount),
        key_id: (r.key_id as string | null) ?? null,
        model: (r.model as string | null) ?? null,
        method: (r.method as string | null) ?? null,
        endpoint: (r.endpoint as string | null) ?? null,
        created_at: String(r.created_at)
      }
      credits += reservation.amount
      row("refund", reservation.amount, refund.actor, reservation.key_id, reservation.request_id, reservation.model, refund.note)
      refunded.push(reservation)
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
        lease = { _tag: "Short", free, held: leased }
        if (batch.reclaim && leased > 0) reclaim++
      }
    }

    const writes: Array<BatchWrite> = [...blockCharges]
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
      writes.push({ table: "credit_reservations", columns: ["request_id", "owner", "amount", "key_id", "model", "method", "endpoint", "created_at"], rows: reservations })
    }
    if (credits !== n(ws!.credits) || leased !== n(ws!.leased) || reclaim !== n(ws!.reclaim)) {
      writes.push({ text: `UPDATE workspaces SET credits = $1, leased = $2, reclaim = $3 WHERE id = $4`, params: [credits, leased, reclaim, DEFAULT_WORKSPACE] })
    }
    if (writes.length > 0) {
      const paid = yield* tx.writeAll(writes)
      if (paid.some((rows) => rows === 0)) return yield* new OptimisticMiss()
    }
    return { budgets, written, found, dropped, unbudgeted, refunded, lease, reclaim, live } satisfies BatchResult
  })

/** Returns the blocks of replicas whose lease lapsed (they died holding them); the rest of each goes back to the pool. */
export const returnOrphanedBlocks = (tx: BatchTx, self: string) =>
  Effect.gen(function*() {
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
