/** The audit trail: one row per request, and the usage totals and pages read from it. */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { SqlClient } from "effect/sql/SqlClient"
import type { AuditPage, AuditQuery, AuditRecord, TrafficKind } from "../../domain/records.ts"
import { decodeRows, Flag, keysetPage, likeLiteral, Num, NullableJson, NullableNum, NullableString } from "./rows.ts"
import { SqliteDatabase, sqliteTry } from "./sqlite-client.ts"
import { storeOp, type StoreError } from "./StoreError.ts"

/**
 * What usage rows are grouped by (issue 33: spend reports): the UTC day (`YYYY-MM-DD`), the key,
 * its team, the model, the provider that answered, the end user the client named.
 */
export type UsageDimension = "day" | "key" | "team" | "model" | "provider" | "end_user"

export const USAGE_DIMENSIONS: ReadonlyArray<UsageDimension> = ["day", "key", "team", "model", "provider", "end_user"]

/**
 * Micro-credits per unit of `audit_log.credits`. The column holds what the money path charged
 * per request; the reports turn it into exact decimal credits through this one constant.
 * Whole credits (1,000,000 micros each) until the micro-credit accounting of issue 33 stores
 * micros in the audit trail; then 1.
 */
export const AUDIT_CREDIT_MICROS = 1

export interface UsageRow {
  readonly day?: string
  readonly key_id?: string | null
  readonly team_id?: string | null
  readonly model?: string | null
  /** The provider that answered (a routed request's last attempt; issue 20). */
  readonly provider?: string | null
  readonly end_user?: string | null
  readonly requests: number
  readonly errors: number
  /** Every input token, cache reads and writes included. */
  readonly prompt_tokens: number
  readonly completion_tokens: number
  /** Of `prompt_tokens`, read from and written to the provider's cache. */
  readonly cache_read_tokens: number
  readonly cache_write_tokens: number
  /** What was charged, in micro-credits (src/domain/money.ts). */
  readonly credits_micros: number
}

/** The most rows one usage query returns: a caller asking for `limit` gets `limit + 1` at most, to tell that there were more. */
export const MAX_USAGE_ROWS = 100_000

const AuditRow = Schema.Struct({
  seq: Num,
  request_id: Schema.String,
  ts: Schema.String,
  key_id: NullableString,
  method: Schema.String,
  endpoint: Schema.String,
  status: Num,
  error: NullableString,
  model: NullableString,
  provider: NullableString,
  tool: NullableString,
  connection_id: NullableNum,
  credits: Num,
  prompt_tokens: NullableNum,
  completion_tokens: NullableNum,
  cache_read_tokens: Schema.optionalKey(NullableNum),
  cache_write_tokens: Schema.optionalKey(NullableNum),
  end_user: Schema.optionalKey(NullableString),
  team_id: Schema.optionalKey(NullableString),
  duration_ms: Num,
  stream: Flag,
  client_addr: NullableString,
  details: NullableJson(Schema.Record(Schema.String, Schema.Unknown))
})

/** A usage row: the grouping columns present are those asked for; aggregates come back as strings from Postgres. */
const UsageRowSchema = Schema.Struct({
  day: Schema.optionalKey(Schema.String),
  key_id: Schema.optionalKey(NullableString),
  team_id: Schema.optionalKey(NullableString),
  model: Schema.optionalKey(NullableString),
  provider: Schema.optionalKey(NullableString),
  end_user: Schema.optionalKey(NullableString),
  requests: Num,
  errors: Num,
  prompt_tokens: Num,
  completion_tokens: Num,
  cache_read_tokens: Num,
  cache_write_tokens: Num,
  credits: Num
})

/**
 * One record per request (issue 21, item 3; the unique index of migration 7). A record arriving
 * for a request already recorded is the same record again (a spool replayed, a write abandoned
 * that landed after all: nothing changes), or the refund of a request whose replica lost its
 * lease: the sweeping replica's `replica_lost` record and the serving replica's own, in either
 * order. Those two become one: what the serving replica saw (status, tokens, provider, duration)
 * with the refund's outcome (error `replica_lost`, no credits); the sweeper's alone stays as it is
 * when the serving replica never wrote one (it died first).
 */
