/**
 * Brings a store's schema up to this release's (issue 31): every pending migration in one
 * transaction, under a store-wide lock and bounds of its own.
 *
 * - One transaction: an upgrade either completes or leaves the store as it was, so replicas of
 *   the previous release keep serving on it until the new ones are ready (README "Upgrading").
 * - A store-wide lock (a Postgres advisory lock; SQLite's write lock) taken before anything is
 *   read: replicas that start together wait for the one that migrates, then find nothing to do.
 * - Its own bounds (`store_timeouts.migration_ms`, `migration_lock_ms`), not the request path's
 *   5 s statement timeout, which cut a migration of a large audit table and crash-looped every
 *   replica. A session that dies or stalls still lets go: the server ends it (statement timeout,
 *   idle-in-transaction timeout) and rolls the transaction and its lock back.
 * - A store whose schema is newer than this release knows is refused before anything is changed:
 *   the release that wrote it may have changed what the older code would read or write.
 *
 * The table is the one `effect/sql/Migrator` created for earlier releases (same name and columns),
 * so a store migrated by any release before this one is read as it is.
 */
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import { SqlClient } from "effect/sql/SqlClient"
import { SqliteDatabase } from "./sqlite-client.ts"

export const MIGRATIONS_TABLE = "modelgate_migrations"

/** A migration as this release knows it: `<id>_<name>` and the work. */
export interface Migration {
  readonly id: number
  readonly name: string
  readonly run: Effect.Effect<void, unknown, SqlClient>
}

export interface MigrationBounds {
  /** How long one migration statement may run. */
  readonly migration_ms: number
  /** How long a replica waits for another one's migration (the store-wide lock) before giving up. */
  readonly migration_lock_ms: number
}

export const DEFAULT_MIGRATION_BOUNDS: MigrationBounds = { migration_ms: 900_000, migration_lock_ms: 1_800_000 }

/** The store's schema was written by a newer release: refused before anything is changed. */
export class StoreSchemaNewer extends Data.TaggedError("StoreSchemaNewer")<{
  readonly message: string
  readonly storeVersion: number
  readonly knownVersion: number
}> {}

/** A migration failed (or waited too long for another replica's): nothing of this run was kept. */
export class MigrationFailed extends Data.TaggedError("MigrationFailed")<{
  readonly message: string
  readonly cause: unknown
}> {}

/** `{ "7_audit_one_per_request": effect }` as an ordered list; ids are unique by construction of the record. */
export const migrationList = (record: Readonly<Record<string, Effect.Effect<void, unknown, SqlClient>>>): ReadonlyArray<Migration> =>
  Object.entries(record)
    .map(([key, run]) => {
      const match = /^(\d+)_(.+)$/.exec(key)
      if (!match) throw new Error(`migration key ${key} is not <id>_<name>`)
      return { id: Number(match[1]), name: match[2]!, run }
    })
    .sort((a, b) => a.id - b.id)

/** Any constant: the key of the store-wide advisory lock every modelgate replica takes to migrate. */
const PG_MIGRATION_LOCK = 7_316_011_931

const elapsed = (since: number) => `${Math.round(performance.now() - since)} ms`

/**
 * Migrates the store the ambient SqlClient talks to; answers the migrations it ran. On SQLite the
 * SqliteDatabase service must be present (the write lock is taken on the raw connection first).
 */
