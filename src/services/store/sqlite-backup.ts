/**
 * Backups of a SQLite store (issue 31, item 2). A plain `cp` of the store while a gateway serves
 * copies the database file without its WAL, where the recent commits (keys, charges) still are:
 * the copy opens as a store of minutes ago, or with no keys at all. A backup here goes through
 * SQLite: `backup()` of node:sqlite copies every page in one step, inside one read transaction
 * of the source, so it is a consistent snapshot of the last commit (WAL included) while the
 * gateway keeps writing; the copy is checked (integrity, schema) before it takes its name.
 *
 * A restore puts a checked copy of a backup in the store's place, only while no process has the
 * store open: each connection to a WAL database holds a shared lock on the file for as long as
 * it is open, so an exclusive lock that cannot be had means a gateway (or a CLI command) is
 * still using it. The store it replaces is kept aside under a timestamped name, never deleted.
 *
 * Plain node:sqlite and node:fs rather than the SqlClient: a backup must read the store as it is,
 * without the migrations or the workspace set-up that opening it through StoreLayer runs.
 */
import { fromMicros } from "../../domain/money.ts"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import { randomBytes } from "node:crypto"
import { closeSync, existsSync, fsyncSync, linkSync, openSync, renameSync, rmSync, statSync, copyFileSync } from "node:fs"
import { basename, dirname, join, resolve } from "node:path"
import { backup, DatabaseSync } from "node:sqlite"
import { ensurePrivateFile, tighten } from "../durability/private-files.ts"
import { migrationsFor } from "./migrations.ts"
import { DEFAULT_WORKSPACE } from "./rows.ts"

/** A backup or restore refused: the message says why and what to do (the CLI prints it, exit 1). */
export class StoreFileRefused extends Data.TaggedError("StoreFileRefused")<{ readonly message: string }> {}

/** The newest schema this release knows: the highest migration id. */
export const KNOWN_SCHEMA_VERSION = Math.max(...Object.keys(migrationsFor("sqlite")).map((id) => Number.parseInt(id, 10)))

/** What a store file holds, as a backup and a restore report it. */
export interface StoreSummary {
  /** The highest migration applied. */
  readonly schema_version: number
  readonly keys: number
  /** The pool's balance (`workspaces.credits`), which the ledger sums to. */
  readonly credits: number
  /** The ledger's sum: equal to `credits` in a consistent store. */
  readonly ledger_sum: number
  /** Credits in blocks leased by replicas (returned to the pool by a live replica once their lease lapses). */
  readonly leased: number
  /** Open reservations of requests in flight (refunded by a live replica once their owner's lease lapses). */
  readonly open_reservations: number
  readonly bytes: number
}

const refused = (message: string) => new StoreFileRefused({ message })

const errorText = (cause: unknown) => ((cause as Error)?.message ?? String(cause)).split("\n")[0]!

/** A name beside `path` for a file being written, so a failure never leaves a half file under `path`. */
const temporaryBeside = (path: string, what: string) => join(dirname(path), `.${basename(path)}.${what}-${process.pid}-${randomBytes(4).toString("hex")}`)

const removeQuietly = (path: string) => {
  for (const file of [path, `${path}-journal`, `${path}-wal`, `${path}-shm`]) rmSync(file, { force: true })
}

/** Flushes a file's contents to disk before it is renamed into place. */
const fsyncFile = (path: string) => {
  const fd = openSync(path, "r+")
  try {
    fsyncSync(fd)
  } finally {
    closeSync(fd)
  }
}

const count = (db: DatabaseSync, sql: string): number => Number((db.prepare(sql).get() as { n: number | bigint | null }).n ?? 0)

/**
 * Checks an open store file and says what it holds: SQLite's integrity check passes, it has
 * modelgate's migrations table and tables, and its schema is not newer than this release (an
 * older one is fine: the next start migrates it). `what` names the file in refusals.
 */
