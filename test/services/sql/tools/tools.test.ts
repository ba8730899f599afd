/**
 * SqlTools at the service level against the machine's real Postgres and MariaDB: result shapes,
 * read versus edit roles, every error mapping, limits, value encodings and history.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { AjvJsonSchemaValidator } from "@modelcontextprotocol/sdk/validation/ajv"
import { createHash, randomBytes } from "node:crypto"
import { Effect, Layer } from "effect"
import { SqlDrivers } from "../../../../src/services/sql/drivers/SqlDrivers.ts"
import { SqlTools } from "../../../../src/services/sql/SqlTools.ts"
import { createMysqlDatabase, createPostgresDatabase, POSTGRES_ADMIN_URL, type TempDatabase } from "../../../support/databases.ts"
import {
  type Admin,
  callTool,
  context,
  countingDrivers,
  type DriverCalls,
  expectFailure,
  expectSuccess,
  makeConfig,
  makeToolsRuntime,
  mysqlAdmin,
  postgresAdmin,
  type ToolsRuntime
} from "./support.ts"

const PG = 1
const MY = 2
const PG_DOWN = 3
const MY_DOWN = 4
const PG_HIDDEN = 5
const PG_RO = 6

const PG_PASSWORD = "pw-SECRET-1234"
const DOWN_PASSWORD = "down-SECRET-5678"
const RO_PASSWORD = "ro-SECRET-9012"

const MAX_ROWS_CAP = 25
const TIMEOUT_CAP = 5_000

const readKey = context("key_read", { [PG]: "read", [MY]: "read", [PG_DOWN]: "read", [MY_DOWN]: "read", [PG_RO]: "read" })
const editKey = context("key_edit", { [PG]: "edit", [MY]: "edit", [PG_RO]: "edit" })
const noKey = context("key_none", {})

const PG_SEED = [
  `CREATE TABLE customers (id bigserial PRIMARY KEY, email text NOT NULL UNIQUE, name text,
     created_at timestamptz NOT NULL DEFAULT now())`,
  `CREATE TABLE orders (id bigint PRIMARY KEY, customer_id bigint NOT NULL REFERENCES customers (id),
     total numeric(20, 6) NOT NULL, big bigint, payload bytea, meta jsonb, placed_at timestamp)`,
  "CREATE INDEX orders_customer_idx ON orders (customer_id)",
  "CREATE VIEW big_orders AS SELECT id, total FROM orders WHERE total > 100",
  "CREATE TABLE numbers (n int PRIMARY KEY)",
  "INSERT INTO numbers SELECT g FROM generate_series(1, 40) AS g",
  `INSERT INTO customers (id, email, name, created_at) VALUES
     (1, 'ada@example.com', 'Ada', '2026-01-02 03:04:05.123456+00'), (2, 'grace@example.com', NULL, '2026-01-03 00:00:00+00')`,
  `INSERT INTO orders VALUES (10, 1, 12345678901234.123456, 9223372036854775807, '\\xdeadbeef',
     '{"a": [1, 2], "b": null}', '2026-01-02 03:04:05.5')`,
  "ANALYZE"
]

const MY_SEED = [
  `CREATE TABLE customers (id BIGINT AUTO_INCREMENT PRIMARY KEY, email VARCHAR(190) NOT NULL UNIQUE, name VARCHAR(100),
     created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))`,
  `CREATE TABLE orders (id BIGINT PRIMARY KEY, customer_id BIGINT NOT NULL, total DECIMAL(20, 6) NOT NULL, big BIGINT,
     payload BLOB, meta JSON, placed_at DATETIME(3), INDEX orders_customer_idx (customer_id),
     CONSTRAINT orders_customer_fk FOREIGN KEY (customer_id) REFERENCES customers (id))`,
  "CREATE VIEW big_orders AS SELECT id, total FROM orders WHERE total > 100",
  "CREATE TABLE numbers (n INT PRIMARY KEY)",
  "INSERT INTO numbers WITH RECURSIVE r (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 40) SELECT n FROM r",
  "CREATE TABLE nums (n INT PRIMARY KEY)",
  "INSERT INTO nums WITH RECURSIVE r (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 1000) SELECT n FROM r",
  `INSERT INTO customers (id, email, name, created_at) VALUES
     (1, 'ada@example.com', 'Ada', '2026-01-02 03:04:05.123456'), (2, 'grace@example.com', NULL, '2026-01-03 00:00:00')`,
  `INSERT INTO orders VALUES (10, 1, 12345678901234.123456, 9223372036854775807, X'DEADBEEF',
     '{"a": [1, 2], "b": null}', '2026-01-02 03:04:05.500')`
]

let pgDb: TempDatabase
let myDb: TempDatabase
let pgAdmin: Admin
let myAdmin: Admin
let roRole: string
let runtime: ToolsRuntime
let calls: DriverCalls

const withPassword = (url: string, user: string, password: string) => {
  const parsed = new URL(url)
  parsed.username = user
  parsed.password = password
  return parsed.toString()
}

beforeAll(async () => {
  ;[pgDb, myDb] = await Promise.all([createPostgresDatabase("mg_tools_pg"), createMysqlDatabase("mg_tools_my")])
  pgAdmin = postgresAdmin(pgDb.url)
  myAdmin = await mysqlAdmin(myDb.url)
  for (const statement of PG_SEED) await pgAdmin.exec(statement)
  for (const statement of MY_SEED) await myAdmin.exec(statement)
  roRole = `mg_ro_${randomBytes(4).toString("hex")}`
  await pgAdmin.exec(`CREATE ROLE ${roRole} LOGIN`)
  await pgAdmin.exec(`GRANT USAGE ON SCHEMA public TO ${roRole}`)
  await pgAdmin.exec(`GRANT SELECT ON ALL TABLES IN SCHEMA public TO ${roRole}`)

  const counting = countingDrivers()
  calls = counting.calls
  const config = makeConfig([
    { id: PG, name: "pg-main", dialect: "postgres", url: withPassword(pgDb.url, "postgres", PG_PASSWORD) },
    { id: MY, name: "mysql-main", dialect: "mysql", url: myDb.url },
    { id: PG_DOWN, name: "pg-down", dialect: "postgres", url: `postgres://postgres:${DOWN_PASSWORD}@127.0.0.1:1/nowhere` },
    { id: MY_DOWN, name: "mysql-down", dialect: "mysql", url: `mysql://root:${DOWN_PASSWORD}@127.0.0.1:1/nowhere` },
    { id: PG_HIDDEN, name: "pg-hidden", dialect: "postgres", url: pgDb.url },
    {
      id: PG_RO,
      name: "pg-split",
      dialect: "postgres",
      url: pgDb.url,
      read_url: withPassword(pgDb.url, roRole, RO_PASSWORD)
    }
  ], { max_rows_cap: MAX_ROWS_CAP, timeout_ms_cap: TIMEOUT_CAP })
  runtime = makeToolsRuntime(config, counting.layer)
})

afterAll(async () => {
  await runtime?.dispose()
  await pgAdmin?.close()
  await myAdmin?.close()
  await Promise.all([pgDb?.drop(), myDb?.drop()])
  if (roRole !== undefined) await postgresAdmin(POSTGRES_ADMIN_URL).exec(`DROP ROLE IF EXISTS ${roRole}`).catch(() => undefined)
})

const call = (name: string, args: unknown, ctx = readKey) => callTool(runtime, name, args, ctx)
const ok = async (name: string, args: unknown, ctx = readKey) => expectSuccess(runtime, await call(name, args, ctx))
const fail = async (name: string, args: unknown, ctx = readKey) => expectFailure(await call(name, args, ctx))
const sha256 = (text: string) => createHash("sha256").update(text).digest("hex")

/** Runs `body` and returns how many driver calls it made. */
const driverCallsDuring = async (body: () => Promise<unknown>) => {
  const before = calls.count()
  await body()
  return calls.count() - before
}