const SUPERSEDING = "replica_lost"

/** The serving record's columns, whichever of the two arrived first, then the refund's outcome. */
const SERVED_COLUMNS = [
  "ts", "key_id", "method", "endpoint", "status", "model", "provider", "tool", "connection_id",
  "prompt_tokens", "completion_tokens", "cache_read_tokens", "cache_write_tokens", "end_user", "team_id",
  "duration_ms", "stream", "client_addr", "details"
] as const
const AMEND = [
  ...SERVED_COLUMNS.map((c) => `${c} = CASE WHEN COALESCE(audit_log.error, '') = '${SUPERSEDING}' THEN excluded.${c} ELSE audit_log.${c} END`),
  `error = '${SUPERSEDING}'`,
  "credits = 0"
].join(", ")

/** The same rule within one batch (one statement may not touch a row twice). */
const onePerRequest = (records: ReadonlyArray<AuditRecord>): ReadonlyArray<AuditRecord> => {
  const byId = new Map<string, AuditRecord>()
  for (const record of records) {
    const seen = byId.get(record.request_id)
    if (seen === undefined) byId.set(record.request_id, record)
    else if ((seen.error === SUPERSEDING) !== (record.error === SUPERSEDING)) {
      const served = seen.error === SUPERSEDING ? record : seen
      byId.set(record.request_id, { ...served, error: SUPERSEDING, credits: 0 })
    }
  }
  return byId.size === records.length ? records : [...byId.values()]
}

const decodeAudit = decodeRows(AuditRow)

/** The columns a record is written to, in the order of its values (`auditValues`). */
const AUDIT_COLUMNS = [
  "request_id", "ts", "key_id", "method", "endpoint", "status", "error", "model", "provider", "tool", "connection_id", "credits",
  "prompt_tokens", "completion_tokens", "cache_read_tokens", "cache_write_tokens", "end_user", "team_id", "duration_ms", "stream",
  "client_addr", "details"
] as const

const auditValues = (r: AuditRecord): Array<string | number | null> => [
  r.request_id, r.ts, r.key_id, r.method, r.endpoint, r.status, r.error, r.model, r.provider, r.tool, r.connection_id, r.credits,
  r.prompt_tokens, r.completion_tokens, r.cache_read_tokens ?? null, r.cache_write_tokens ?? null, r.end_user ?? null,
  r.team_id ?? null, r.duration_ms, r.stream ? 1 : 0, r.client_addr, r.details === null ? null : JSON.stringify(r.details)
]

const ON_CONFLICT = `ON CONFLICT (request_id) DO UPDATE SET ${AMEND}
  WHERE (COALESCE(audit_log.error, '') = '${SUPERSEDING}') <> (COALESCE(excluded.error, '') = '${SUPERSEDING}')`

/** One record, on SQLite's raw connection: prepared once, run once per record of a batch. */
const INSERT_ONE = `INSERT INTO audit_log (${AUDIT_COLUMNS.join(", ")}) VALUES (${AUDIT_COLUMNS.map(() => "?").join(", ")}) ${ON_CONFLICT}`

const decodeUsage = decodeRows(UsageRowSchema)

