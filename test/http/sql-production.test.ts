/**
 * Issue 36: a connection marked `environment: production` refuses schema changes for every key,
 * edit included (422 query_too_dangerous with the statement's kind), however the statement is
 * written, while data changes still run for edit keys. Through the real server, on the
 * machine's Postgres and MariaDB; the schema is checked afterwards.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createConnection } from "mysql2/promise"
import { createMysqlDatabase, createPostgresDatabase, type TempDatabase } from "../support/databases.ts"
import { Client as PgClient } from "../support/pg-admin.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

const VERSION = "2026-07-28"
const envelope = {
  "io.modelcontextprotocol/protocolVersion": VERSION,
  "io.modelcontextprotocol/clientInfo": { name: "raw", version: "1" },
  "io.modelcontextprotocol/clientCapabilities": {}
}
const callTool = async (url: string, key: string, name: string, args: Record<string, unknown>) => {
  const response = await fetch(`${url}/v1/mcp`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${key}`,
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      "mcp-protocol-version": VERSION,
      "mcp-method": "tools/call",
      "mcp-name": name
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name, arguments: args, _meta: envelope } })
  })
  expect(response.status).toBe(200)
  const result = ((await response.json()) as { result: { isError?: boolean; structuredContent: any } }).result
  return { isError: result.isError === true, body: result.structuredContent }
}

const PG = 1
const MY = 2
const PG_DEV = 3

/** [statement, the statement_kind of the refusal] */
const PG_REFUSED: ReadonlyArray<readonly [string, string]> = [
  ["DROP TABLE items", "DROP TABLE"],
  ["/* tidy up */ dRoP   tAbLe \"items\"", "DROP TABLE"],
  ["-- add a column\nALTER TABLE items ADD COLUMN z int", "ALTER TABLE"],
  ["ALTER TABLE items RENAME TO renamed", "ALTER TABLE"],
  ["TRUNCATE items", "TRUNCATE"],
  ["TrUnCaTe TABLE public.items CASCADE", "TRUNCATE"],
  ["COMMENT ON TABLE items IS 'x'", "COMMENT"],
  ["CREATE TABLE t2 (a int)", "CREATE TABLE"],
  ["CREATE TEMP TABLE t3 (a int)", "CREATE TABLE"],
  ["CREATE INDEX ON items (name)", "CREATE INDEX"],
  ["CREATE TABLE t4 AS SELECT 1 AS a", "CREATE TABLE AS"],
  ["SELECT * INTO copy FROM items", "SELECT INTO"],
  ["WITH d AS (DELETE FROM items WHERE false RETURNING *) SELECT * INTO copy2 FROM d", "SELECT INTO"],
  ["CREATE FUNCTION f() RETURNS int AS 'SELECT 1' LANGUAGE sql", "CREATE FUNCTION"],
  ["CALL some_procedure()", "CALL"],
  ["VACUUM items", "VACUUM"],
  ["REINDEX TABLE items", "REINDEX"],
  ["DROP SCHEMA public CASCADE", "DROP SCHEMA"],
  ["GRANT SELECT ON items TO public", "GRANT"],
  ["REVOKE SELECT ON items FROM public", "REVOKE"],
  ["DO $$ BEGIN EXECUTE 'DROP TABLE items'; END $$", "DO"],
  ["PREPARE p AS DROP TABLE items", "PREPARE"],
  ["EXECUTE p", "EXECUTE"],
  ["SELECT 1; DROP TABLE items", "MULTIPLE STATEMENTS"],
  // A function that runs DDL through dynamic SQL: the catalogue says volatile, which on production is refused.
  ["SELECT drop_items()", "SELECT"],
  ["INSERT INTO items (name) SELECT drop_items()::text", "INSERT"]
]

