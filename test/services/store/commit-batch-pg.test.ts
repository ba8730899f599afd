/**
 * The one-call Postgres commit (issue 38, credit-admit-pg.ts) against the transaction path it
 * replaces for most batches: random batches of budget counts (several on one row, refusals by
 * requests and by credits, periods), charges (open or not, conditional on a count, on a block
 * that pays, one too small to, one that is gone) and settlements run through `runCreditBatch` in
 * a transaction on one database and through `modelgate_commit_batch` on another, both migrated the
 * same way; after every batch the two answers and every credit table must be the same.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Duration, Effect, Layer, ManagedRuntime, Redacted } from "effect"
import * as PgClient from "@effect/sql-pg/PgClient"
import { SqlClient } from "effect/sql/SqlClient"
import { createPostgresDatabase, type TempDatabase } from "../../support/databases.ts"
import { commitCallArgument, commitCallResult, commitsInOneCall } from "../../../src/services/store/credit-admit-pg.ts"
import { type BatchResult, type BudgetCheck, type BatchCharge, type CreditBatch, runCreditBatch } from "../../../src/services/store/credit-batches.ts"
import { CreditsRepo, postgresBatchTx } from "../../../src/services/store/CreditsRepo.ts"
import { StoreDeadline } from "../../../src/services/store/StoreError.ts"
import { StoreLayer } from "../../../src/services/store/StoreLayer.ts"

const M = 1_000_000
const OWNER = "rep_equiv"

/** A small deterministic generator: a failure names its seed. */
const random = (seed: number) => () => {
  seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648
  return seed / 2_147_483_648
}

