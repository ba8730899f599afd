/**
 * The Postgres driver. It works on @effect/sql-pg's session pool directly rather than through
 * the `PgClient` facade because it needs what the facade hides: the raw result (command tag,
 * row count, column types even for zero rows) and the power to destroy a session instead of
 * returning it.
 *
 * Every statement goes through the extended protocol with bound parameters (one statement per
 * Parse, so `SELECT 1; DROP ...` is refused by the server), unnamed: sessions are reset with
 * `DISCARD ALL` after each call, which would orphan a named-statement cache.
 *
 * A call runs inside one transaction with `SET LOCAL` limits. Reads are `REPEATABLE READ READ
 * ONLY` and always rolled back. Rows come through a server-side cursor, `FETCH max_rows + 1`, so
 * a huge result is never produced, let alone read, past the cap. Statements a cursor cannot hold
 * (SHOW, EXPLAIN, DML with RETURNING, DDL) fall back to direct execution in a fresh transaction;
 * writes that cannot run in any transaction (VACUUM...) run alone.
 */
import type { Duplex } from "node:stream"
import type * as PgConnection from "@effect/sql-pg/PgConnection"
import * as PgPool from "@effect/sql-pg/PgPool"
import { Duration, Effect, Predicate, Redacted } from "effect"
import type { SqlError } from "effect/sql/SqlError"
import {
  describeEndpoint,
  makeRedactor,
  SqlConnectionUnreachable,
  type SqlDriverError,
  SqlQueryFailed,
  queryTimeout
} from "./errors.ts"
import { pgRegistry, toPgParams } from "./postgres-values.ts"
import { valueBytes } from "./result-size.ts"
import { withSession } from "./session.ts"
import {
  CATALOG_TIMEOUT_MS,
  clampPoolSize,
  clampRows,
  clampTimeout,
  type ColumnDescription,
  type ExplainInput,
  type ForeignKeyDescription,
  type IndexDescription,
  type ResultColumn,
  type RoutineInfo,
  type RoutineLookup,
  type RunInput,
  type RunResult,
  type SqlDriver,
  type SqlMode,
  type TableDescription,
  type TableEntry
} from "./types.ts"

type Session = PgConnection.PgConnection
type Row = PgConnection.Row

const CURSOR = "modelgate_cursor"

/**
 * One SELECT both takes the transaction's snapshot (after which `SET TRANSACTION READ WRITE` is
 * refused, so a read can never be flipped into a write) and sets the limits, as `SET LOCAL`
 * would, from bound values.
 */
const SET_LIMITS = "SELECT set_config('statement_timeout', $1, true), set_config('lock_timeout', $2, true), " +
  "set_config('idle_in_transaction_session_timeout', $3, true)"

/** Headroom for the gaps between our own statements before the server gives up on an idle transaction. */
const IDLE_MARGIN_MS = 5_000

const RELATION_KINDS = "('r', 'p', 'v', 'm', 'f')"

const LIST_TABLES = `SELECT n.nspname::text AS schema, c.relname::text AS name,
  CASE c.relkind WHEN 'r' THEN 'table' WHEN 'p' THEN 'partitioned table' WHEN 'v' THEN 'view'
    WHEN 'm' THEN 'materialized view' ELSE 'foreign table' END AS kind,
  round(greatest(c.reltuples, 0))::float8 AS rows_estimate
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = coalesce($1, current_schema()) AND c.relkind IN ${RELATION_KINDS}
ORDER BY c.relname`

const FIND_RELATION = `SELECT c.oid AS oid, n.nspname::text AS schema, c.relname::text AS name
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = coalesce($1, current_schema()) AND c.relname = $2 AND c.relkind IN ${RELATION_KINDS}`

const DESCRIBE_COLUMNS = `SELECT a.attname::text AS name, format_type(a.atttypid, a.atttypmod) AS type,
  NOT a.attnotnull AS nullable, pg_get_expr(d.adbin, d.adrelid) AS default_expr,
  a.attidentity::text AS identity, a.attgenerated::text AS generated
FROM pg_catalog.pg_attribute a
LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`

/** Plain key columns by name, expression keys by their definition. */
const DESCRIBE_INDEXES = `SELECT i.relname::text AS name, x.indisunique AS is_unique, x.indisprimary AS is_primary,
  array(SELECT CASE WHEN x.indkey[k - 1] <> 0
      THEN (SELECT a.attname::text FROM pg_catalog.pg_attribute a WHERE a.attrelid = x.indrelid AND a.attnum = x.indkey[k - 1])
      ELSE pg_get_indexdef(x.indexrelid, k, true) END
    FROM generate_series(1, x.indnkeyatts::int) AS k ORDER BY k) AS columns
FROM pg_catalog.pg_index x JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid
WHERE x.indrelid = $1
ORDER BY i.relname`

