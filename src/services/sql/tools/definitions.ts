/**
 * What `tools/list` shows for the six SQL tools: JSON Schemas for arguments and results, and
 * annotations. The schemas use only keywords that mean the same in draft-07 and 2020-12 and
 * carry no `$schema`, because MCP clients validate with whatever draft their validator
 * defaults to (the TypeScript SDK's Ajv is draft-07).
 *
 * The server never relies on a client having validated: arguments are decoded again with the
 * Effect schemas of arguments.ts, which must accept exactly what these describe.
 */

export type SqlToolName =
  | "sql_list_connections"
  | "sql_list_tables"
  | "sql_describe"
  | "sql_run"
  | "sql_explain"
  | "sql_history"

export interface JsonSchemaObject {
  readonly type: "object"
  readonly properties: Readonly<Record<string, unknown>>
  readonly required?: ReadonlyArray<string>
  readonly additionalProperties?: boolean
  readonly [keyword: string]: unknown
}

/** MCP tool annotations: hints a client may show or act on, never trusted for security. */
export interface ToolAnnotations {
  readonly title: string
  readonly readOnlyHint: boolean
  readonly destructiveHint: boolean
  readonly idempotentHint: boolean
  readonly openWorldHint: boolean
}

export interface McpToolDefinition {
  readonly name: SqlToolName
  readonly title?: string
  readonly description: string
  readonly inputSchema: JsonSchemaObject
  readonly outputSchema: JsonSchemaObject
  readonly annotations: ToolAnnotations
}

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

const string = (description: string) => ({ type: "string", description })
const integer = (description: string) => ({ type: "integer", description })
const stringArray = { type: "array", items: { type: "string" } }

const connectionId = {
  type: "integer",
  minimum: 1,
  description: "Id of the database connection, as listed by sql_list_connections."
}

const input = (properties: Record<string, unknown>, required: ReadonlyArray<string>): JsonSchemaObject => ({
  type: "object",
  properties,
  ...(required.length > 0 ? { required } : {}),
  additionalProperties: false
})

const output = (properties: Record<string, unknown>, required: ReadonlyArray<string>): JsonSchemaObject => ({
  type: "object",
  properties,
  required
})

const readOnly = (title: string): ToolAnnotations => ({
  title,
  readOnlyHint: true,
  destructiveHint: false,
  idempotentHint: true,
  openWorldHint: false
})

const connectionEntry = {
  type: "object",
  properties: {
    id: { type: "integer" },
    name: { type: "string" },
    dialect: { type: "string", enum: ["postgres", "mysql"] },
    role: { type: "string", enum: ["read", "edit"] }
  },
  required: ["id", "name", "dialect", "role"]
}

const tableEntry = {
  type: "object",
  properties: {
    schema: { type: "string" },
    name: { type: "string" },
    kind: { type: "string", description: "table, view, materialized view, partitioned table, foreign table, sequence..." },
    rows_estimate: { type: "number", description: "The engine's statistics, not a count." }
  },
  required: ["schema", "name", "kind", "rows_estimate"]
}

const columnEntry = {
  type: "object",
  properties: {
    name: { type: "string" },
    type: { type: "string" },
    nullable: { type: "boolean" },
    default: { type: "string" },
    pk: { type: "boolean" },
    unique: { type: "boolean" }
  },
  required: ["name", "type", "nullable"]
}

const indexEntry = {
  type: "object",
  properties: { name: { type: "string" }, columns: stringArray, unique: { type: "boolean" } },
  required: ["name", "columns", "unique"]
}

const foreignKeyEntry = {
  type: "object",
  properties: {
    name: { type: "string" },
    columns: stringArray,
    references: {
      type: "object",
      properties: { schema: { type: "string" }, table: { type: "string" }, columns: stringArray },
      required: ["schema", "table", "columns"]
    }
  },
  required: ["name", "columns", "references"]
}

const historyEntry = {
  type: "object",
  properties: {
    ts: { type: "string", format: "date-time" },
    statement: { type: "string" },
    duration_ms: { type: "number" },
    kind: { type: "string", enum: ["rows", "affected"] },
    row_count: { type: "integer", minimum: 0 }
  },
  required: ["ts", "statement", "duration_ms", "kind", "row_count"]
}

/** One object schema for both result kinds: MCP wants `type: "object"` at the root, so the variants are a `oneOf` inside it. */
const runOutput: JsonSchemaObject = {
  type: "object",
  properties: {
    kind: { type: "string", enum: ["rows", "affected"] },
    columns: {
      type: "array",
      items: { type: "object", properties: { name: { type: "string" }, type: { type: "string" } }, required: ["name"] }
    },
    rows: { type: "array", items: { type: "object" } },
    row_count: { type: "integer", minimum: 0 },
    truncated: { type: "boolean" },
    affected_rows: { type: "integer", minimum: 0 },
    duration_ms: { type: "number", minimum: 0 }
  },
  required: ["kind", "duration_ms"],
  oneOf: [
    { properties: { kind: { const: "rows" } }, required: ["columns", "rows", "row_count", "truncated"] },
    { properties: { kind: { const: "affected" } }, required: ["affected_rows"] }
  ]
}

