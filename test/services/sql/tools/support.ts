/**
 * Shared setup for the SqlTools tests: the service over the real drivers, a throwaway database
 * per dialect, an admin connection to each that bypasses the tools (for seeding and for
 * checking what the tools left behind), and a driver factory that counts every call so a test
 * can prove that a database was never contacted.
 */
import { PgClient } from "@effect/sql-pg"
import { AjvJsonSchemaValidator } from "@modelcontextprotocol/sdk/validation/ajv"
import { Effect, Layer, ManagedRuntime, Redacted, References, Schema } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { createConnection, type Connection as MysqlConnection } from "mysql2/promise"
import { expect } from "vitest"
import { toEnvelope } from "../../../../src/domain/errors.ts"
import type { ConnectionRole } from "../../../../src/domain/records.ts"
import { AppConfig } from "../../../../src/services/config/AppConfig.ts"
import { GatewayConfig } from "../../../../src/services/config/schema.ts"
import { Connections } from "../../../../src/services/sql/Connections.ts"
import { makeSqlDriver, type SqlDriver, SqlDrivers } from "../../../../src/services/sql/drivers/SqlDrivers.ts"
import { type ToolContext, type ToolOutcome, SqlTools } from "../../../../src/services/sql/SqlTools.ts"
import { StoreLayer, type StoreRepos } from "../../../../src/services/store/StoreLayer.ts"

export interface ConnectionInput {
  readonly id: number
  readonly name: string
  readonly dialect: "postgres" | "mysql"
  readonly url: string
  readonly read_url?: string
  readonly default_schema?: string
}

export const makeConfig = (
  connections: ReadonlyArray<ConnectionInput>,
  mcp: { readonly max_rows_cap?: number; readonly timeout_ms_cap?: number } = {}
): GatewayConfig => Schema.decodeUnknownSync(GatewayConfig)({ connections, mcp, log: { level: "none" } })

/** Every call any driver made, by the DSN it was made for. */
export interface DriverCalls {
  readonly log: Array<{ readonly url: string; readonly method: keyof SqlDriver; readonly mode?: string }>
  readonly count: () => number
}

export const countingDrivers = (): { readonly calls: DriverCalls; readonly layer: Layer.Layer<SqlDrivers> } => {
  const log: DriverCalls["log"] = []
  const layer = Layer.succeed(
    SqlDrivers,
    SqlDrivers.of({
      make: (options) =>
        Effect.map(makeSqlDriver(options), (driver): SqlDriver => ({
          dialect: driver.dialect,
          run: (input) => Effect.suspend(() => {
            log.push({ url: options.url, method: "run", mode: input.mode })
            return driver.run(input)
          }),
          explain: (input) => Effect.suspend(() => {
            log.push({ url: options.url, method: "explain", mode: input.mode })
            return driver.explain(input)
          }),
          listTables: (schema) => Effect.suspend(() => {
            log.push({ url: options.url, method: "listTables" })
            return driver.listTables(schema)
          }),
          describe: (schema, name) => Effect.suspend(() => {
            log.push({ url: options.url, method: "describe" })
            return driver.describe(schema, name)
          }),
          serverInfo: Effect.suspend(() => {
            log.push({ url: options.url, method: "serverInfo" })
            return driver.serverInfo
          }),
          // Not logged: the guard's catalogue lookup reads pg_proc / ROUTINES, never user data,
          // and the suites count the calls that reach a statement's target.
          routines: (names) => driver.routines(names)
        }))
    })
  )
  return { calls: { log, count: () => log.length }, layer }
}

export type ToolsRuntime = ManagedRuntime.ManagedRuntime<SqlTools | StoreRepos, unknown>

export const makeToolsRuntime = (config: GatewayConfig, drivers: Layer.Layer<SqlDrivers>): ToolsRuntime => {
  const base = Layer.mergeAll(Connections.layer(config.connections), drivers, AppConfig.layer(config)).pipe(
    Layer.provideMerge(StoreLayer.memory)
  )
  // The defect test logs on purpose; keep the test output clean.
  const quiet = Layer.succeed(References.MinimumLogLevel, "None")
  return ManagedRuntime.make(SqlTools.layer.pipe(Layer.provideMerge(base), Layer.provideMerge(quiet)))
}

export const context = (keyId: string, grants: Record<number, ConnectionRole>): ToolContext => ({
  keyId,
  grants: new Map(Object.entries(grants).map(([id, role]) => [Number(id), role])),
  requestId: `req_${keyId}`
})

export const callTool = (runtime: ToolsRuntime, name: string, args: unknown, ctx: ToolContext): Promise<ToolOutcome> =>
  runtime.runPromise(SqlTools.use((tools) => tools.call(name, args, ctx)))

const validator = new AjvJsonSchemaValidator()

/** Asserts success and that the result matches the tool's outputSchema, as an MCP client checks it. */
export const expectSuccess = async (runtime: ToolsRuntime, outcome: ToolOutcome): Promise<Record<string, any>> => {
  if (outcome._tag === "Failure") {
    expect.fail(`expected success, got ${JSON.stringify(toEnvelope(outcome.error, "req_test"))}`)
  }
  const tools = await runtime.runPromise(SqlTools.use(Effect.succeed))
  const definition = tools.definitions.find((d) => d.name === outcome.audit.tool)
  expect(definition).toBeDefined()
  const check = validator.getValidator(definition!.outputSchema as never)(outcome.structured)
  expect(check.valid, `${outcome.audit.tool} output schema: ${check.errorMessage}`).toBe(true)
  return outcome.structured
}

/** Asserts failure and returns the spec section 7 envelope a client would see. */
export const expectFailure = (outcome: ToolOutcome) => {
  if (outcome._tag === "Success") expect.fail(`expected a failure, got ${JSON.stringify(outcome.structured).slice(0, 500)}`)
  return toEnvelope(outcome.error, "req_test")
}

/** Direct access to a database, around the tools. */
export interface Admin {
  readonly exec: (sql: string, params?: ReadonlyArray<unknown>) => Promise<ReadonlyArray<Record<string, unknown>>>
  readonly close: () => Promise<void>
}

export const postgresAdmin = (url: string): Admin => {
  const runtime = ManagedRuntime.make(PgClient.layer({ url: Redacted.make(url), maxConnections: 2 }))
  return {
    exec: (sql, params = []) =>
      runtime.runPromise(Effect.gen(function*() {
        const client = yield* SqlClient
        return (yield* client.unsafe(sql, params)) as unknown as ReadonlyArray<Record<string, unknown>>
      })),
    close: () => runtime.dispose()
  }
}

export const mysqlAdmin = async (url: string): Promise<Admin> => {
  const connection: MysqlConnection = await createConnection({ uri: url, multipleStatements: false, dateStrings: true })
  // A killed session of the tools may hold a metadata lock for a moment; never wait on it for long.
  await connection.query("SET SESSION lock_wait_timeout = 20")
  return {
    exec: async (sql, params = []) => {
      const [rows] = await connection.query(sql, params as Array<unknown>)
      return Array.isArray(rows) ? rows as Array<Record<string, unknown>> : []
    },
    close: () => connection.end()
  }
}