const DESCRIBE_FOREIGN_KEYS = `SELECT con.conname::text AS name,
  array(SELECT a.attname::text FROM unnest(con.conkey) WITH ORDINALITY AS k(attnum, ord)
    JOIN pg_catalog.pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.attnum ORDER BY k.ord) AS columns,
  rn.nspname::text AS ref_schema, rc.relname::text AS ref_table,
  array(SELECT a.attname::text FROM unnest(con.confkey) WITH ORDINALITY AS k(attnum, ord)
    JOIN pg_catalog.pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.attnum ORDER BY k.ord) AS ref_columns
FROM pg_catalog.pg_constraint con
JOIN pg_catalog.pg_class rc ON rc.oid = con.confrelid
JOIN pg_catalog.pg_namespace rn ON rn.oid = rc.relnamespace
WHERE con.conrelid = $1 AND con.contype = 'f'
ORDER BY con.conname`

const TYPE_NAMES = "SELECT t.oid AS oid, format_type(t.oid, NULL) AS name FROM pg_catalog.pg_type t WHERE t.oid = ANY($1::oid[])"

/** Argument types through which a function could be handed SQL text to run. */
const TEXT_LIKE_TYPES = "ARRAY['text', 'varchar', 'bpchar', 'name', 'cstring', 'unknown', '\"any\"', 'anyelement', " +
  "'anynonarray', 'anycompatible', 'anycompatiblenonarray']::regtype[]::oid[]"

const ROUTINES = `SELECT n.nspname::text AS schema, p.proname::text AS name, p.provolatile::text AS volatility,
  p.prosecdef AS secdef, l.lanname::text AS language, p.pronargs::int AS nargs, p.pronargdefaults::int AS ndefaults,
  p.provariadic <> 0 AS variadic,
  EXISTS (SELECT 1 FROM unnest(p.proargtypes::oid[]) AS t(oid) WHERE t.oid = ANY (${TEXT_LIKE_TYPES})) AS text_arg
FROM pg_catalog.pg_proc p
JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
JOIN pg_catalog.pg_language l ON l.oid = p.prolang
WHERE p.proname = ANY ($1::text[])`

const query = (session: Session, sql: string, params: ReadonlyArray<unknown> = []) => session.query(sql, params, false)

/**
 * VACUUM, CREATE INDEX CONCURRENTLY and the like refuse to run in a transaction block (25001).
 * They run alone with session-level limits, which the `DISCARD ALL` after the call resets.
 */
const outsideTransaction = (session: Session, statement: string, params: ReadonlyArray<unknown>, timeoutMs: number) =>
  Effect.gen(function*() {
    yield* query(session, "ROLLBACK")
    yield* query(
      session,
      "SELECT set_config('statement_timeout', $1, false), set_config('lock_timeout', $2, false)",
      [String(timeoutMs), String(timeoutMs)]
    )
    return yield* query(session, statement, params)
  })

const begin = (session: Session, mode: SqlMode, timeoutMs: number) =>
  Effect.andThen(
    query(session, mode === "read" ? "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY" : "BEGIN"),
    query(session, SET_LIMITS, [String(timeoutMs), String(timeoutMs), String(timeoutMs + IDLE_MARGIN_MS)])
  )

/** A cursor holds only a plain query: the parser says 42601 for SHOW/EXPLAIN/DML, 0A000 for a writing CTE. */
const cannotBeCursor = (error: SqlError) => {
  const code = sqlState(error)
  return code === "42601" || code === "0A000"
}

const sqlState = (error: SqlError): string | undefined => {
  const cause: unknown = error.reason.cause
  return Predicate.hasProperty(cause, "code") && Predicate.isString(cause.code) ? cause.code : undefined
}

const causeText = (error: SqlError): string => {
  const cause: unknown = error.reason.cause
  const message = Predicate.hasProperty(cause, "message") && Predicate.isString(cause.message)
    ? cause.message
    : error.reason.message ?? error.reason._tag
  const detail = Predicate.hasProperty(cause, "detail") && Predicate.isString(cause.detail) ? cause.detail : undefined
  return detail === undefined ? message : `${message} (${detail})`
}

type Outcome =
  | {
    readonly kind: "rows"
    readonly fields: ReadonlyArray<PgConnection.Field>
    readonly rows: ReadonlyArray<Row>
    /** Rows were left out because the byte budget ran out. */
    readonly overBudget: boolean
  }
  | { readonly kind: "affected"; readonly rowCount: number }

