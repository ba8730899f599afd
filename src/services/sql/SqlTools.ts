/**
 * The six MCP SQL tools (spec 4.3), transport-free: the MCP route decodes JSON-RPC, resolves the
 * key's grants and hands each `tools/call` here. Every call ends in a `ToolOutcome`, never a
 * failure, because a refused statement, a database that is down or bad arguments are all tool
 * results (`isError`) in MCP, not protocol errors.
 *
 * Defense in depth (docs/decisions.md section 7), in this order, on every call:
 * 1. Authorize from the key's grants before anything else; a missing grant and a missing
 *    connection give the same 403 and no database is contacted.
 * 2. Classify the statement with the guard; refused statements, and writes under a read role,
 *    stop here, again without contacting the database.
 * 3. Execute exactly the classified text. A read verdict always runs in the driver's read mode
 *    (an engine read-only transaction, rolled back) on the read DSN, whatever the key's role;
 *    only a write verdict with the edit role reaches the edit DSN in write mode.
 *
 * Drivers (one pool each) are keyed by (connection, role, DSN), made on first use and closed
 * when idle for a while or with the layer's scope.
 */
import { Context, DateTime, Effect, Layer, RcMap, Semaphore } from "effect"
import {
  type ApiError,
  InternalError,
  NotFound,
  ValidationFailed
} from "../../domain/errors.ts"
import type { ConnectionRecord, ConnectionRole, ConnectionSsh } from "../../domain/records.ts"
import { decodeStrict } from "../../domain/validation.ts"
import { AppConfig } from "../config/AppConfig.ts"
import { storeUnavailable } from "../credits/Credits.ts"
import { SqlHistoryRepo } from "../store/SqlHistoryRepo.ts"
import { Connections } from "./Connections.ts"
import { type SqlDialect, type SqlDriver, SqlDrivers, type SqlDriverError } from "./drivers/SqlDrivers.ts"
import { SqlGuard } from "./SqlGuard.ts"
import type { Classified, ExplainVerdict, Verdict } from "./guard/index.ts"
import { type Catalogue, callNames, classifyCalls } from "./guard/routines.ts"
import { productionCalls, productionVerdict } from "./guard/production.ts"
import { refused as refusedVerdict, settle, write as writeVerdict } from "./guard/verdict.ts"
import type { RoutineInfo } from "./drivers/types.ts"
import {
  clamp,
  DescribeArgs,
  ExplainArgs,
  HistoryArgs,
  ListConnectionsArgs,
  ListTablesArgs,
  MAX_PARAM_DEPTH,
  RunArgs,
  tooDeepParam
} from "./tools/arguments.ts"
import {
  DEFAULT_HISTORY_LIMIT,
  DEFAULT_MAX_ROWS,
  DEFAULT_TIMEOUT_MS,
  MAX_HISTORY_LIMIT,
  type McpToolDefinition,
  MIN_TIMEOUT_MS,
  type SqlToolName,
  toolDefinitions,
  toolNames
} from "./tools/definitions.ts"
import { stageSpan } from "../tracing/stage-span.ts"
import {
  fromDriverError,
  gateBlocked,
  noAccess,
  refusedExplain,
  refusedStatement,
  statementHash
} from "./tools/errors.ts"

export type { JsonSchemaObject, McpToolDefinition, SqlToolName, ToolAnnotations } from "./tools/definitions.ts"

export interface ToolContext {
  readonly keyId: string
  /** The key's role per connection id; a connection absent from the map is not visible to the key. */
  readonly grants: ReadonlyMap<number, ConnectionRole>
  readonly requestId: string
}

/**
 * What the audit trail keeps about one call. `details` holds the verdict ("read", "write",
 * "refused", "blocked", "denied", "invalid"), `statement_kind`, `statement_hash` (sha256 hex:
 * the statement text itself is never kept here), and counts and timings when the database ran.
 */
export interface ToolAudit {
  readonly tool: string
  readonly connection_id: number | null
  readonly details: Record<string, unknown>
}