export const migrate = Effect.fn("Store.migrate")(function*(
  dialect: "sqlite" | "postgres",
  migrations: ReadonlyArray<Migration>,
  bounds: MigrationBounds = DEFAULT_MIGRATION_BOUNDS
) {
  const sql = yield* SqlClient
  const known = migrations.at(-1)?.id ?? 0

  const lockStore = dialect === "postgres"
    ? Effect.gen(function*() {
      // Bounds for this transaction only; the pool's sessions keep the request path's.
      yield* sql.unsafe(`SET LOCAL lock_timeout = ${bounds.migration_lock_ms}`)
      yield* sql.unsafe(`SET LOCAL statement_timeout = ${bounds.migration_lock_ms}`)
      yield* sql.unsafe(`SET LOCAL idle_in_transaction_session_timeout = 60000`)
      const [free] = yield* sql.unsafe<{ locked: boolean }>(`SELECT pg_try_advisory_xact_lock(${PG_MIGRATION_LOCK}) AS locked`)
      if (!free?.locked) {
        yield* Effect.logInfo(`store: another replica is migrating the schema; waiting for it (at most ${bounds.migration_lock_ms} ms)`)
        yield* sql.unsafe(`SELECT pg_advisory_xact_lock(${PG_MIGRATION_LOCK})`)
      }
      yield* sql.unsafe(`SET LOCAL lock_timeout = ${bounds.migration_ms}`)
      yield* sql.unsafe(`SET LOCAL statement_timeout = ${bounds.migration_ms}`)
    })
    : Effect.void

  const applied = Effect.map(
    sql.unsafe<{ migration_id: number | string; name: string }>(`SELECT migration_id, name FROM ${MIGRATIONS_TABLE}`),
    (rows) => new Map(rows.map((row) => [Number(row.migration_id), row.name]))
  )

  const run = Effect.gen(function*() {
    yield* lockStore
    yield* sql.unsafe(
      dialect === "postgres"
        ? `CREATE TABLE IF NOT EXISTS ${MIGRATIONS_TABLE} (migration_id integer PRIMARY KEY, created_at timestamp with time zone NOT NULL DEFAULT now(), name text NOT NULL)`
        : `CREATE TABLE IF NOT EXISTS ${MIGRATIONS_TABLE} (migration_id integer PRIMARY KEY NOT NULL, created_at datetime NOT NULL DEFAULT current_timestamp, name VARCHAR(255) NOT NULL)`
    )
    const done = yield* applied
    const newest = Math.max(0, ...done.keys())
    if (newest > known) {
      return yield* new StoreSchemaNewer({
        storeVersion: newest,
        knownVersion: known,
        message: `the store's schema is version ${newest} (${newest}_${done.get(newest)}), newer than this release knows ` +
          `(version ${known}): it was upgraded by a newer modelgate. Run that release (or a newer one), or restore the ` +
          `backup taken before the upgrade to go back to this one (README "Upgrading")`
      })
    }
    const pending = migrations.filter((m) => !done.has(m.id))
    if (pending.length === 0) return pending
    // An upgrade is worth the operator's attention, step by step; a new store's creation is not.
    const log = newest === 0 ? Effect.logDebug : Effect.logInfo
    yield* log(`store: migrating the schema from version ${newest} to ${known} (${pending.length} migration${pending.length === 1 ? "" : "s"})`)
    for (const migration of pending) {
      const started = performance.now()
      yield* log(`store: migration ${migration.id}_${migration.name}`)
      yield* Effect.mapError(migration.run, (cause) =>
        new MigrationFailed({
          message: `store migration ${migration.id}_${migration.name} failed; nothing of this upgrade was kept: ${(cause as { message?: string })?.message ?? String(cause)}`,
          cause
        }))
      yield* sql.unsafe(`INSERT INTO ${MIGRATIONS_TABLE} (migration_id, name) VALUES (${migration.id}, '${migration.name.replaceAll("'", "''")}')`)
      yield* log(`store: migration ${migration.id}_${migration.name} done in ${elapsed(started)}`)
    }
    yield* log(`store: schema at version ${known}`)
    return pending
  })

  const ran = yield* (dialect === "sqlite" ? sqliteWriteLocked(sql.withTransaction(run), bounds) : sql.withTransaction(run)).pipe(
    Effect.catchTag("SqlError", (cause) =>
      Effect.fail(
        new MigrationFailed({
          message: `store schema migration failed; nothing of this upgrade was kept: ${cause.message}` +
            (/timeout|canceling statement/i.test(cause.message) ? ` (bounded by store_timeouts.migration_ms / migration_lock_ms)` : ""),
          cause
        })
      ))
  )
  return ran.map((m) => `${m.id}_${m.name}`)
})

/**
 * SQLite's write lock is the store-wide lock: the transaction begins IMMEDIATE. Another process
 * holding it (a replica migrating, a CLI writing) is first tried without waiting, so the wait is
 * logged, then waited for up to `migration_lock_ms` (node:sqlite waits synchronously: nothing else
 * runs in this process before its store is migrated anyway).
 */
const sqliteWriteLocked = <A, E, R>(transaction: Effect.Effect<A, E, R>, bounds: MigrationBounds) =>
  Effect.gen(function*() {
    const raw = yield* Effect.serviceOption(SqliteDatabase)
    // Only the project's own SQLite client has the raw connection; any other runs the transaction as it is.
    if (raw._tag === "None") return yield* transaction
    const { db } = raw.value
    const busy = (ms: number) => Effect.sync(() => db.exec(`PRAGMA busy_timeout = ${ms}`))
    const previous = Number((db.prepare("PRAGMA busy_timeout").get() as { timeout: number }).timeout)
    return yield* Effect.gen(function*() {
      // Is another process writing? An immediate transaction tells at once; it is given back at once.
      const free = yield* Effect.sync(() => {
        try {
          db.exec("PRAGMA busy_timeout = 0; BEGIN IMMEDIATE; ROLLBACK")
          return true
        } catch {
          return false
        }
      })
      // Usually a moment (a CLI command, a batch): only worth a line at debug.
      if (!free) yield* Effect.logDebug(`store: waiting for the store's write lock, held by another process (a replica migrating?), at most ${bounds.migration_lock_ms} ms`)
      yield* busy(bounds.migration_lock_ms)
      return yield* transaction
    }).pipe(Effect.ensuring(busy(previous)))
  })
