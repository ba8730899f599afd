/**
 * The databases the SQL tools can reach (config file plus admin API) and which keys may use
 * them with which role. A role is only ever raised through PUT: lowering it is a 409, because a
 * grant that silently weakens access is usually a mistake; revoking is an explicit DELETE.
 */
import { Context, Effect, Layer, Schema } from "effect"
import { Conflict, NotFound } from "../../domain/errors.ts"
import type { ConnectionRecord, ConnectionRole, ConnectionSsh, GrantRecord, Principal } from "../../domain/records.ts"
import { storeUnavailable } from "../credits/Credits.ts"
import { ConnectionEnvironment, type ConnectionConfig, SshSettings } from "../config/schema.ts"
import { ConnectionsRepo } from "../store/ConnectionsRepo.ts"
import type { DependencyUnavailable } from "../../domain/errors.ts"
import { redactDsn } from "./dsn.ts"

export { redactDsn } from "./dsn.ts"

const roleRank: Record<ConnectionRole, number> = { read: 1, edit: 2 }

const ConnectionName = Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(200))
const ConnectionDialect = Schema.Literals(["postgres", "mysql"])
const ConnectionUrl = Schema.String.check(
  Schema.isMaxLength(4096),
  Schema.isPattern(/^(postgres|postgresql|mysql|mariadb):\/\//, { expected: "a postgres:// or mysql:// URL" })
)
const SchemaName = Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(200))

/** A new connection, as the admin API (POST /connections) accepts it. */
export const ConnectionInput = Schema.Struct({
  /** Optional: without it the connection gets the next free id (above the config file's too). */
  id: Schema.optional(Schema.Int.check(Schema.isGreaterThan(0), Schema.isLessThanOrEqualTo(2_147_483_647))),
  name: ConnectionName,
  dialect: ConnectionDialect,
  url: ConnectionUrl,
  read_url: Schema.optional(ConnectionUrl),
  default_schema: Schema.optional(SchemaName),
  environment: Schema.optional(ConnectionEnvironment),
  ssh: Schema.optional(SshSettings)
})

/** A change to a connection (PATCH /connections/:id, `modelgate connections update`): any field but the id; `null` clears the optional ones. */
export const ConnectionChange = Schema.Struct({
  name: Schema.optional(ConnectionName),
  dialect: Schema.optional(ConnectionDialect),
  url: Schema.optional(ConnectionUrl),
  read_url: Schema.optional(Schema.NullOr(ConnectionUrl)),
  default_schema: Schema.optional(Schema.NullOr(SchemaName)),
  environment: Schema.optional(ConnectionEnvironment),
  /** A whole new tunnel (its secrets are never shown, so they cannot be merged field by field); `null`: connect directly. */
  ssh: Schema.optional(Schema.NullOr(SshSettings))
})
export type ConnectionChange = typeof ConnectionChange.Type

/** A connection as the admin API shows it: the same record, its DSNs with passwords replaced, its SSH secrets too. */
export type ConnectionView = ConnectionRecord

/** The tunnel as anyone may see it: file paths and variable names stay, inline secrets become `***`. */
export const toSshView = (ssh: ConnectionSsh | null): ConnectionSsh | null =>
  ssh === null
    ? null
    : {
      ...ssh,
      ...(ssh.private_key !== undefined ? { private_key: "***" } : {}),
      ...(ssh.password !== undefined ? { password: "***" } : {})
    }

export const toConnectionView = (c: ConnectionRecord): ConnectionView => ({
  id: c.id,
  name: c.name,
  dialect: c.dialect,
  url: redactDsn(c.url),
  read_url: c.read_url === null ? null : redactDsn(c.read_url),
  default_schema: c.default_schema,
  environment: c.environment,
  ssh: toSshView(c.ssh),
  source: c.source
})