export type ToolOutcome =
  | { readonly _tag: "Success"; readonly structured: Record<string, unknown>; readonly audit: ToolAudit }
  | { readonly _tag: "Failure"; readonly error: ApiError; readonly audit: ToolAudit }

/**
 * How long what the catalogue says about a function name is trusted. Names not found are never
 * cached, so a function an edit key has just created is found on its next call.
 */
const ROUTINE_CACHE_MS = 60_000

/** Pools of connections nobody used for this long are closed; the next call opens a new one. */
const DRIVER_IDLE_TTL = "10 minutes"

/** Filled in as a call progresses, so a failure at any step still leaves what was learnt before it. */
interface AuditDraft {
  connection_id: number | null
  readonly details: Record<string, unknown>
}

interface DriverKey {
  readonly connectionId: number
  readonly role: ConnectionRole
  readonly dialect: SqlDialect
  readonly url: string
  readonly ssh: ConnectionSsh | null
}

const decodeArgs = <A>(decode: (input: unknown) => Effect.Effect<A, ValidationFailed>, args: unknown, draft: AuditDraft) =>
  decode(args === undefined ? {} : args).pipe(
    Effect.mapError((error) => {
      draft.details.verdict = "invalid"
      const field = error.details?.field
      return new ValidationFailed({
        message: field === "" ? `invalid arguments: ${error.message}` : `invalid argument ${error.message}`,
        details: { field: field === "" ? "arguments" : field },
        status: 400
      })
    })
  )

/** What a tool call's span shows of its audit draft: verdict, kinds, hash and counts; never the statement or a reason quoting it. */
const TOOL_SPAN_DETAILS = [
  ["role", "modelgate.sql.role"],
  ["verdict", "modelgate.sql.verdict"],
  ["statement_kind", "modelgate.sql.statement_kind"],
  ["statement_hash", "modelgate.sql.statement_hash"],
  ["row_count", "modelgate.sql.row_count"],
  ["duration_ms", "modelgate.sql.duration_ms"],
  ["truncated", "modelgate.sql.truncated"],
  ["count", "modelgate.sql.count"]
] as const

const toolSpanAttributes = (name: string, draft: AuditDraft): Record<string, unknown> => {
  const attributes: Record<string, unknown> = { "modelgate.tool": name }
  if (draft.connection_id !== null) attributes["modelgate.connection_id"] = draft.connection_id
  for (const [detail, attribute] of TOOL_SPAN_DETAILS) {
    const value = draft.details[detail]
    if (typeof value === "string" || typeof value === "number" || typeof value === "boolean") attributes[attribute] = value
  }
  return attributes
}

/** An unrecognised statement's kind is its first word, which can be anything: the audit keeps a bounded prefix. */
const auditKind = (kind: string) => (kind.length > 64 ? `${kind.slice(0, 64)}...` : kind)

/** Compiled once: decoding is on every call's path. */
const decoders = {
  listConnectionsArgs: decodeStrict(ListConnectionsArgs),
  listTablesArgs: decodeStrict(ListTablesArgs),
  describeArgs: decodeStrict(DescribeArgs),
  runArgs: decodeStrict(RunArgs),
  explainArgs: decodeStrict(ExplainArgs),
  historyArgs: decodeStrict(HistoryArgs)
}

