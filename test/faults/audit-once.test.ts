/**
 * One audit record per request (issue 21, item 3). A request refunded as `replica_lost` used to
 * have two: the serving replica's ("200, 1 credit") and the sweeper's ("503 replica_lost, 0
 * credits"). Now the second to arrive amends the first, in either order and within one batch;
 * the same record written twice (a replayed spool) changes nothing; usage and the audit pages
 * count each request once. A store migrated before this keeps its first record of each request,
 * merged the same way. Against SQLite and a Postgres database of the test's own.
 */
import { Effect, Layer, ManagedRuntime } from "effect"
import * as Migrator from "effect/sql/Migrator"
import { afterAll, describe, expect, it } from "vitest"
import type { AuditRecord } from "../../src/domain/records.ts"
import { AUDIT_CREDIT_MICROS, AuditRepo } from "../../src/services/store/AuditRepo.ts"
import { migrationsFor } from "../../src/services/store/migrations.ts"
import { StoreLayer } from "../../src/services/store/StoreLayer.ts"
import { createPostgresDatabase, type TempDatabase } from "../support/databases.ts"
import { Client } from "../support/pg-admin.ts"

const served = (id: string, extra: Partial<AuditRecord> = {}): AuditRecord => ({
  request_id: id, ts: "2026-11-25T10:00:00.000Z", key_id: "key_a", method: "POST", endpoint: "/v1/chat/completions",
  status: 200, error: null, model: "paid", provider: "fake", tool: null, connection_id: null, credits: 1,
  prompt_tokens: 7, completion_tokens: 9, duration_ms: 120, stream: true, client_addr: "127.0.0.1", details: null, ...extra
})

const lost = (id: string): AuditRecord => ({
  ...served(id), ts: "2026-11-25T10:00:05.000Z", status: 503, error: "replica_lost", provider: null, credits: 0,
  prompt_tokens: null, completion_tokens: null, duration_ms: 5000, stream: false, client_addr: null,
  details: { owner: "rep_dead", refunded_credits: 1, settled_by: "rep_live" }
})

const databases: Array<TempDatabase> = []
afterAll(async () => {
  for (const db of databases) await db.drop()
})

const stores = [
  ["sqlite", async () => StoreLayer.memory],
  ["postgres", async () => {
    const db = await createPostgresDatabase("mg_audit_once")
    databases.push(db)
    return StoreLayer.postgres(db.url)
  }]
] as const

describe.each(stores)("one audit record per request: %s", (_, makeLayer) => {
  it("merges a replica_lost refund with the serving record in either order, and a replay changes nothing", async () => {
    const runtime = ManagedRuntime.make(await makeLayer())
    try {
      const audit = await runtime.runPromise(Effect.gen(function*() {
        return yield* AuditRepo
      }))
      const write = (records: Array<AuditRecord>) => runtime.runPromise(audit.appendAudit(records))
      await write([served("req_first"), served("req_plain")])
      await write([lost("req_first")])
      await write([lost("req_later")])
      await write([served("req_later")])
      await write([served("req_batch"), lost("req_batch")])
      await write([lost("req_alone")])
      // A spool replayed (after a crash mid-replay): the same records again.
      await write([served("req_first"), served("req_plain"), lost("req_alone")])

      const page = await runtime.runPromise(audit.queryAudit({ limit: 100 }))
      const byId = new Map(page.items.map((r) => [r.request_id, r]))
      expect(page.items).toHaveLength(5)
      for (const id of ["req_first", "req_later", "req_batch"]) {
        // What the client saw, with the refund's outcome.
        expect(byId.get(id)).toMatchObject({ status: 200, error: "replica_lost", credits: 0, provider: "fake", prompt_tokens: 7, stream: true })
      }
      expect(byId.get("req_alone")).toMatchObject({ status: 503, error: "replica_lost", credits: 0 })
      expect(byId.get("req_plain")).toMatchObject({ status: 200, error: null, credits: 1 })

      const [usage] = await runtime.runPromise(audit.usage({ group_by: [] }))
      expect(usage).toMatchObject({ requests: 5, errors: 4, credits_micros: AUDIT_CREDIT_MICROS })
    } finally {
      await runtime.dispose()
    }
  })
})

describe("one audit record per request: a Postgres store migrated before", () => {
  it("keeps one record per request, the serving one amended", async () => {
    const db = await createPostgresDatabase("mg_audit_merge")
    databases.push(db)
    const all = migrationsFor("postgres")
    const before = Object.fromEntries(Object.entries(all).filter(([id]) => Number(id.split("_")[0]) < 7))
    const pgLayer = (await import("@effect/sql-pg/PgClient")).layer
    const { Redacted } = await import("effect")
    await Effect.runPromise(
      Migrator.make({})({ loader: Migrator.fromRecord(before), table: "modelgate_migrations" }).pipe(
        Effect.provide(pgLayer({ url: Redacted.make(db.url) }).pipe(Layer.fresh))
      )
    )
    const admin = new Client(db.url)
    const insert = (r: AuditRecord) =>
      admin.query(
        `INSERT INTO audit_log (request_id, ts, key_id, method, endpoint, status, error, model, credits, duration_ms, stream)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
        [r.request_id, r.ts, r.key_id, r.method, r.endpoint, r.status, r.error, r.model, r.credits, r.duration_ms, r.stream ? 1 : 0]
      )
    for (const r of [served("req_pair"), lost("req_pair"), lost("req_only"), served("req_twice"), served("req_twice")]) await insert(r)

    const runtime = ManagedRuntime.make(StoreLayer.postgres(db.url))
    try {
      const audit = await runtime.runPromise(Effect.gen(function*() {
        return yield* AuditRepo
      }))
      const page = await runtime.runPromise(audit.queryAudit({ limit: 100 }))
      const rows = page.items.map((r) => [r.request_id, r.status, r.error, r.credits]).sort()
      expect(rows).toEqual([["req_only", 503, "replica_lost", 0], ["req_pair", 200, "replica_lost", 0], ["req_twice", 200, null, 1_000_000]]) // migration 13: micro-credits
      // And from now on a second record for a request is merged, not added.
      await runtime.runPromise(audit.appendAudit([served("req_only")]))
      expect((await runtime.runPromise(audit.queryAudit({ limit: 100 }))).items).toHaveLength(3)
    } finally {
      await runtime.dispose()
    }
  })
})
