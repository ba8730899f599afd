/**
 * /v1/mcp on MCP revision 2026-07-28 (stateless: no initialize, no session, each request carries
 * its version and capabilities in `_meta`), through the real server with the MCP SDK v2 client
 * against real Postgres and MariaDB databases; the probe Claude Code sends, replayed as
 * captured; and the gateway's refusals and costs on that path, which must be the ones the
 * session revisions have.
 */
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { createConnection } from "mysql2/promise"
import { createMysqlDatabase, createPostgresDatabase, type TempDatabase } from "../support/databases.ts"
import { Client as PgClient } from "../support/pg-admin.ts"
import { auditFor, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

const VERSION = "2026-07-28"

interface CapturedRequest {
  readonly method: string
  readonly headers: Record<string, string>
  readonly body: { readonly method: string; readonly params: { readonly _meta: Record<string, unknown> } }
}
const claudeCode = JSON.parse(readFileSync(join(import.meta.dirname, "fixtures/claude-code-mcp.json"), "utf8")) as {
  readonly requests: ReadonlyArray<CapturedRequest>
}

/** What the server answered to each request the client sent, to check what the client does not show. */
interface Seen {
  readonly method: string | undefined
  readonly status: number
  readonly sessionId: string | null
}

const connect = async (url: string, key: string, mode: "auto" | { pin: string }) => {
  const seen: Array<Seen> = []
  const transport = new StreamableHTTPClientTransport(new URL(`${url}/v1/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${key}` } },
    fetch: async (input, init) => {
      const response = await fetch(input, init)
      const method = typeof init?.body === "string" ? (JSON.parse(init.body) as { method?: string }).method : undefined
      seen.push({ method, status: response.status, sessionId: response.headers.get("mcp-session-id") })
      return response
    }
  })
  const client = new Client({ name: "modelgate-test", version: "1.0.0" }, { versionNegotiation: { mode } })
  await client.connect(transport)
  return { client, transport, seen }
}