export const toolDefinitions = (limits: ToolLimits): ReadonlyArray<McpToolDefinition> => {
  const defaultRows = Math.min(DEFAULT_MAX_ROWS, limits.maxRowsCap)
  const defaultTimeout = Math.max(MIN_TIMEOUT_MS, Math.min(DEFAULT_TIMEOUT_MS, limits.timeoutMsCap))
  return [
    {
      name: "sql_list_connections",
      title: "List database connections",
      description: "Lists the database connections this API key may use, with its role on each: " +
        "read (list, describe, explain, history, read-only statements) or edit (also writes and DDL).",
      inputSchema: input({}, []),
      outputSchema: output({ connections: { type: "array", items: connectionEntry } }, ["connections"]),
      annotations: readOnly("List database connections")
    },
    {
      name: "sql_list_tables",
      title: "List tables",
      description: "Lists the tables and views of one schema of a connection, with the engine's row estimates.",
      inputSchema: input({
        connection_id: connectionId,
        schema: { type: "string", minLength: 1, description: "Defaults to the connection's default schema." }
      }, ["connection_id"]),
      outputSchema: output({ tables: { type: "array", items: tableEntry } }, ["tables"]),
      annotations: readOnly("List tables")
    },
    {
      name: "sql_describe",
      title: "Describe a table",
      description: "Describes one table or view: columns, indexes and foreign keys.",
      inputSchema: input({
        connection_id: connectionId,
        name: { type: "string", minLength: 1, description: "Table or view name, exactly as stored (no quoting)." },
        schema: { type: "string", minLength: 1, description: "Defaults to the connection's default schema." }
      }, ["connection_id", "name"]),
      outputSchema: output({
        schema: { type: "string" },
        name: { type: "string" },
        columns: { type: "array", items: columnEntry },
        indexes: { type: "array", items: indexEntry },
        foreign_keys: { type: "array", items: foreignKeyEntry }
      }, ["schema", "name", "columns", "indexes", "foreign_keys"]),
      annotations: readOnly("Describe a table")
    },
    {
      name: "sql_run",
      title: "Run a SQL statement",
      description: "Runs exactly one SQL statement. Read-only statements run in a read-only transaction " +
        "that is rolled back; writes and DDL need the edit role. Session, transaction control, server file " +
        "access and similar statements are refused for every role. Bind values with `params` " +
        "($1, $2... on Postgres, ? on MySQL) instead of writing them into the statement. BIGINT and " +
        "NUMERIC values come back as strings, binary values as base64.",
      inputSchema: input({
        connection_id: connectionId,
        statement: string("One SQL statement."),
        params: { type: "array", description: "Positional parameter values." },
        max_rows: integer(`Rows to return at most; default ${defaultRows}, clamped to 1..${limits.maxRowsCap}.`),
        timeout_ms: integer(
          `Statement deadline in milliseconds; default ${defaultTimeout}, clamped to ${MIN_TIMEOUT_MS}..${limits.timeoutMsCap}.`
        )
      }, ["connection_id", "statement"]),
      outputSchema: runOutput,
      annotations: {
        title: "Run a SQL statement",
        readOnlyHint: false,
        destructiveHint: true,
        idempotentHint: false,
        openWorldHint: false
      }
    },
    {
      name: "sql_explain",
      title: "Explain a SQL statement",
      description: "Shows the engine's plan for one statement (pass the statement without EXPLAIN). " +
        "With analyze the statement really runs inside a transaction that is rolled back; analyzing a " +
        "write needs the edit role.",
      inputSchema: input({
        connection_id: connectionId,
        statement: string("The statement to explain, without EXPLAIN."),
        analyze: { type: "boolean", description: "Run the statement and report actual timings (default false)." }
      }, ["connection_id", "statement"]),
      outputSchema: output({ plan: { description: "The engine's plan, as it reports it." } }, ["plan"]),
      annotations: readOnly("Explain a SQL statement")
    },
    {
      name: "sql_history",
      title: "Statement history",
      description: "The statements this API key ran with sql_run on a connection, newest first.",
      inputSchema: input({
        connection_id: connectionId,
        limit: integer(`Items to return; default ${DEFAULT_HISTORY_LIMIT}, clamped to 1..${MAX_HISTORY_LIMIT}.`)
      }, ["connection_id"]),
      outputSchema: output({ items: { type: "array", items: historyEntry } }, ["items"]),
      annotations: readOnly("Statement history")
    }
  ]
}

export const toolNames: ReadonlyArray<SqlToolName> = [
  "sql_list_connections",
  "sql_list_tables",
  "sql_describe",
  "sql_run",
  "sql_explain",
  "sql_history"
]