describe("definitions", () => {
  it("lists the six tools with honest annotations and closed input schemas", async () => {
    const tools = await runtime.runPromise(SqlTools.use(Effect.succeed))
    expect(tools.definitions.map((d) => d.name)).toEqual([
      "sql_list_connections",
      "sql_list_tables",
      "sql_describe",
      "sql_run",
      "sql_explain",
      "sql_history"
    ])
    for (const definition of tools.definitions) {
      expect(tools.has(definition.name)).toBe(true)
      expect(definition.inputSchema).toMatchObject({ type: "object", additionalProperties: false })
      expect(definition.outputSchema.type).toBe("object")
      expect(definition.inputSchema).not.toHaveProperty("$schema")
      expect(definition.annotations.openWorldHint).toBe(false)
      const writes = definition.name === "sql_run"
      expect(definition.annotations).toMatchObject({
        readOnlyHint: !writes,
        destructiveHint: writes,
        idempotentHint: !writes
      })
    }
    expect(tools.has("sql_drop_everything")).toBe(false)
    const run = tools.definitions.find((d) => d.name === "sql_run")!
    expect(JSON.stringify(run.inputSchema)).toContain(`1..${MAX_ROWS_CAP}`)
    expect(JSON.stringify(run.inputSchema)).toContain(`100..${TIMEOUT_CAP}`)
  })

  it("accepts and refuses the same arguments as the JSON Schemas say", async () => {
    const tools = await runtime.runPromise(SqlTools.use(Effect.succeed))
    const validator = new AjvJsonSchemaValidator()
    const cases: ReadonlyArray<readonly [string, unknown, boolean, string?]> = [
      ["sql_list_connections", {}, true],
      ["sql_list_connections", { connection_id: 1 }, false, "connection_id"],
      ["sql_list_tables", { connection_id: PG }, true],
      ["sql_list_tables", { connection_id: PG, schema: "public" }, true],
      ["sql_list_tables", {}, false, "connection_id"],
      ["sql_list_tables", { connection_id: "1" }, false, "connection_id"],
      ["sql_list_tables", { connection_id: 0 }, false, "connection_id"],
      ["sql_list_tables", { connection_id: 1.5 }, false, "connection_id"],
      ["sql_list_tables", { connection_id: PG, schema: "" }, false, "schema"],
      ["sql_list_tables", { connection_id: PG, schema: 3 }, false, "schema"],
      ["sql_describe", { connection_id: PG, name: "customers" }, true],
      ["sql_describe", { connection_id: PG }, false, "name"],
      ["sql_describe", { connection_id: PG, name: "customers", extra: true }, false, "extra"],
      ["sql_run", { connection_id: PG, statement: "SELECT 1" }, true],
      ["sql_run", { connection_id: PG, statement: "SELECT $1", params: ["x", 1, null, true, { a: 1 }, [1]] }, true],
      ["sql_run", { connection_id: PG, statement: "SELECT 1", max_rows: 0, timeout_ms: -5 }, true],
      ["sql_run", { connection_id: PG, statement: "SELECT 1", max_rows: 10 ** 9 }, true],
      ["sql_run", { connection_id: PG }, false, "statement"],
      ["sql_run", { connection_id: PG, statement: ["SELECT 1"] }, false, "statement"],
      ["sql_run", { connection_id: PG, statement: "SELECT 1", params: "x" }, false, "params"],
      ["sql_run", { connection_id: PG, statement: "SELECT 1", max_rows: "10" }, false, "max_rows"],
      ["sql_run", { connection_id: PG, statement: "SELECT 1", max_rows: 2.5 }, false, "max_rows"],
      ["sql_run", { connection_id: PG, statement: "SELECT 1", timeout_ms: null }, false, "timeout_ms"],
      ["sql_explain", { connection_id: PG, statement: "SELECT 1", analyze: true }, true],
      ["sql_explain", { connection_id: PG, statement: "SELECT 1", analyze: "yes" }, false, "analyze"],
      ["sql_explain", { connection_id: PG, statement: "SELECT 1", params: [] }, false, "params"],
      ["sql_history", { connection_id: PG, limit: 5 }, true],
      ["sql_history", { connection_id: PG, limit: 0 }, true],
      ["sql_history", { connection_id: PG, limit: "5" }, false, "limit"]
    ]
    for (const [name, args, valid, field] of cases) {
      const definition = tools.definitions.find((d) => d.name === name)!
      const label = `${name} ${JSON.stringify(args)}`
      expect(validator.getValidator(definition.inputSchema as never)(args).valid, label).toBe(valid)
      // A key without grants: valid arguments get as far as authorization, invalid ones not even there.
      const outcome = await call(name, args, noKey)
      if (valid) {
        if (outcome._tag === "Failure") expect(outcome.error._tag, label).toBe("ScopeViolation")
      } else {
        const envelope = expectFailure(outcome)
        expect(envelope, label).toMatchObject({ status: 400, error: "validation_failed", details: { field } })
        expect(envelope.message, label).toContain(field)
        expect(outcome.audit.details.verdict).toBe("invalid")
      }
    }
    expect(expectFailure(await call("sql_list_tables", null))).toMatchObject({ status: 400, error: "validation_failed" })
    expect(expectFailure(await call("sql_list_tables", "1"))).toMatchObject({ status: 400, error: "validation_failed" })
  })

  it("answers an unknown tool with not_found", async () => {
    expect(await fail("sql_drop_everything", {})).toMatchObject({ status: 404, error: "not_found" })
  })
})

