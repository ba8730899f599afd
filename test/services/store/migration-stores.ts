/**
 * Stores at an earlier release's schema, for the upgrade tests (migrations.test.ts and
 * migrations-large.test.ts): a store of either dialect, migrated the way releases before issue 31
 * did, and dropped when the file ends. The test files share no module state (Vitest runs them in
 * one worker without isolation), so each file calls `useMigrationStores()` for its own cleanup.
 */
import { afterAll } from "@effect/vitest"
import { Effect, Layer, ManagedRuntime, Redacted } from "effect"
import * as Migrator from "effect/sql/Migrator"
import { SqlClient } from "effect/sql/SqlClient"
import { PgClient } from "@effect/sql-pg"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { DatabaseSync } from "node:sqlite"
import { layerSqliteClient } from "../../../src/services/store/sqlite-client.ts"
import { migrationsFor } from "../../../src/services/store/migrations.ts"
import { createPostgresDatabase, type TempDatabase } from "../../support/databases.ts"

export type Dialect = "sqlite" | "postgres"

export const NOW = "2026-11-01T00:00:00.000Z"

/** The migration ids this release knows, in order: the schema versions a store can be at. */
export const ids = (dialect: Dialect) => Object.keys(migrationsFor(dialect)).map((key) => Number(key.split("_")[0])).sort((a, b) => a - b)

/** A store of one dialect: where it is, a raw SQL runner, and the config's store URL. */
export interface TestStore {
  readonly url: string
  readonly query: (text: string) => Promise<ReadonlyArray<Record<string, unknown>>>
  readonly client: Layer.Layer<SqlClient>
}

/** Migrates a store to `version` the way releases before issue 31 did: effect/sql's Migrator, its table. */
export const migrateAsEarlierRelease = (store: TestStore, dialect: Dialect, version: number) => {
  const before = Object.fromEntries(Object.entries(migrationsFor(dialect)).filter(([key]) => Number(key.split("_")[0]) <= version))
  return Effect.runPromise(
    Migrator.make({})({ loader: Migrator.fromRecord(before), table: "modelgate_migrations" }).pipe(Effect.provide(store.client))
  )
}

export const count = async (store: TestStore, table: string) => Number((await store.query(`SELECT COUNT(*) AS n FROM ${table}`))[0]!.n)

/** Store makers whose directories and databases are removed after the calling file's tests. */
export const useMigrationStores = () => {
  const dirs: Array<string> = []
  const databases: Array<TempDatabase> = []
  const sessions: Array<ManagedRuntime.ManagedRuntime<SqlClient, unknown>> = []
  afterAll(async () => {
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true })
    await Promise.all(sessions.map((session) => session.dispose()))
    await Promise.all(databases.map((db) => db.drop()))
  })

  const tempDir = () => {
    const dir = mkdtempSync(join(tmpdir(), "mg-migrations-"))
    dirs.push(dir)
    return dir
  }

  const sqliteStore = (): TestStore => {
    const file = join(tempDir(), "store.db")
    return {
      url: `sqlite:${file}`,
      query: async (text) => {
        const db = new DatabaseSync(file)
        try {
          return /^\s*(SELECT|PRAGMA|WITH)/i.test(text) ? (db.prepare(text).all() as Array<Record<string, unknown>>) : (db.exec(text), [])
        } finally {
          db.close()
        }
      },
      client: layerSqliteClient(file).pipe(Layer.fresh) as Layer.Layer<SqlClient>
    }
  }

  const postgresStore = async (prefix: string): Promise<TestStore> => {
    const db = await createPostgresDatabase(prefix)
    databases.push(db)
    // One session per store for the test's own statements: a connection per statement (what
    // support/pg-admin.ts's Client opens) was most of the upgrade test's time, about 40 per
    // schema version, 15-30 s of the file on a loaded machine. It holds no lock between statements.
    const admin = ManagedRuntime.make(PgClient.layer({ url: Redacted.make(db.url), maxConnections: 1 }) as unknown as Layer.Layer<SqlClient>)
    sessions.push(admin)
    return {
      url: db.url,
      query: (text) =>
        admin.runPromise(Effect.gen(function*() {
          const sql = yield* SqlClient
          return (yield* sql.unsafe(text)) as unknown as ReadonlyArray<Record<string, unknown>>
        })),
      client: PgClient.layer({ url: Redacted.make(db.url), maxConnections: 1 }).pipe(Layer.fresh) as unknown as Layer.Layer<SqlClient>
    }
  }

  const makeStore = (dialect: Dialect, prefix: string) => dialect === "sqlite" ? Promise.resolve(sqliteStore()) : postgresStore(prefix)

  return { tempDir, sqliteStore, postgresStore, makeStore }
}
