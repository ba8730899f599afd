/**
 * The store: one SQL database (SQLite for the embedded default, Postgres for replicas), migrated
 * once, with a repository per aggregate on top. Queries are written once against effect/sql; only
 * the migrations (and the SQLite hot path in CreditsRepo.admitPaid) differ per dialect.
 */
import type { PgClient } from "@effect/sql-pg"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Scope from "effect/Scope"
import type { SqlClient } from "effect/sql/SqlClient"
import { abandonAfter } from "../durability/backoff.ts"
import { AlertsRepo } from "./AlertsRepo.ts"
import { AuditRepo } from "./AuditRepo.ts"
import { ConnectionsRepo } from "./ConnectionsRepo.ts"
import { CreditsRepo } from "./CreditsRepo.ts"
import { KeysRepo } from "./KeysRepo.ts"
import { McpPinsRepo } from "./McpPinsRepo.ts"
import { McpSessionsRepo } from "./McpSessionsRepo.ts"
import { ResponsesRepo } from "./ResponsesRepo.ts"
import { DEFAULT_MIGRATION_BOUNDS, migrate, migrationList, type MigrationBounds } from "./migrate.ts"
import { migrationsFor } from "./migrations.ts"
import { layerSqliteClient } from "./sqlite-client.ts"
import { SqlHistoryRepo } from "./SqlHistoryRepo.ts"
import { noSecrets, StoreSecrets, type StoreSecretsShape } from "./secrets.ts"
import { SubjectsRepo } from "./SubjectsRepo.ts"
import { TeamsRepo } from "./TeamsRepo.ts"

/** Every repository: what a store layer provides, and what a test swaps as a whole. */
export type StoreRepos =
  | AlertsRepo
  | KeysRepo
  | CreditsRepo
  | AuditRepo
  | ConnectionsRepo
  | McpSessionsRepo
  | McpPinsRepo
  | SqlHistoryRepo
  | SubjectsRepo
  | ResponsesRepo
  | TeamsRepo

const repositories = Layer.mergeAll(
  AlertsRepo.layer,
  KeysRepo.layer,
  CreditsRepo.layer,
  AuditRepo.layer,
  ConnectionsRepo.layer,
  McpSessionsRepo.layer,
  McpPinsRepo.layer,
  SqlHistoryRepo.layer,
  SubjectsRepo.layer,
  ResponsesRepo.layer,
  TeamsRepo.layer
)

/** The repositories on a client, built only after the schema is migrated (migrate.ts). */
const onClient = <R, E>(dialect: "sqlite" | "postgres", client: Layer.Layer<SqlClient | R, E>, bounds: MigrationBounds) =>
  repositories.pipe(
    Layer.provide(
      Layer.effectDiscard(migrate(dialect, migrationList(migrationsFor(dialect)), bounds)).pipe(Layer.provideMerge(client))
    )
  )

const sqlite = (filename: string, bounds: MigrationBounds = DEFAULT_MIGRATION_BOUNDS) =>
  onClient("sqlite", layerSqliteClient(filename), bounds)

/**
 * Bounds on every Postgres session (issue 21; config `store_timeouts`): sent in each
 * connection's startup packet, so they hold on every connection of the pool from its first
 * statement. Without them one replica cut off from the server inside its group commit held the
 * workspace row (idle in transaction) for as long as its dead TCP connection lived, and every
 * other replica's paid traffic and lease renewals queued behind it.
 */
export interface StoreSession extends MigrationBounds {
  readonly statement_ms: number
  readonly lock_ms: number
  readonly idle_in_transaction_ms: number
  readonly keepalive_seconds: number
  /** The most connections the pool opens (config `store_pool_size`): replicas times this must fit the server's max_connections. */
  readonly pool_size?: number | undefined
}

export const DEFAULT_STORE_POOL_SIZE = 20

export const DEFAULT_STORE_SESSION: StoreSession = {
  statement_ms: 5_000,
  lock_ms: 2_000,
  idle_in_transaction_ms: 2_000,
  keepalive_seconds: 5,
  pool_size: DEFAULT_STORE_POOL_SIZE,
  ...DEFAULT_MIGRATION_BOUNDS
}

/** The Postgres driver loads only for a Postgres store: a SQLite deployment and the CLI never need it. */
const pgClient = (url: string, session: StoreSession): ReturnType<typeof PgClient.layer> =>
  Layer.unwrap(
    Effect.map(
      Effect.promise(() => import("@effect/sql-pg/PgClient")),
      (PgClient) =>
        PgClient.layer({
          url: Redacted.make(url),
          maxConnections: session.pool_size ?? DEFAULT_STORE_POOL_SIZE,
          applicationName: "modelgate",
          // A dead peer of an idle connection is found in seconds (then 10 probes 1 s apart), not the kernel's 2 h.
          keepAlive: Duration.seconds(session.keepalive_seconds),
          startupParameters: {
            statement_timeout: String(session.statement_ms),
            lock_timeout: String(session.lock_ms),
            // The server ends a session that sits inside a transaction this long: its locks go with it.
            idle_in_transaction_session_timeout: String(session.idle_in_transaction_ms)
          }
        })
    )
  )

/** How long a stop waits for the pool to close before leaving its connections to the process's exit. */
const POOL_CLOSE_TIMEOUT = Duration.seconds(3)

/**
 * The client's pool, closed at stop within POOL_CLOSE_TIMEOUT: a connection still checked out by
 * a statement abandoned on a partitioned server (its rollback waits for an answer that never
 * comes) would otherwise hold the stop until the kernel gives the TCP connection up, minutes later.
 */
const boundedClose = <A, E>(layer: Layer.Layer<A, E>): Layer.Layer<A, E> =>
  Layer.effectContext(Effect.gen(function*() {
    const scope = yield* Scope.make()
    yield* Effect.addFinalizer((exit) => Effect.ignore(abandonAfter(Scope.close(scope, exit), POOL_CLOSE_TIMEOUT)))
    return yield* Layer.buildWithScope(layer, scope)
  }))

const postgres = (url: string, session: StoreSession = DEFAULT_STORE_SESSION) =>
  onClient("postgres", boundedClose(pgClient(url, session)), session)

export const StoreLayer = {
  sqlite,
  postgres,
  /**
   * `sqlite:<path>` or `postgres://...`, as written in the config's `store` key; `session`: the
   * Postgres sessions' bounds (issue 21); `secrets`: how DSNs are kept at rest (secrets.ts).
   */
  fromUrl: (url: string, session?: StoreSession, secrets: StoreSecretsShape = noSecrets) =>
    (url.startsWith("sqlite:") ? sqlite(url.slice("sqlite:".length) || ":memory:", session) : postgres(url, session)).pipe(
      Layer.provide(Layer.succeed(StoreSecrets, secrets))
    ),
  /** A private in-memory SQLite store: the real queries, nothing on disk. */
  memory: Layer.suspend(() => sqlite(":memory:"))
}
