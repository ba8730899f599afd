/**
 * The large-table upgrade an operator hit (issue 31): a Postgres store at the previous release's
 * schema with an audit trail holding duplicates, migrated by two replicas that start together
 * under the request path's statement timeout. Before the fix the migration ran under that timeout
 * (and crash-looped every replica), and its duplicate removal was planned as a quadratic rescan
 * (hours at 300,000 records).
 *
 * 300,000 records, not the 1,000,000 of the incident: the quadratic plan never finished at
 * 300,000 (6ecefb2, the commit that fixed it), and the upgrade still has statements that run
 * seconds, far past the 300 ms statement timeout (migration 13 rewrites every record's credits in
 * one UPDATE: 4-10 s here at 300,000; migration 7's duplicate removal about 1 s). The million took
 * 30-50 s of the suite's wall time on a loaded two-core machine, the longest single test.
 *
 * And a SQLite store of 1,000,000 ledger rows at schema 17, rebuilt by migration 18 (issue 38).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, ManagedRuntime } from "effect"
import { DatabaseSync } from "node:sqlite"
import { CreditsRepo } from "../../../src/services/store/CreditsRepo.ts"
import { KeysRepo } from "../../../src/services/store/KeysRepo.ts"
import { DEFAULT_STORE_SESSION, StoreLayer } from "../../../src/services/store/StoreLayer.ts"
import { count, ids, migrateAsEarlierRelease, NOW, useMigrationStores } from "./migration-stores.ts"

const { postgresStore, sqliteStore } = useMigrationStores()

/** Recorded once; recorded twice; refunded by another replica (a serving record and a `replica_lost` one). */
const ONCE = 291_000
const TWICE = 6_000
const REFUNDED = 3_000
const RECORDS = ONCE + TWICE + REFUNDED

describe("a large Postgres store upgraded from the previous release", () => {
  it("migrates 300,000 audit records with duplicates while two replicas start together, under the request path's timeouts", { timeout: 300_000 }, async () => {
    const store = await postgresStore("mg_mig_large")
    // The release of 2026-11-25 (2742650) was at migration 6.
    await migrateAsEarlierRelease(store, "postgres", 6)
    // Written without the indexes, which are built once afterwards (a third of the insert's time).
    await store.query(`DROP INDEX audit_log_key, audit_log_ts, audit_log_request`)
    await store.query(
      `INSERT INTO audit_log (request_id, ts, key_id, method, endpoint, status, error, model, credits, duration_ms, stream)
       SELECT 'req_' || g, '${NOW}', 'key_' || (g % 50), 'POST', '/v1/chat/completions', 200, NULL, 'echo', 1, 1.5, 0
       FROM generate_series(1, ${ONCE}) g`
    )
    await store.query(
      `INSERT INTO audit_log (request_id, ts, key_id, method, endpoint, status, error, model, credits, duration_ms, stream)
       SELECT 'req_' || g, '${NOW}', 'key_' || (g % 50), 'POST', '/v1/chat/completions', 200, NULL, 'echo', 1, 1.5, 0
       FROM generate_series(1, ${TWICE}) g
       UNION ALL
       SELECT 'req_' || g, '${NOW}', 'key_' || (g % 50), 'POST', '/v1/chat/completions', 503, 'replica_lost', 'echo', 0, 1.5, 0
       FROM generate_series(${TWICE + 1}, ${TWICE + REFUNDED}) g`
    )
    await store.query(`CREATE INDEX audit_log_key ON audit_log (key_id, seq)`)
    await store.query(`CREATE INDEX audit_log_ts ON audit_log (ts)`)
    await store.query(`CREATE INDEX audit_log_request ON audit_log (request_id)`)
    // Statistics, as a store in service has them: the old migration's quadratic plan needed them.
    await store.query(`ANALYZE audit_log`)
    expect(await count(store, "audit_log")).toBe(RECORDS)

    // Both replicas run with a request-path statement timeout far below what the migration takes.
    const session = { ...DEFAULT_STORE_SESSION, statement_ms: 300, lock_ms: 300 }
    const replicas = [ManagedRuntime.make(StoreLayer.fromUrl(store.url, session)), ManagedRuntime.make(StoreLayer.fromUrl(store.url, session))]
    try {
      const started = performance.now()
      // Each replica's store is usable once its layer is built: the one that migrated and the one that waited.
      const versions = await Promise.all(replicas.map((runtime) => runtime.runPromise(Effect.flatMap(KeysRepo, (keys) => keys.keyChangeVersion))))
      console.log(`${RECORDS} audit records migrated in ${Math.round(performance.now() - started)} ms`)
      expect(versions).toEqual([0, 0])
    } finally {
      await Promise.all(replicas.map((r) => r.dispose()))
    }
    const recorded = await store.query(`SELECT migration_id FROM modelgate_migrations ORDER BY migration_id`)
    expect(recorded.map((r) => Number(r.migration_id))).toEqual(ids("postgres"))
    expect(await count(store, "audit_log")).toBe(ONCE)
    const refunded = await store.query(`SELECT COUNT(*) AS n, SUM(credits) AS credits, MIN(status) AS status FROM audit_log WHERE error = 'replica_lost'`)
    expect(refunded.map((r) => [Number(r.n), Number(r.credits), Number(r.status)])).toEqual([[REFUNDED, 0, 200]])
    const unique = await store.query(`SELECT indexdef FROM pg_indexes WHERE indexname = 'audit_log_request_once'`)
    expect(String(unique[0]?.indexdef)).toContain("UNIQUE")
  })
})

