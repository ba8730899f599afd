/**
 * Spend reports on a large audit trail (issue 33): migration 15 on 1,000,000 existing records,
 * then GET /usage's queries (AuditRepo.usage) over 1,000,000 records spread over 90 days, 200
 * keys, 20 teams, 1,000 end users and 5 models, on the machine's Postgres (or
 * MODELGATE_TEST_POSTGRES). Prints one line per measure: the median of 5 runs, after one warm-up.
 *
 *   npx node bench/usage-report.ts [records]
 */
import { Duration, Effect, Layer, ManagedRuntime } from "effect"
import { StoreDeadline } from "../src/services/store/StoreError.ts"
import { AuditRepo, type UsageDimension } from "../src/services/store/AuditRepo.ts"
import { StoreLayer } from "../src/services/store/StoreLayer.ts"
import { createPostgresDatabase } from "../test/support/databases.ts"
import { Client } from "../test/support/pg-admin.ts"

const RECORDS = Number(process.argv[2] ?? 1_000_000)
const DAY_MS = 86_400_000
const END = Date.parse("2026-11-01T00:00:00.000Z")
const START = END - 90 * DAY_MS

const median = (values: ReadonlyArray<number>) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!

const db = await createPostgresDatabase("mg_bench_usage")
const sql = new Client(db.url)
try {
  const migrate = () => Effect.runPromise(Effect.scoped(Layer.build(StoreLayer.fromUrl(db.url))))
  await migrate()
  // As at schema 12: the audit trail without migration 15's columns, holding RECORDS rows.
  await sql.query(`DROP INDEX audit_log_team, audit_log_end_user`)
  await sql.query(`ALTER TABLE audit_log DROP COLUMN cache_read_tokens, DROP COLUMN cache_write_tokens, DROP COLUMN end_user, DROP COLUMN team_id`)
  await sql.query(`DELETE FROM modelgate_migrations WHERE migration_id = 15`)
  const ts = `to_char(to_timestamp(${START / 1000} + (g::bigint * ${90 * 86_400}) / ${RECORDS}) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`
  await sql.query(
    `INSERT INTO audit_log (request_id, ts, key_id, method, endpoint, status, error, model, provider, credits, prompt_tokens, completion_tokens, duration_ms, stream)
     SELECT 'req_' || g, ${ts}, 'key_' || (g % 200), 'POST', '/v1/messages', 200, NULL, 'model_' || (g % 5), 'up', 2, 1200, 300, 12.5, 0
     FROM generate_series(1, ${RECORDS}) g`
  )
  await sql.query(`ANALYZE audit_log`)
  let started = performance.now()
  await migrate()
  console.log(`migration 15 on ${RECORDS} existing records: ${Math.round(performance.now() - started)} ms`)

  // The same volume as this release writes it: teams, end users and cache tokens on every record.
  started = performance.now()
  await sql.query(`TRUNCATE audit_log`)
  await sql.query(
    `INSERT INTO audit_log (request_id, ts, key_id, method, endpoint, status, error, model, provider, credits, prompt_tokens, completion_tokens,
       cache_read_tokens, cache_write_tokens, end_user, team_id, duration_ms, stream)
     SELECT 'req_' || g, ${ts}, 'key_' || (g % 200), 'POST', '/v1/messages', 200, NULL, 'model_' || (g % 5), 'up', 2, 1200, 300,
       800, 100, 'user_' || (g % 1000), 'team_' || (g % 20), 12.5, 0
     FROM generate_series(1, ${RECORDS}) g`
  )
  await sql.query(`ANALYZE audit_log`)
  console.log(`wrote ${RECORDS} records with teams and end users in ${Math.round(performance.now() - started)} ms`)

  const runtime = ManagedRuntime.make(StoreLayer.fromUrl(db.url))
  try {
    const iso = (ms: number) => new Date(ms).toISOString()
    const last30 = { since: iso(END - 30 * DAY_MS), until: iso(END) }
    const all90 = { since: iso(START), until: iso(END) }
    const cases: ReadonlyArray<readonly [string, { since?: string; until?: string; group_by: ReadonlyArray<UsageDimension>; team_id?: string; end_user?: string }]> = [
      ["by team, 30 days", { ...last30, group_by: ["team"] }],
      ["by day and team, 90 days", { ...all90, group_by: ["day", "team"] }],
      ["by team and end user, 30 days", { ...last30, group_by: ["team", "end_user"] }],
      ["by day, key and model, 30 days (the Usage page)", { ...last30, group_by: ["day", "key", "model"] }],
      ["one team by day, 90 days", { ...all90, group_by: ["day"], team_id: "team_7" }],
      ["one end user by day, 90 days", { ...all90, group_by: ["day"], end_user: "user_42" }],
      ["by key and model, all time (no window)", { group_by: ["key", "model"] }]
    ]
    for (const [label, query] of cases) {
      const times: Array<number> = []
      let rows = 0
      for (let i = 0; i < 6; i++) {
        const t0 = performance.now()
        rows = (await runtime.runPromise(Effect.gen(function*() {
          // As GET /usage runs it: store_timeouts.report_ms (default 60 s) as its bound.
          return yield* (yield* AuditRepo).usage({ ...query, statement_ms: 60_000 })
        }).pipe(Effect.provideService(StoreDeadline, Duration.seconds(61))))).length
        if (i > 0) times.push(performance.now() - t0)
      }
      console.log(`${label}: ${rows} rows, median ${Math.round(median(times))} ms`)
    }
  } finally {
    await runtime.dispose()
  }
} finally {
  await db.drop()
}
