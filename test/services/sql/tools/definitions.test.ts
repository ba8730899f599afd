/**
 * The advertised input schemas against the decoders the server really uses: for every tool, each
 * sample is accepted by the JSON Schema (under a draft-07 and a 2020-12 validator, since MCP
 * clients use either) exactly when the Effect decoder of arguments.ts accepts it. No database:
 * tools.test.ts checks the same agreement through the tool calls on a smaller set.
 */
import { Ajv } from "ajv"
import { Ajv2020 } from "ajv/dist/2020.js"
import { Schema } from "effect"
import { describe, expect, it } from "vitest"
import {
  DescribeArgs,
  ExplainArgs,
  HistoryArgs,
  ListConnectionsArgs,
  ListTablesArgs,
  RunArgs
} from "../../../../src/services/sql/tools/arguments.ts"
import { type SqlToolName, toolDefinitions } from "../../../../src/services/sql/tools/definitions.ts"
import { makeDecoder } from "../../../../src/wire/decode.ts"

const definitions = toolDefinitions({ maxRowsCap: 25, timeoutMsCap: 5_000 })

const decoders: Record<SqlToolName, (input: unknown) => { readonly ok: boolean }> = {
  sql_list_connections: makeDecoder(ListConnectionsArgs),
  sql_list_tables: makeDecoder(ListTablesArgs),
  sql_describe: makeDecoder(DescribeArgs),
  sql_run: makeDecoder(RunArgs),
  sql_explain: makeDecoder(ExplainArgs),
  sql_history: makeDecoder(HistoryArgs)
}

const SAFE = Number.MAX_SAFE_INTEGER

/** Not JSON objects at all, and the connection id's edges: every tool but the first shares them. */
const anyTool: ReadonlyArray<unknown> = [null, "x", 1, true, [], [1], { connection_id: null }]
const connectionIds: ReadonlyArray<unknown> = [0, -1, 1, 7, 1.5, "1", SAFE, SAFE + 1, 2 ** 53 + 2, 1e300, true]

const samples: Record<SqlToolName, ReadonlyArray<Record<string, unknown> | unknown>> = {
  sql_list_connections: [
    ...anyTool,
    {},
    { connection_id: 1 },
    { "": 1 },
    { __proto__: null, x: undefined }
  ],
  sql_list_tables: [
    ...anyTool,
    {},
    ...connectionIds.map((connection_id) => ({ connection_id })),
    { connection_id: 1, schema: "public" },
    { connection_id: 1, schema: "" },
    { connection_id: 1, schema: null },
    { connection_id: 1, schema: 3 },
    { connection_id: 1, schema: ["public"] },
    { connection_id: 1, name: "t" }
  ],
  sql_describe: [
    ...anyTool,
    { connection_id: 1 },
    { name: "t" },
    { connection_id: 1, name: "t" },
    { connection_id: 1, name: "" },
    { connection_id: 1, name: null },
    { connection_id: 1, name: "t", schema: "s" },
    { connection_id: 1, name: "t", schema: "" },
    { connection_id: 1, name: "t", extra: true },
    { connection_id: 0, name: "t" }
  ],
  sql_run: [
    ...anyTool,
    { connection_id: 1 },
    { statement: "SELECT 1" },
    { connection_id: 1, statement: "SELECT 1" },
    { connection_id: 1, statement: "" },
    { connection_id: 1, statement: null },
    { connection_id: 1, statement: ["SELECT 1"] },
    { connection_id: 1, statement: "SELECT $1", params: [] },
    { connection_id: 1, statement: "SELECT $1", params: ["x", 1, null, true, { a: 1 }, [1]] },
    { connection_id: 1, statement: "SELECT 1", params: "x" },
    { connection_id: 1, statement: "SELECT 1", params: { 0: "x" } },
    { connection_id: 1, statement: "SELECT 1", params: null },
    ...[0, -5, 1, 10 ** 9, SAFE, SAFE + 1, 2.5, "10", null, 1e300].flatMap((n) => [
      { connection_id: 1, statement: "SELECT 1", max_rows: n },
      { connection_id: 1, statement: "SELECT 1", timeout_ms: n }
    ]),
    { connection_id: 1, statement: "SELECT 1", analyze: true },
    { connection_id: 1, statement: "SELECT 1", limit: 1 }
  ],
  sql_explain: [
    ...anyTool,
    { connection_id: 1, statement: "SELECT 1" },
    { connection_id: 1, statement: "SELECT 1", analyze: true },
    { connection_id: 1, statement: "SELECT 1", analyze: false },
    { connection_id: 1, statement: "SELECT 1", analyze: "yes" },
    { connection_id: 1, statement: "SELECT 1", analyze: null },
    { connection_id: 1, statement: "SELECT 1", analyze: 1 },
    { connection_id: 1, statement: "SELECT 1", params: [] },
    { connection_id: 1 },
    { statement: "SELECT 1" }
  ],
  sql_history: [
    ...anyTool,
    { connection_id: 1 },
    {},
    ...[0, -1, 5, 100, 101, SAFE, SAFE + 1, 2.5, "5", null].map((limit) => ({ connection_id: 1, limit })),
    { connection_id: 1, limit: 5, offset: 1 }
  ]
}

