/**
 * Server-side validation of tool arguments, the counterpart of the JSON Schemas in
 * definitions.ts. Invalid arguments are a tool error (MCP 2025-11-25) naming the argument, and
 * unknown arguments are refused like unknown body fields. Numeric limits are only checked to be
 * integers here: clamping them is the tool's job, so `0` or a huge value is never an error and
 * never means "unlimited".
 */
import { Schema } from "effect"

const ConnectionId = Schema.Int.check(Schema.isGreaterThan(0))
const Name = Schema.NonEmptyString

/** `Struct({})` would accept any object: a record of nothing refuses every key. */
export const ListConnectionsArgs = Schema.Record(Schema.String, Schema.Never.annotate({ message: "unknown field" }))

export const ListTablesArgs = Schema.Struct({
  connection_id: ConnectionId,
  schema: Schema.optional(Name)
})

export const DescribeArgs = Schema.Struct({
  connection_id: ConnectionId,
  name: Name,
  schema: Schema.optional(Name)
})

export const RunArgs = Schema.Struct({
  connection_id: ConnectionId,
  statement: Schema.String,
  params: Schema.optional(Schema.Array(Schema.Unknown)),
  max_rows: Schema.optional(Schema.Int),
  timeout_ms: Schema.optional(Schema.Int)
})

export const ExplainArgs = Schema.Struct({
  connection_id: ConnectionId,
  statement: Schema.String,
  analyze: Schema.optional(Schema.Boolean)
})

export const HistoryArgs = Schema.Struct({
  connection_id: ConnectionId,
  limit: Schema.optional(Schema.Int)
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
