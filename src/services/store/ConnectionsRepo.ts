/** Database connections added through the admin API, and the per-key grants on them. */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { SqlClient } from "effect/sql/SqlClient"
import type { ConnectionRecord, ConnectionRole, ConnectionSsh, GrantRecord } from "../../domain/records.ts"
import { bumpKeyVersion, decodeRows, Num, NullableString } from "./rows.ts"
import { storeOp, type StoreError } from "./StoreError.ts"
import { isSealed, noSecrets, openStored, openWith, seal, SEALED_PREFIX, StoreSecrets, toStored } from "./secrets.ts"

const ConnectionRow = Schema.Struct({
  id: Num,
  name: Schema.String,
  dialect: Schema.Literals(["postgres", "mysql"]),
  url: Schema.String,
  read_url: NullableString,
  default_schema: NullableString,
  environment: Schema.Literals(["development", "production"]),
  ssh: NullableString
})

const GrantRow = Schema.Struct({
  key_id: Schema.String,
  connection_id: Num,
  role: Schema.Literals(["read", "edit"]),
  granted_at: Schema.String
})

const decodeConnections = decodeRows(ConnectionRow)
const decodeGrants = decodeRows(GrantRow)

export class ConnectionsRepo extends Context.Service<ConnectionsRepo, {
  readonly listConnections: Effect.Effect<ReadonlyArray<ConnectionRecord>, StoreError>
  /** Inserts a connection; false when the id is taken. */
  readonly insertConnection: (connection: Omit<ConnectionRecord, "source">) => Effect.Effect<boolean, StoreError>
  /**
   * Inserts a connection under the next free id above every stored one and above `floor` (the
   * config file's ids); returns that id. Concurrent inserts never share one: the id is taken by
   * the insert itself, and one that lost the race to another replica's is tried again.
   */
  readonly insertConnectionWithNextId: (connection: Omit<ConnectionRecord, "source" | "id">, floor: number) => Effect.Effect<number, StoreError>
  readonly grantsOf: (keyId: string) => Effect.Effect<ReadonlyArray<GrantRecord>, StoreError>
  /** The grants of each of these keys, in one query (a page of the key list); a key without grants has none in the map. */
  readonly grantsOfKeys: (keyIds: ReadonlyArray<string>) => Effect.Effect<ReadonlyMap<string, ReadonlyArray<GrantRecord>>, StoreError>
  readonly putGrant: (keyId: string, connectionId: number, role: ConnectionRole) => Effect.Effect<void, StoreError>
  readonly deleteGrant: (keyId: string, connectionId: number) => Effect.Effect<boolean, StoreError>
  /** Replaces a stored connection's fields; false when there is no such stored connection. */
  readonly updateConnection: (connection: Omit<ConnectionRecord, "source">) => Effect.Effect<boolean, StoreError>
  /** Deletes a stored connection and every grant on it; false when there is no such stored connection. */
  readonly deleteConnection: (id: number) => Effect.Effect<boolean, StoreError>
}>()("modelgate/ConnectionsRepo") {
  static readonly layer = Layer.effect(
    ConnectionsRepo,
    Effect.gen(function*() {
      const sql = yield* SqlClient
      const secrets = Option.getOrElse(yield* Effect.serviceOption(StoreSecrets), () => noSecrets)
      // A grant changes what a key may do, so replicas' key caches must notice it like a key edit.
      const bump = bumpKeyVersion(sql)
      const open = (row: typeof ConnectionRow.Type) => ({
        ...row,
        url: openStored(row.url, secrets),
        read_url: row.read_url === null ? null : openStored(row.read_url, secrets),
        ssh: row.ssh === null ? null : JSON.parse(openStored(row.ssh, secrets)) as ConnectionSsh
      })
      // The tunnel is stored as JSON, sealed as a whole: it may carry a private key or a password.
      const sshStored = (ssh: ConnectionSsh | null) => (ssh === null ? null : toStored(JSON.stringify(ssh), secrets))
      // Sealed DSNs and no key to open them: refused at start, like a wrong key, rather than a
      // 500 on the first request that uses the connection (issue 31.5).
      if (secrets.key === undefined) {
        const sealed = yield* sql`SELECT * FROM connections WHERE url LIKE ${`${SEALED_PREFIX}%`} OR read_url LIKE ${`${SEALED_PREFIX}%`} OR ssh LIKE ${`${SEALED_PREFIX}%`} ORDER BY id`.pipe(
          decodeConnections,
          Effect.orDie
        )
        // secrets.previous_keys alone still opens what they sealed; anything else cannot be read.
        const opens = (value: string | null) => value === null || !isSealed(value) || secrets.previousKeys.some((key) => openWith(value, key) !== undefined)
        const unreadable = sealed.filter((row) => !opens(row.url) || !opens(row.read_url) || !opens(row.ssh))
        if (unreadable.length > 0) {
          return yield* Effect.die(
            new Error(
              `the store holds sealed connection DSNs (connection ${unreadable.map((row) => String(row.id)).join(", ")}) and no secrets.key is configured: ` +
                "set secrets.key (or MODELGATE_SECRETS_KEY) to the key they were sealed with"
            )
          )
        }
      }
      // DSNs at rest are sealed with the current key (secrets.ts): rows stored in plain text or
      // under a previous key are sealed again at start, which is how a key is rotated.
      if (secrets.key !== undefined) {
        const current = secrets.key
        const stale = (value: string | null) => value !== null && (!isSealed(value) || openWith(value, current) === undefined)
        const rows = yield* sql`SELECT * FROM connections ORDER BY id`.pipe(decodeConnections, Effect.orDie)
        for (const row of rows) {
          if (!stale(row.url) && !stale(row.read_url) && !stale(row.ssh)) continue
          const plain = open(row)
          yield* sql`UPDATE connections SET url = ${seal(plain.url, current)}, read_url = ${plain.read_url === null ? null : seal(plain.read_url, current)},
            ssh = ${plain.ssh === null ? null : seal(JSON.stringify(plain.ssh), current)} WHERE id = ${row.id}`.pipe(Effect.orDie)
        }
      }
      return ConnectionsRepo.of({
        listConnections: sql`SELECT * FROM connections ORDER BY id`.pipe(
          decodeConnections,
          Effect.map((rows) => rows.map((row): ConnectionRecord => ({ ...open(row), source: "admin" }))),
          storeOp("ConnectionsRepo.listConnections")
        ),
        insertConnection: (c) =>
          sql`INSERT INTO connections (id, name, dialect, url, read_url, default_schema, environment, ssh, created_at)
              VALUES (${c.id}, ${c.name}, ${c.dialect}, ${toStored(c.url, secrets)}, ${c.read_url === null ? null : toStored(c.read_url, secrets)}, ${c.default_schema},
                ${c.environment}, ${sshStored(c.ssh)}, ${new Date().toISOString()})
              ON CONFLICT (id) DO NOTHING RETURNING id`.pipe(
            Effect.map((rows) => rows.length > 0),
            storeOp("ConnectionsRepo.insertConnection")
          ),
        insertConnectionWithNextId: (c, floor) =>
          Effect.gen(function*() {
            for (let attempt = 0; attempt < 50; attempt++) {
              // One statement: the id is computed and taken together (`WHERE true` lets SQLite
              // read the ON CONFLICT as the insert's, not the SELECT's join).
              const rows = yield* sql<{ id: number }>`INSERT INTO connections (id, name, dialect, url, read_url, default_schema, environment, ssh, created_at)
                SELECT (CASE WHEN COALESCE(MAX(id), 0) > ${floor} THEN MAX(id) ELSE ${floor} END) + 1, ${c.name}, ${c.dialect},
                  ${toStored(c.url, secrets)}, ${c.read_url === null ? null : toStored(c.read_url, secrets)}, ${c.default_schema},
                  ${c.environment}, ${sshStored(c.ssh)}, ${new Date().toISOString()}
                FROM connections WHERE true
                ON CONFLICT (id) DO NOTHING RETURNING id`
              if (rows[0] !== undefined) return Number(rows[0].id)
            }
            return yield* Effect.fail(new Error("no free connection id after 50 attempts (too many concurrent creates)"))
          }).pipe(storeOp("ConnectionsRepo.insertConnectionWithNextId")),
        grantsOf: (keyId) =>
          sql`SELECT key_id, connection_id, role, granted_at FROM key_grants WHERE key_id = ${keyId} ORDER BY connection_id`.pipe(
            decodeGrants,
            storeOp("ConnectionsRepo.grantsOf")
          ),
        grantsOfKeys: (keyIds) =>
          keyIds.length === 0
            ? Effect.succeed(new Map())
            : sql`SELECT key_id, connection_id, role, granted_at FROM key_grants WHERE ${sql.in("key_id", keyIds)} ORDER BY key_id, connection_id`.pipe(
              decodeGrants,
              Effect.map((rows) => {
                const byKey = new Map<string, Array<GrantRecord>>()
                for (const row of rows) {
                  const list = byKey.get(row.key_id)
                  if (list === undefined) byKey.set(row.key_id, [row])
                  else list.push(row)
                }
                return byKey
              }),
              storeOp("ConnectionsRepo.grantsOfKeys")
            ),
        putGrant: (keyId, connectionId, role) =>
          sql.withTransaction(
            sql`INSERT INTO key_grants (key_id, connection_id, role, granted_at)
                VALUES (${keyId}, ${connectionId}, ${role}, ${new Date().toISOString()})
                ON CONFLICT (key_id, connection_id) DO UPDATE SET role = excluded.role`.pipe(Effect.andThen(bump))
          ).pipe(Effect.asVoid, storeOp("ConnectionsRepo.putGrant")),
        deleteGrant: (keyId, connectionId) =>
          sql.withTransaction(
            Effect.gen(function*() {
              const rows = yield* sql`DELETE FROM key_grants WHERE key_id = ${keyId} AND connection_id = ${connectionId} RETURNING key_id`
              if (rows.length > 0) yield* bump
              return rows.length > 0
            })
          ).pipe(storeOp("ConnectionsRepo.deleteGrant")),
        updateConnection: (c) =>
          // Sealed like an insert: a rotated password must not sit in plain text until the next start.
          sql`UPDATE connections SET name = ${c.name}, dialect = ${c.dialect}, url = ${toStored(c.url, secrets)},
              read_url = ${c.read_url === null ? null : toStored(c.read_url, secrets)},
              default_schema = ${c.default_schema}, environment = ${c.environment}, ssh = ${sshStored(c.ssh)} WHERE id = ${c.id} RETURNING id`.pipe(
            Effect.map((rows) => rows.length > 0),
            storeOp("ConnectionsRepo.updateConnection")
          ),
        deleteConnection: (id) =>
          sql.withTransaction(
            Effect.gen(function*() {
              // Grants go with their connection: a later connection reusing the id must not inherit them.
              const grants = yield* sql`DELETE FROM key_grants WHERE connection_id = ${id} RETURNING key_id`
              if (grants.length > 0) yield* bump
              const rows = yield* sql`DELETE FROM connections WHERE id = ${id} RETURNING id`
              return rows.length > 0
            })
          ).pipe(storeOp("ConnectionsRepo.deleteConnection"))
      })
    })
  )
}