describe("sql_list_connections", () => {
  it("shows exactly the connections the key has a grant on, with its role", async () => {
    expect(await ok("sql_list_connections", {})).toEqual({
      connections: [
        { id: PG, name: "pg-main", dialect: "postgres", environment: "development", role: "read" },
        { id: MY, name: "mysql-main", dialect: "mysql", environment: "development", role: "read" },
        { id: PG_DOWN, name: "pg-down", dialect: "postgres", environment: "development", role: "read" },
        { id: MY_DOWN, name: "mysql-down", dialect: "mysql", environment: "development", role: "read" },
        { id: PG_RO, name: "pg-split", dialect: "postgres", environment: "development", role: "read" }
      ]
    })
    expect(await ok("sql_list_connections", undefined, editKey)).toEqual({
      connections: [
        { id: PG, name: "pg-main", dialect: "postgres", environment: "development", role: "edit" },
        { id: MY, name: "mysql-main", dialect: "mysql", environment: "development", role: "edit" },
        { id: PG_RO, name: "pg-split", dialect: "postgres", environment: "development", role: "edit" }
      ]
    })
    expect(await ok("sql_list_connections", {}, noKey)).toEqual({ connections: [] })
  })
})

describe("authorization", () => {
  const everyTool = (connection_id: number): ReadonlyArray<readonly [string, Record<string, unknown>]> => [
    ["sql_list_tables", { connection_id }],
    ["sql_describe", { connection_id, name: "customers" }],
    ["sql_run", { connection_id, statement: "SELECT 1" }],
    ["sql_run", { connection_id, statement: "DROP TABLE customers" }],
    ["sql_explain", { connection_id, statement: "SELECT 1", analyze: true }],
    ["sql_history", { connection_id }]
  ]

  it("gives the same 403 for a connection without a grant and one that does not exist, without contacting a database", async () => {
    const used = await driverCallsDuring(async () => {
      for (const [name, args] of everyTool(PG)) {
        const hidden = expectFailure(await call(name, { ...args, connection_id: PG_HIDDEN }))
        const missing = expectFailure(await call(name, { ...args, connection_id: 999 }))
        const noGrant = expectFailure(await call(name, args, noKey))
        for (const envelope of [hidden, missing, noGrant]) {
          expect(envelope).toMatchObject({ status: 403, error: "scope_violation" })
        }
        const strip = (e: typeof hidden, id: number) => JSON.stringify(e).replaceAll(String(id), "N")
        expect(strip(hidden, PG_HIDDEN)).toBe(strip(missing, 999))
        expect(strip(noGrant, PG)).toBe(strip(missing, 999))
      }
    })
    expect(used).toBe(0)
  })
})

describe("sql_list_tables", () => {
  it("lists tables and views of the default schema on both dialects", async () => {
    for (const id of [PG, MY]) {
      const { tables } = await ok("sql_list_tables", { connection_id: id })
      const byName = Object.fromEntries(tables.map((t: { name: string }) => [t.name, t]))
      expect(byName.customers).toMatchObject({ kind: "table" })
      expect(byName.orders.rows_estimate).toEqual(expect.any(Number))
      expect(byName.big_orders).toMatchObject({ kind: "view" })
      expect(byName.numbers.schema).toBe(id === PG ? "public" : myDb.name)
    }
  })

  it("binds the schema name as a value", async () => {
    expect((await ok("sql_list_tables", { connection_id: PG, schema: "public" })).tables.length).toBeGreaterThan(3)
    expect(await ok("sql_list_tables", { connection_id: PG, schema: "public' OR '1'='1" })).toEqual({ tables: [] })
    expect(await ok("sql_list_tables", { connection_id: MY, schema: "x' OR 1=1 -- " })).toEqual({ tables: [] })
  })
})