export class Connections extends Context.Service<Connections, {
  readonly list: Effect.Effect<ReadonlyArray<ConnectionRecord>, DependencyUnavailable>
  readonly get: (id: number) => Effect.Effect<ConnectionRecord | undefined, DependencyUnavailable>
  /** Adds a connection under `id`, or (none given) the next free one. */
  readonly create: (
    input: Omit<ConnectionRecord, "source" | "id"> & { readonly id?: number | undefined }
  ) => Effect.Effect<ConnectionRecord, Conflict | DependencyUnavailable>
  /**
   * Changes a connection added through the admin API (a rotated password, a new host). One from
   * the config file is a 409: the file would put it back at the next start.
   */
  readonly update: (
    id: number,
    change: Partial<Omit<ConnectionRecord, "id" | "source">>
  ) => Effect.Effect<{ readonly before: ConnectionRecord; readonly after: ConnectionRecord }, Conflict | NotFound | DependencyUnavailable>
  /** Deletes a connection added through the admin API, with every grant on it; 409 for one from the config file. */
  readonly remove: (id: number) => Effect.Effect<ConnectionRecord, Conflict | NotFound | DependencyUnavailable>
  readonly grantsOf: (keyId: string) => Effect.Effect<ReadonlyArray<GrantRecord>, DependencyUnavailable>
  readonly grantsOfKeys: (keyIds: ReadonlyArray<string>) => Effect.Effect<ReadonlyMap<string, ReadonlyArray<GrantRecord>>, DependencyUnavailable>
  /**
   * The connections a principal may use, with its role on each: a key's grants from the store; a
   * subject's from its policy, by connection name. A name that more than one connection carries
   * grants none of them: which one the operator meant cannot be known, so access is not guessed.
   */
  readonly grantsFor: (principal: Principal) => Effect.Effect<ReadonlyMap<number, ConnectionRole>, DependencyUnavailable>
  readonly grant: (keyId: string, connectionId: number, role: ConnectionRole) => Effect.Effect<GrantRecord, Conflict | NotFound | DependencyUnavailable>
  readonly revoke: (keyId: string, connectionId: number) => Effect.Effect<void, NotFound | DependencyUnavailable>
}>()("modelgate/Connections") {
  static readonly layer = (configured: ReadonlyArray<ConnectionConfig>) =>
    Layer.effect(
      Connections,
      Effect.gen(function*() {
        const store = yield* ConnectionsRepo
        const fromConfig = configured.map((c): ConnectionRecord => ({
          id: c.id,
          name: c.name,
          dialect: c.dialect,
          url: c.url,
          read_url: c.read_url ?? null,
          default_schema: c.default_schema ?? null,
          environment: c.environment ?? "development",
          ssh: c.ssh ?? null,
          source: "config"
        }))
        const configIds = new Set(fromConfig.map((c) => c.id))
        // Assigned ids start above the config file's: a stored connection never hides behind one of them.
        const maxConfigId = Math.max(0, ...configIds)
        const list = store.listConnections.pipe(
          Effect.mapError(storeUnavailable),
          // The config file wins over a stored connection that reuses its id.
          Effect.map((stored) => [...fromConfig, ...stored.filter((c) => !configIds.has(c.id))].sort((a, b) => a.id - b.id))
        )
        const get = (id: number) => Effect.map(list, (all) => all.find((c) => c.id === id))
        const missing = (id: number) => new NotFound({ message: `no connection with id ${id}` })
        /** A connection the admin API may change: it exists and does not come from the config file. */
        const stored = (id: number): Effect.Effect<ConnectionRecord, NotFound | Conflict | DependencyUnavailable> =>
          Effect.flatMap(get(id), (found): Effect.Effect<ConnectionRecord, NotFound | Conflict> =>
            found === undefined
              ? Effect.fail(missing(id))
              : found.source === "config"
              ? Effect.fail(
                new Conflict({
                  message: `connection ${id} is defined in the config file: change it there (the file would restore it at the next start)`,
                  details: { connection_id: id, source: "config" }
                })
              )
              : Effect.succeed(found))
        return Connections.of({
          list,
          get,
          create: ({ id, ...fields }) =>
            Effect.gen(function*() {
              if (id === undefined) {
                const assigned = yield* store.insertConnectionWithNextId(fields, maxConfigId).pipe(Effect.mapError(storeUnavailable))
                return { id: assigned, ...fields, source: "admin" as const }
              }
              const taken = () => new Conflict({ message: `connection id ${id} is already in use`, details: { connection_id: id } })
              if (configIds.has(id)) return yield* taken()
              const inserted = yield* store.insertConnection({ id, ...fields }).pipe(Effect.mapError(storeUnavailable))
              if (!inserted) return yield* taken()
              return { id, ...fields, source: "admin" as const }
            }),
          update: (id, change) =>
            Effect.gen(function*() {
              const before = yield* stored(id)
              const after: ConnectionRecord = { ...before, ...change, id, source: "admin" }
              const { source: _, ...fields } = after
              if (!(yield* store.updateConnection(fields).pipe(Effect.mapError(storeUnavailable)))) return yield* missing(id)
              return { before, after }
            }),
          remove: (id) =>
            Effect.gen(function*() {
              const before = yield* stored(id)
              if (!(yield* store.deleteConnection(id).pipe(Effect.mapError(storeUnavailable)))) return yield* missing(id)
              return before
            }),
          grantsOf: (keyId) => store.grantsOf(keyId).pipe(Effect.mapError(storeUnavailable)),
          grantsOfKeys: (keyIds) => store.grantsOfKeys(keyIds).pipe(Effect.mapError(storeUnavailable)),
          grantsFor: (principal) =>
            principal.kind === "key"
              ? store.grantsOf(principal.id).pipe(
                Effect.mapError(storeUnavailable),
                Effect.map((grants) => new Map(grants.map((g) => [g.connection_id, g.role] as const)))
              )
              : principal.connection_grants.length === 0
              ? Effect.succeed(new Map())
              : Effect.map(list, (all) => {
                const granted = new Map<number, ConnectionRole>()
                for (const grant of principal.connection_grants) {
                  const named = all.filter((c) => c.name === grant.connection)
                  if (named.length === 1) granted.set(named[0]!.id, grant.role)
                }
                return granted
              }),
          grant: (keyId, connectionId, role) =>
            Effect.gen(function*() {
              if ((yield* get(connectionId)) === undefined) {
                return yield* new NotFound({ message: `no connection with id ${connectionId}` })
              }
              const current = (yield* store.grantsOf(keyId).pipe(Effect.mapError(storeUnavailable))).find((g) => g.connection_id === connectionId)
              if (current !== undefined && roleRank[role] < roleRank[current.role]) {
                return yield* new Conflict({
                  message: `the key already holds ${current.role} on connection ${connectionId}; revoke the grant first to lower it`,
                  details: { connection_id: connectionId, current_role: current.role, requested_role: role }
                })
              }
              yield* store.putGrant(keyId, connectionId, role).pipe(Effect.mapError(storeUnavailable))
              const granted = (yield* store.grantsOf(keyId).pipe(Effect.mapError(storeUnavailable))).find((g) => g.connection_id === connectionId)
              return granted!
            }),
          revoke: (keyId, connectionId) =>
            store.deleteGrant(keyId, connectionId).pipe(
              Effect.mapError(storeUnavailable),
              Effect.flatMap((deleted) =>
                deleted ? Effect.void : Effect.fail(new NotFound({ message: `the key has no grant on connection ${connectionId}` }))
              )
            )
        })
      })
    )
}