describe("a large SQLite ledger upgraded from the previous release", () => {
  it("rebuilds 1,000,000 ledger rows (migration 18) keeping every seq and amount, its request id index searched", { timeout: 300_000 }, async () => {
    const store = sqliteStore()
    await migrateAsEarlierRelease(store, "sqlite", 17)
    const file = store.url.slice("sqlite:".length)
    const db = new DatabaseSync(file)
    // 500,000 requests charged, each settled with a refund; 1,000 reservations still open.
    db.exec(`WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 1000000)
      INSERT INTO credit_ledger (ts, workspace_id, kind, amount, balance_after, actor, key_id, request_id, model)
      SELECT '${NOW}', 'ws_default', CASE n % 2 WHEN 1 THEN 'charge' ELSE 'refund' END, CASE n % 2 WHEN 1 THEN -3 ELSE 1 END,
        0, 'key_1', 'key_1', 'req_' || ((n + 1) / 2), 'echo' FROM g`)
    db.exec(`WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 1000)
      INSERT INTO credit_reservations (request_id, owner, amount, key_id, model, method, endpoint, created_at, budgets)
      SELECT 'req_open_' || n, 'rep_old', n, 'key_1', 'echo', 'POST', '/v1/chat/completions', '${NOW}', NULL FROM g`)
    db.close()

    const runtime = ManagedRuntime.make(StoreLayer.fromUrl(store.url))
    try {
      const started = performance.now()
      const entries = await runtime.runPromise(Effect.flatMap(CreditsRepo, (credits) => credits.ledger({ limit: 10, request_id: "req_250000" })))
      console.log(`1,000,000 ledger rows migrated in ${Math.round(performance.now() - started)} ms`)
      expect(entries.map((e) => [e.seq, e.kind, e.amount])).toEqual([[500_000, "refund", 1], [499_999, "charge", -3]])
    } finally {
      await runtime.dispose()
    }
    const recorded = await store.query(`SELECT migration_id FROM modelgate_migrations ORDER BY migration_id`)
    expect(recorded.map((r) => Number(r.migration_id))).toEqual(ids("sqlite"))
    const [ledger] = await store.query(`SELECT COUNT(*) AS n, MAX(seq) AS last, SUM(amount) AS sum FROM credit_ledger`)
    expect([Number(ledger!.n), Number(ledger!.last), Number(ledger!.sum)]).toEqual([1_000_000, 1_000_000, -1_000_000])
    const [open] = await store.query(`SELECT COUNT(*) AS n, SUM(amount) AS sum FROM credit_reservations`)
    expect([Number(open!.n), Number(open!.sum)]).toEqual([1000, 500_500])
    // The lookups a paid request and the ledger API make search an index, not the table.
    for (const query of [
      `SELECT * FROM credit_ledger WHERE request_id = 'req_1' ORDER BY seq DESC LIMIT 10`,
      `SELECT request_id FROM credit_ledger WHERE kind = 'charge' AND request_id IN ('req_1', 'req_2')`,
      `DELETE FROM credit_reservations WHERE request_id IN ('req_open_1', 'req_open_2')`
    ]) {
      const reader = new DatabaseSync(file)
      const plan = reader.prepare(`EXPLAIN QUERY PLAN ${query}`).all()
      reader.close()
      expect(plan.map((r) => String(r.detail)).join("; "), query).toMatch(/SEARCH (credit_ledger|credit_reservations) USING (INDEX credit_ledger_request|PRIMARY KEY)/)
    }
  })
})
