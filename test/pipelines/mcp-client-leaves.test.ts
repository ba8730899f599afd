/**
 * Issue 24 item 6 on /v1/mcp: a client that leaves a `tools/call` before its answer cancels the
 * SQL statement on the database (it does not run on to its timeout), and the request is audited
 * as `client_closed_request`.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createPostgresDatabase, type TempDatabase } from "../support/databases.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { Client as PgClient } from "../support/pg-admin.ts"
import { waitFor } from "../support/wait.ts"

describe("a client that leaves an MCP tool call", () => {
  let db: TempDatabase
  let gw: TestGateway
  let key: string
  let keyId: string
  let admin: PgClient

  beforeAll(async () => {
    db = await createPostgresDatabase("mg_leaves")
    admin = new PgClient(db.url)
    gw = await startGateway(testConfig({ connections: [{ id: 1, name: "slow", dialect: "postgres", url: db.url }] }))
    const created = (await (await gw.admin("POST", "/api-keys", {
      name: "agent",
      tools_enabled: true,
      connections: [{ connection_id: 1, role: "read" }]
    })).json()) as { key: string; id: string }
    key = created.key
    keyId = created.id
  })
  afterAll(async () => {
    await gw?.close()
    await db?.drop()
  })

  /**
   * The statement's session at work on this test's own database. The gateway runs a query as a
   * cursor: its text (and the token) shows in pg_stat_activity only for the instant of its
   * DECLARE; the work itself shows as the FETCH from that cursor. Looking for the token alone
   * caught the statement only when a poll happened to land on the DECLARE.
   */
  const running = async (token: string) =>
    (await admin.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'active'
          AND (query LIKE $1 OR query LIKE 'FETCH % FROM modelgate_cursor')`,
      [`%${token}%`]
    ))[0]!.n

  it("cancels the statement on the database at once and audits 499", async () => {
    const transport = new StreamableHTTPClientTransport(new URL(`${gw.url}/v1/mcp`), {
      requestInit: { headers: { Authorization: `Bearer ${key}` } }
    })
    const client = new Client({ name: "leaves", version: "1.0.0" })
    await client.connect(transport)
    const token = `leaves_${Date.now()}`
    const controller = new AbortController()
    const pending = fetch(`${gw.url}/v1/mcp`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${key}`,
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
        "mcp-session-id": transport.sessionId!,
        "mcp-protocol-version": "2025-11-25"
      },
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: 7,
        method: "tools/call",
        params: {
          name: "sql_run",
          // Minutes of work, with a timeout far beyond the test's patience.
          arguments: { connection_id: 1, statement: `SELECT count(*) FROM generate_series(1, 100000000000) AS g /* ${token} */`, timeout_ms: 120000 }
        }
      }),
      signal: controller.signal
    }).catch((e: unknown) => e)
    await waitFor("the statement running", async () => (await running(token)) === 1, 10000)
    controller.abort()
    expect(await pending).toBeInstanceOf(Error)
    // Cancelled well before its 120 s timeout: the client leaving did it.
    await waitFor("the statement cancelled", async () => (await running(token)) === 0, 10000)
    let record: { status: number; error: string | null; tool: string | null } | undefined
    for (let i = 0; i < 50 && record === undefined; i++) {
      await Effect.runPromise(gw.audit.flush)
      const page = await Effect.runPromise(gw.store.audit.queryAudit({ key_id: keyId, error: "client_closed_request", limit: 10 }))
      record = page.items[0]
      if (record === undefined) await new Promise((resolve) => setTimeout(resolve, 50))
    }
    expect(record).toMatchObject({ status: 499, error: "client_closed_request" })
    await client.close().catch(() => undefined)
  }, 40000)
})
