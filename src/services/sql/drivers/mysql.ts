/**
 * The MySQL / MariaDB driver over mysql2 (see mysql-connection.ts for the Effect adapter).
 *
 * Connections are opened with `multipleStatements` off, no LOCAL INFILE capability and no
 * infile stream factory. User statements are server-side prepared statements (`execute`) with
 * bound parameters.
 *
 * A call sets its session limits (MariaDB `max_statement_time` covers every statement; MySQL 8
 * `max_execution_time` only SELECT), then a transaction. Reads also make the whole session read
 * only (`SET SESSION TRANSACTION READ ONLY`), because DDL commits implicitly and would otherwise
 * escape `START TRANSACTION READ ONLY`; they always roll back. Behind the server limits a client
 * timer kills the statement from a side connection. After each call the session is reset with
 * COM_RESET_CONNECTION; after a timeout, a capped read stopped mid-result, an interruption or a
 * lost connection it is killed and destroyed instead.
 */
import type { Duplex } from "node:stream"
import { Duration, Effect, Pool, Predicate } from "effect"
import type { ConnectionOptions } from "mysql2"
import { Buffer } from "node:buffer"
import {
  describeEndpoint,
  makeRedactor,
  SqlConnectionUnreachable,
  type SqlDriverError,
  SqlQueryFailed,
  queryTimeout
} from "./errors.ts"
import {
  abort,
  type Capped,
  command,
  close,
  connect,
  executeCapped,
  killConnection,
  type MysqlFailure,
  type MysqlSession,
  reset
} from "./mysql-connection.ts"
import { mysqlColumns, mysqlRow, toMysqlParams } from "./mysql-values.ts"
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
  type RoutineInfo,
  type RoutineLookup,
  type RunInput,
  type RunResult,
  type ServerInfo,
  type SqlDriver,
  type SqlMode,
  type TableDescription,
  type TableEntry
} from "./types.ts"

/**
 * Server errnos that mean "a limit stopped the statement": MariaDB max_statement_time (1969),
 * MySQL max_execution_time (3024), lock waits (1205), and a statement interrupted by a kill (1317).
 */
const TIMEOUT_ERRNOS = new Set([1969, 3024, 1205, 1317])
/** ER_UNSUPPORTED_PS: the statement has no prepared form on this server. */
const UNSUPPORTED_PS = 1295

const LIST_TABLES = `SELECT TABLE_SCHEMA AS table_schema, TABLE_NAME AS table_name, TABLE_TYPE AS table_type,
  TABLE_ROWS AS table_rows
FROM information_schema.TABLES WHERE TABLE_SCHEMA = COALESCE(?, DATABASE())
ORDER BY TABLE_NAME`

const FIND_TABLE = `SELECT TABLE_SCHEMA AS table_schema, TABLE_NAME AS table_name
FROM information_schema.TABLES WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?`

const DESCRIBE_COLUMNS = `SELECT COLUMN_NAME AS column_name, COLUMN_TYPE AS column_type, IS_NULLABLE AS is_nullable,
  COLUMN_DEFAULT AS column_default, EXTRA AS extra
FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?
ORDER BY ORDINAL_POSITION`

const DESCRIBE_INDEXES = `SELECT INDEX_NAME AS index_name, NON_UNIQUE AS non_unique, COLUMN_NAME AS column_name
FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?
ORDER BY INDEX_NAME, SEQ_IN_INDEX`

const DESCRIBE_FOREIGN_KEYS = `SELECT CONSTRAINT_NAME AS constraint_name, COLUMN_NAME AS column_name,
  REFERENCED_TABLE_SCHEMA AS ref_schema, REFERENCED_TABLE_NAME AS ref_table, REFERENCED_COLUMN_NAME AS ref_column
FROM information_schema.KEY_COLUMN_USAGE
WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND REFERENCED_TABLE_NAME IS NOT NULL
ORDER BY CONSTRAINT_NAME, ORDINAL_POSITION`

const TABLE_KINDS: Record<string, string> = {
  "BASE TABLE": "table",
  "VIEW": "view",
  "SYSTEM VIEW": "system view",
  "SEQUENCE": "sequence",
  "TEMPORARY": "temporary table"
}