const MY_REFUSED: ReadonlyArray<readonly [string, string]> = [
  ["DROP TABLE items", "DROP TABLE"],
  ["/* tidy up */ dRoP tAbLe `items`", "DROP TABLE"],
  ["# add a column\nALTER TABLE items ADD COLUMN z int", "ALTER TABLE"],
  ["ALTER TABLE items COMMENT 'x'", "ALTER TABLE"],
  ["RENAME TABLE items TO renamed", "RENAME TABLE"],
  ["TRUNCATE items", "TRUNCATE"],
  ["CREATE TABLE t2 (a int)", "CREATE TABLE"],
  ["CREATE TEMPORARY TABLE t3 (a int)", "CREATE TABLE"],
  ["CREATE TABLE t4 AS SELECT 1 AS a", "CREATE TABLE"],
  ["CREATE INDEX i ON items (name)", "CREATE INDEX"],
  ["CREATE VIEW v AS SELECT 1", "CREATE VIEW"],
  ["OPTIMIZE TABLE items", "OPTIMIZE TABLE"],
  ["CALL drop_items()", "CALL"],
  ["PREPARE s FROM 'DROP TABLE items'", "PREPARE"],
  ["EXECUTE s", "EXECUTE"],
  ["SELECT 1; DROP TABLE items", "MULTIPLE STATEMENTS"],
  ["/*!50000 DROP TABLE items */", "UNKNOWN"],
  ["GRANT SELECT ON items TO 'x'@'%'", "GRANT"]
]

