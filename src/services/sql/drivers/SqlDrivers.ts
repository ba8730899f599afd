/**
 * Entry point of the SQL drivers: one driver per (connection, role), each with its own pool, so a
 * read role's DSN and an edit role's DSN never share a session. The pool closes with the scope
 * the driver was made in.
 */
import { Context, Effect, Layer } from "effect"
import type * as Scope from "effect/Scope"
import type { SqlDriver, SqlDriverOptions } from "./types.ts"

export * from "./errors.ts"
export * from "./types.ts"

/**
 * Never fails: nothing connects until the first call, so a database that is down shows up as
 * `SqlConnectionUnreachable` on that call rather than here. Each dialect's driver (mysql2,
 * @effect/sql-pg) loads with the first driver of that dialect: a gateway whose SQL tools are
 * never used never loads either.
 */
export const makeSqlDriver = (options: SqlDriverOptions): Effect.Effect<SqlDriver, never, Scope.Scope> =>
  options.dialect === "postgres"
    ? Effect.flatMap(
      Effect.promise(() => import("./postgres.ts")),
      ({ makePostgresDriver }) => makePostgresDriver({ url: options.url, poolSize: options.poolSize })
    )
    : Effect.flatMap(
      Effect.promise(() => import("./mysql.ts")),
      ({ makeMysqlDriver }) => makeMysqlDriver({ url: options.url, poolSize: options.poolSize })
    )

/** The factory as a service, so SqlTools can be tested against drivers that never touch a database. */
export class SqlDrivers extends Context.Service<SqlDrivers, {
  readonly make: (options: SqlDriverOptions) => Effect.Effect<SqlDriver, never, Scope.Scope>
}>()("modelgate/SqlDrivers") {
  static readonly layer = Layer.succeed(SqlDrivers, SqlDrivers.of({ make: makeSqlDriver }))
}
