/**
 * The contract between the SqlTools service and a database. A driver executes one statement
 * the caller has already classified; `mode` says which protection the engine must add
 * ("read": a read-only transaction that is always rolled back).
 */
import type { Effect } from "effect"
import type { ConnectionSsh } from "../../../domain/records.ts"
import type { SqlDriverError } from "./errors.ts"

export type SqlDialect = "postgres" | "mysql"
export type SqlMode = "read" | "write"

export interface RunInput {
  readonly statement: string
  readonly params: ReadonlyArray<unknown>
  readonly mode: SqlMode
  /** At most this many rows are returned; one more is fetched to detect truncation. */
  readonly maxRows: number
  /**
   * Fetching stops once the rows kept weigh this many bytes (result-size.ts): the row that
   * would pass the budget is dropped and the result marked truncated. Undefined: no byte budget.
   */
  readonly maxBytes?: number
  readonly timeoutMs: number
}

export interface ResultColumn {
  readonly name: string
  readonly type?: string
}

export type RunResult =
  | {
    readonly kind: "rows"
    readonly columns: Array<ResultColumn>
    readonly rows: Array<Record<string, unknown>>
    readonly row_count: number
    readonly truncated: boolean
    readonly duration_ms: number
  }
  | {
    readonly kind: "affected"
    readonly affected_rows: number
    readonly duration_ms: number
  }

export interface ExplainInput {
  readonly statement: string
  readonly params: ReadonlyArray<unknown>
  readonly analyze: boolean
  readonly mode: SqlMode
  readonly timeoutMs: number
}

export interface TableEntry {
  readonly schema: string
  readonly name: string
  readonly kind: string
  readonly rows_estimate: number
}

export interface ColumnDescription {
  readonly name: string
  readonly type: string
  readonly nullable: boolean
  readonly default?: string
  readonly pk?: boolean
  readonly unique?: boolean
}

export interface IndexDescription {
  readonly name: string
  readonly columns: Array<string>
  readonly unique: boolean
}

export interface ForeignKeyDescription {
  readonly name: string
  readonly columns: Array<string>
  readonly references: { readonly schema: string; readonly table: string; readonly columns: Array<string> }
}

export interface TableDescription {
  readonly schema: string
  readonly name: string
  readonly columns: Array<ColumnDescription>
  readonly indexes: Array<IndexDescription>
  readonly foreign_keys: Array<ForeignKeyDescription>
}

export interface ServerInfo {
  readonly version: string
  readonly flavor: "postgres" | "mysql" | "mariadb"
}

/**
 * What the database's catalogue says about the functions of a name, for the guard's function
 * check (guard/routines.ts). Postgres: pg_proc; MySQL: information_schema.ROUTINES.
 */
export interface RoutineInfo {
  readonly schema: string
  readonly name: string
  /** Postgres provolatile; on MySQL DETERMINISTIC is "immutable", anything else "volatile". */
  readonly volatility: "immutable" | "stable" | "volatile"
  /** Runs with its owner's privileges (SECURITY DEFINER / SQL SECURITY DEFINER). */
  readonly securityDefiner: boolean
  /** Postgres: pg_language.lanname; MySQL: "sql". */
  readonly language: string
  /** Takes an argument of a text-like type, which the function could run as SQL (Postgres). */
  readonly textArgument: boolean
  /** Declared MODIFIES SQL DATA (MySQL); undefined where the catalogue does not say. */
  readonly modifiesData?: boolean
  /** Arguments needed at least and taken at most (-1: variadic), where the catalogue says (Postgres). */
  readonly minArgs?: number
  readonly maxArgs?: number
}

export interface RoutineLookup {
  /** Schemas an unqualified name resolves in, in order (Postgres search path; MySQL: the default database). */
  readonly path: ReadonlyArray<string>
  readonly routines: ReadonlyArray<RoutineInfo>
}

export interface SqlDriver {
  readonly dialect: SqlDialect
  readonly run: (input: RunInput) => Effect.Effect<RunResult, SqlDriverError>
  readonly explain: (input: ExplainInput) => Effect.Effect<{ readonly plan: unknown }, SqlDriverError>
  /** `schema` undefined means the connection's default schema (Postgres `current_schema()`, MySQL `DATABASE()`). */
  readonly listTables: (schema: string | undefined) => Effect.Effect<Array<TableEntry>, SqlDriverError>
  /** `undefined` when no table or view of that name exists in the schema. */
  readonly describe: (
    schema: string | undefined,
    name: string
  ) => Effect.Effect<TableDescription | undefined, SqlDriverError>
  readonly serverInfo: Effect.Effect<ServerInfo, SqlDriverError>
  /** The catalogue's functions of these names (exact on Postgres, case-insensitive on MySQL), with the search path. */
  readonly routines: (names: ReadonlyArray<string>) => Effect.Effect<RoutineLookup, SqlDriverError>
}

export interface SqlDriverOptions {
  readonly dialect: SqlDialect
  readonly url: string
  /** Connections this driver may hold open at once (default 5). */
  readonly poolSize?: number
  /** Reach the database through this SSH tunnel (ssh-tunnel.ts); absent or null: directly. */
  readonly ssh?: ConnectionSsh | null | undefined
}

/** Catalog lookups are small; they get a fixed deadline instead of the caller's. */
export const CATALOG_TIMEOUT_MS = 10_000

/**
 * The server-side limit fires first and leaves a clean error; the client timer behind it covers
 * a server that does not answer at all (network stall, a limit the engine does not enforce).
 */
export const CLIENT_GRACE_MS = 500

/** `0`, negatives and garbage never mean "unlimited". */
const clampPositive = (value: number, max: number): number =>
  Number.isFinite(value) ? Math.min(max, Math.max(1, Math.floor(value))) : 1

/** FETCH takes an int32 count. */
export const clampRows = (value: number) => clampPositive(value, 2_147_483_646)

/** A day at most: far above any plan's cap, and well inside int32 milliseconds once margins are added. */
export const clampTimeout = (value: number) => clampPositive(value, 86_400_000)

export const clampPoolSize = (value: number | undefined) => clampPositive(value ?? 5, 100)