const inspect = (db: DatabaseSync, what: string, bytes: number): StoreSummary => {
  let integrity: string
  try {
    integrity = String(Object.values(db.prepare("PRAGMA integrity_check(1)").get() ?? {})[0])
  } catch (cause) {
    // "file is not a database", "database disk image is malformed".
    throw refused(`${what} is not a modelgate store: ${errorText(cause)}`)
  }
  if (integrity !== "ok") throw refused(`${what} fails SQLite's integrity check: ${integrity}`)
  const tables = new Set((db.prepare("SELECT name FROM sqlite_schema WHERE type = 'table'").all() as Array<{ name: string }>).map((t) => t.name))
  // The tables of the first migration: a store of any release has them.
  for (const table of ["modelgate_migrations", "workspaces", "api_keys"]) {
    if (!tables.has(table)) throw refused(`${what} is not a modelgate store: it has no ${table} table`)
  }
  const version = count(db, "SELECT MAX(migration_id) AS n FROM modelgate_migrations")
  if (version > KNOWN_SCHEMA_VERSION) {
    throw refused(
      `${what} has schema version ${version}, newer than this release knows (${KNOWN_SCHEMA_VERSION}): ` +
        "restore it with the modelgate release that made it, or a newer one"
    )
  }
  const workspace = db.prepare("SELECT * FROM workspaces WHERE id = ?").get(DEFAULT_WORKSPACE) as Record<string, unknown> | undefined
  // In credits: a store from migration 13 on holds micro-credits (issue 33), an older one whole credits.
  const credits = (stored: number) => version >= 13 ? fromMicros(stored) : stored
  return {
    schema_version: version,
    keys: count(db, "SELECT COUNT(*) AS n FROM api_keys"),
    credits: credits(Number(workspace?.credits ?? 0)),
    // The ledger, blocks and reservations came with later migrations; before the ledger, the balance was all there was.
    ledger_sum: credits(tables.has("credit_ledger") ? count(db, "SELECT COALESCE(SUM(amount), 0) AS n FROM credit_ledger") : Number(workspace?.credits ?? 0)),
    leased: credits(tables.has("credit_blocks") ? Number(workspace?.leased ?? 0) : 0),
    open_reservations: tables.has("credit_reservations") ? count(db, "SELECT COUNT(*) AS n FROM credit_reservations") : 0,
    bytes
  }
}

/** Opens `path`, checks it (inspect), leaves it a single file (rollback journal) and closes it. */
const checkFile = (path: string, what: string): StoreSummary => {
  let db: DatabaseSync
  try {
    db = new DatabaseSync(path, { timeout: 5000 })
  } catch (cause) {
    throw refused(`${what} cannot be opened: ${errorText(cause)}`)
  }
  try {
    const summary = inspect(db, what, 0)
    // A self-contained file: no -wal beside it to lose when it is copied somewhere.
    db.exec("PRAGMA journal_mode = DELETE")
    return summary
  } catch (cause) {
    if (cause instanceof StoreFileRefused) throw cause
    throw refused(`${what} is not a modelgate store: ${errorText(cause)}`)
  } finally {
    db.close()
  }
}

const sync = <A>(f: () => A): Effect.Effect<A, StoreFileRefused> =>
  Effect.try({
    try: f,
    catch: (cause) => (cause instanceof StoreFileRefused ? cause : refused(errorText(cause)))
  })

export interface BackupResult extends StoreSummary {
  readonly backup: string
  readonly store: string
}

/**
 * Writes a consistent copy of the SQLite store `storeFile` to `target` while the store may be in
 * use: to a temporary name beside `target` (mode 600), checked, then linked into place (a
 * `target` that appeared meanwhile is not overwritten) or, with `force`, renamed over it.
 */
export const backupSqlite = Effect.fn("SqliteBackup.backup")(function*(storeFile: string, target: string, options: { readonly force: boolean }) {
  const store = resolve(storeFile)
  const destination = resolve(target)
  if (!existsSync(store)) return yield* refused(`no store at ${store}: nothing to back up`)
  if ([store, `${store}-wal`, `${store}-shm`, `${store}-journal`].includes(destination)) {
    return yield* refused(`${destination} is the store itself: write the backup to another file`)
  }
  if (!existsSync(dirname(destination)) || !statSync(dirname(destination)).isDirectory()) {
    return yield* refused(`the directory ${dirname(destination)} does not exist`)
  }
  if (existsSync(destination) && !options.force) return yield* refused(`${destination} exists: choose another name, or --force to replace it`)
  if (existsSync(destination) && !statSync(destination).isFile()) return yield* refused(`${destination} is not a file`)

  const temporary = temporaryBeside(destination, "backup")
  return yield* Effect.gen(function*() {
    // 600 before SQLite writes a byte: it keeps the mode of a file that exists.
    yield* sync(() => ensurePrivateFile(temporary))
    const source = yield* sync(() => new DatabaseSync(store, { timeout: 5000 }))
    yield* Effect.tryPromise({
      // Every page in one step (the largest rate node:sqlite takes), inside one read transaction
      // of the source. Steps of a few pages would start over whenever the gateway commits in
      // between (another connection's write), which under steady traffic could be forever.
      try: () => backup(source, temporary, { rate: 2 ** 31 - 1 }),
      catch: (cause) => refused(`the backup of ${store} failed: ${errorText(cause)}`)
    }).pipe(Effect.ensuring(Effect.sync(() => source.close())))
    const summary = yield* sync(() => checkFile(temporary, `the backup of ${store}`))
    yield* sync(() => {
      tighten(temporary)
      fsyncFile(temporary)
      if (options.force) renameSync(temporary, destination)
      else {
        // link fails if the name was taken meanwhile: never overwritten without --force.
        try {
          linkSync(temporary, destination)
        } catch (cause) {
          if ((cause as NodeJS.ErrnoException).code === "EEXIST") throw refused(`${destination} exists: choose another name, or --force to replace it`)
          throw cause
        }
        rmSync(temporary)
      }
    })
    return { backup: destination, store, ...summary, bytes: statSync(destination).size } satisfies BackupResult
  }).pipe(Effect.ensuring(Effect.sync(() => removeQuietly(temporary))))
})

