/**
 * Issue 37: a session's `notifications/cancelled` that reaches another replica than the one
 * running the call it names (a load balancer spreading one session's requests) still cancels it,
 * through Redis: the call answers -32800 and the upstream server hears the cancellation. The call
 * stays charged once, as a model stream the client aborts does (the server's work was done).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { REDIS_URL } from "../limits/support.ts"
import { createPostgresDatabase, type TempDatabase } from "../support/databases.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { type McpUpstream, startMcpUpstream } from "../support/mcp-upstream.ts"

const VERSION = "2025-11-25"

const waitFor = async (what: string, check: () => boolean | Promise<boolean>, ms = 20_000) => {
  const deadline = Date.now() + ms
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
}

describe("MCP cancellation across replicas (Postgres store, Redis)", () => {
  let db: TempDatabase
  let upstream: McpUpstream
  let a: TestGateway
  let b: TestGateway
  let key: string

  beforeAll(async () => {
    db = await createPostgresDatabase("mg_mcp_cancel")
    upstream = await startMcpUpstream([{ name: "slow", description: "Waits until cancelled", inputSchema: { type: "object" } }], {
      slow: (_args, signal) => new Promise((resolve) => signal.addEventListener("abort", () => resolve({ content: [] })))
    })
    const config = testConfig({
      store: db.url,
      redis: REDIS_URL,
      workspace: { credits: 100 },
      mcp: { servers: [{ name: "up", url: upstream.url, timeout_ms: 60_000, credits_per_call: 5 }] }
    })
    a = await startGateway(config)
    b = await startGateway(config)
    key = ((await (await a.admin("POST", "/api-keys", { name: "agent", tools_enabled: true, mcp_servers: ["up"], limits: { requests_per_minute: 100_000 } })).json()) as { key: string }).key
  }, 60_000)

  afterAll(async () => {
    await a?.close()
    await b?.close()
    await upstream?.close()
    await db?.drop()
  })

  const post = (gw: TestGateway, body: unknown, session?: string) =>
    fetch(`${gw.url}/v1/mcp`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${key}`,
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
        "mcp-protocol-version": VERSION,
        ...(session === undefined ? {} : { "mcp-session-id": session })
      },
      body: JSON.stringify(body)
    })

  it("a cancellation sent to replica B interrupts the call replica A runs, upstream too, charged once", async () => {
    const init = await post(a, { jsonrpc: "2.0", id: 0, method: "initialize", params: { protocolVersion: VERSION, capabilities: {}, clientInfo: { name: "agent", version: "1" } } })
    expect(init.status).toBe(200)
    const session = init.headers.get("mcp-session-id")!
    await post(a, { jsonrpc: "2.0", method: "notifications/initialized" }, session)
    const balance = async () => Number(((await (await a.admin("GET", "/workspace")).json()) as { credits: number }).credits)
    const before = await balance()

    const calls = upstream.calls.length
    const running = post(a, { jsonrpc: "2.0", id: "call-1", method: "tools/call", params: { name: "up__slow", arguments: {} } }, session)
    await waitFor("the call to reach the server", () => upstream.calls.length > calls)

    // The same session's cancellation, through the other replica.
    const cancel = await post(b, { jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: "call-1", reason: "user pressed stop" } }, session)
    expect(cancel.status).toBe(202)

    const answer = await running
    expect(answer.status).toBe(200)
    expect(await answer.json()).toMatchObject({ jsonrpc: "2.0", id: "call-1", error: { code: -32800 } })
    await waitFor("the server to see the call cancelled", () => upstream.cancelled.includes("slow"))
    await waitFor("the call's charge to settle", async () => (await balance()) === before - 5)
  })

  it("a cancellation naming nothing that runs anywhere changes nothing", async () => {
    const init = await post(b, { jsonrpc: "2.0", id: 0, method: "initialize", params: { protocolVersion: VERSION, capabilities: {}, clientInfo: { name: "agent", version: "1" } } })
    const session = init.headers.get("mcp-session-id")!
    const cancel = await post(a, { jsonrpc: "2.0", method: "notifications/cancelled", params: { requestId: 99 } }, session)
    expect(cancel.status).toBe(202)
    const ping = await post(b, { jsonrpc: "2.0", id: 1, method: "ping" }, session)
    expect(await ping.json()).toMatchObject({ id: 1, result: {} })
  })
})
