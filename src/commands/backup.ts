/**
 * `modelgate backup FILE` and `modelgate restore FILE` (issue 31, item 2): the SQLite store
 * through services/store/sqlite-backup.ts; a Postgres store is backed up and restored with
 * Postgres's own tools, whose recipe is printed (nothing is run behind the operator's back: the
 * pg_dump on PATH may not match the server's version, and a restore replaces a shared database).
 * Loaded by command-line.ts only when one of them runs.
 */
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import { dirname } from "node:path"
import { redact } from "../cli/failure.ts"
import { DEFAULT_STORE, sqliteFileOf } from "../services/config/operator-rules.ts"
import { ensurePrivateDir } from "../services/durability/private-files.ts"
import type { GatewayConfig } from "../services/config/schema.ts"
import { backupSqlite, KNOWN_SCHEMA_VERSION, restoreSqlite } from "../services/store/sqlite-backup.ts"
import { printJson } from "./print.ts"
import { Refused } from "./refused.ts"

/** A file name as a shell takes it: quoted when it holds anything but the usual path characters. */
// The configured DSN is shown with its password hidden (redact): it is not for the terminal.
const quoted = (text: string) => (/^[\w./@%+=:,-]+$/.test(text) ? text : `'${text.replaceAll("'", "'\\''")}'`)

const inMemory = new Refused({ message: "the store is in memory (sqlite::memory:): there is nothing on disk to back up or restore" })

const toRefused = Effect.mapError((error: { readonly message: string }) => new Refused({ message: error.message }))

export const backupStore = (config: GatewayConfig, file: string, force: boolean) =>
  Effect.gen(function*() {
    if (!config.store.startsWith("sqlite:")) {
      yield* Console.error([
        "A Postgres store is backed up with pg_dump (consistent while the replicas serve: one snapshot):",
        `  pg_dump --format=custom --file=${quoted(file)} '${redact(config.store)}'`,
        "(the password as in the store URL, or from PGPASSWORD or ~/.pgpass). See the README, \"Backups\"."
      ].join("\n"))
      return yield* new Refused({ message: "modelgate backup writes SQLite stores only; run the pg_dump above for this Postgres store" })
    }
    const store = sqliteFileOf(config.store)
    if (store === undefined) return yield* inMemory
    const result = yield* toRefused(backupSqlite(store, file, { force }))
    yield* printJson(result)
  })

export const restoreStore = (config: GatewayConfig, file: string) =>
  Effect.gen(function*() {
    if (!config.store.startsWith("sqlite:")) {
      yield* Console.error([
        "A Postgres store is restored with pg_restore, with every replica stopped, into a new empty database:",
        "  createdb modelgate_restored",
        `  pg_restore --no-owner --single-transaction --exit-on-error --dbname=postgres://.../modelgate_restored ${quoted(file)}`,
        `then point store (now '${redact(config.store)}') at the new database and start the replicas. See the README, "Backups".`
      ].join("\n"))
      return yield* new Refused({ message: "modelgate restore writes SQLite stores only; run the pg_restore above for this Postgres store" })
    }
    const store = sqliteFileOf(config.store)
    if (store === undefined) return yield* inMemory
    // The embedded default's ./data is created as `serve` creates it; any other directory must exist (preflight).
    if (config.store === DEFAULT_STORE) ensurePrivateDir(dirname(store))
    const result = yield* toRefused(restoreSqlite(store, file))
    yield* printJson(result)
    if (result.schema_version < KNOWN_SCHEMA_VERSION) {
      yield* Console.error(`The backup has schema version ${result.schema_version}; the next start migrates it to ${KNOWN_SCHEMA_VERSION}.`)
    }
    if (result.leased > 0 || result.open_reservations > 0) {
      // The replicas that held them are not running on this store: the next start's sweep settles them as a dead replica's.
      yield* Console.error(
        `The backup holds ${result.leased} credits in blocks and ${result.open_reservations} open reservations of the gateway that ` +
          "served when it was made: one lease (credits.reservation_lease_seconds) after the next start, the blocks go back to " +
          "the pool and the reservations are refunded (audited replica_lost)."
      )
    }
  })