describe("production connections", () => {
  let pg: TempDatabase
  let maria: TempDatabase
  let gw: TestGateway
  let edit: string
  let read: string

  beforeAll(async () => {
    pg = await createPostgresDatabase("mg_prod_pg")
    maria = await createMysqlDatabase("mg_prod_my")
    const admin = new PgClient(pg.url)
    await admin.query("CREATE TABLE items (id serial PRIMARY KEY, name text NOT NULL)")
    await admin.query("INSERT INTO items (name) VALUES ('a'), ('b')")
    await admin.query("CREATE FUNCTION drop_items() RETURNS int LANGUAGE plpgsql AS $$ BEGIN EXECUTE 'DROP TABLE items'; RETURN 1; END $$")
    const my = await createConnection(maria.url)
    await my.query("CREATE TABLE items (id int AUTO_INCREMENT PRIMARY KEY, name varchar(20) NOT NULL)")
    await my.query("INSERT INTO items (name) VALUES ('x'), ('y')")
    await my.query("CREATE PROCEDURE drop_items() BEGIN DROP TABLE items; END")
    await my.end()
    gw = await startGateway(testConfig({
      limits: { requests_per_minute: 1000 },
      workspace: { credits: 100_000 },
      connections: [
        { id: PG, name: "pg-prod", dialect: "postgres", url: pg.url, environment: "production" },
        { id: MY, name: "maria-prod", dialect: "mysql", url: maria.url, environment: "production" },
        { id: PG_DEV, name: "pg-dev", dialect: "postgres", url: pg.url }
      ]
    }))
    const editKey = await gw.createKey({ name: "editor", tools_enabled: true })
    const readKey = await gw.createKey({ name: "reader", tools_enabled: true })
    edit = editKey.key
    read = readKey.key
    for (const id of [PG, MY, PG_DEV]) {
      expect((await gw.admin("PUT", `/api-keys/${editKey.id}/connections/${id}`, { role: "edit" })).status).toBe(200)
      expect((await gw.admin("PUT", `/api-keys/${readKey.id}/connections/${id}`, { role: "read" })).status).toBe(200)
    }
  })

  afterAll(async () => {
    await gw?.close()
    await pg?.drop()
    await maria?.drop()
  })

  it("shows each connection's environment", async () => {
    const listed = await callTool(gw.url, edit, "sql_list_connections", {})
    expect(listed.body.connections).toEqual([
      { id: PG, name: "pg-prod", dialect: "postgres", environment: "production", role: "edit" },
      { id: MY, name: "maria-prod", dialect: "mysql", environment: "production", role: "edit" },
      { id: PG_DEV, name: "pg-dev", dialect: "postgres", environment: "development", role: "edit" }
    ])
  })

  it("refuses every schema change on Postgres to an edit key, however it is written", async () => {
    for (const [statement, kind] of PG_REFUSED) {
      const answer = await callTool(gw.url, edit, "sql_run", { connection_id: PG, statement })
      expect({ statement, ...answer.body }).toMatchObject({ statement, status: 422, error: "query_too_dangerous", details: { statement_kind: kind } })
    }
    const admin = new PgClient(pg.url)
    const columns = await admin.query("SELECT column_name FROM information_schema.columns WHERE table_name = 'items' ORDER BY ordinal_position")
    expect(columns.map((r: any) => r.column_name)).toEqual(["id", "name"])
    const tables = await admin.query("SELECT count(*)::int AS n FROM pg_tables WHERE schemaname = 'public'")
    expect((tables[0] as any).n).toBe(1)
  })

  it("refuses every schema change on MariaDB to an edit key, however it is written", async () => {
    for (const [statement, kind] of MY_REFUSED) {
      const answer = await callTool(gw.url, edit, "sql_run", { connection_id: MY, statement })
      expect({ statement, ...answer.body }).toMatchObject({ statement, status: 422, error: "query_too_dangerous", details: { statement_kind: kind } })
    }
    const my = await createConnection(maria.url)
    const [tables] = await my.query("SHOW TABLES")
    const [columns] = await my.query("SHOW COLUMNS FROM items")
    await my.end()
    expect((tables as Array<unknown>).length).toBe(1)
    expect((columns as Array<{ Field: string }>).map((c) => c.Field)).toEqual(["id", "name"])
  })

  it("refuses a schema change to a read key with the same 422, not a role error", async () => {
    const answer = await callTool(gw.url, read, "sql_run", { connection_id: PG, statement: "DROP TABLE items" })
    expect(answer.body).toMatchObject({ status: 422, error: "query_too_dangerous", details: { statement_kind: "DROP TABLE" } })
  })

  it("runs data changes and reads for an edit key", async () => {
    const pgWrites = [
      "INSERT INTO items (name) VALUES ('c')",
      "UPDATE items SET name = 'C' WHERE name = 'c'",
      "WITH moved AS (DELETE FROM items WHERE name = 'C' RETURNING name) INSERT INTO items (name) SELECT name || '2' FROM moved",
      "MERGE INTO items USING (VALUES ('C2')) AS v(name) ON items.name = v.name WHEN MATCHED THEN DELETE",
      "SELECT * FROM items FOR UPDATE"
    ]
    for (const statement of pgWrites) {
      const answer = await callTool(gw.url, edit, "sql_run", { connection_id: PG, statement })
      expect({ statement, isError: answer.isError }).toEqual({ statement, isError: false })
    }
    for (const statement of ["INSERT INTO items (name) VALUES ('z')", "UPDATE items SET name = 'Z' WHERE name = 'z'", "REPLACE INTO items (id, name) VALUES (100, 'r')", "DELETE FROM items WHERE name = 'Z'"]) {
      const answer = await callTool(gw.url, edit, "sql_run", { connection_id: MY, statement })
      expect({ statement, isError: answer.isError }).toEqual({ statement, isError: false })
    }
    const rows = await callTool(gw.url, read, "sql_run", { connection_id: PG, statement: "SELECT name FROM items ORDER BY id" })
    expect(rows.body.rows).toEqual([{ name: "a" }, { name: "b" }])
  })

  it("refuses EXPLAIN ANALYZE of a schema change, and allows its plain plan", async () => {
    const analyzed = await callTool(gw.url, edit, "sql_explain", { connection_id: PG, statement: "CREATE TABLE t5 AS SELECT 1 AS a", analyze: true })
    expect(analyzed.body).toMatchObject({ status: 422, error: "query_too_dangerous", details: { statement_kind: "EXPLAIN ANALYZE" } })
    const plain = await callTool(gw.url, edit, "sql_explain", { connection_id: PG, statement: "CREATE TABLE t5 AS SELECT 1 AS a" })
    expect(plain.isError).toBe(false)
    const dml = await callTool(gw.url, edit, "sql_explain", { connection_id: PG, statement: "INSERT INTO items (name) VALUES ('e')", analyze: true })
    expect(dml.isError).toBe(false)
    const admin = new PgClient(pg.url)
    expect(((await admin.query("SELECT count(*)::int AS n FROM pg_tables WHERE tablename = 't5'"))[0] as any).n).toBe(0)
  })

  it("leaves a development connection's schema changes to the edit role", async () => {
    const created = await callTool(gw.url, edit, "sql_run", { connection_id: PG_DEV, statement: "CREATE TABLE dev_only (a int)" })
    expect(created.isError).toBe(false)
    const dropped = await callTool(gw.url, edit, "sql_run", { connection_id: PG_DEV, statement: "DROP TABLE dev_only" })
    expect(dropped.isError).toBe(false)
  })
})