export interface RestoreResult extends StoreSummary {
  readonly restored: string
  readonly from: string
  /** Where the store that was replaced now is; null when there was none. */
  readonly kept_aside: string | null
}

/** `2026-11-28T12-05-32-123Z`: sorts by time and is a valid file name everywhere. */
const stamp = () => new Date().toISOString().replace(/[:.]/g, "-")

/**
 * Refuses while any process has `store` open, then folds its WAL into it: a connection in
 * exclusive locking mode gets its exclusive lock only when no other connection holds the shared
 * lock every open connection of a WAL database keeps. Closing that connection (the last one)
 * checkpoints and removes the WAL, so the file kept aside is complete by itself.
 */
const quiesce = (store: string) => {
  let db: DatabaseSync
  try {
    db = new DatabaseSync(store, { timeout: 0 })
  } catch (cause) {
    throw refused(`the store ${store} cannot be opened: ${errorText(cause)}`)
  }
  try {
    db.exec("PRAGMA locking_mode = EXCLUSIVE")
    try {
      db.exec("BEGIN EXCLUSIVE")
    } catch (cause) {
      const message = errorText(cause)
      if (/locked|busy/i.test(message)) {
        throw refused(`the store ${store} is in use (a gateway is serving on it, or another modelgate command has it open): stop every gateway on it first`)
      }
      // A store that no longer opens (what a restore is often for) has no gateway serving on it:
      // it is kept aside as it is.
      if (/not a database|malformed|corrupt/i.test(message)) return
      throw refused(`the store ${store} cannot be locked: ${message}`)
    }
    db.exec("COMMIT")
    try {
      db.exec("PRAGMA wal_checkpoint(TRUNCATE)")
    } catch {
      // A damaged store's WAL that cannot be folded in is kept aside beside it (restoreSqlite).
    }
  } finally {
    db.close()
  }
}

/**
 * Puts a checked copy of the backup `from` in the place of the SQLite store `storeFile`: refused
 * while the store is in use, for a file that is not a modelgate store or whose schema is newer
 * than this release. The replaced store is renamed `<store>.before-restore-<time>`; -wal and -shm
 * files left at the store's name are removed (a leftover WAL would be replayed onto the restored
 * file at its first open) or, a WAL with content, kept aside with it.
 */
export const restoreSqlite = Effect.fn("SqliteBackup.restore")(function*(storeFile: string, from: string) {
  const store = resolve(storeFile)
  const backupFile = resolve(from)
  if (!existsSync(backupFile)) return yield* refused(`no backup at ${backupFile}`)
  if (!statSync(backupFile).isFile()) return yield* refused(`${backupFile} is not a file`)
  if (backupFile === store) return yield* refused(`${backupFile} is the store itself`)
  if (existsSync(`${backupFile}-wal`) && statSync(`${backupFile}-wal`).size > 0) {
    return yield* refused(
      `${backupFile} has a WAL beside it (${backupFile}-wal): it was copied from a store in use, and the WAL holds its latest commits; ` +
        "make backups with `modelgate backup`, or open it once with the gateway stopped to fold the WAL in"
    )
  }
  if (!existsSync(dirname(store))) return yield* refused(`the store's directory ${dirname(store)} does not exist`)

  const temporary = temporaryBeside(store, "restore")
  return yield* Effect.gen(function*() {
    // Checked as a copy beside the store: the backup itself is never opened for writing, and the
    // rename into place is atomic (same directory, same file system).
    yield* sync(() => {
      ensurePrivateFile(temporary)
      copyFileSync(backupFile, temporary)
      tighten(temporary)
    })
    const summary = yield* sync(() => checkFile(temporary, backupFile))
    yield* sync(() => fsyncFile(temporary))
    const keptAside = yield* sync(() => {
      let aside: string | null = null
      const time = stamp()
      if (existsSync(store)) {
        quiesce(store)
        aside = `${store}.before-restore-${time}`
        renameSync(store, aside)
      }
      // Nothing of the old store may be read as the new one's: a WAL with content (a store whose
      // file had gone, or a checkpoint that could not finish) goes aside too; the rest is removed.
      const wal = `${store}-wal`
      if (existsSync(wal) && statSync(wal).size > 0) renameSync(wal, `${aside ?? `${store}.before-restore-${time}`}-wal`)
      for (const stale of [wal, `${store}-shm`, `${store}-journal`]) rmSync(stale, { force: true })
      renameSync(temporary, store)
      return aside
    })
    return { restored: store, from: backupFile, kept_aside: keptAside, ...summary, bytes: statSync(store).size } satisfies RestoreResult
  }).pipe(Effect.ensuring(Effect.sync(() => removeQuietly(temporary))))
})
