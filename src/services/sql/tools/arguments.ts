/**
 * The SQL tools' arguments: one Effect schema per tool, decoded on every call, and the source of
 * the `inputSchema` that `tools/list` advertises (definitions.ts derives it with
 * `Schema.toJsonSchemaDocument`), so the descriptions a model reads live here as annotations.
 * Invalid arguments are a tool error (MCP 2025-11-25) naming the argument, and unknown arguments
 * are refused like unknown body fields. Numeric limits are only checked to be integers here:
 * clamping them is the tool's job, so `0` or a huge value is never an error and never means
 * "unlimited".
 *
 * Optional fields are `optionalKey`, not `optional`: the JSON Schema generator describes the JSON
 * codec of a schema, in which `optional` also admits `null` (decoded to `undefined`), while these
 * schemas decode the arguments as they are and refuse `null`. With `optionalKey` the two agree,
 * and JSON arguments cannot carry `undefined` anyway.
 */
import { Schema } from "effect"

/** The server-side limits the descriptions quote, so a model knows them before it asks. */
export interface ToolLimits {
  readonly maxRowsCap: number
  readonly timeoutMsCap: number
}

export const DEFAULT_MAX_ROWS = 1000
export const DEFAULT_TIMEOUT_MS = 30_000
export const MIN_TIMEOUT_MS = 100
export const DEFAULT_HISTORY_LIMIT = 20
export const MAX_HISTORY_LIMIT = 100

const ConnectionId = Schema.Int.check(Schema.isGreaterThan(0)).annotate({
  description: "Id of the database connection, as listed by sql_list_connections."
})
const Name = Schema.NonEmptyString
const SchemaName = Schema.optionalKey(Name.annotate({ description: "Defaults to the connection's default schema." }))
const Statement = (description: string) => Schema.String.annotate({ description })

/** `Struct({})` would accept any object: a record of nothing refuses every key. */
export const ListConnectionsArgs = Schema.Record(Schema.String, Schema.Never.annotate({ message: "unknown field" }))

export const ListTablesArgs = Schema.Struct({
  connection_id: ConnectionId,
  schema: SchemaName
})

export const DescribeArgs = Schema.Struct({
  connection_id: ConnectionId,
  name: Name.annotate({ description: "Table or view name, exactly as stored (no quoting)." }),
  schema: SchemaName
})

/**
 * sql_run's arguments, with the descriptions of its two limits quoting the server's caps. What it
 * accepts does not depend on `limits`: RunArgs, which the server decodes with, is the same
 * schema built with the defaults.
 */
export const runArgs = (limits: ToolLimits) => {
  const defaultRows = Math.min(DEFAULT_MAX_ROWS, limits.maxRowsCap)
  const defaultTimeout = Math.max(MIN_TIMEOUT_MS, Math.min(DEFAULT_TIMEOUT_MS, limits.timeoutMsCap))
  return Schema.Struct({
    connection_id: ConnectionId,
    statement: Statement("One SQL statement."),
    params: Schema.optionalKey(Schema.Array(Schema.Unknown).annotate({ description: "Positional parameter values." })),
    max_rows: Schema.optionalKey(Schema.Int.annotate({
      description: `Rows to return at most; default ${defaultRows}, clamped to 1..${limits.maxRowsCap}.`
    })),
    timeout_ms: Schema.optionalKey(Schema.Int.annotate({
      description:
        `Statement deadline in milliseconds; default ${defaultTimeout}, clamped to ${MIN_TIMEOUT_MS}..${limits.timeoutMsCap}.`
    }))
  })
}

export const RunArgs = runArgs({ maxRowsCap: DEFAULT_MAX_ROWS, timeoutMsCap: DEFAULT_TIMEOUT_MS })

export const ExplainArgs = Schema.Struct({
  connection_id: ConnectionId,
  statement: Statement("The statement to explain, without EXPLAIN."),
  analyze: Schema.optionalKey(
    Schema.Boolean.annotate({ description: "Run the statement and report actual timings (default false)." })
  )
})

export const HistoryArgs = Schema.Struct({
  connection_id: ConnectionId,
  limit: Schema.optionalKey(Schema.Int.annotate({
    description: `Items to return; default ${DEFAULT_HISTORY_LIMIT}, clamped to 1..${MAX_HISTORY_LIMIT}.`
  }))
})

/** `value` clamped into [min, max]; `max` wins when the configured cap is below `min`. */
export const clamp = (value: number, min: number, max: number): number => Math.max(1, Math.min(max, Math.max(min, value)))

/**
 * How deep a bound value may nest: Postgres arrays go to six dimensions, and a JSON parameter
 * deeper than this is not data anyone binds. Deeper values are a tool error naming the
 * parameter, before any driver turns them into text.
 */
export const MAX_PARAM_DEPTH = 16

/** The index of the first parameter nesting deeper than MAX_PARAM_DEPTH, or -1. Iterative: the value may be hostile. */
export const tooDeepParam = (params: ReadonlyArray<unknown>): number =>
  params.findIndex((param) => {
    const stack: Array<readonly [unknown, number]> = [[param, 0]]
    while (stack.length > 0) {
      const [value, depth] = stack.pop()!
      if (typeof value !== "object" || value === null) continue
      if (depth + 1 > MAX_PARAM_DEPTH) return true
      for (const child of Array.isArray(value) ? value : Object.values(value)) stack.push([child, depth + 1])
    }
    return false
  })