export class SqlTools extends Context.Service<SqlTools, {
  readonly definitions: ReadonlyArray<McpToolDefinition>
  readonly has: (name: string) => boolean
  /** Never fails: every problem is a `Failure` outcome carrying the spec's error. */
  readonly call: (name: string, args: unknown, ctx: ToolContext) => Effect.Effect<ToolOutcome>
}>()("modelgate/SqlTools") {
  /** With the guard's worker pool, which lives and dies with the tools. */
  static readonly layer = Layer.suspend(() => SqlTools.layerWithoutGuard.pipe(Layer.provide(SqlGuard.layer)))

  static readonly layerWithoutGuard = Layer.effect(
    SqlTools,
    Effect.gen(function*() {
      const connections = yield* Connections
      const sqlDrivers = yield* SqlDrivers
      const store = yield* SqlHistoryRepo
      const config = yield* AppConfig
      const maxRowsCap = config.mcp.max_rows_cap
      const timeoutMsCap = config.mcp.timeout_ms_cap
      const definitions = toolDefinitions({ maxRowsCap, timeoutMsCap })
      const inFlightBytes = config.mcp.max_result_bytes_in_flight
      /**
       * Result bytes all sql_run calls may hold at once: each call reserves its whole budget
       * before it fetches and returns it when its answer is built, so parallel huge reads wait
       * for room instead of adding up.
       */
      const resultBytes = yield* Semaphore.make(inFlightBytes)

      const guard = yield* SqlGuard

      // A JSON string is a key with value equality; it carries everything the lookup needs.
      const drivers = yield* RcMap.make({
        lookup: (key: string) => {
          const { dialect, url, ssh } = JSON.parse(key) as DriverKey
          return sqlDrivers.make({ dialect, url, ssh })
        },
        idleTimeToLive: DRIVER_IDLE_TTL
      })

      const withDriver = <A>(
        connection: ConnectionRecord,
        role: ConnectionRole,
        use: (driver: SqlDriver) => Effect.Effect<A, SqlDriverError>
      ): Effect.Effect<A, ApiError> => {
        const key: DriverKey = {
          connectionId: connection.id,
          role,
          dialect: connection.dialect,
          url: role === "read" ? connection.read_url ?? connection.url : connection.url,
          // A changed tunnel is a new pool: the old one idles out.
          ssh: connection.ssh
        }
        return Effect.scoped(Effect.flatMap(RcMap.get(drivers, JSON.stringify(key)), use)).pipe(
          Effect.mapError((error) => fromDriverError(error, connection))
        )
      }

      /** Per connection: its search path and, per function name, the catalogue's entries. */
      const routineCache = new Map<string, {
        path: ReadonlyArray<string>
        readonly byName: Map<string, { readonly at: number; readonly routines: ReadonlyArray<RoutineInfo> }>
      }>()

      /**
       * The catalogue entries for `names`, from the cache or the DSN the statement will run on
       * (each role's own view of the catalogue: its search path and what it may see).
       */
      const catalogueFor = (connection: ConnectionRecord, role: ConnectionRole, names: ReadonlyArray<string>) =>
        Effect.gen(function*() {
          const fold = (name: string) => (connection.dialect === "mysql" ? name.toLowerCase() : name)
          const now = performance.now()
          const cacheKey = `${connection.id}:${role}`
          const cached = routineCache.get(cacheKey)
          const missing = names.filter((name) => {
            const entry = cached?.byName.get(fold(name))
            return entry === undefined || now - entry.at >= ROUTINE_CACHE_MS
          })
          let entry = cached
          if (entry === undefined || missing.length > 0) {
            const lookup = yield* withDriver(connection, role, (driver) => driver.routines(missing))
            entry ??= { path: lookup.path, byName: new Map() }
            entry.path = lookup.path
            for (const name of missing) {
              const routines = lookup.routines.filter((r) => fold(r.name) === fold(name))
              if (routines.length > 0) entry.byName.set(fold(name), { at: now, routines })
              else entry.byName.delete(fold(name))
            }
            routineCache.set(cacheKey, entry)
          }
          const known = entry
          return {
            path: known.path,
            routines: names.flatMap((name) => known.byName.get(fold(name))?.routines ?? [])
          } satisfies Catalogue
        })

      /**
       * The guard's verdict made stricter by what the catalogue says about the statement's calls.
       * A read is checked against the read DSN's catalogue, where it runs; a write against the
       * edit DSN's, unless the key cannot run writes anyway (it is blocked without a lookup).
       */
      const checkCalls = (connection: ConnectionRecord, role: ConnectionRole, classified: Classified) =>
        Effect.gen(function*() {
          const { verdict, calls } = classified
          if (verdict.verdict === "refused" || calls.length === 0) return verdict
          if (verdict.verdict === "write" && role !== "edit") return verdict
          const runsAs = verdict.verdict === "write" ? "edit" : "read"
          const catalogue = yield* catalogueFor(connection, runsAs, callNames(calls))
          const unknown = verdict.verdict === "write" ? "defer" : "refuse"
          return settle(verdict, classifyCalls(connection.dialect, calls, catalogue, unknown))
        })

      /** The same for EXPLAIN: a refusal refuses the plan too; a write matters only when ANALYZE executes it. */
      const checkExplainCalls = (
        connection: ConnectionRecord,
        role: ConnectionRole,
        classified: Classified<ExplainVerdict>,
        analyze: boolean
      ) =>
        Effect.gen(function*() {
          const { verdict } = classified
          if (verdict.verdict === "refused" || classified.calls.length === 0) return verdict
          // A plain EXPLAIN plans on the read DSN; the catalogue that matters is the one the plan is made on.
          const inner: Verdict = yield* checkCalls(connection, analyze ? role : "read", { verdict: verdict.inner, calls: classified.calls })
          if (inner === verdict.inner) return verdict
          if (inner.verdict === "refused") return { ...refusedVerdict(verdict.kind, inner.reason), inner } satisfies ExplainVerdict
          if (inner.verdict === "write" && analyze && verdict.verdict === "read") {
            return { ...writeVerdict(verdict.kind, inner.reason ?? `EXPLAIN ANALYZE executes the ${inner.kind} it explains.`), inner } satisfies ExplainVerdict
          }
          return { ...verdict, inner } satisfies ExplainVerdict
        })

      /**
       * A production connection's verdict (guard/production.ts): schema changes refused for every
       * role; a Postgres data change calling a function that may write is looked up in the edit
       * DSN's catalogue, where it would run (a read key's write is blocked without a lookup).
       */
      const productionCheck = (connection: ConnectionRecord, role: ConnectionRole, calls: Classified["calls"], verdict: Verdict) =>
        Effect.gen(function*() {
          const checked = productionVerdict(verdict)
          if (checked.verdict !== "write" || role !== "edit" || calls.length === 0 || connection.dialect !== "postgres") return checked
          const catalogue = yield* catalogueFor(connection, "edit", callNames(calls))
          return productionCalls(connection.dialect, checked, classifyCalls(connection.dialect, calls, catalogue, "defer"))
        })

      const authorize = Effect.fnUntraced(function*(ctx: ToolContext, connectionId: number, draft: AuditDraft) {
        draft.connection_id = connectionId
        const role = ctx.grants.get(connectionId)
        const connection = role === undefined ? undefined : yield* connections.get(connectionId)
        if (role === undefined || connection === undefined) {
          draft.details.verdict = "denied"
          return yield* noAccess(connectionId)
        }
        draft.details.role = role
        return { connection, role }
      })

      const noteDriverFailure = (draft: AuditDraft) => (error: ApiError) =>
        Effect.sync(() => {
          if (error._tag === "ValidationFailed" && error.details?.code !== undefined) {
            draft.details.database_code = error.details.code
          }
        })

      const listConnections = Effect.fnUntraced(
        function*(args: unknown, ctx: ToolContext, draft: AuditDraft) {
          yield* decodeArgs(decoders.listConnectionsArgs, args, draft)
          const all = yield* connections.list
          const visible = all.flatMap((c) => {
            const role = ctx.grants.get(c.id)
            return role === undefined ? [] : [{ id: c.id, name: c.name, dialect: c.dialect, environment: c.environment, role }]
          })
          draft.details.count = visible.length
          return { connections: visible }
        }
      )

      const listTables = Effect.fnUntraced(
        function*(args: unknown, ctx: ToolContext, draft: AuditDraft) {
          const input = yield* decodeArgs(decoders.listTablesArgs, args, draft)
          const { connection } = yield* authorize(ctx, input.connection_id, draft)
          const tables = yield* withDriver(connection, "read", (driver) => driver.listTables(input.schema))
          draft.details.count = tables.length
          return { tables }
        }
      )

      const describe = Effect.fnUntraced(
        function*(args: unknown, ctx: ToolContext, draft: AuditDraft) {
          const input = yield* decodeArgs(decoders.describeArgs, args, draft)
          const { connection } = yield* authorize(ctx, input.connection_id, draft)
          const description = yield* withDriver(connection, "read", (driver) => driver.describe(input.schema, input.name))
          if (description === undefined) {
            const where = input.schema === undefined ? "the connection's default schema" : `schema "${input.schema}"`
            return yield* new NotFound({
              message: `no table or view named "${input.name}" in ${where}`,
              details: { connection_id: connection.id, name: input.name, ...(input.schema === undefined ? {} : { schema: input.schema }) }
            })
          }
          return { ...description }
        }
      )

      const run = Effect.fnUntraced(function*(args: unknown, ctx: ToolContext, draft: AuditDraft) {
        const input = yield* decodeArgs(decoders.runArgs, args, draft)
        const deep = tooDeepParam(input.params ?? [])
        if (deep >= 0) {
          draft.details.verdict = "invalid"
          return yield* new ValidationFailed({
            message: `invalid argument params.${deep}: nested deeper than ${MAX_PARAM_DEPTH} levels`,
            details: { field: `params.${deep}`, limit_depth: MAX_PARAM_DEPTH },
            status: 400
          })
        }
        const { connection, role } = yield* authorize(ctx, input.connection_id, draft)
        draft.details.statement_hash = statementHash(input.statement)
        const classified = yield* guard.statement(connection.dialect, input.statement)
        const checked = yield* checkCalls(connection, role, classified)
        const verdict = connection.environment === "production"
          ? yield* productionCheck(connection, role, classified.calls, checked)
          : checked
        draft.details.verdict = verdict.verdict
        draft.details.statement_kind = auditKind(verdict.kind)
        if (verdict.verdict === "refused") {
          draft.details.reason = verdict.reason
          return yield* refusedStatement(verdict)
        }
        if (verdict.verdict === "write" && role !== "edit") {
          draft.details.verdict = "blocked"
          return yield* gateBlocked(verdict)
        }
        const mode = verdict.verdict
        const maxRows = clamp(input.max_rows ?? DEFAULT_MAX_ROWS, 1, maxRowsCap)
        const timeoutMs = clamp(input.timeout_ms ?? DEFAULT_TIMEOUT_MS, MIN_TIMEOUT_MS, timeoutMsCap)
        draft.details.max_rows = maxRows
        draft.details.timeout_ms = timeoutMs
        // Read at each call (a config reload may change it), never above what all calls may hold.
        const maxResultBytes = Math.min(config.mcp.max_result_bytes, inFlightBytes)
        const result = yield* withDriver(
          connection,
          mode === "write" ? "edit" : "read",
          (driver) =>
            driver.run({ statement: input.statement, params: input.params ?? [], mode, maxRows, maxBytes: maxResultBytes, timeoutMs })
        ).pipe(Effect.tapError(noteDriverFailure(draft)), resultBytes.withPermits(maxResultBytes))

        const rowCount = result.kind === "rows" ? result.row_count : result.affected_rows
        draft.details.row_count = rowCount
        draft.details.duration_ms = result.duration_ms
        if (result.kind === "rows") draft.details.truncated = result.truncated

        const ts = DateTime.formatIso(yield* DateTime.now)
        // The statement ran (and a write is committed): a history that cannot be written must
        // not turn that into an error a client would retry.
        yield* store.appendSqlHistory({
          ts,
          statement: input.statement,
          duration_ms: result.duration_ms,
          kind: result.kind,
          row_count: rowCount,
          key_id: ctx.keyId,
          connection_id: connection.id
        }).pipe(
          Effect.catch((error) =>
            Effect.andThen(
              Effect.sync(() => {
                draft.details.history_recorded = false
              }),
              Effect.logWarning("sql_run: the statement history could not be written", error)
            )
          )
        )
        return { ...result }
      })

      const explain = Effect.fnUntraced(function*(args: unknown, ctx: ToolContext, draft: AuditDraft) {
        const input = yield* decodeArgs(decoders.explainArgs, args, draft)
        const { connection, role } = yield* authorize(ctx, input.connection_id, draft)
        const analyze = input.analyze ?? false
        draft.details.statement_hash = statementHash(input.statement)
        draft.details.analyze = analyze
        const classified = yield* guard.explain(connection.dialect, input.statement, { analyze })
        const checked = yield* checkExplainCalls(connection, role, classified, analyze)
        let verdict = checked
        // ANALYZE executes the statement: on production it must be one that may run there.
        if (connection.environment === "production" && analyze && checked.verdict !== "refused") {
          const inner = yield* productionCheck(connection, role, classified.calls, checked.inner)
          if (inner.verdict === "refused") verdict = { ...refusedVerdict(checked.kind, inner.reason), inner: checked.inner }
        }
        draft.details.verdict = verdict.verdict
        draft.details.statement_kind = auditKind(verdict.kind)
        draft.details.explained_kind = auditKind(verdict.inner.kind)
        if (verdict.verdict === "refused") {
          draft.details.reason = verdict.reason
          return yield* refusedExplain(verdict)
        }
        if (verdict.verdict === "write" && role !== "edit") {
          draft.details.verdict = "blocked"
          return yield* refusedExplain(verdict)
        }
        // A plan of a write made by a key that may run that write is planned where the write would
        // run (edit DSN, write mode): engines refuse to plan writes inside a read-only transaction
        // (MariaDB) or without the write privilege (Postgres). A plain EXPLAIN never executes it.
        const mode = verdict.verdict === "write" || (verdict.inner.verdict === "write" && role === "edit") ? "write" : "read"
        const timeoutMs = clamp(DEFAULT_TIMEOUT_MS, MIN_TIMEOUT_MS, timeoutMsCap)
        const result = yield* withDriver(
          connection,
          mode === "write" ? "edit" : "read",
          (driver) => driver.explain({ statement: input.statement, params: [], analyze, mode, timeoutMs })
        ).pipe(Effect.tapError(noteDriverFailure(draft)))
        return { plan: result.plan }
      })

      const history = Effect.fnUntraced(function*(args: unknown, ctx: ToolContext, draft: AuditDraft) {
        const input = yield* decodeArgs(decoders.historyArgs, args, draft)
        const { connection } = yield* authorize(ctx, input.connection_id, draft)
        const limit = clamp(input.limit ?? DEFAULT_HISTORY_LIMIT, 1, MAX_HISTORY_LIMIT)
        const items = yield* store.sqlHistory(ctx.keyId, connection.id, limit).pipe(Effect.mapError(storeUnavailable))
        draft.details.count = items.length
        return { items: items.map((item) => ({ ...item })) }
      })

      const handlers: Record<
        SqlToolName,
        (args: unknown, ctx: ToolContext, draft: AuditDraft) => Effect.Effect<Record<string, unknown>, ApiError>
      > = {
        sql_list_connections: listConnections,
        sql_list_tables: listTables,
        sql_describe: describe,
        sql_run: run,
        sql_explain: explain,
        sql_history: history
      }

      const known = new Set<string>(toolNames)
      const has = (name: string) => known.has(name)

      const call = (name: string, args: unknown, ctx: ToolContext): Effect.Effect<ToolOutcome> => {
        const draft: AuditDraft = { connection_id: null, details: {} }
        const audit = (): ToolAudit => ({ tool: name, connection_id: draft.connection_id, details: { ...draft.details } })
        if (!has(name)) {
          return Effect.succeed({
            _tag: "Failure",
            error: new NotFound({ message: `no tool named "${name}"`, details: { tool: name } }),
            audit: audit()
          })
        }
        return handlers[name as SqlToolName](args, ctx, draft).pipe(
          stageSpan(`SqlTools.${name}`, { atEnd: () => toolSpanAttributes(name, draft) }),
          Effect.map((structured): ToolOutcome => ({ _tag: "Success", structured, audit: audit() })),
          Effect.catch((error) => Effect.succeed<ToolOutcome>({ _tag: "Failure", error, audit: audit() })),
          Effect.catchDefect((defect) =>
            Effect.as(
              Effect.logError(`SQL tool ${name} failed unexpectedly`, defect),
              {
                _tag: "Failure",
                error: new InternalError({ message: `the ${name} tool failed unexpectedly` }),
                audit: audit()
              } satisfies ToolOutcome
            )
          )
        )
      }

      return SqlTools.of({ definitions, has, call })
    })
  )
}