const validators = [
  ["draft-07", new Ajv({ strict: true, allErrors: true })],
  ["2020-12", new Ajv2020({ strict: true, allErrors: true })]
] as const

describe("advertised input schemas", () => {
  it("are derived for every tool, closed, with no $schema or $ref", () => {
    expect(definitions.map((definition) => definition.name).sort()).toEqual(Object.keys(samples).sort())
    for (const definition of definitions) {
      expect(definition.inputSchema).toMatchObject({ type: "object", additionalProperties: false })
      const text = JSON.stringify(definition.inputSchema)
      expect(text).not.toContain("$schema")
      expect(text).not.toContain("$ref")
      expect(text).not.toContain("$defs")
    }
  })

  it("carry the descriptions annotated on the argument schemas", () => {
    const run = definitions.find((definition) => definition.name === "sql_run")!
    const properties = run.inputSchema.properties as Record<string, { readonly description?: string }>
    expect(properties.statement?.description).toBe("One SQL statement.")
    expect(properties.max_rows?.description).toBe("Rows to return at most; default 25, clamped to 1..25.")
    expect(properties.timeout_ms?.description).toBe("Statement deadline in milliseconds; default 5000, clamped to 100..5000.")
    expect(properties.connection_id?.description).toContain("sql_list_connections")
    expect(run.inputSchema.required).toEqual(["connection_id", "statement"])
  })

  for (const definition of definitions) {
    it(`${definition.name}: the JSON Schema accepts a sample iff the Effect decoder does`, () => {
      const decode = decoders[definition.name]
      let accepted = 0
      for (const [draft, ajv] of validators) {
        const validate = ajv.compile(definition.inputSchema)
        for (const sample of samples[definition.name]) {
          const label = `${draft} ${definition.name} ${String(JSON.stringify(sample))}`
          const decoded = decode(sample).ok
          expect(validate(sample), label).toBe(decoded)
          if (decoded) accepted++
        }
      }
      // Both outcomes are exercised, so the agreement is not "everything is refused".
      expect(accepted).toBeGreaterThan(0)
      expect(accepted).toBeLessThan(samples[definition.name].length * validators.length)
    })
  }

  it("refuses an argument schema that needs a keyword outside the portable subset", async () => {
    const { inputSchemaOf } = await import("../../../../src/services/sql/tools/definitions.ts")
    const Pair = Schema.Struct({ pair: Schema.Tuple([Schema.String, Schema.Int]) })
    expect(() => inputSchemaOf(Pair)).toThrow(/not portable/)
    const Open = Schema.Struct({ a: Schema.String, b: Schema.optionalKey(Schema.Int) })
    expect(inputSchemaOf(Open)).toMatchObject({ type: "object", required: ["a"], additionalProperties: false })
  })
})
