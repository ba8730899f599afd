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
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, ManagedRuntime } from "effect"
import { KeysRepo } from "../../../src/services/store/KeysRepo.ts"
import { DEFAULT_STORE_SESSION, StoreLayer } from "../../../src/services/store/StoreLayer.ts"
import { count, ids, migrateAsEarlierRelease, NOW, useMigrationStores } from "./migration-stores.ts"

const { postgresStore } = useMigrationStores()

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