const flavorOf = (version: string): "mysql" | "mariadb" => (/mariadb/i.test(version) ? "mariadb" : "mysql")

const errnoOf = (error: MysqlFailure): number | undefined =>
  Predicate.hasProperty(error, "errno") && Predicate.isNumber(error.errno) ? error.errno : undefined

const sqlStateOf = (error: MysqlFailure): string | undefined =>
  Predicate.hasProperty(error, "sqlState") && Predicate.isString(error.sqlState) ? error.sqlState : undefined

const isFatal = (error: MysqlFailure) => Predicate.hasProperty(error, "fatal") && error.fatal === true

/** `mysql://user:password@host:port/database?ssl=true`; also accepts the `mariadb:` scheme. */
const connectionOptions = (url: string): ConnectionOptions | undefined => {
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    return undefined
  }
  if (parsed.protocol !== "mysql:" && parsed.protocol !== "mariadb:") return undefined
  const decode = (text: string) => {
    try {
      return decodeURIComponent(text)
    } catch {
      return text
    }
  }
  const ssl = parsed.searchParams.get("ssl") ?? parsed.searchParams.get("ssl-mode")
  const database = decode(parsed.pathname.replace(/^\//, ""))
  return {
    host: parsed.hostname || "localhost",
    port: parsed.port === "" ? 3306 : Number(parsed.port),
    user: decode(parsed.username),
    password: decode(parsed.password),
    ...(database === "" ? {} : { database }),
    ...(ssl !== null && !/^(false|0|disabled?)$/i.test(ssl) ? { ssl: { rejectUnauthorized: true } } : {}),
    multipleStatements: false,
    flags: ["-LOCAL_FILES", "-MULTI_STATEMENTS"],
    supportBigNumbers: true,
    bigNumberStrings: true,
    dateStrings: true,
    timezone: "Z",
    charset: "utf8mb4",
    connectTimeout: 5_000,
    enableKeepAlive: true
  }
}

const asText = (value: unknown): string | undefined =>
  value === null || value === undefined ? undefined : Buffer.isBuffer(value) ? value.toString("utf8") : String(value)

export const makeMysqlDriver = Effect.fnUntraced(function*(options: {
  readonly url: string
  readonly poolSize?: number | undefined
  /** Instead of a TCP connection to the URL's host: a stream through an SSH tunnel (the side connection that kills a query too). */
  readonly stream?: (() => Duplex) | undefined
}) {
  const redact = makeRedactor(options.url)
  const endpoint = describeEndpoint(options.url, 3306)
  const parsed = connectionOptions(options.url)
  const streamFactory = options.stream
  const connection = parsed === undefined || streamFactory === undefined ? parsed : { ...parsed, stream: () => streamFactory() }
  /** Learnt from `SELECT VERSION()` on the first connection; every later call needs it for its limits. */
  let server: ServerInfo | undefined

  const unreachable = (error: MysqlFailure) =>
    new SqlConnectionUnreachable({ message: redact(`cannot reach MySQL at ${endpoint}: ${error.message}`) })

  const open = Effect.gen(function*() {
    if (connection === undefined) {
      return yield* new SqlConnectionUnreachable({ message: "the connection URL is not a valid mysql:// URL" })
    }
    const session = yield* connect(connection).pipe(Effect.mapError(unreachable))
    if (server === undefined) {
      const detected = yield* executeCapped(session, { sql: "SELECT VERSION() AS version", params: [], prepared: false }, 1, false)
        .pipe(Effect.tapError(() => close(session)), Effect.mapError(unreachable))
      const version = asText(detected.rows[0]?.version) ?? ""
      server = { version, flavor: flavorOf(version) }
    }
    return session
  })

  const pool = yield* Pool.makeWithTTL({
    acquire: Effect.acquireRelease(open, close),
    min: 0,
    max: clampPoolSize(options.poolSize),
    timeToLive: Duration.seconds(60),
    timeToLiveStrategy: "usage"
  })

  /** A pooled socket may have died while idle (server restart, wait_timeout); those are skipped. */
  const checkout = Effect.gen(function*() {
    for (let attempt = 0; attempt <= clampPoolSize(options.poolSize); attempt++) {
      const session = yield* Pool.get(pool)
      if (!session.dead) return session
      yield* Pool.invalidate(pool, session)
    }
    return yield* new SqlConnectionUnreachable({ message: `cannot reach MySQL at ${endpoint}: connections keep dropping` })
  })

  const toDriverError = (error: MysqlFailure, timeoutMs: number): SqlDriverError => {
    const errno = errnoOf(error)
    if (errno !== undefined && TIMEOUT_ERRNOS.has(errno)) return queryTimeout(timeoutMs)
    if (isFatal(error) || (errno === undefined && Predicate.hasProperty(error, "code"))) return unreachable(error)
    if (errno === undefined) {
      return new SqlQueryFailed({ code: "0A000", message: redact(`the driver refused the statement: ${error.message}`) })
    }
    const sqlstate = sqlStateOf(error)
    return new SqlQueryFailed({
      code: String(errno),
      ...(sqlstate === undefined ? {} : { sqlstate }),
      message: redact(error.message)
    })
  }

  /** COM_RESET_CONNECTION after each call. A read abandoned at the cap cannot take another command. */
  const restore = (session: MysqlSession, rollback: boolean) =>
    session.abandoned
      ? Effect.succeed(false)
      : (rollback ? Effect.andThen(command(session, "ROLLBACK"), reset(session)) : reset(session))
        .pipe(Effect.match({ onFailure: () => false, onSuccess: () => true }))

  /** The kill stops the statement on the server; aborting the socket frees a thread blocked writing to it. */
  const discard = (session: MysqlSession) =>
    Effect.andThen(
      connection === undefined ? Effect.void : killConnection(connection, session.threadId),
      Effect.andThen(abort(session), Pool.invalidate(pool, session))
    )

  const inSession = <A>(timeoutMs: number, body: (session: MysqlSession) => Effect.Effect<A, MysqlFailure>) =>
    withSession({
      timeoutMs,
      acquire: checkout,
      restore,
      discard,
      toDriverError: (error: MysqlFailure) => toDriverError(error, timeoutMs),
      body
    })

  const begin = (session: MysqlSession, mode: SqlMode, timeoutMs: number) =>
    Effect.gen(function*() {
      const lockSeconds = Math.max(1, Math.ceil(timeoutMs / 1000))
      const statementLimit = server?.flavor === "mariadb"
        ? `max_statement_time = ${(timeoutMs / 1000).toFixed(3)}`
        : `max_execution_time = ${timeoutMs}`
      yield* command(
        session,
        `SET SESSION time_zone = '+00:00', ${statementLimit}, innodb_lock_wait_timeout = ${lockSeconds}, ` +
          `lock_wait_timeout = ${lockSeconds}`
      )
      if (mode === "read") {
        yield* command(session, "SET SESSION TRANSACTION READ ONLY")
        yield* command(session, "START TRANSACTION READ ONLY")
      } else {
        yield* command(session, "START TRANSACTION")
      }
    })

  /** Prepared first; a statement the server cannot prepare runs as text only when there is nothing to bind. */
  const executeStatement = (
    session: MysqlSession,
    sql: string,
    params: ReadonlyArray<unknown>,
    limit: number,
    stopEarly: boolean,
    maxBytes: number | undefined
  ): Effect.Effect<Capped, MysqlFailure> =>
    executeCapped(session, { sql, params, prepared: true }, limit, stopEarly, maxBytes).pipe(
      Effect.catchIf(
        (error) => errnoOf(error) === UNSUPPORTED_PS && params.length === 0,
        () => executeCapped(session, { sql, params, prepared: false }, limit, stopEarly, maxBytes)
      )
    )

  const run = Effect.fn("MysqlDriver.run")(function*(input: RunInput) {
    const maxRows = clampRows(input.maxRows)
    const timeoutMs = clampTimeout(input.timeoutMs)
    const params = toMysqlParams(input.params)
    return yield* inSession(timeoutMs, (session) =>
      Effect.gen(function*() {
        yield* begin(session, input.mode, timeoutMs)
        const [elapsed, capped] = yield* Effect.timed(
          executeStatement(session, input.statement, params, maxRows, input.mode === "read", input.maxBytes)
        )
        // A read abandoned at the cap cannot take another command; destroying the session rolls it back.
        if (!session.abandoned) yield* command(session, input.mode === "read" ? "ROLLBACK" : "COMMIT")
        const duration_ms = Duration.toMillis(elapsed)
        if (capped.fields === undefined) {
          return { kind: "affected", affected_rows: capped.header?.affectedRows ?? 0, duration_ms } satisfies RunResult
        }
        const fields = capped.fields
        const rows = capped.rows.slice(0, maxRows).map((row) => mysqlRow(row, fields))
        return {
          kind: "rows",
          columns: mysqlColumns(fields),
          rows,
          row_count: rows.length,
          truncated: capped.truncated,
          duration_ms
        } satisfies RunResult
      }))
  })

  const explain = Effect.fn("MysqlDriver.explain")(function*(input: ExplainInput) {
    const timeoutMs = clampTimeout(input.timeoutMs)
    return yield* inSession(timeoutMs, (session) =>
      Effect.gen(function*() {
        // Only a MySQL 8 analysis is a text tree; MariaDB's ANALYZE and every plain EXPLAIN give JSON.
        const tree = input.analyze && server?.flavor === "mysql"
        const prefix = !input.analyze
          ? "EXPLAIN FORMAT=JSON"
          : tree
          ? "EXPLAIN ANALYZE"
          : "ANALYZE FORMAT=JSON"
        yield* begin(session, input.mode, timeoutMs)
        const result = yield* executeStatement(session, `${prefix} ${input.statement}`, toMysqlParams(input.params), 1, false, undefined)
        // ANALYZE really executed the statement: nothing it did may survive, whatever the mode.
        yield* command(session, "ROLLBACK")
        const first = result.rows[0]
        const text = asText(first === undefined ? undefined : Object.values(first)[0]) ?? ""
        if (tree) return { plan: text.split("\n").filter((line) => line.trim() !== "") }
        return { plan: parsePlan(text) }
      }))
  })

  const catalog = <A>(body: (session: MysqlSession) => Effect.Effect<A, MysqlFailure>) =>
    inSession(CATALOG_TIMEOUT_MS, (session) =>
      Effect.gen(function*() {
        yield* begin(session, "read", CATALOG_TIMEOUT_MS)
        const result = yield* body(session)
        yield* command(session, "ROLLBACK")
        return result
      }))

  /** Catalog queries are small and bound their names as parameters. */
  const lookup = (session: MysqlSession, sql: string, params: ReadonlyArray<unknown>) =>
    Effect.map(executeCapped(session, { sql, params, prepared: true }, 100_000, false), (result) => result.rows)

  const listTables = Effect.fn("MysqlDriver.listTables")(function*(schema: string | undefined) {
    return yield* catalog((session) =>
      Effect.map(lookup(session, LIST_TABLES, [schema ?? null]), (rows) =>
        rows.map((row): TableEntry => {
          const type = asText(row.table_type) ?? ""
          return {
            schema: asText(row.table_schema) ?? "",
            name: asText(row.table_name) ?? "",
            kind: TABLE_KINDS[type] ?? type.toLowerCase(),
            rows_estimate: Math.max(0, Number(row.table_rows ?? 0) || 0)
          }
        }))
    )
  })

  const describe = Effect.fn("MysqlDriver.describe")(function*(schema: string | undefined, name: string) {
    return yield* catalog((session) =>
      Effect.gen(function*() {
        const found = (yield* lookup(session, FIND_TABLE, [schema ?? null, name]))[0]
        if (found === undefined) return undefined
        const table = [asText(found.table_schema) ?? "", asText(found.table_name) ?? ""]
        const columnRows = yield* lookup(session, DESCRIBE_COLUMNS, table)
        const indexRows = yield* lookup(session, DESCRIBE_INDEXES, table)
        const foreignKeyRows = yield* lookup(session, DESCRIBE_FOREIGN_KEYS, table)

        const indexes = new Map<string, { columns: Array<string>; unique: boolean }>()
        for (const row of indexRows) {
          const indexName = asText(row.index_name) ?? ""
          const entry = indexes.get(indexName) ?? { columns: [], unique: Number(row.non_unique) === 0 }
          // A functional index key (MySQL 8) has no column name.
          entry.columns.push(asText(row.column_name) ?? "(expression)")
          indexes.set(indexName, entry)
        }
        const primary = new Set(indexes.get("PRIMARY")?.columns ?? [])
        const unique = new Set(
          [...indexes.entries()]
            .filter(([indexName, index]) => indexName !== "PRIMARY" && index.unique && index.columns.length === 1)
            .flatMap(([, index]) => index.columns)
        )
        const columns = columnRows.map((row): ColumnDescription => {
          const columnName = asText(row.column_name) ?? ""
          const fallback = asText(row.column_default)
          // MariaDB spells "no default" as the string NULL (a NULL literal default would be quoted).
          const defaultText = server?.flavor === "mariadb" && fallback === "NULL" ? undefined : fallback
          return {
            name: columnName,
            type: asText(row.column_type) ?? "",
            nullable: asText(row.is_nullable) === "YES",
            ...(defaultText === undefined ? {} : { default: defaultText }),
            ...(primary.has(columnName) ? { pk: true } : {}),
            ...(unique.has(columnName) ? { unique: true } : {})
          }
        })
        const foreignKeys = new Map<string, ForeignKeyDescription>()
        for (const row of foreignKeyRows) {
          const keyName = asText(row.constraint_name) ?? ""
          const entry = foreignKeys.get(keyName) ?? {
            name: keyName,
            columns: [],
            references: { schema: asText(row.ref_schema) ?? "", table: asText(row.ref_table) ?? "", columns: [] }
          }
          entry.columns.push(asText(row.column_name) ?? "")
          entry.references.columns.push(asText(row.ref_column) ?? "")
          foreignKeys.set(keyName, entry)
        }
        return {
          schema: table[0] ?? "",
          name: table[1] ?? "",
          columns,
          indexes: [...indexes.entries()].map(([indexName, index]): IndexDescription => ({
            name: indexName,
            columns: index.columns,
            unique: index.unique
          })),
          foreign_keys: [...foreignKeys.values()]
        } satisfies TableDescription
      })
    )
  })

  const serverInfo = catalog((session) =>
    Effect.map(lookup(session, "SELECT VERSION() AS version", []), (rows): ServerInfo => {
      const version = asText(rows[0]?.version) ?? ""
      return { version, flavor: flavorOf(version) }
    })
  ).pipe(Effect.withSpan("MysqlDriver.serverInfo"))

  const routines = Effect.fn("MysqlDriver.routines")(function*(names: ReadonlyArray<string>) {
    return yield* catalog((session) =>
      Effect.gen(function*() {
        const database = asText((yield* lookup(session, "SELECT DATABASE() AS db", []))[0]?.db)
        const rows = names.length === 0 ? [] : yield* lookup(
          session,
          `SELECT ROUTINE_SCHEMA AS routine_schema, ROUTINE_NAME AS routine_name, SQL_DATA_ACCESS AS sql_data_access,
             SECURITY_TYPE AS security_type, IS_DETERMINISTIC AS is_deterministic
           FROM information_schema.ROUTINES
           WHERE ROUTINE_TYPE = 'FUNCTION' AND LOWER(ROUTINE_NAME) IN (${names.map(() => "?").join(", ")})`,
          names.map((name) => name.toLowerCase())
        )
        return {
          path: database === undefined ? [] : [database],
          routines: rows.map((row): RoutineInfo => ({
            schema: asText(row.routine_schema) ?? "",
            name: asText(row.routine_name) ?? "",
            volatility: asText(row.is_deterministic) === "YES" ? "immutable" : "volatile",
            securityDefiner: asText(row.security_type) !== "INVOKER",
            language: "sql",
            textArgument: false,
            modifiesData: asText(row.sql_data_access) === "MODIFIES SQL DATA"
          }))
        } satisfies RoutineLookup
      })
    )
  })

  return { dialect: "mysql", run, explain, listTables, describe, serverInfo, routines } satisfies SqlDriver
})

const parsePlan = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}