describe("sql_describe", () => {
  it("describes columns, keys, indexes and foreign keys on both dialects", async () => {
    for (const id of [PG, MY]) {
      const customers = await ok("sql_describe", { connection_id: id, name: "customers" })
      const columns = Object.fromEntries(customers.columns.map((c: { name: string }) => [c.name, c]))
      expect(columns.id).toMatchObject({ pk: true, nullable: false })
      expect(columns.email).toMatchObject({ unique: true, nullable: false })
      expect(columns.name).toMatchObject({ nullable: true })
      expect(columns.created_at.default).toEqual(expect.any(String))

      const orders = await ok("sql_describe", { connection_id: id, name: "orders" })
      expect(orders.name).toBe("orders")
      expect(orders.indexes).toContainEqual({ name: "orders_customer_idx", columns: ["customer_id"], unique: false })
      expect(orders.foreign_keys).toHaveLength(1)
      expect(orders.foreign_keys[0]).toMatchObject({ columns: ["customer_id"], references: { table: "customers", columns: ["id"] } })
    }
  })

  it("answers 404 for an unknown table, whatever the name looks like", async () => {
    for (const id of [PG, MY]) {
      for (const name of ["no_such_table", "customers' OR '1'='1", "customers; DROP TABLE customers"]) {
        expect(await fail("sql_describe", { connection_id: id, name })).toMatchObject({ status: 404, error: "not_found" })
      }
      expect(await fail("sql_describe", { connection_id: id, name: "customers", schema: "nope" })).toMatchObject({
        status: 404,
        error: "not_found"
      })
    }
  })
})