export class AuditRepo extends Context.Service<AuditRepo, {
  readonly appendAudit: (records: ReadonlyArray<AuditRecord>) => Effect.Effect<void, StoreError>
  /**
   * Totals from the audit trail, one row per combination of `group_by` (default key and model),
   * ordered by those columns; at most `limit` rows plus one (default and most MAX_USAGE_ROWS), so
   * a caller can tell a report that did not fit.
   */
  readonly usage: (query: {
    readonly since?: string | undefined
    readonly until?: string | undefined
    readonly key_id?: string | undefined
    readonly team_id?: string | undefined
    readonly end_user?: string | undefined
    readonly group_by?: ReadonlyArray<UsageDimension> | undefined
    readonly limit?: number | undefined
    /**
     * The statement's own time bound on Postgres, in place of the session's (a report reads a
     * window of the whole trail; it is not on the request path). Absent: the session's.
     */
    readonly statement_ms?: number | undefined
  }) => Effect.Effect<ReadonlyArray<UsageRow>, StoreError>
  /** Newest first, `limit` at a time; `next_seq` continues the page. */
  readonly queryAudit: (query: AuditQuery) => Effect.Effect<AuditPage, StoreError>
}>()("modelgate/AuditRepo") {
  static readonly layer = Layer.effect(
    AuditRepo,
    Effect.gen(function*() {
      const sql = yield* SqlClient
      const sqlite = Option.getOrUndefined(yield* Effect.serviceOption(SqliteDatabase))
      /** Every record in one multi-row statement (Postgres; SQLite while another fiber's transaction holds the connection). */
      const insertClient = (records: ReadonlyArray<AuditRecord>) =>
        sql.unsafe(
          `INSERT INTO audit_log (${AUDIT_COLUMNS.join(", ")}) VALUES ${
            records.map((_, i) => `(${AUDIT_COLUMNS.map((_, j) => sqlite === undefined ? `$${i * AUDIT_COLUMNS.length + j + 1}` : "?").join(", ")})`).join(", ")
          } ${ON_CONFLICT}`,
          records.flatMap(auditValues)
        )
      /**
       * SQLite: one prepared statement run per record, BEGIN to COMMIT in one synchronous step
       * (issue 38). The multi-row statement was compiled and prepared anew for every batch (its
       * length differs each time): with batches of hundreds of records, 2 to 3% of a free
       * request's CPU went to building and preparing it.
       */
      let insert: ReturnType<SqliteDatabase["Service"]["prepare"]> | undefined
      const insertSqlite = (raw: SqliteDatabase["Service"], records: ReadonlyArray<AuditRecord>) =>
        sqliteTry(() => {
          // Kept here: at 2,861 characters it is past the connection's cache of short statements,
          // and was compiled anew for every batch.
          insert ??= raw.prepare(INSERT_ONE)
          raw.db.exec("BEGIN IMMEDIATE")
          try {
            for (const record of records) insert.run(...auditValues(record))
            raw.db.exec("COMMIT")
          } catch (error) {
            if (raw.db.isTransaction) raw.db.exec("ROLLBACK")
            throw error
          }
        }, "appendAudit")
      return AuditRepo.of({
        appendAudit: (input) =>
          Effect.suspend(() => {
            const records = onePerRequest(input)
            if (records.length === 0) return Effect.void
            const write = sqlite !== undefined && !sqlite.db.isTransaction ? insertSqlite(sqlite, records) : insertClient(records)
            return write.pipe(Effect.asVoid, storeOp("AuditRepo.appendAudit"))
          }),
        usage: (query) => {
          // Column expressions come from this fixed table only, never from the caller's text.
          const dimensions: Record<UsageDimension, string> = {
            day: "substr(ts, 1, 10)",
            key: "key_id",
            team: "team_id",
            model: "model",
            provider: "provider",
            end_user: "end_user"
          }
          const names: Record<UsageDimension, string> = {
            day: "day",
            key: "key_id",
            team: "team_id",
            model: "model",
            provider: "provider",
            end_user: "end_user"
          }
          const groups = USAGE_DIMENSIONS.filter((d) => (query.group_by ?? ["key", "model"]).includes(d))
          const selected = groups.map((d) => `${dimensions[d]} AS ${names[d]}`)
          const grouped = groups.map((d) => dimensions[d]).join(", ")
          const limit = Math.min(Math.max(Math.trunc(query.limit ?? MAX_USAGE_ROWS), 1), MAX_USAGE_ROWS)
          const select = sql`SELECT ${sql.literal(selected.length > 0 ? selected.join(", ") + "," : "")} COUNT(*) AS requests,
                SUM(CASE WHEN status >= 400 OR error IS NOT NULL THEN 1 ELSE 0 END) AS errors,
                COALESCE(SUM(prompt_tokens), 0) AS prompt_tokens, COALESCE(SUM(completion_tokens), 0) AS completion_tokens,
                COALESCE(SUM(cache_read_tokens), 0) AS cache_read_tokens, COALESCE(SUM(cache_write_tokens), 0) AS cache_write_tokens,
                COALESCE(SUM(credits), 0) AS credits
              FROM audit_log WHERE ${
            sql.and([
              query.since !== undefined ? sql`ts >= ${query.since}` : undefined,
              query.until !== undefined ? sql`ts < ${query.until}` : undefined,
              query.key_id !== undefined ? sql`key_id = ${query.key_id}` : undefined,
              query.team_id !== undefined ? sql`team_id = ${query.team_id}` : undefined,
              query.end_user !== undefined ? sql`end_user = ${query.end_user}` : undefined
            ].filter((c) => c !== undefined))
          } ${sql.literal(groups.length > 0 ? `GROUP BY ${grouped} ORDER BY ${grouped}` : "")} LIMIT ${limit + 1}`
          const statementMs = query.statement_ms
          const bounded = statementMs === undefined
            ? select
            : sql.onDialectOrElse({
              // A transaction of its own, so the bound is this statement's only (SET LOCAL).
              pg: () =>
                sql.withTransaction(
                  Effect.andThen(
                    Effect.andThen(
                      sql.unsafe(`SET LOCAL statement_timeout = ${Math.trunc(statementMs)}`),
                      // Room to group a large window in memory rather than sort it on disk.
                      sql.unsafe(`SET LOCAL work_mem = '64MB'`)
                    ),
                    select
                  )
                ),
              orElse: () => select
            })
          return bounded.pipe(
            decodeUsage,
            Effect.map((rows) =>
              rows.map(({ credits, ...row }): UsageRow => ({ ...row, credits_micros: credits * AUDIT_CREDIT_MICROS }))
            ),
            storeOp("AuditRepo.usage")
          )
        },
        queryAudit: (query) => {
          // The kind of traffic is read off the endpoint (a route pattern, or the path when none
          // matched), so records written before these filters existed are classified too.
          const isKind = (kind: TrafficKind) => {
            switch (kind) {
              case "health":
                return sql`endpoint IN ('/healthz', '/readyz')`
              case "app":
                return sql`(endpoint = '/app' OR endpoint LIKE '/app/%')`
              case "api":
                return sql`(endpoint = '/v1' OR endpoint LIKE '/v1/%')`
              case "admin":
                return sql`NOT (endpoint IN ('/healthz', '/readyz') OR endpoint = '/app' OR endpoint LIKE '/app/%' OR endpoint = '/v1' OR endpoint LIKE '/v1/%')`
            }
          }
          // details is JSON text written by JSON.stringify in a fixed key order (admin-audit.ts).
          const targetPattern = query.target_kind === undefined && query.target_id === undefined
            ? undefined
            : `%"target":{"kind":"${query.target_kind === undefined ? "%" : likeLiteral(JSON.stringify(query.target_kind).slice(1, -1))}","id":"${
              query.target_id === undefined ? "%" : likeLiteral(JSON.stringify(query.target_id).slice(1, -1))
            }"}%`
          const conditions = [
            query.include !== undefined && query.include.length > 0 ? sql.or(query.include.map(isKind)) : undefined,
            ...(query.exclude ?? []).map((kind) => sql`NOT ${isKind(kind)}`),
            query.writes_only === true ? sql`method NOT IN ('GET', 'HEAD')` : undefined,
            targetPattern !== undefined ? sql`details LIKE ${targetPattern} ESCAPE '\\'` : undefined,
            query.key_id !== undefined ? sql`key_id = ${query.key_id}` : undefined,
            query.status !== undefined ? sql`status = ${query.status}` : undefined,
            query.error !== undefined ? sql`error = ${query.error}` : undefined,
            query.endpoint !== undefined ? sql`endpoint = ${query.endpoint}` : undefined,
            query.since !== undefined ? sql`ts >= ${query.since}` : undefined,
            query.until !== undefined ? sql`ts < ${query.until}` : undefined,
            query.before_seq !== undefined ? sql`seq < ${query.before_seq}` : undefined
          ].filter((c) => c !== undefined)
          return sql`SELECT * FROM audit_log WHERE ${sql.and(conditions)} ORDER BY seq DESC LIMIT ${query.limit + 1}`.pipe(
            decodeAudit,
            Effect.map((rows): AuditPage => {
              const { items, last } = keysetPage(rows, query.limit)
              return { items, next_seq: last === undefined ? null : last.seq }
            }),
            storeOp("AuditRepo.queryAudit")
          )
        }
      })
    })
  )
}
