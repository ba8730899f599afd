/**
 * A SqlClient over `node:sqlite`, the embedded default store. Written here because the
 * published Effect SQLite driver does not load with effect 4.1 GA (docs/decisions.md section 1).
 * One synchronous connection shared through a semaphore, as SQLite wants.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Semaphore from "effect/Semaphore"
import * as Stream from "effect/Stream"
import * as Reactivity from "effect/reactivity/Reactivity"
import * as SqlClient from "effect/sql/SqlClient"
import type { Connection } from "effect/sql/SqlConnection"
import { classifySqliteError, SqlError } from "effect/sql/SqlError"
import * as Statement from "effect/sql/Statement"
import { ensurePrivateDir, ensurePrivateFile, tighten } from "../durability/private-files.ts"
import { dirname } from "node:path"
import { DatabaseSync, type StatementSync } from "node:sqlite"

type SqliteValue = null | number | bigint | string | Uint8Array

const toSqlite = (value: unknown): SqliteValue => {
  if (value === undefined || value === null) return null
  if (typeof value === "boolean") return value ? 1 : 0
  if (value instanceof Date) return value.toISOString()
  if (typeof value === "number" || typeof value === "bigint" || typeof value === "string" || value instanceof Uint8Array) return value
  return JSON.stringify(value)
}

const fail = (cause: unknown, operation: string) =>
  new SqlError({ reason: classifySqliteError(cause, { message: (cause as Error)?.message ?? "SQLite failure", operation }) })

/** Work on the raw connection (SqliteDatabase), its failure a SqlError as the SqlClient's are. */
export const sqliteTry = <A>(f: () => A, operation: string): Effect.Effect<A, SqlError> =>
  Effect.try({ try: f, catch: (cause) => fail(cause, operation) })

export const makeSqliteConnection = (filename: string) =>
  Effect.sync(() => {
    const onDisk = filename !== ":memory:" && filename !== ""
    if (onDisk) {
      // Directory 700, database 600 whatever the umask (issue 22, finding 6); SQLite gives its
      // WAL and shared-memory files the database file's mode, and they are tightened below too.
      ensurePrivateDir(dirname(filename))
      ensurePrivateFile(filename)
    }
    const db = new DatabaseSync(filename)
    // WAL lets the CLI write keys while a server holds the file; busy_timeout absorbs the overlap.
    db.exec("PRAGMA journal_mode = WAL; PRAGMA busy_timeout = 5000; PRAGMA foreign_keys = ON; PRAGMA synchronous = NORMAL;")
    if (onDisk) for (const suffix of ["-wal", "-shm"]) tighten(filename + suffix)
    // Only the hot, fixed statements are worth keeping prepared: multi-row inserts (audit batches)
    // differ in length every time and each would pin a large compiled statement.
    const cache = new Map<string, StatementSync>()
    const prepare = (sql: string): StatementSync => {
      let statement = cache.get(sql)
      if (!statement) {
        statement = db.prepare(sql)
        if (sql.length > 2000) return statement
        if (cache.size >= 200) cache.clear()
        cache.set(sql, statement)
      }
      return statement
    }
    const run = (sql: string, params: ReadonlyArray<unknown>, operation: string) =>
      Effect.try({
        try: () => {
          const statement = prepare(sql)
          const values = params.map(toSqlite)
          // Statements without result columns (DDL, plain DML) go through run(); all() would still work but allocates.
          return statement.columns().length > 0 ? (statement.all(...values) as Array<Record<string, unknown>>) : (statement.run(...values), [])
        },
        catch: (cause) => fail(cause, operation)
      })
    const runValues = (sql: string, params: ReadonlyArray<unknown>) =>
      Effect.map(run(sql, params, "executeValues"), (rows) => rows.map((row) => Object.values(row)))
    const connection: Connection & { readonly db: DatabaseSync; readonly prepare: (sql: string) => StatementSync } = {
      db,
      prepare,
      execute: (sql, params, transformRows) =>
        Effect.map(run(sql, params, "execute"), (rows) => (transformRows ? transformRows(rows) : rows)),
      executeRaw: (sql, params) => run(sql, params, "executeRaw"),
      executeStream: (sql, params, transformRows) =>
        Stream.fromIterableEffect(Effect.map(run(sql, params, "executeStream"), (rows) => (transformRows ? transformRows(rows) : rows))),
      executeValues: runValues,
      executeValuesUnprepared: runValues,
      executeUnprepared: (sql, params, transformRows) =>
        Effect.try({
          try: () => {
            if (params.length === 0) {
              db.exec(sql)
              return []
            }
            const rows = db.prepare(sql).all(...params.map(toSqlite)) as Array<Record<string, unknown>>
            return transformRows ? transformRows(rows) : rows
          },
          catch: (cause) => fail(cause, "executeUnprepared")
        })
    }
    return connection
  })

/**
 * The raw connection under the SqlClient, for the few hot statements that must not pay the
 * SqlClient's per-statement and per-transaction machinery. A caller may use it only for work
 * that completes synchronously (node:sqlite is synchronous) and only when `db.isTransaction` is
 * false, i.e. no SqlClient transaction is in progress across an await.
 */
export class SqliteDatabase extends Context.Service<SqliteDatabase, {
  readonly db: DatabaseSync
  readonly prepare: (sql: string) => StatementSync
}>()("modelgate/SqliteDatabase") {}

export const makeSqliteClient = (filename: string) =>
  Effect.gen(function*() {
    const connection = yield* Effect.acquireRelease(makeSqliteConnection(filename), (c) => Effect.sync(() => c.db.close()))
    const semaphore = yield* Semaphore.make(1)
    const acquirers = SqlClient.makeSqliteAcquirers({
      connection: Effect.succeed(connection),
      semaphore,
      isTransaction: (c) => c.db.isTransaction
    })
    const client = yield* SqlClient.make({
      ...acquirers,
      compiler: Statement.makeCompilerSqlite(),
      driver: "node:sqlite",
      spanAttributes: [["db.system.name", "sqlite"]],
      beginTransaction: "BEGIN IMMEDIATE"
    })
    return { client, raw: SqliteDatabase.of({ db: connection.db, prepare: connection.prepare }) }
  })

export const layerSqliteClient = (filename: string) =>
  Layer.effectContext(
    Effect.map(makeSqliteClient(filename), ({ client, raw }) =>
      Context.make(SqlClient.SqlClient, client).pipe(Context.add(SqliteDatabase, raw)))
  ).pipe(Layer.provide(Reactivity.layer))
