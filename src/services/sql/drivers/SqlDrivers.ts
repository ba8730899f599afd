/**
 * Entry point of the SQL drivers: one driver per (connection, role), each with its own pool, so a
 * read role's DSN and an edit role's DSN never share a session. The pool closes with the scope
 * the driver was made in.
 */
import { Context, Effect, Layer } from "effect"
import type * as Scope from "effect/Scope"
import type { Duplex } from "node:stream"
import type { ConnectionSsh } from "../../../domain/records.ts"
import { SqlConnectionUnreachable, type SqlDriverError } from "./errors.ts"
import type { TunnelFailure } from "./ssh-tunnel.ts"
import type { SqlDriver, SqlDriverOptions } from "./types.ts"

export * from "./errors.ts"
export * from "./types.ts"

/**
 * Never fails: nothing connects until the first call, so a database that is down shows up as
 * `SqlConnectionUnreachable` on that call rather than here. Each dialect's driver (mysql2,
 * @effect/sql-pg) loads with the first driver of that dialect: a gateway whose SQL tools are
 * never used never loads either.
 */
const makeDirect = (options: SqlDriverOptions, stream?: () => Duplex): Effect.Effect<SqlDriver, never, Scope.Scope> =>
  options.dialect === "postgres"
    ? Effect.flatMap(
      Effect.promise(() => import("./postgres.ts")),
      ({ makePostgresDriver }) => makePostgresDriver({ url: options.url, poolSize: options.poolSize, stream })
    )
    : Effect.flatMap(
      Effect.promise(() => import("./mysql.ts")),
      ({ makeMysqlDriver }) => makeMysqlDriver({ url: options.url, poolSize: options.poolSize, stream })
    )

/** The host and port the bastion connects to: the URL's, as the driver would have used them. */
const targetOf = (url: string, defaultPort: number) => {
  try {
    const parsed = new URL(url)
    return { host: decodeURIComponent(parsed.hostname.replace(/^\[|\]$/g, "")) || "localhost", port: Number(parsed.port || defaultPort) }
  } catch {
    return { host: "localhost", port: defaultPort }
  }
}

/** By shape: the tunnel module (and ssh2) loads only with the first tunnel, so its class is not at hand here. */
const isTunnelFailure = (error: unknown): error is TunnelFailure =>
  error instanceof Error && "hop" in error && "reason" in error && (error.hop === "ssh" || error.hop === "database")

const fromTunnelFailure = (error: unknown): SqlConnectionUnreachable =>
  isTunnelFailure(error)
    ? new SqlConnectionUnreachable({ message: error.message, hop: error.hop, reason: error.reason })
    : new SqlConnectionUnreachable({ message: "the SSH tunnel failed", hop: "ssh", reason: "handshake_failed" })

/**
 * A driver behind an SSH tunnel: each call first makes sure the tunnel is up (so a bastion that
 * is down, refuses the login or shows another host key is named as such, within the tunnel's
 * deadline), then runs; a database that cannot be reached behind a working tunnel is named too.
 */
const makeTunneled = (options: SqlDriverOptions, ssh: ConnectionSsh): Effect.Effect<SqlDriver, never, Scope.Scope> =>
  Effect.gen(function*() {
    // ssh2 loads with the first tunnel, as each dialect's driver does with its first pool.
    const { makeTunnel } = yield* Effect.promise(() => import("./ssh-tunnel.ts"))
    const tunnel = makeTunnel(ssh, targetOf(options.url, options.dialect === "postgres" ? 5432 : 3306))
    yield* Effect.addFinalizer(() => Effect.sync(() => tunnel.close()))
    const inner = yield* makeDirect(options, () => tunnel.stream())
    const through = <A>(call: Effect.Effect<A, SqlDriverError>): Effect.Effect<A, SqlDriverError> =>
      Effect.suspend(() => {
        const before = tunnel.failures()
        return Effect.tryPromise({ try: () => tunnel.ready(), catch: fromTunnelFailure }).pipe(
          Effect.andThen(call),
          Effect.mapError((error): SqlDriverError => {
            if (error._tag !== "SqlConnectionUnreachable" || error.hop !== undefined) return error
            const failure = tunnel.failureSince(before)
            if (failure !== undefined) return fromTunnelFailure(failure)
            return tunnel.connected()
              ? new SqlConnectionUnreachable({ message: error.message, hop: "database", reason: "database_unreachable" })
              : new SqlConnectionUnreachable({ message: error.message, hop: "ssh", reason: "connection_lost" })
          })
        )
      })
    return {
      dialect: inner.dialect,
      run: (input) => through(inner.run(input)),
      explain: (input) => through(inner.explain(input)),
      listTables: (schema) => through(inner.listTables(schema)),
      describe: (schema, name) => through(inner.describe(schema, name)),
      serverInfo: through(inner.serverInfo),
      routines: (names) => through(inner.routines(names))
    } satisfies SqlDriver
  })

export const makeSqlDriver = (options: SqlDriverOptions): Effect.Effect<SqlDriver, never, Scope.Scope> =>
  options.ssh === undefined || options.ssh === null ? makeDirect(options) : makeTunneled(options, options.ssh)

/** The factory as a service, so SqlTools can be tested against drivers that never touch a database. */
export class SqlDrivers extends Context.Service<SqlDrivers, {
  readonly make: (options: SqlDriverOptions) => Effect.Effect<SqlDriver, never, Scope.Scope>
}>()("modelgate/SqlDrivers") {
  static readonly layer = Layer.succeed(SqlDrivers, SqlDrivers.of({ make: makeSqlDriver }))
}