describe("the one-call Postgres commit", () => {
  const dbs: Array<TempDatabase> = []
  const runtimes: Array<ManagedRuntime.ManagedRuntime<SqlClient | CreditsRepo, unknown>> = []

  beforeAll(async () => {
    for (const prefix of ["mg_commit_tx", "mg_commit_call"]) {
      const db = await createPostgresDatabase(prefix)
      dbs.push(db)
      const sql = PgClient.layer({ url: Redacted.make(db.url) })
      const runtime = ManagedRuntime.make(
        Layer.mergeAll(StoreLayer.postgres(db.url), sql, Layer.succeed(StoreDeadline, Duration.minutes(1)))
      ) as ManagedRuntime.ManagedRuntime<SqlClient | CreditsRepo, unknown>
      runtimes.push(runtime)
      await runtime.runPromise(Effect.flatMap(CreditsRepo, (repo) => Effect.andThen(repo.ensureWorkspace(10_000 * M), repo.renewReplica(OWNER, 600_000))))
    }
  }, 60_000)

  afterAll(async () => {
    for (const runtime of runtimes) await runtime.dispose()
    for (const db of dbs) await db.drop()
  })

  const viaTransaction = (batch: CreditBatch) =>
    runtimes[0]!.runPromise(Effect.gen(function*() {
      const sql = yield* SqlClient
      return yield* sql.withTransaction(runCreditBatch(postgresBatchTx(sql), batch, () => "blk_unexpected"))
    }))

  const viaCall = (batch: CreditBatch) =>
    runtimes[1]!.runPromise(Effect.gen(function*() {
      const sql = yield* SqlClient
      const rows = yield* sql.unsafe<{ r: unknown }>(`SELECT modelgate_commit_batch($1::jsonb) AS r`, [commitCallArgument(batch, new Date().toISOString())])
      return commitCallResult(rows[0]!.r)
    }))

  /** Every credit table, in a stable order, without the timestamps each path takes for itself. */
  const tables = (index: number) =>
    runtimes[index]!.runPromise(Effect.gen(function*() {
      const sql = yield* SqlClient
      return {
        workspaces: yield* sql.unsafe(`SELECT id, credits::text, leased::text, reclaim::text FROM workspaces ORDER BY id`),
        blocks: yield* sql.unsafe(`SELECT id, owner, remaining::text FROM credit_blocks ORDER BY id`),
        budgets: yield* sql.unsafe(`SELECT holder, period_start, requests::text, credits::text FROM budget_usage ORDER BY holder, period_start`),
        ledger: yield* sql.unsafe(
          `SELECT kind, amount::text, balance_after::text, actor, key_id, request_id, model, note FROM credit_ledger ORDER BY seq`
        ),
        reservations: yield* sql.unsafe(
          `SELECT request_id, owner, amount::text, key_id, model, method, endpoint, budgets FROM credit_reservations ORDER BY request_id`
        )
      }
    }))

  const comparable = (result: BatchResult) => ({
    checks: [...result.checks].sort(([a], [b]) => (a < b ? -1 : 1)),
    written: [...result.written].sort(),
    dropped: [...result.dropped].sort(),
    unbudgeted: [...result.unbudgeted].sort(),
    budgetUsage: result.budgetUsage,
    balance: result.balance,
    reclaim: result.reclaim,
    lease: result.lease,
    refunded: result.refunded
  })

  it("answers and writes what the transaction path does, batch after batch", async () => {
    const empty: CreditBatch = {
      owner: OWNER, checks: [], releases: [], charges: [], settles: [], partialSettles: [], refunds: [], returns: [],
      strays: undefined, lease: undefined, reclaim: false, now: Date.now()
    }
    // The blocks both stores hold: one large, one that runs dry, each leased by the transaction path on both.
    for (const [size, name] of [[500 * M, "blk_big"], [3 * M, "blk_small"]] as const) {
      for (const runtime of runtimes) {
        const leased = await runtime.runPromise(Effect.gen(function*() {
          const sql = yield* SqlClient
          return yield* sql.withTransaction(runCreditBatch(postgresBatchTx(sql), { ...empty, lease: { min: size, size } }, () => name))
        }))
        expect(leased.lease).toEqual({ _tag: "Leased", id: name, amount: size })
      }
    }
    expect(await tables(1)).toEqual(await tables(0))

    const next = random(20261128)
    const pick = <A>(items: ReadonlyArray<A>): A => items[Math.floor(next() * items.length)]!
    const holders = ["key_a", "key_b", "team_t", "key_c"]
    const periods = ["", "day:2026-11-28", "month:2026-11-01"]
    const open: Array<string> = []
    let request = 0
    const seen = { refused: 0, dropped: 0, written: 0 }
    for (let round = 0; round < 120; round++) {
      const checks: Array<BudgetCheck> = []
      const charges: Array<BatchCharge> = []
      for (let i = Math.floor(next() * 4); i > 0; i--) {
        const amount = pick([0, 0.5 * M, 1 * M, 2 * M])
        const holds = [...new Set(Array.from({ length: 1 + Math.floor(next() * 2) }, () => pick(holders)))].map((holder) => ({
          holder,
          period: pick(periods),
          ...(next() < 0.6 ? { max_requests: 5 + Math.floor(next() * 30) } : {}),
          ...(next() < 0.5 ? { max_credits: (10 + Math.floor(next() * 40)) * M } : {})
        }))
        const id = `c${round}_${i}`
        checks.push({ id, holds, amount, ...(next() < 0.2 ? { requests: 0 } : {}) })
        if (amount > 0 && next() < 0.8) {
          const requestId = `req_${request++}`
          const isOpen = next() < 0.7
          charges.push({
            block: pick(["blk_big", "blk_big", "blk_small", "blk_gone"]),
            request_id: requestId,
            amount,
            key_id: holds[0]!.holder,
            model: pick(["paid", null]),
            open: isOpen ? { method: "POST", endpoint: pick(["/v1/chat/completions", null]) } : undefined,
            refundNote: undefined,
            retried: false,
            check: id,
            budgets: holds.map((h) => [h.holder, h.period] as const)
          })
          if (isOpen) open.push(requestId)
        }
      }
      const settles = open.splice(0, Math.floor(next() * 3))
      if (next() < 0.2) settles.push("req_never_written")
      const batch: CreditBatch = { ...empty, checks, charges, settles, now: Date.now() }
      expect(commitsInOneCall(batch)).toBe(true)
      const a = await viaTransaction(batch)
      const b = await viaCall(batch)
      expect(comparable(b), `round ${round}`).toEqual(comparable(a))
      seen.refused += [...a.checks.values()].filter((v) => v._tag === "Refused").length
      seen.dropped += a.dropped.size
      seen.written += a.written.size
      expect(await tables(1), `round ${round}`).toEqual(await tables(0))
    }
    // The batches did what they are for: counts refused, charges written and dropped.
    expect(seen.refused).toBeGreaterThan(10)
    expect(seen.dropped).toBeGreaterThan(10)
    expect(seen.written).toBeGreaterThan(50)
  }, 120_000)

  it("leaves a batch it does not implement to the transaction path", () => {
    const base: CreditBatch = {
      owner: OWNER, checks: [], releases: [], charges: [], settles: [], partialSettles: [], refunds: [], returns: [],
      strays: undefined, lease: undefined, reclaim: false, now: 0
    }
    expect(commitsInOneCall(base)).toBe(true)
    expect(commitsInOneCall({ ...base, lease: { min: 1, size: 1 } })).toBe(false)
    expect(commitsInOneCall({ ...base, refunds: [{ request_id: "r", actor: "a", note: "n" }] })).toBe(false)
    expect(commitsInOneCall({ ...base, returns: ["blk"] })).toBe(false)
    expect(commitsInOneCall({ ...base, releases: [{ budgets: [["k", ""]], amount: 1 }] })).toBe(false)
    expect(commitsInOneCall({ ...base, checks: [{ id: "c", amount: 0, holds: [{ holder: "s", period: "", subject: { issuer: "i", subject: "s" } }] }] })).toBe(false)
  })
})