describe("sql_run", () => {
  it("returns rows for a read, with parameters bound as values", async () => {
    const pg = await ok("sql_run", {
      connection_id: PG,
      statement: "SELECT id, email FROM customers WHERE email = $1 OR name = $2 ORDER BY id",
      params: ["ada@example.com", "'; DROP TABLE customers; --"]
    })
    expect(pg).toMatchObject({
      kind: "rows",
      columns: [{ name: "id" }, { name: "email" }],
      rows: [{ id: "1", email: "ada@example.com" }],
      row_count: 1,
      truncated: false
    })
    expect(pg.duration_ms).toEqual(expect.any(Number))
    const my = await ok("sql_run", {
      connection_id: MY,
      statement: "SELECT id, email FROM customers WHERE email = ? OR name = ? ORDER BY id",
      params: ["ada@example.com", "'; DROP TABLE customers; --"]
    })
    expect(my).toMatchObject({ kind: "rows", rows: [{ id: "1", email: "ada@example.com" }], row_count: 1, truncated: false })
  })

  it("blocks a write for a read key with 403 sql_gate_blocked before any database is contacted", async () => {
    for (const [id, statement, kind] of [
      [PG, "DELETE FROM numbers", "DELETE"],
      [PG, "WITH d AS (DELETE FROM numbers RETURNING n) SELECT * FROM d", "DELETE"],
      [PG, "DROP TABLE numbers", "DROP TABLE"],
      [MY, "UPDATE numbers SET n = n + 100", "UPDATE"],
      [MY, "CREATE TABLE sneaky (id INT)", "CREATE TABLE"]
    ] as const) {
      const used = await driverCallsDuring(async () => {
        const outcome = await call("sql_run", { connection_id: id, statement })
        expect(expectFailure(outcome)).toMatchObject({
          status: 403,
          error: "sql_gate_blocked",
          details: { statement_kind: kind }
        })
        expect(outcome.audit.details).toMatchObject({ verdict: "blocked", statement_kind: kind, statement_hash: sha256(statement) })
      })
      expect(used).toBe(0)
    }
    expect(await pgAdmin.exec("SELECT count(*)::int AS n FROM numbers")).toEqual([{ n: 40 }])
    expect(await myAdmin.exec("SELECT COUNT(*) AS n FROM numbers")).toEqual([{ n: 40 }])
  })

  it("refuses dangerous statements for every role with 422 query_too_dangerous", async () => {
    for (const ctx of [readKey, editKey]) {
      for (const [id, statement, kind] of [
        [PG, "SELECT pg_sleep(1)", "SELECT"],
        [PG, "SET search_path TO pg_catalog", "SET"],
        [PG, "COMMIT; DROP TABLE numbers", "MULTIPLE STATEMENTS"],
        [MY, "SELECT SLEEP(1)", "SELECT"],
        [MY, "LOAD DATA INFILE '/etc/hostname' INTO TABLE numbers", "LOAD DATA"]
      ] as const) {
        const used = await driverCallsDuring(async () => {
          const outcome = await call("sql_run", { connection_id: id, statement }, ctx)
          expect(expectFailure(outcome)).toMatchObject({
            status: 422,
            error: "query_too_dangerous",
            details: { statement_kind: kind }
          })
          expect(outcome.audit.details).toMatchObject({ verdict: "refused", statement_kind: kind })
        })
        expect(used).toBe(0)
      }
    }
  })

  it("runs writes and DDL for an edit key, and they are committed", async () => {
    for (const id of [PG, MY]) {
      const table = `scratch_${id}_${randomBytes(3).toString("hex")}`
      const created = await ok("sql_run", { connection_id: id, statement: `CREATE TABLE ${table} (id INT PRIMARY KEY, label VARCHAR(20))` }, editKey)
      expect(created).toMatchObject({ kind: "affected", affected_rows: 0 })
      const inserted = await ok("sql_run", {
        connection_id: id,
        statement: `INSERT INTO ${table} (id, label) VALUES (1, 'one'), (2, 'two'), (3, 'three')`
      }, editKey)
      expect(inserted).toMatchObject({ kind: "affected", affected_rows: 3 })
      const placeholder = id === PG ? "$1" : "?"
      expect(await ok("sql_run", { connection_id: id, statement: `DELETE FROM ${table} WHERE id = ${placeholder}`, params: [2] }, editKey))
        .toMatchObject({ kind: "affected", affected_rows: 1 })
      const admin = id === PG ? pgAdmin : myAdmin
      expect((await admin.exec(`SELECT id FROM ${table} ORDER BY id`)).map((r) => Number(r.id))).toEqual([1, 3])
      expect(await ok("sql_run", { connection_id: id, statement: `DROP TABLE ${table}` }, editKey)).toMatchObject({ kind: "affected" })
    }
  })

  it("runs a read in read mode even for an edit key, on the read DSN; only writes use the edit DSN", async () => {
    const current = async (ctx: typeof readKey) =>
      (await ok("sql_run", { connection_id: PG_RO, statement: "SELECT current_user AS who" }, ctx)).rows[0].who
    expect(await current(readKey)).toBe(roRole)
    expect(await current(editKey)).toBe(roRole)
    const last = calls.log[calls.log.length - 1]!
    expect(last).toMatchObject({ method: "run", mode: "read" })
    expect(last.url).toContain(roRole)

    const table = `split_${randomBytes(3).toString("hex")}`
    await pgAdmin.exec(`CREATE TABLE ${table} (who text)`)
    const written = await ok("sql_run", {
      connection_id: PG_RO,
      statement: `INSERT INTO ${table} VALUES (current_user) RETURNING who`
    }, editKey)
    expect(written).toMatchObject({ kind: "rows", rows: [{ who: "postgres" }] })
    expect(calls.log[calls.log.length - 1]).toMatchObject({ method: "run", mode: "write", url: pgDb.url })

    // A locking read takes row locks, so the guard calls it a write: the edit key runs it in write mode.
    const edited = await call("sql_run", { connection_id: PG, statement: "SELECT * FROM numbers FOR UPDATE" }, editKey)
    expect(edited._tag).toBe("Success")
    expect(calls.log[calls.log.length - 1]).toMatchObject({ method: "run", mode: "write" })
    await pgAdmin.exec(`DROP TABLE ${table}`)
  })

  it("caps rows: max_rows defaults and clamps to the configured cap, 0 is one row, truncation is reported", async () => {
    for (const id of [PG, MY]) {
      const statement = "SELECT n FROM numbers ORDER BY n"
      const ten = await ok("sql_run", { connection_id: id, statement, max_rows: 10 })
      expect(ten).toMatchObject({ kind: "rows", row_count: 10, truncated: true })
      expect(ten.rows.map((r: { n: number }) => Number(r.n))).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
      const defaulted = await call("sql_run", { connection_id: id, statement })
      expect(await expectSuccess(runtime, defaulted)).toMatchObject({ row_count: MAX_ROWS_CAP, truncated: true })
      expect(defaulted.audit.details).toMatchObject({ max_rows: MAX_ROWS_CAP, timeout_ms: TIMEOUT_CAP })
      expect(await ok("sql_run", { connection_id: id, statement, max_rows: 10 ** 9 })).toMatchObject({ row_count: MAX_ROWS_CAP, truncated: true })
      expect(await ok("sql_run", { connection_id: id, statement, max_rows: 0 })).toMatchObject({ row_count: 1, truncated: true })
      expect(await ok("sql_run", { connection_id: id, statement, max_rows: -3 })).toMatchObject({ row_count: 1, truncated: true })
      expect(await ok("sql_run", { connection_id: id, statement: `${statement} LIMIT ${MAX_ROWS_CAP}` })).toMatchObject({
        row_count: MAX_ROWS_CAP,
        truncated: false
      })
      const clamped = await call("sql_run", { connection_id: id, statement: "SELECT 1 AS one", timeout_ms: 0 })
      expect(clamped.audit.details).toMatchObject({ timeout_ms: 100 })
    }
  })

  it("returns bigint and numeric as strings, binary as base64, JSON as values, timestamps as ISO 8601", async () => {
    const pg = await ok("sql_run", {
      connection_id: PG,
      statement: `SELECT o.big, o.total, o.payload, o.meta, o.placed_at, c.created_at, $1::bigint + 1 AS bumped
        FROM orders o JOIN customers c ON c.id = o.customer_id`,
      params: ["9223372036854775806"]
    })
    expect(pg.rows).toEqual([{
      big: "9223372036854775807",
      total: "12345678901234.123456",
      payload: "3q2+7w==",
      meta: { a: [1, 2], b: null },
      placed_at: "2026-01-02T03:04:05.5",
      created_at: "2026-01-02T03:04:05.123456Z",
      bumped: "9223372036854775807"
    }])
    const my = await ok("sql_run", {
      connection_id: MY,
      statement: `SELECT o.big, o.total, o.payload, o.meta, o.placed_at, c.created_at, CAST(? AS SIGNED) + 1 AS bumped
        FROM orders o JOIN customers c ON c.id = o.customer_id`,
      params: ["9223372036854775806"]
    })
    const row = my.rows[0]
    expect(row).toMatchObject({
      big: "9223372036854775807",
      total: "12345678901234.123456",
      payload: "3q2+7w==",
      bumped: "9223372036854775807"
    })
    // MariaDB's JSON is LONGTEXT with a check: it arrives as text unless the driver parses it.
    expect(typeof row.meta === "string" ? JSON.parse(row.meta) : row.meta).toEqual({ a: [1, 2], b: null })
    expect(row.placed_at).toMatch(/^2026-01-02T03:04:05\.5/)
    expect(row.created_at).toMatch(/^2026-01-02T03:04:05\.123456/)
  })

  it("maps a statement the database refuses to 422 validation_failed with its code, never a DSN or password", async () => {
    const pg = await call("sql_run", { connection_id: PG, statement: "SELECT * FROM no_such_table" })
    expect(expectFailure(pg)).toMatchObject({
      status: 422,
      error: "validation_failed",
      details: { code: "42P01", database_message: expect.stringContaining("no_such_table") }
    })
    expect(pg.audit.details).toMatchObject({ verdict: "read", database_code: "42P01" })
    const my = await fail("sql_run", { connection_id: MY, statement: "SELECT * FROM no_such_table" })
    expect(my).toMatchObject({ status: 422, error: "validation_failed", details: { code: "1146", sqlstate: "42S02" } })
    // The read DSN of connection 6 may only SELECT: the engine's own permission check answers.
    const denied = await fail("sql_run", { connection_id: PG_RO, statement: "SELECT * FROM pg_authid" }, editKey)
    expect(denied).toMatchObject({ status: 422, error: "validation_failed", details: { code: "42501" } })
    for (const envelope of [expectFailure(pg), my, denied]) {
      expect(JSON.stringify(envelope)).not.toMatch(/SECRET|postgres:\/\/|mysql:\/\//)
    }
  })

  it("maps an unreachable database to 502 connection_unreachable without the DSN or password", async () => {
    for (const id of [PG_DOWN, MY_DOWN]) {
      for (const [name, args] of [
        ["sql_run", { connection_id: id, statement: "SELECT 1" }],
        ["sql_list_tables", { connection_id: id }],
        ["sql_describe", { connection_id: id, name: "x" }],
        ["sql_explain", { connection_id: id, statement: "SELECT 1" }]
      ] as const) {
        const envelope = await fail(name, args)
        expect(envelope, `${name} on ${id}`).toMatchObject({ status: 502, error: "connection_unreachable" })
        expect(JSON.stringify(envelope)).not.toMatch(/SECRET|postgres:\/\/|mysql:\/\//)
      }
    }
  })

  it("cancels a statement at its deadline with 504, and the server-side query is gone", async () => {
    const pgActive = () =>
      pgAdmin.exec(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid()"
      )
    const myActive = () =>
      myAdmin.exec(
        "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND COMMAND = 'Query' AND ID <> CONNECTION_ID()"
      )
    for (const [id, statement, active] of [
      [PG, "SELECT count(*) FROM generate_series(1, 5000000000) AS g", pgActive],
      [MY, "SELECT COUNT(*) FROM nums a, nums b, nums c WHERE a.n + b.n + c.n > 0", myActive]
    ] as const) {
      const started = Date.now()
      const outcome = await call("sql_run", { connection_id: id, statement, timeout_ms: 300 })
      const elapsed = Date.now() - started
      expect(expectFailure(outcome)).toMatchObject({ status: 504, error: "upstream_timeout" })
      // Ended by the 300 ms timeout, not by the statement (which runs for minutes): 10 s is generous at load 10.
      expect(elapsed).toBeLessThan(10_000)
      // A cancelled backend may take a moment to report idle; it must not still be running a second later.
      let remaining = await active()
      for (let i = 0; i < 20 && Number(remaining[0]?.n) !== 0; i++) {
        await new Promise((resolve) => setTimeout(resolve, 50))
        remaining = await active()
      }
      expect(remaining).toEqual([{ n: 0 }])
      // The pool is healthy afterwards.
      expect(await ok("sql_run", { connection_id: id, statement: "SELECT 1 AS one" })).toMatchObject({ row_count: 1 })
    }
  })
})

describe("sql_explain", () => {
  it("gives a plan for a read, and for a write without analyze even to a read key", async () => {
    for (const [id, statement, writes] of [
      [PG, "SELECT * FROM customers WHERE id = 1", false],
      [PG, "DELETE FROM numbers WHERE n = 1", true],
      [MY, "SELECT * FROM customers WHERE id = 1", false]
    ] as const) {
      for (const ctx of [readKey, editKey]) {
        const outcome = await call("sql_explain", { connection_id: id, statement }, ctx)
        const { plan } = await expectSuccess(runtime, outcome)
        expect(plan).toBeTruthy()
        expect(outcome.audit.details).toMatchObject({ verdict: "read", statement_kind: "EXPLAIN" })
        // A write is planned where it would run when the key may run it; otherwise in read mode.
        const mode = writes && ctx === editKey ? "write" : "read"
        expect(calls.log[calls.log.length - 1]).toMatchObject({ method: "explain", mode })
      }
    }
    expect(await pgAdmin.exec("SELECT count(*)::int AS n FROM numbers")).toEqual([{ n: 40 }])
  })

  it("plans a write for an edit key where the write would run, and leaves a read key the engine's refusal", async () => {
    // MariaDB refuses EXPLAIN DELETE inside START TRANSACTION READ ONLY, and Postgres checks the
    // DELETE privilege when planning, which a SELECT-only read DSN lacks.
    const mariadb = await call("sql_explain", { connection_id: MY, statement: "DELETE FROM numbers WHERE n = 1" }, readKey)
    expect(expectFailure(mariadb)).toMatchObject({ status: 422, error: "validation_failed", details: { code: "1792" } })
    expect(calls.log[calls.log.length - 1]).toMatchObject({ method: "explain", mode: "read" })
    const split = await call("sql_explain", { connection_id: PG_RO, statement: "DELETE FROM numbers WHERE n = 1" }, readKey)
    expect(expectFailure(split)).toMatchObject({ status: 422, error: "validation_failed", details: { code: "42501" } })
    expect(calls.log[calls.log.length - 1]!.url).toContain(roRole)

    for (const id of [MY, PG_RO]) {
      const planned = await call("sql_explain", { connection_id: id, statement: "DELETE FROM numbers WHERE n = 1" }, editKey)
      const { plan } = await expectSuccess(runtime, planned)
      expect(plan).toBeTruthy()
      expect(calls.log[calls.log.length - 1]).toMatchObject({ method: "explain", mode: "write" })
      expect(calls.log[calls.log.length - 1]!.url).not.toContain(roRole)
    }
    expect(await myAdmin.exec("SELECT COUNT(*) AS n FROM numbers")).toEqual([{ n: 40 }])
    expect(await pgAdmin.exec("SELECT count(*)::int AS n FROM numbers")).toEqual([{ n: 40 }])
  })

  it("runs analyze of a read for a read key", async () => {
    for (const id of [PG, MY]) {
      const { plan } = await ok("sql_explain", { connection_id: id, statement: "SELECT count(*) FROM numbers", analyze: true })
      expect(JSON.stringify(plan)).toMatch(/[Aa]ctual|r_rows|rows/)
    }
  })

  it("refuses analyze of a write for a read key with 422, and rolls it back for an edit key", async () => {
    for (const [id, admin] of [[PG, () => pgAdmin], [MY, () => myAdmin]] as const) {
      const statement = "DELETE FROM numbers WHERE n > 0"
      const used = await driverCallsDuring(async () => {
        const outcome = await call("sql_explain", { connection_id: id, statement, analyze: true })
        expect(expectFailure(outcome)).toMatchObject({
          status: 422,
          error: "query_too_dangerous",
          details: { statement_kind: "EXPLAIN ANALYZE", explained_kind: "DELETE" }
        })
        expect(outcome.audit.details).toMatchObject({ verdict: "blocked" })
      })
      expect(used).toBe(0)
      const analyzed = await call("sql_explain", { connection_id: id, statement, analyze: true }, editKey)
      expect((await expectSuccess(runtime, analyzed)).plan).toBeTruthy()
      expect(calls.log[calls.log.length - 1]).toMatchObject({ method: "explain", mode: "write" })
      expect((await admin().exec("SELECT COUNT(*) AS n FROM numbers")).map((r) => Number(r.n))).toEqual([40])
    }
  })

  it("refuses what the guard refuses, explained or not", async () => {
    for (const [id, statement] of [[PG, "SELECT pg_sleep(5)"], [MY, "SELECT SLEEP(5)"], [PG, "SELECT 1; DROP TABLE numbers"]] as const) {
      for (const analyze of [false, true]) {
        expect(await fail("sql_explain", { connection_id: id, statement, analyze }, editKey)).toMatchObject({
          status: 422,
          error: "query_too_dangerous",
          details: { statement_kind: analyze ? "EXPLAIN ANALYZE" : "EXPLAIN" }
        })
      }
    }
  })
})

describe("sql_history", () => {
  it("lists this key's statements on that connection, newest first, with the limit clamped", async () => {
    const own = context(`key_hist_${randomBytes(3).toString("hex")}`, { [PG]: "edit", [MY]: "read" })
    const other = context(`key_hist_other_${randomBytes(3).toString("hex")}`, { [PG]: "read" })
    const statements = ["SELECT 1 AS a", "SELECT n FROM numbers WHERE n <= 3", "UPDATE numbers SET n = n WHERE n = 1"]
    for (const statement of statements) await ok("sql_run", { connection_id: PG, statement }, own)
    await ok("sql_run", { connection_id: PG, statement: "SELECT 'other key' AS x" }, other)
    await ok("sql_run", { connection_id: MY, statement: "SELECT 'other connection' AS x" }, own)
    // Refused, blocked and failed statements never ran to completion: not in the history.
    await fail("sql_run", { connection_id: PG, statement: "SELECT pg_sleep(1)" }, own)
    await fail("sql_run", { connection_id: PG, statement: "SELECT * FROM no_such_table" }, own)
    await fail("sql_run", { connection_id: PG, statement: "DELETE FROM numbers" }, other)

    const { items } = await ok("sql_history", { connection_id: PG }, own)
    expect(items.map((i: { statement: string }) => i.statement)).toEqual([...statements].reverse())
    expect(items[0]).toMatchObject({ kind: "affected", row_count: 1 })
    expect(items[1]).toMatchObject({ kind: "rows", row_count: 3 })
    for (const item of items) {
      expect(new Date(item.ts).toISOString()).toBe(item.ts)
      expect(item.duration_ms).toEqual(expect.any(Number))
    }
    expect(Date.parse(items[0].ts)).toBeGreaterThanOrEqual(Date.parse(items[2].ts))

    expect((await ok("sql_history", { connection_id: PG, limit: 2 }, own)).items).toHaveLength(2)
    expect((await ok("sql_history", { connection_id: PG, limit: 0 }, own)).items).toHaveLength(1)
    expect((await ok("sql_history", { connection_id: PG, limit: 100_000 }, own)).items).toHaveLength(3)
    expect((await ok("sql_history", { connection_id: PG }, other)).items.map((i: { statement: string }) => i.statement))
      .toEqual(["SELECT 'other key' AS x"])
    expect((await ok("sql_history", { connection_id: MY }, own)).items).toHaveLength(1)
  })
})

describe("audit", () => {
  it("keeps verdicts, kinds, counts and the statement's hash, never its text", async () => {
    const marker = `marker_${randomBytes(6).toString("hex")}`
    const cases = [
      { ctx: readKey, statement: `SELECT '${marker}' AS m`, verdict: "read" },
      { ctx: readKey, statement: `DELETE FROM numbers WHERE n = -1 /* ${marker} */`, verdict: "blocked" },
      { ctx: editKey, statement: `DELETE FROM numbers WHERE n = -1 /* ${marker} */`, verdict: "write" },
      { ctx: editKey, statement: `SELECT pg_sleep(0) AS ${marker}`, verdict: "refused" },
      { ctx: readKey, statement: `SELECT * FROM ${marker}`, verdict: "read" }
    ]
    for (const c of cases) {
      for (const name of ["sql_run", "sql_explain"]) {
        const outcome = await call(name, { connection_id: PG, statement: c.statement }, c.ctx)
        expect(outcome.audit).toMatchObject({ tool: name, connection_id: PG })
        expect(outcome.audit.details.statement_hash).toBe(sha256(c.statement))
        expect(JSON.stringify(outcome.audit)).not.toContain(marker)
        if (name === "sql_run") expect(outcome.audit.details.verdict).toBe(c.verdict)
      }
    }
    const read = await call("sql_run", { connection_id: PG, statement: "SELECT n FROM numbers WHERE n <= 2" })
    expect(read.audit.details).toMatchObject({ verdict: "read", statement_kind: "SELECT", row_count: 2, truncated: false, role: "read" })
    expect(read.audit.details.duration_ms).toEqual(expect.any(Number))
    const denied = await call("sql_run", { connection_id: PG, statement: "SELECT 1" }, noKey)
    expect(denied.audit).toEqual({ tool: "sql_run", connection_id: PG, details: { verdict: "denied" } })
    const listed = await call("sql_list_connections", {})
    expect(listed.audit).toEqual({ tool: "sql_list_connections", connection_id: null, details: { count: 5 } })
  })
})

describe("the service", () => {
  it("opens one pool per (connection, role) on first use and closes them with the layer", async () => {
    const backends = async () =>
      Number((await pgAdmin.exec(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'modelgate'"
      ))[0]!.n)
    const before = await backends()
    const config = makeConfig([
      { id: PG, name: "pools", dialect: "postgres", url: pgDb.url, read_url: withPassword(pgDb.url, roRole, RO_PASSWORD) }
    ])
    const fresh = makeToolsRuntime(config, countingDrivers().layer)
    try {
      await fresh.runPromise(SqlTools.use(Effect.succeed))
      expect(await backends()).toBe(before)
      for (let i = 0; i < 3; i++) await expectSuccess(fresh, await callTool(fresh, "sql_run", { connection_id: PG, statement: "SELECT 1 AS one" }, editKey))
      expect(await backends()).toBe(before + 1)
      await expectSuccess(fresh, await callTool(fresh, "sql_run", { connection_id: PG, statement: "UPDATE numbers SET n = n WHERE n = 1" }, editKey))
      expect(await backends()).toBe(before + 2)
    } finally {
      await fresh.dispose()
    }
    let after = await backends()
    for (let i = 0; i < 20 && after !== before; i++) {
      await new Promise((resolve) => setTimeout(resolve, 50))
      after = await backends()
    }
    expect(after).toBe(before)
  })

  it("never fails: a defect in a driver becomes a 500 internal_error outcome, with the audit kept", async () => {
    const broken = Layer.succeed(
      SqlDrivers,
      SqlDrivers.of({
        make: () =>
          Effect.succeed({
            dialect: "postgres",
            run: () => Effect.die(new Error("driver bug")),
            explain: () => Effect.die(new Error("driver bug")),
            listTables: () => Effect.die(new Error("driver bug")),
            describe: () => Effect.die(new Error("driver bug")),
            serverInfo: Effect.die(new Error("driver bug")),
            routines: () => Effect.die(new Error("driver bug"))
          })
      })
    )
    const config = makeConfig([{ id: PG, name: "broken", dialect: "postgres", url: "postgres://u:p@127.0.0.1:1/x" }])
    const brokenRuntime = makeToolsRuntime(config, broken)
    try {
      const statement = "SELECT 1 AS one"
      const outcome = await callTool(brokenRuntime, "sql_run", { connection_id: PG, statement }, readKey)
      expect(expectFailure(outcome)).toMatchObject({ status: 500, error: "internal_error" })
      expect(outcome.audit).toMatchObject({
        tool: "sql_run",
        connection_id: PG,
        details: { verdict: "read", statement_hash: sha256(statement) }
      })
      const listed = await callTool(brokenRuntime, "sql_list_tables", { connection_id: PG }, readKey)
      expect(expectFailure(listed)).toMatchObject({ status: 500, error: "internal_error" })
    } finally {
      await brokenRuntime.dispose()
    }
  })
})
