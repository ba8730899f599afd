/**
 * /v1/mcp through the real server with the official MCP SDK client: sessions (initialize, use,
 * expiry, foreign key, DELETE, a second replica), tools_disabled, transport rules, and the MCP
 * Inspector CLI. Tool behaviour in depth is tested in test/services/sql/tools.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { spawn } from "node:child_process"
import { join } from "node:path"
import { Client as PgClient } from "../support/pg-admin.ts"
import { createPostgresDatabase, type TempDatabase } from "../support/databases.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { childEnv, NODE, ROOT } from "../support/process.ts"

const connect = async (url: string, key: string, sessionId?: string) => {
  const transport = new StreamableHTTPClientTransport(new URL(`${url}/v1/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${key}` } },
    ...(sessionId === undefined ? {} : { sessionId })
  })
  const client = new Client({ name: "modelgate-test", version: "1.0.0" })
  await client.connect(transport)
  return { client, transport }
}

const rpc = (url: string, key: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${url}/v1/mcp`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${key}`,
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      ...headers
    },
    body: JSON.stringify(body)
  })

const initializeBody = {
  jsonrpc: "2.0",
  id: 1,
  method: "initialize",
  params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "1" } }
}

describe("/v1/mcp", () => {
  let db: TempDatabase
  let store: TempDatabase
  let gw: TestGateway
  let replica: TestGateway
  let key: string
  let keyId: string

  beforeAll(async () => {
    db = await createPostgresDatabase("mg_mcp_data")
    store = await createPostgresDatabase("mg_mcp_store")
    const admin = new PgClient(db.url)
    await admin.query("CREATE TABLE items (id serial PRIMARY KEY, name text NOT NULL)")
    await admin.query("INSERT INTO items (name) VALUES ('a'), ('b')")
    const config = testConfig({
      store: store.url,
      connections: [{ id: 1, name: "analytics", dialect: "postgres", url: db.url }],
      mcp: { session_ttl_seconds: 60 }
    })
    gw = await startGateway(config)
    replica = await startGateway(config)
    const created = (await (await gw.admin("POST", "/api-keys", {
      name: "agent",
      tools_enabled: true,
      connections: [{ connection_id: 1, role: "read" }]
    })).json()) as { key: string; id: string; connections: unknown }
    expect(created.connections).toEqual([{ connection_id: 1, role: "read" }])
    key = created.key
    keyId = created.id
  })
  afterAll(async () => {
    await gw?.close()
    await replica?.close()
    await db?.drop()
    await store?.drop()
  })

  it("lists and runs the tools with the official SDK client", async () => {
    const { client, transport } = await connect(gw.url, key)
    expect(transport.sessionId).toMatch(/^mcp_[0-9a-f]{48}$/)
    const { tools } = await client.listTools()
    expect(tools.map((t) => t.name).sort()).toEqual(
      ["sql_describe", "sql_explain", "sql_history", "sql_list_connections", "sql_list_tables", "sql_run"]
    )
    for (const tool of tools) {
      expect(tool.inputSchema.type).toBe("object")
      expect(tool.outputSchema?.type).toBe("object")
    }
    const connections = await client.callTool({ name: "sql_list_connections", arguments: {} })
    expect(connections.structuredContent).toEqual({ connections: [{ id: 1, name: "analytics", dialect: "postgres", environment: "development", role: "read" }] })
    const run = await client.callTool({ name: "sql_run", arguments: { connection_id: 1, statement: "SELECT name FROM items ORDER BY id" } })
    expect(run.isError).toBeFalsy()
    expect(run.structuredContent).toMatchObject({ kind: "rows", rows: [{ name: "a" }, { name: "b" }], row_count: 2 })
    expect(JSON.parse((run.content as Array<{ text: string }>)[0]!.text)).toEqual(run.structuredContent)

    const blocked = await client.callTool({ name: "sql_run", arguments: { connection_id: 1, statement: "DELETE FROM items" } })
    expect(blocked.isError).toBe(true)
    expect(blocked.structuredContent).toMatchObject({ status: 403, error: "sql_gate_blocked" })
    const rows = await new PgClient(db.url).query<{ n: string }>("SELECT count(*)::text AS n FROM items")
    expect(rows[0]!.n).toBe("2")
    await client.close()
  })

  it("audits every MCP request with tool, connection and verdict, never the statement text", async () => {
    const { client } = await connect(gw.url, key)
    await client.callTool({ name: "sql_run", arguments: { connection_id: 1, statement: "SELECT 'secret-literal-42' AS s" } })
    await client.close()
    const records = ((await (await gw.admin("GET", `/audit?key_id=${keyId}&limit=100`)).json()) as { data: Array<any> }).data
    const call = records.find((r) => r.tool === "sql_run")
    expect(call).toMatchObject({ endpoint: "/v1/mcp", connection_id: 1, status: 200 })
    expect(call.details.statement_hash).toMatch(/^[0-9a-f]{64}$/)
    expect(call.details.verdict).toBeDefined()
    expect(JSON.stringify(records)).not.toContain("secret-literal-42")
  })

  it("serves a session opened on one replica from another", async () => {
    const { client, transport } = await connect(gw.url, key)
    const sessionId = transport.sessionId!
    const other = await rpc(replica.url, key, { jsonrpc: "2.0", id: 2, method: "tools/list", params: {} }, {
      "mcp-session-id": sessionId,
      "mcp-protocol-version": "2025-11-25"
    })
    expect(other.status).toBe(200)
    expect(((await other.json()) as any).result.tools).toHaveLength(6)
    await client.close()
  })

  it("refuses an unknown, foreign or deleted session with 404 session_expired", async () => {
    const unknown = await rpc(gw.url, key, { jsonrpc: "2.0", id: 2, method: "tools/list" }, { "mcp-session-id": "mcp_nope" })
    expect(unknown.status).toBe(404)
    expect(await unknown.json()).toMatchObject({ status: 404, error: "session_expired" })

    const { transport } = await connect(gw.url, key)
    const sessionId = transport.sessionId!
    const other = (await (await gw.admin("POST", "/api-keys", { name: "other", tools_enabled: true })).json()) as { key: string }
    const foreign = await rpc(gw.url, other.key, { jsonrpc: "2.0", id: 2, method: "tools/list" }, { "mcp-session-id": sessionId })
    expect(foreign.status).toBe(404)
    expect(((await foreign.json()) as any).error).toBe("session_expired")

    await transport.terminateSession()
    const after = await rpc(gw.url, key, { jsonrpc: "2.0", id: 3, method: "tools/list" }, { "mcp-session-id": sessionId })
    expect(after.status).toBe(404)
  })

  it("lets another key's session id touch nothing: no TTL extension, no DELETE, the owner keeps it", async () => {
    const { transport } = await connect(gw.url, key)
    const sessionId = transport.sessionId!
    const expiresAt = async () =>
      (await new PgClient(store.url).query<{ expires_at: string }>("SELECT expires_at FROM mcp_sessions WHERE id = $1", [sessionId]))[0]?.expires_at
    const before = await expiresAt()
    expect(before).toBeDefined()
    const other = (await (await gw.admin("POST", "/api-keys", { name: "intruder", tools_enabled: true })).json()) as { key: string }
    // Later than the owner's last use, so a slid expiry would show.
    await new Promise((r) => setTimeout(r, 50))
    for (const method of ["tools/list", "ping"]) {
      const foreign = await rpc(gw.url, other.key, { jsonrpc: "2.0", id: 2, method }, { "mcp-session-id": sessionId })
      expect(foreign.status).toBe(404)
      expect(((await foreign.json()) as any).error).toBe("session_expired")
    }
    const deleted = await fetch(`${gw.url}/v1/mcp`, {
      method: "DELETE",
      headers: { authorization: `Bearer ${other.key}`, "mcp-session-id": sessionId }
    })
    expect(deleted.status).toBe(404)
    expect(await expiresAt()).toBe(before)

    const owner = await rpc(gw.url, key, { jsonrpc: "2.0", id: 3, method: "ping" }, { "mcp-session-id": sessionId })
    expect(owner.status).toBe(200)
    expect(await expiresAt()).not.toBe(before)
    await transport.terminateSession()
  })

  it("expires a session after its idle TTL (sliding), by the store's clock", async () => {
    // Expiry is the store's clock (any replica serves the next request): the test reads and ages
    // the row instead of moving a replica's clock.
    const short = await startGateway(testConfig({ store: store.url, mcp: { session_ttl_seconds: 60 } }))
    const db = new PgClient(store.url)
    const expiresAt = async (id: string) =>
      (await db.query<{ expires_at: string }>("SELECT expires_at FROM mcp_sessions WHERE id = $1", [id]))[0]!.expires_at
    try {
      const init = await rpc(short.url, key, initializeBody)
      const sessionId = init.headers.get("mcp-session-id")!
      let last = await expiresAt(sessionId)
      for (let i = 0; i < 3; i++) {
        // Each use slides the expiry forward.
        await new Promise((r) => setTimeout(r, 5))
        const used = await rpc(short.url, key, { jsonrpc: "2.0", id: 10 + i, method: "ping" }, { "mcp-session-id": sessionId })
        expect(used.status).toBe(200)
        const slid = await expiresAt(sessionId)
        expect(Date.parse(slid)).toBeGreaterThan(Date.parse(last))
        last = slid
      }
      // Idle past its TTL.
      await db.query("UPDATE mcp_sessions SET expires_at = $1 WHERE id = $2", [new Date(Date.now() - 1000).toISOString(), sessionId])
      const expired = await rpc(short.url, key, { jsonrpc: "2.0", id: 20, method: "ping" }, { "mcp-session-id": sessionId })
      expect(expired.status).toBe(404)
      expect(((await expired.json()) as any).error).toBe("session_expired")
    } finally {
      await short.close()
    }
  })

  it("refuses a key without tools with 403 tools_disabled on every request", async () => {
    const plain = (await (await gw.admin("POST", "/api-keys", { name: "no-tools" })).json()) as { key: string }
    const init = await rpc(gw.url, plain.key, initializeBody)
    expect(init.status).toBe(403)
    expect(await init.json()).toMatchObject({ error: "tools_disabled" })
    await expect(connect(gw.url, plain.key)).rejects.toThrow()
  })

  it("follows the transport rules: initialize negotiates, GET is 405, notifications 202, missing session 400, bad Origin 403", async () => {
    const init = await rpc(gw.url, key, { ...initializeBody, params: { ...initializeBody.params, protocolVersion: "1999-01-01" } })
    expect(init.status).toBe(200)
    expect(((await init.json()) as any).result.protocolVersion).toBe("2025-11-25")
    const sessionId = init.headers.get("mcp-session-id")!

    const get = await fetch(`${gw.url}/v1/mcp`, { headers: { authorization: `Bearer ${key}`, accept: "text/event-stream" } })
    expect(get.status).toBe(405)
    expect(((await get.json()) as any).error).toBe("method_not_allowed")

    const note = await rpc(gw.url, key, { jsonrpc: "2.0", method: "notifications/initialized" }, { "mcp-session-id": sessionId })
    expect(note.status).toBe(202)
    expect(await note.text()).toBe("")

    const missing = await rpc(gw.url, key, { jsonrpc: "2.0", id: 5, method: "tools/list" })
    expect(missing.status).toBe(400)
    expect(((await missing.json()) as any).error).toBe("validation_failed")

    const badVersion = await rpc(gw.url, key, { jsonrpc: "2.0", id: 6, method: "tools/list" }, {
      "mcp-session-id": sessionId,
      "mcp-protocol-version": "1999-01-01"
    })
    expect(badVersion.status).toBe(400)

    const evil = await rpc(gw.url, key, { jsonrpc: "2.0", id: 7, method: "tools/list" }, { "mcp-session-id": sessionId, origin: "https://evil.example" })
    expect(evil.status).toBe(403)

    const notRpc = await rpc(gw.url, key, { hello: "world" }, { "mcp-session-id": sessionId })
    expect(notRpc.status).toBe(400)

    const unknownMethod = await rpc(gw.url, key, { jsonrpc: "2.0", id: 8, method: "resources/list" }, { "mcp-session-id": sessionId })
    expect(((await unknownMethod.json()) as any).error.code).toBe(-32601)

    const unknownTool = await rpc(gw.url, key, { jsonrpc: "2.0", id: 9, method: "tools/call", params: { name: "rm_rf", arguments: {} } }, { "mcp-session-id": sessionId })
    expect(((await unknownTool.json()) as any).error.code).toBe(-32602)

    const unauthorized = await rpc(gw.url, "sk-mg-" + "0".repeat(32), initializeBody)
    expect(unauthorized.status).toBe(401)
  })

  it("can be listed and called by the MCP Inspector CLI", async () => {
    const inspector = join(ROOT, "node_modules/@modelcontextprotocol/inspector-cli/build/index.js")
    const run = (args: Array<string>) =>
      new Promise<{ code: number | null; out: string }>((resolve) => {
        // The CLI finds its own package.json relative to the working directory, so it runs from its build folder.
        const child = spawn(NODE, [inspector, `${gw.url}/v1/mcp`, "--transport", "http", "--header", `Authorization: Bearer ${key}`, ...args], {
          cwd: join(ROOT, "node_modules/@modelcontextprotocol/inspector-cli/build"),
          env: childEnv()
        })
        let out = ""
        child.stdout.on("data", (c) => (out += c))
        child.stderr.on("data", (c) => (out += c))
        child.on("exit", (code) => resolve({ code, out }))
      })
    const listed = await run(["--method", "tools/list"])
    expect(listed.code, listed.out).toBe(0)
    expect(listed.out).toContain("sql_run")
    const called = await run(["--method", "tools/call", "--tool-name", "sql_run", "--tool-arg", "connection_id=1", "statement=SELECT count(*) AS n FROM items"])
    expect(called.code, called.out).toBe(0)
    expect(called.out).toContain("\"row_count\": 1")
  })
})

describe("/v1/mcp limits and money", () => {
  it("charges mcp.credits_per_tool_call per tools/call (402 when the pool is short) and counts every request against the budget", async () => {
    const gw = await startGateway(testConfig({
      workspace: { credits: 3 },
      connections: [{ id: 1, name: "nowhere", dialect: "postgres", url: "postgres://nobody@127.0.0.1:1/none" }],
      mcp: { credits_per_tool_call: 2 }
    }))
    try {
      const created = (await (await gw.admin("POST", "/api-keys", {
        name: "metered",
        tools_enabled: true,
        budget: { max_requests: 4 },
        connections: [{ connection_id: 1, role: "read" }]
      })).json()) as { key: string }
      const init = await rpc(gw.url, created.key, initializeBody)
      expect(init.status).toBe(200)
      expect(init.headers.get("x-ratelimit-limit")).toBe("50")
      const session = { "mcp-session-id": init.headers.get("mcp-session-id")! }
      const call = (id: number) =>
        rpc(gw.url, created.key, { jsonrpc: "2.0", id, method: "tools/call", params: { name: "sql_list_connections", arguments: {} } }, session)

      const first = await call(2)
      expect(first.status).toBe(200)
      expect(((await first.json()) as any).result.structuredContent.connections).toHaveLength(1)
      const second = await call(3)
      expect(second.status).toBe(402)
      expect(await second.json()).toMatchObject({
        error: "insufficient_credits",
        details: { model: "mcp:sql_list_connections", required_credits: 2, available_credits: 1 }
      })
      // initialize, two calls: three counted; the fourth request is the last the budget admits.
      expect((await rpc(gw.url, created.key, { jsonrpc: "2.0", id: 4, method: "ping" }, session)).status).toBe(200)
      const fifth = await rpc(gw.url, created.key, { jsonrpc: "2.0", id: 5, method: "ping" }, session)
      expect(fifth.status).toBe(429)
      expect(((await fifth.json()) as any).error).toBe("budget_exhausted")
      expect(((await (await gw.admin("GET", "/workspace")).json()) as any).credits).toBe(1)
    } finally {
      await gw.close()
    }
  })
})