/** Rows of the first FETCH, before anything is known of their size; later batches adapt. */
const FIRST_BATCH = 8
const MAX_BATCH = 1_000

const trimToBudget = (fields: ReadonlyArray<PgConnection.Field>, all: ReadonlyArray<Row>, maxBytes: number): Outcome => {
  let bytes = 0
  const rows: Array<Row> = []
  for (const row of all) {
    bytes += valueBytes(row)
    if (bytes > maxBytes) return { kind: "rows", fields, rows, overBudget: true }
    rows.push(row)
  }
  return { kind: "rows", fields, rows, overBudget: false }
}

export const makePostgresDriver = Effect.fnUntraced(function*(options: {
  readonly url: string
  readonly poolSize?: number | undefined
  /** Instead of a TCP connection to the URL's host: a stream through an SSH tunnel. */
  readonly stream?: (() => Duplex) | undefined
}) {
  const redact = makeRedactor(options.url)
  const endpoint = describeEndpoint(options.url, 5432)
  const pool = yield* PgPool.make({
    url: Redacted.make(options.url),
    maxConnections: clampPoolSize(options.poolSize),
    minConnections: 0,
    idleTimeout: Duration.seconds(60),
    prepare: false,
    applicationName: "modelgate",
    types: pgRegistry(),
    ...(options.stream === undefined ? {} : { stream: options.stream })
  }).pipe(Effect.orDie)

  const toDriverError = (error: SqlError, timeoutMs: number): SqlDriverError => {
    const reason = error.reason
    if (
      reason.operation === "connect" || reason._tag === "ConnectionError" || reason._tag === "AuthenticationError"
    ) {
      return new SqlConnectionUnreachable({
        message: redact(`cannot reach Postgres at ${endpoint}: ${causeText(error)}`)
      })
    }
    if (reason._tag === "StatementTimeoutError" || reason._tag === "LockTimeoutError") return queryTimeout(timeoutMs)
    const code = sqlState(error)
    if (code === undefined) {
      // No SQLSTATE: the driver itself could not encode a parameter or decode a column.
      return new SqlQueryFailed({
        code: "0A000",
        sqlstate: "0A000",
        message: redact(`the driver cannot handle a value of this statement: ${causeText(error)}`)
      })
    }
    return new SqlQueryFailed({ code, sqlstate: code, message: redact(causeText(error)) })
  }

  /** `DISCARD ALL` resets everything a statement may have left on the session (settings, temp tables, locks). */
  const restore = (session: Session, rollback: boolean) =>
    (rollback ? Effect.andThen(query(session, "ROLLBACK"), query(session, "DISCARD ALL")) : query(session, "DISCARD ALL"))
      .pipe(Effect.match({ onFailure: () => false, onSuccess: () => true }))

  /**
   * Destroying the session is enough: sql-pg has already cancelled an interrupted statement on
   * the server (CancelRequest) before the session gets here.
   */
  const inSession = <A>(timeoutMs: number, body: (session: Session) => Effect.Effect<A, SqlError>) =>
    withSession({
      timeoutMs,
      acquire: pool.reserve.pipe(Effect.mapError((error) => toDriverError(error, timeoutMs))),
      restore,
      discard: pool.invalidate,
      toDriverError: (error: SqlError) => toDriverError(error, timeoutMs),
      body
    })

  const typeNames = new Map<number, string>()

  /**
   * Column type names, looked up once per type OID for the life of the driver. The lookup runs
   * after a write has committed, so it must not turn that success into a failure: without it the
   * columns simply carry no type.
   */
  const describeColumns = (session: Session, fields: ReadonlyArray<PgConnection.Field>) =>
    Effect.gen(function*() {
      const missing = [...new Set(fields.map((field) => field.dataTypeId))].filter((oid) => !typeNames.has(oid))
      if (missing.length > 0) {
        yield* query(session, TYPE_NAMES, toPgParams([missing])).pipe(
          Effect.tap((found) =>
            Effect.sync(() => {
              for (const row of found.rows) typeNames.set(row.oid as number, row.name as string)
            })
          ),
          Effect.ignore
        )
      }
      return fields.map((field): ResultColumn => {
        const type = typeNames.get(field.dataTypeId)
        return type === undefined ? { name: field.name } : { name: field.name, type }
      })
    })

  /**
   * Reads the cursor in batches until `maxRows + 1` rows or `maxBytes` are reached. The first
   * batch is small; later ones are sized from the rows seen so far to fit what is left of the
   * budget, so a table of huge rows is read a few rows at a time and never past the budget by
   * more than one batch.
   */
  const fetchCapped = (session: Session, maxRows: number, maxBytes: number) =>
    Effect.gen(function*() {
      const rows: Array<Row> = []
      let fields: ReadonlyArray<PgConnection.Field> = []
      let bytes = 0
      let batch = Math.min(maxRows + 1, FIRST_BATCH)
      for (;;) {
        const fetched = yield* query(session, `FETCH FORWARD ${batch} FROM ${CURSOR}`)
        fields = fetched.fields
        for (const row of fetched.rows) {
          const size = valueBytes(row)
          if (bytes + size > maxBytes) return { kind: "rows", fields, rows, overBudget: true } satisfies Outcome
          bytes += size
          rows.push(row)
        }
        if (fetched.rows.length < batch || rows.length > maxRows) {
          return { kind: "rows", fields, rows, overBudget: false } satisfies Outcome
        }
        const average = Math.max(1, bytes / rows.length)
        const fits = Math.floor((maxBytes - bytes) / average)
        batch = Math.max(1, Math.min(maxRows + 1 - rows.length, MAX_BATCH, fits))
      }
    })

  const execute = (
    session: Session,
    input: RunInput,
    params: ReadonlyArray<unknown>,
    maxRows: number,
    timeoutMs: number
  ) =>
    Effect.gen(function*() {
      const declared = yield* query(session, `DECLARE ${CURSOR} NO SCROLL CURSOR FOR ${input.statement}`, params).pipe(
        Effect.as(true),
        Effect.catchIf(cannotBeCursor, () => Effect.succeed(false))
      )
      if (declared) return yield* fetchCapped(session, maxRows, input.maxBytes ?? Number.POSITIVE_INFINITY)
      // The refused DECLARE aborted the transaction before anything ran; start over and run the statement as is.
      yield* query(session, "ROLLBACK")
      yield* begin(session, input.mode, timeoutMs)
      const result = yield* query(session, input.statement, params).pipe(
        Effect.catchIf(
          (error) => input.mode === "write" && sqlState(error) === "25001",
          () => outsideTransaction(session, input.statement, params, timeoutMs)
        )
      )
      // Without a cursor (SHOW, EXPLAIN, RETURNING) the result is whole already; the budget still trims it.
      return (result.fields.length > 0
        ? trimToBudget(result.fields, result.rows, input.maxBytes ?? Number.POSITIVE_INFINITY)
        : { kind: "affected", rowCount: result.rowCount }) satisfies Outcome
    })

  const run = Effect.fn("PostgresDriver.run")(function*(input: RunInput) {
    const maxRows = clampRows(input.maxRows)
    const timeoutMs = clampTimeout(input.timeoutMs)
    const params = toPgParams(input.params)
    return yield* inSession(timeoutMs, (session) =>
      Effect.gen(function*() {
        yield* begin(session, input.mode, timeoutMs)
        const [elapsed, outcome] = yield* Effect.timed(execute(session, input, params, maxRows, timeoutMs))
        yield* query(session, input.mode === "read" ? "ROLLBACK" : "COMMIT")
        const duration_ms = Duration.toMillis(elapsed)
        if (outcome.kind === "affected") {
          return { kind: "affected", affected_rows: outcome.rowCount, duration_ms } satisfies RunResult
        }
        const rows = outcome.rows.slice(0, maxRows) as Array<Record<string, unknown>>
        return {
          kind: "rows",
          columns: yield* describeColumns(session, outcome.fields),
          rows,
          row_count: rows.length,
          truncated: outcome.overBudget || outcome.rows.length > maxRows,
          duration_ms
        } satisfies RunResult
      }))
  })

  const explain = Effect.fn("PostgresDriver.explain")(function*(input: ExplainInput) {
    const timeoutMs = clampTimeout(input.timeoutMs)
    const statement = `EXPLAIN (${input.analyze ? "ANALYZE, " : ""}FORMAT JSON) ${input.statement}`
    return yield* inSession(timeoutMs, (session) =>
      Effect.gen(function*() {
        yield* begin(session, input.mode, timeoutMs)
        const result = yield* query(session, statement, toPgParams(input.params))
        // ANALYZE really executed the statement: nothing it did may survive, whatever the mode.
        yield* query(session, "ROLLBACK")
        return { plan: result.rows[0]?.["QUERY PLAN"] ?? null }
      }))
  })

  const catalog = <A>(body: (session: Session) => Effect.Effect<A, SqlError>) =>
    inSession(CATALOG_TIMEOUT_MS, (session) =>
      Effect.gen(function*() {
        yield* begin(session, "read", CATALOG_TIMEOUT_MS)
        const result = yield* body(session)
        yield* query(session, "ROLLBACK")
        return result
      }))

  const listTables = Effect.fn("PostgresDriver.listTables")(function*(schema: string | undefined) {
    return yield* catalog((session) =>
      Effect.map(query(session, LIST_TABLES, [schema ?? null]), (result) =>
        result.rows.map((row): TableEntry => ({
          schema: row.schema as string,
          name: row.name as string,
          kind: row.kind as string,
          rows_estimate: row.rows_estimate as number
        })))
    )
  })

  const describe = Effect.fn("PostgresDriver.describe")(function*(schema: string | undefined, name: string) {
    return yield* catalog((session) =>
      Effect.gen(function*() {
        const found = (yield* query(session, FIND_RELATION, [schema ?? null, name])).rows[0]
        if (found === undefined) return undefined
        const relation = [String(found.oid)]
        const columnRows = (yield* query(session, DESCRIBE_COLUMNS, relation)).rows
        const indexRows = (yield* query(session, DESCRIBE_INDEXES, relation)).rows
        const foreignKeyRows = (yield* query(session, DESCRIBE_FOREIGN_KEYS, relation)).rows

        const primary = new Set(indexRows.filter((row) => row.is_primary === true).flatMap((row) => row.columns as Array<string>))
        const unique = new Set(
          indexRows
            .filter((row) => row.is_unique === true && row.is_primary !== true && (row.columns as Array<string>).length === 1)
            .flatMap((row) => row.columns as Array<string>)
        )
        const columns = columnRows.map((row): ColumnDescription => {
          const columnName = row.name as string
          const defaultText = row.identity === "a"
            ? "generated always as identity"
            : row.identity === "d"
            ? "generated by default as identity"
            : row.generated === "s" && Predicate.isString(row.default_expr)
            ? `generated always as (${row.default_expr}) stored`
            : row.default_expr
          return {
            name: columnName,
            type: row.type as string,
            nullable: row.nullable as boolean,
            ...(Predicate.isString(defaultText) ? { default: defaultText } : {}),
            ...(primary.has(columnName) ? { pk: true } : {}),
            ...(unique.has(columnName) ? { unique: true } : {})
          }
        })
        const indexes = indexRows.map((row): IndexDescription => ({
          name: row.name as string,
          columns: row.columns as Array<string>,
          unique: row.is_unique as boolean
        }))
        const foreign_keys = foreignKeyRows.map((row): ForeignKeyDescription => ({
          name: row.name as string,
          columns: row.columns as Array<string>,
          references: {
            schema: row.ref_schema as string,
            table: row.ref_table as string,
            columns: row.ref_columns as Array<string>
          }
        }))
        return {
          schema: found.schema as string,
          name: found.name as string,
          columns,
          indexes,
          foreign_keys
        } satisfies TableDescription
      })
    )
  })

  const serverInfo = catalog((session) =>
    Effect.map(query(session, "SELECT current_setting('server_version') AS version"), (result) => ({
      version: String(result.rows[0]?.version ?? ""),
      flavor: "postgres" as const
    }))
  ).pipe(Effect.withSpan("PostgresDriver.serverInfo"))

  const volatilities: Readonly<Record<string, RoutineInfo["volatility"]>> = { i: "immutable", s: "stable", v: "volatile" }

  const routines = Effect.fn("PostgresDriver.routines")(function*(names: ReadonlyArray<string>) {
    return yield* catalog((session) =>
      Effect.gen(function*() {
        const path = (yield* query(session, "SELECT current_schemas(true)::text[] AS path")).rows[0]?.path
        const rows = names.length === 0 ? [] : (yield* query(session, ROUTINES, toPgParams([[...names]]))).rows
        return {
          path: Array.isArray(path) ? path.map(String) : [],
          routines: rows.map((row): RoutineInfo => ({
            schema: row.schema as string,
            name: row.name as string,
            // Anything unexpected counts as volatile: the strictest reading.
            volatility: volatilities[row.volatility as string] ?? "volatile",
            securityDefiner: row.secdef === true,
            language: row.language as string,
            textArgument: row.text_arg === true,
            minArgs: (row.nargs as number) - (row.ndefaults as number),
            maxArgs: row.variadic === true ? -1 : (row.nargs as number)
          }))
        } satisfies RoutineLookup
      })
    )
  })

  return { dialect: "postgres", run, explain, listTables, describe, serverInfo, routines } satisfies SqlDriver
})
