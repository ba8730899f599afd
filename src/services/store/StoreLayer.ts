/**
 * The store: one SQL database (SQLite for the embedded default, Postgres for replicas), migrated
 * once, with a repository per aggregate on top. Queries are written once against effect/sql; only
 * the migrations (and the SQLite hot path in CreditsRepo.admitPaid) differ per dialect.
 */
import type { PgClient } from "@effect/sql-pg"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Redacted from "effect/Redacted"
import * as Migrator from "effect/sql/Migrator"
import type { SqlClient } from "effect/sql/SqlClient"
import { AuditRepo } from "./AuditRepo.ts"
import { ConnectionsRepo } from "./ConnectionsRepo.ts"
import { CreditsRepo } from "./CreditsRepo.ts"
import { KeysRepo } from "./KeysRepo.ts"
import { McpSessionsRepo } from "./McpSessionsRepo.ts"
import { migrationsFor } from "./migrations.ts"
import { layerSqliteClient } from "./sqlite-client.ts"
import { SqlHistoryRepo } from "./SqlHistoryRepo.ts"
import { noSecrets, StoreSecrets, type StoreSecretsShape } from "./secrets.ts"
import { SubjectsRepo } from "./SubjectsRepo.ts"

/** Every repository: what a store layer provides, and what a test swaps as a whole. */
export type StoreRepos = KeysRepo | CreditsRepo | AuditRepo | ConnectionsRepo | McpSessionsRepo | SqlHistoryRepo | SubjectsRepo

const repositories = Layer.mergeAll(
  KeysRepo.layer,
  CreditsRepo.layer,
  AuditRepo.layer,
  ConnectionsRepo.layer,
  McpSessionsRepo.layer,
  SqlHistoryRepo.layer,
  SubjectsRepo.layer
)

/** The repositories on a client, built only after the schema is migrated. */
const onClient = <R, E>(dialect: "sqlite" | "postgres", client: Layer.Layer<SqlClient | R, E>) =>
  repositories.pipe(
    Layer.provide(
      Layer.effectDiscard(
        Migrator.make({})({ loader: Migrator.fromRecord(migrationsFor(dialect)), table: "modelgate_migrations" })
      ).pipe(Layer.provideMerge(client))
    )
  )

const sqlite = (filename: string) => onClient("sqlite", layerSqliteClient(filename))

/** The Postgres driver loads only for a Postgres store: a SQLite deployment and the CLI never need it. */
const pgClient = (url: string): ReturnType<typeof PgClient.layer> =>
  Layer.unwrap(
    Effect.map(
      Effect.promise(() => import("@effect/sql-pg/PgClient")),
      (PgClient) => PgClient.layer({ url: Redacted.make(url), maxConnections: 20, applicationName: "modelgate" })
    )
  )

const postgres = (url: string) => onClient("postgres", pgClient(url))

export const StoreLayer = {
  sqlite,
  postgres,
  /** `sqlite:<path>` or `postgres://...`, as written in the config's `store` key; `secrets`: how DSNs are kept at rest (secrets.ts). */
  fromUrl: (url: string, secrets: StoreSecretsShape = noSecrets) =>
    (url.startsWith("sqlite:") ? sqlite(url.slice("sqlite:".length) || ":memory:") : postgres(url)).pipe(
      Layer.provide(Layer.succeed(StoreSecrets, secrets))
    ),
  /** A private in-memory SQLite store: the real queries, nothing on disk. */
  memory: Layer.suspend(() => sqlite(":memory:"))
}
