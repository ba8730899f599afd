/**
 * What `tools/list` shows for the six SQL tools: JSON Schemas for arguments and results, and
 * annotations. The schemas use only keywords that mean the same in draft-07 and 2020-12 and
 * carry no `$schema` and no `$ref`, because MCP clients validate with whatever draft their
 * validator defaults to (the TypeScript SDK's Ajv is draft-07).
 *
 * Input schemas are derived from the Effect schemas of arguments.ts, which the server decodes
 * every call with, so the two cannot drift: Effect's own generator (`toJsonSchemaDocument`) with
 * excess properties refused, references inlined, and every keyword checked against the portable
 * subset, so a future argument that needs a draft-specific keyword fails at start-up instead of
 * being advertised. Output schemas stay hand-written: they describe the results the tools build,
 * which are never decoded, so there is no second copy for them to drift from.
 */
import { Schema } from "effect"
import {
  DescribeArgs,
  ExplainArgs,
  HistoryArgs,
  ListConnectionsArgs,
  ListTablesArgs,
  runArgs,
  type ToolLimits
} from "./arguments.ts"

export {
  DEFAULT_HISTORY_LIMIT,
  DEFAULT_MAX_ROWS,
  DEFAULT_TIMEOUT_MS,
  MAX_HISTORY_LIMIT,
  MIN_TIMEOUT_MS,
  type ToolLimits
} from "./arguments.ts"

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

const stringArray = { type: "array", items: { type: "string" } }

/** Keywords that mean the same in draft-07 and 2020-12 (numeric `exclusiveMinimum` since draft-06, `items` as one schema). */
const PORTABLE_KEYWORDS = new Set([
  "type",
  "properties",
  "required",
  "additionalProperties",
  "items",
  "enum",
  "const",
  "minimum",
  "maximum",
  "exclusiveMinimum",
  "exclusiveMaximum",
  "minLength",
  "maxLength",
  "pattern",
  "minItems",
  "maxItems",
  "uniqueItems",
  "anyOf",
  "oneOf",
  "allOf",
  "not",
  "title",
  "description"
])

type Json = { readonly [keyword: string]: unknown }

const isObject = (value: unknown): value is Json => typeof value === "object" && value !== null && !Array.isArray(value)

/**
 * A generated schema with its references inlined and every keyword checked against the portable
 * subset. Throws on anything else: that is a change to arguments.ts this file must learn about,
 * and the tools' tests build these at start-up.
 */
const portable = (schema: unknown, definitions: Json, path: string, expanding: ReadonlyArray<string>): Json => {
  if (!isObject(schema)) throw new Error(`${path}: a JSON Schema must be an object here, got ${JSON.stringify(schema)}`)
  const ref = schema.$ref
  if (typeof ref === "string") {
    const name = ref.startsWith("#/$defs/") ? decodeURIComponent(ref.slice("#/$defs/".length)) : undefined
    if (name === undefined || !(name in definitions)) throw new Error(`${path}: unresolvable $ref ${ref}`)
    if (expanding.includes(name)) throw new Error(`${path}: recursive $ref ${ref} cannot be inlined`)
    const { $ref: _, ...siblings } = schema
    return portable({ ...(definitions[name] as Json), ...siblings }, definitions, path, [...expanding, name])
  }
  const out: Record<string, unknown> = {}
  for (const [keyword, value] of Object.entries(schema)) {
    if (!PORTABLE_KEYWORDS.has(keyword)) throw new Error(`${path}: keyword ${keyword} is not portable between drafts`)
    const at = `${path}/${keyword}`
    switch (keyword) {
      case "properties":
        out[keyword] = Object.fromEntries(
          Object.entries(value as Json).map(([name, sub]) => [name, portable(sub, definitions, `${at}/${name}`, expanding)])
        )
        break
      case "items":
      case "not":
        out[keyword] = portable(value, definitions, at, expanding)
        break
      case "additionalProperties":
        out[keyword] = typeof value === "boolean" ? value : portable(value, definitions, at, expanding)
        break
      case "anyOf":
      case "oneOf":
      case "allOf":
        out[keyword] = (value as ReadonlyArray<unknown>).map((sub, i) => portable(sub, definitions, `${at}/${i}`, expanding))
        break
      default:
        out[keyword] = value
    }
  }
  return out
}

/** The advertised `inputSchema` of an argument schema: a closed object, `properties` always present. */
export const inputSchemaOf = (args: Schema.Top): JsonSchemaObject => {
  const document = Schema.toJsonSchemaDocument(args, { onExcessProperty: "error" })
  const schema = portable(document.schema, document.definitions, "#", [])
  if (schema.type !== "object" || schema.additionalProperties !== false) {
    throw new Error(`an inputSchema must be a closed object, got ${JSON.stringify(schema)}`)
  }
  return { ...schema, type: "object", properties: isObject(schema.properties) ? schema.properties : {} }
}

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
    /** production: schema changes are refused there, whatever the role. */
    environment: { type: "string", enum: ["development", "production"] },
    role: { type: "string", enum: ["read", "edit"] }
  },
  required: ["id", "name", "dialect", "environment", "role"]
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
  return [
    {
      name: "sql_list_connections",
      title: "List database connections",
      description: "Lists the database connections this API key may use, with its role on each: " +
        "read (list, describe, explain, history, read-only statements) or edit (also writes and DDL), and its environment " +
        "(on production, schema changes are refused for every role).",
      inputSchema: inputSchemaOf(ListConnectionsArgs),
      outputSchema: output({ connections: { type: "array", items: connectionEntry } }, ["connections"]),
      annotations: readOnly("List database connections")
    },
    {
      name: "sql_list_tables",
      title: "List tables",
      description: "Lists the tables and views of one schema of a connection, with the engine's row estimates.",
      inputSchema: inputSchemaOf(ListTablesArgs),
      outputSchema: output({ tables: { type: "array", items: tableEntry } }, ["tables"]),
      annotations: readOnly("List tables")
    },
    {
      name: "sql_describe",
      title: "Describe a table",
      description: "Describes one table or view: columns, indexes and foreign keys.",
      inputSchema: inputSchemaOf(DescribeArgs),
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
      inputSchema: inputSchemaOf(runArgs(limits)),
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
      inputSchema: inputSchemaOf(ExplainArgs),
      outputSchema: output({ plan: { description: "The engine's plan, as it reports it." } }, ["plan"]),
      annotations: readOnly("Explain a SQL statement")
    },
    {
      name: "sql_history",
      title: "Statement history",
      description: "The statements this API key ran with sql_run on a connection, newest first.",
      inputSchema: inputSchemaOf(HistoryArgs),
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