/** A request as a 2026-07-28 client sends it: the `_meta` envelope in the body, the method in Mcp-Method. */
const envelope = {
  "io.modelcontextprotocol/protocolVersion": VERSION,
  "io.modelcontextprotocol/clientInfo": { name: "raw", version: "1" },
  "io.modelcontextprotocol/clientCapabilities": {}
}
const stateless = (url: string, key: string, method: string, params: Record<string, unknown> = {}, headers: Record<string, string> = {}) =>
  fetch(`${url}/v1/mcp`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${key}`,
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      "mcp-protocol-version": VERSION,
      "mcp-method": method,
      ...(typeof params.name === "string" ? { "mcp-name": params.name } : {}),
      ...headers
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params: { ...params, _meta: envelope } })
  })

describe("/v1/mcp on 2026-07-28", () => {
  let pg: TempDatabase
  let maria: TempDatabase
  let gw: TestGateway
  let key: string
  let keyId: string

  beforeAll(async () => {
    pg = await createPostgresDatabase("mg_mcp2_pg")
    maria = await createMysqlDatabase("mg_mcp2_my")
    const admin = new PgClient(pg.url)
    await admin.query("CREATE TABLE items (id serial PRIMARY KEY, name text NOT NULL)")
    await admin.query("INSERT INTO items (name) VALUES ('a'), ('b')")
    const my = await createConnection(maria.url)
    await my.query("CREATE TABLE items (id int AUTO_INCREMENT PRIMARY KEY, name varchar(20) NOT NULL)")
    await my.query("INSERT INTO items (name) VALUES ('x'), ('y'), ('z')")
    await my.end()
    gw = await startGateway(testConfig({
      connections: [
        { id: 1, name: "analytics", dialect: "postgres", url: pg.url },
        { id: 2, name: "shop", dialect: "mysql", url: maria.url }
      ]
    }))
    const created = await gw.createKey({ name: "agent", tools_enabled: true })
    key = created.key
    keyId = created.id
    for (const id of [1, 2]) {
      expect((await gw.admin("PUT", `/api-keys/${keyId}/connections/${id}`, { role: "read" })).status).toBe(200)
    }
  })
  afterAll(async () => {
    await gw?.close()
    await pg?.drop()
    await maria?.drop()
  })

  it("negotiates 2026-07-28 with the SDK v2 client and runs the tools on Postgres and MariaDB without a session", async () => {
    const { client, transport, seen } = await connect(gw.url, key, "auto")
    expect(client.getNegotiatedProtocolVersion()).toBe(VERSION)
    expect(client.getDiscoverResult()?.supportedVersions).toContain(VERSION)
    expect(client.getServerVersion()?.name).toBe("modelgate")
    const { tools } = await client.listTools()
    expect(tools.map((t) => t.name).sort()).toEqual(
      ["sql_describe", "sql_explain", "sql_history", "sql_list_connections", "sql_list_tables", "sql_run"]
    )

    const connections = await client.callTool({ name: "sql_list_connections", arguments: {} })
    expect(connections.structuredContent).toEqual({
      connections: [
        { id: 1, name: "analytics", dialect: "postgres", environment: "development", role: "read" },
        { id: 2, name: "shop", dialect: "mysql", environment: "development", role: "read" }
      ]
    })
    const fromPg = await client.callTool({ name: "sql_run", arguments: { connection_id: 1, statement: "SELECT name FROM items ORDER BY id" } })
    expect(fromPg.isError).toBeFalsy()
    expect(fromPg.structuredContent).toMatchObject({ kind: "rows", rows: [{ name: "a" }, { name: "b" }], row_count: 2 })
    const fromMaria = await client.callTool({ name: "sql_run", arguments: { connection_id: 2, statement: "SELECT name FROM items ORDER BY id" } })
    expect(fromMaria.isError).toBeFalsy()
    expect(fromMaria.structuredContent).toMatchObject({ kind: "rows", rows: [{ name: "x" }, { name: "y" }, { name: "z" }], row_count: 3 })
    const tables = await client.callTool({ name: "sql_list_tables", arguments: { connection_id: 2 } })
    expect((tables.structuredContent as { tables: Array<{ name: string }> }).tables.map((t) => t.name)).toContain("items")

    const blocked = await client.callTool({ name: "sql_run", arguments: { connection_id: 2, statement: "DELETE FROM items" } })
    expect(blocked.isError).toBe(true)
    expect(blocked.structuredContent).toMatchObject({ status: 403, error: "sql_gate_blocked" })
    const my = await createConnection(maria.url)
    const [rows] = await my.query("SELECT count(*) AS n FROM items")
    await my.end()
    expect((rows as Array<{ n: number }>)[0]!.n).toBe(3)

    // Stateless: the first request was the server/discover probe, and no answer opened a session.
    expect(seen[0]).toMatchObject({ method: "server/discover", status: 200 })
    expect(seen.every((s) => s.sessionId === null)).toBe(true)
    expect(seen.map((s) => s.method)).not.toContain("initialize")
    expect(transport.sessionId).toBeUndefined()
    await client.close()
  })

  it("serves a client pinned to 2026-07-28 and audits each request with its revision, tool and connection", async () => {
    const { client } = await connect(gw.url, key, { pin: VERSION })
    await client.callTool({ name: "sql_run", arguments: { connection_id: 1, statement: "SELECT 'secret-literal-7' AS s" } })
    await client.close()
    const call = await stateless(gw.url, key, "tools/call", { name: "sql_run", arguments: { connection_id: 1, statement: "SELECT 1 AS one" } })
    expect(call.status).toBe(200)
    const records = await auditFor(gw, call.headers.get("x-request-id")!)
    expect(records).toHaveLength(1)
    expect(records[0]).toMatchObject({
      endpoint: "/v1/mcp",
      status: 200,
      tool: "sql_run",
      connection_id: 1,
      details: { method: "tools/call", protocol_version: VERSION, verdict: "read" }
    })
    const page = await gw.admin("GET", `/audit?key_id=${keyId}&limit=1000`)
    expect(JSON.stringify(await page.json())).not.toContain("secret-literal-7")

    // Every kind of answer ends its request (one record each): a notification's 202, a
    // subscription stream (acknowledged and closed: the tool list never changes), a refusal.
    const notification = await fetch(`${gw.url}/v1/mcp`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "mcp-protocol-version": VERSION, "mcp-method": "notifications/cancelled" },
      body: JSON.stringify({ jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: 1, _meta: envelope } })
    })
    expect(notification.status).toBe(202)
    const listen = await stateless(gw.url, key, "subscriptions/listen", { notifications: { toolsListChanged: true } })
    expect(listen.status).toBe(200)
    expect(listen.headers.get("content-type")).toContain("text/event-stream")
    expect(await listen.text()).toContain("notifications/subscriptions/acknowledged")
    const refused = await stateless(gw.url, key, "tools/list", {}, { "mcp-method": "tools/call" })
    expect(refused.status).toBe(400)
    for (const [response, status] of [[notification, 202], [listen, 200], [refused, 400]] as const) {
      const [record, ...more] = await auditFor(gw, response.headers.get("x-request-id")!)
      expect(more).toEqual([])
      expect(record).toMatchObject({ status, details: { protocol_version: VERSION } })
    }
  })

  it("answers Claude Code's probe and tool listing as captured, then a tools/call in the same shape", async () => {
    const [probe, listing] = claudeCode.requests
    const replay = (captured: CapturedRequest, body: unknown = captured.body) =>
      fetch(`${gw.url}/v1/mcp`, {
        method: captured.method,
        headers: { ...captured.headers, authorization: `Bearer ${key}` },
        body: JSON.stringify(body)
      })

    const discovered = await replay(probe!)
    expect(discovered.status).toBe(200)
    expect(discovered.headers.get("mcp-session-id")).toBeNull()
    const discover = (await discovered.json()) as any
    expect(discover).toMatchObject({
      jsonrpc: "2.0",
      id: "server-discover-probe-1",
      result: {
        supportedVersions: [VERSION],
        capabilities: { tools: { listChanged: false } },
        resultType: "complete",
        _meta: { "io.modelcontextprotocol/serverInfo": { name: "modelgate" } }
      }
    })

    const listed = await replay(listing!)
    expect(listed.status).toBe(200)
    const tools = ((await listed.json()) as any).result.tools as Array<{ name: string }>
    expect(tools.map((t) => t.name)).toContain("sql_run")

    const call = await replay(
      { ...listing!, headers: { ...listing!.headers, "mcp-method": "tools/call", "mcp-name": "sql_run" } },
      {
        jsonrpc: "2.0",
        id: 7,
        method: "tools/call",
        params: { name: "sql_run", arguments: { connection_id: 1, statement: "SELECT count(*) AS n FROM items" }, _meta: listing!.body.params._meta }
      }
    )
    expect(call.status).toBe(200)
    expect(((await call.json()) as any).result.structuredContent).toMatchObject({ kind: "rows", rows: [{ n: "2" }] })
  })

  it("refuses what the revision refuses, with its JSON-RPC codes, and what the gateway refuses, with the envelope", async () => {
    // Header and body disagree: the revision's HeaderMismatch.
    const mismatch = await stateless(gw.url, key, "tools/list", {}, { "mcp-method": "tools/call" })
    expect(mismatch.status).toBe(400)
    expect(((await mismatch.json()) as any).error.code).toBe(-32020)
    // The 2026-07-28 header on a body without the envelope is not taken for a session request.
    const noEnvelope = await fetch(`${gw.url}/v1/mcp`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "mcp-protocol-version": VERSION, "mcp-method": "tools/list" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" })
    })
    expect(noEnvelope.status).toBe(400)
    expect(((await noEnvelope.json()) as any).error.code).toBe(-32602)
    // The revision has no initialize and no ping.
    const initialize = await stateless(gw.url, key, "initialize", { protocolVersion: VERSION, capabilities: {}, clientInfo: { name: "x", version: "1" } })
    expect(((await initialize.json()) as any).error.code).toBe(-32601)
    const unknownTool = await stateless(gw.url, key, "tools/call", { name: "rm_rf", arguments: {} })
    expect(unknownTool.status).toBe(200)
    expect(((await unknownTool.json()) as any).error.code).toBe(-32602)

    const unauthorized = await stateless(gw.url, "sk-mg-" + "0".repeat(32), "server/discover")
    expect(unauthorized.status).toBe(401)
    expect(await unauthorized.json()).toMatchObject({ error: "unauthorized" })
    const evil = await stateless(gw.url, key, "server/discover", {}, { origin: "https://evil.example" })
    expect(evil.status).toBe(403)
    expect(await evil.json()).toMatchObject({ error: "scope_violation" })

    const plain = await gw.createKey({ name: "no-tools" })
    for (const method of ["server/discover", "tools/list"]) {
      const refused = await stateless(gw.url, plain.key, method)
      expect(refused.status).toBe(403)
      expect(await refused.json()).toMatchObject({ status: 403, error: "tools_disabled" })
    }
    const call = await stateless(gw.url, plain.key, "tools/call", { name: "sql_list_connections", arguments: {} })
    expect(call.status).toBe(403)
  })
})

describe("/v1/mcp on 2026-07-28: limits and money", () => {
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
      })).json()) as { key: string; id: string }
      const discover = await stateless(gw.url, created.key, "server/discover")
      expect(discover.status).toBe(200)
      expect(discover.headers.get("x-ratelimit-limit")).toBe("50")
      const call = () => stateless(gw.url, created.key, "tools/call", { name: "sql_list_connections", arguments: {} })

      const first = await call()
      expect(first.status).toBe(200)
      expect(((await first.json()) as any).result.structuredContent.connections).toHaveLength(1)
      const second = await call()
      expect(second.status).toBe(402)
      expect(await second.json()).toMatchObject({
        error: "insufficient_credits",
        details: { model: "mcp:sql_list_connections", required_credits: 2, available_credits: 1 }
      })
      // discover, two calls: three counted; the fourth request is the last the budget admits.
      expect((await stateless(gw.url, created.key, "tools/list")).status).toBe(200)
      const fifth = await stateless(gw.url, created.key, "tools/list")
      expect(fifth.status).toBe(429)
      expect(await fifth.json()).toMatchObject({ error: "budget_exhausted" })
      expect(fifth.headers.get("x-should-retry")).toBe("false")
      expect(((await (await gw.admin("GET", "/workspace")).json()) as any).credits).toBe(1)
    } finally {
      await gw.close()
    }
  })

  it("refunds a tool call that fails on the server's side", async () => {
    const gw = await startGateway(testConfig({
      workspace: { credits: 10 },
      connections: [{ id: 1, name: "down", dialect: "postgres", url: "postgres://nobody@127.0.0.1:1/none" }],
      mcp: { credits_per_tool_call: 2 }
    }))
    try {
      const created = (await (await gw.admin("POST", "/api-keys", {
        name: "refunded",
        tools_enabled: true,
        connections: [{ connection_id: 1, role: "read" }]
      })).json()) as { key: string }
      const call = await stateless(gw.url, created.key, "tools/call", { name: "sql_run", arguments: { connection_id: 1, statement: "SELECT 1" } })
      expect(call.status).toBe(200)
      const result = ((await call.json()) as any).result
      expect(result.isError).toBe(true)
      expect(result.structuredContent).toMatchObject({ status: 502, error: "connection_unreachable" })
      expect(((await (await gw.admin("GET", "/workspace")).json()) as any).credits).toBe(10)
    } finally {
      await gw.close()
    }
  })
})
