/**
 * Issue 31.5: the credit pool as gauges (`modelgate_workspace_credits`, and the part replicas'
 * blocks hold), so an operator can alert before clients get 402. Two replicas on one Postgres:
 * each scrape reads the store, so both report the pool exactly as it is, whichever replica moved
 * it. A replica cut off from its store still answers the scrape in bounded time, without them.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createPostgresDatabase, type TempDatabase } from "../support/databases.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { startTcpProxy, type TcpProxy } from "../support/tcp-proxy.ts"

const PRICE = 3

const config = (store: string) =>
  testConfig({
    store,
    workspace: { credits: 1000 },
    store_timeouts: { call_ms: 1000, statement_ms: 1000, lock_ms: 500 },
    models: [{ alias: "paid", id: "echo-paid", provider: "echo", credits: PRICE }]
  })

/** A gauge's samples in one scrape: label set (as written) to value. */
const gauge = async (gw: TestGateway, name: string) => {
  const response = await fetch(`${gw.url}/metrics`)
  expect(response.status).toBe(200)
  const text = await response.text()
  expect(text).toContain(`# TYPE ${name} gauge`)
  const samples = new Map<string, number>()
  for (const line of text.split("\n")) {
    const match = new RegExp(`^${name}(\\{[^}]*\\})? (\\S+)$`).exec(line)
    if (match) samples.set(match[1] ?? "", Number(match[2]))
  }
  return samples
}

const pool = async (gw: TestGateway) => ((await (await gw.admin("GET", "/workspace")).json()) as { credits: number }).credits

describe("the credit pool gauges", () => {
  let db: TempDatabase
  let proxy: TcpProxy
  let a: TestGateway
  let b: TestGateway

  beforeAll(async () => {
    db = await createPostgresDatabase("mg_pool_gauge")
    a = await startGateway(config(db.url))
    const url = new URL(db.url)
    proxy = await startTcpProxy(Number(url.port || 5432))
    url.port = String(proxy.port)
    b = await startGateway(config(url.toString()))
  }, 30_000)

  afterAll(async () => {
    proxy?.heal()
    await a?.close()
    await b?.close()
    await proxy?.close()
    await db?.drop()
  })

  it("report the pool as the store holds it on every replica, and leave a dead store out of a bounded scrape", async () => {
    const workspace = '{workspace="ws_default"}'
    expect(await gauge(a, "modelgate_workspace_credits")).toEqual(new Map([[workspace, 1000]]))
    expect(await gauge(b, "modelgate_workspace_credits")).toEqual(new Map([[workspace, 1000]]))
    expect(await gauge(a, "modelgate_workspace_credits_leased")).toEqual(new Map([[workspace, 0]]))

    // A top-up on B is what A reports at once (no per-replica copy to go stale; reads share a second).
    expect((await b.admin("POST", "/workspace/credits", { credits: 500 })).status).toBe(200)
    const topped = Date.now()
    let seen = await gauge(a, "modelgate_workspace_credits")
    while (seen.get(workspace) !== 1500 && Date.now() - topped < 5_000) {
      await new Promise((r) => setTimeout(r, 100))
      seen = await gauge(a, "modelgate_workspace_credits")
    }
    expect(seen.get(workspace)).toBe(1500)

    // Paid requests on A spend from a block A leased: while they go on, the leased gauge shows
    // it; once they stop, the balance is the store's (what GET /workspace says) on both replicas.
    const { key } = await a.createKey()
    let paid = 0
    let spending = true
    const spender = (async () => {
      while (spending) {
        const answer = await fetch(`${a.url}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
          body: JSON.stringify({ model: "paid", messages: [{ role: "user", content: "hi" }] })
        })
        expect(answer.status).toBe(200)
        paid++
        await new Promise((r) => setTimeout(r, 50))
      }
    })()
    while (paid === 0) await new Promise((r) => setTimeout(r, 20))
    // Past the second a scrape's read is shared for.
    await new Promise((r) => setTimeout(r, 1_100))
    const leased = (await gauge(a, "modelgate_workspace_credits_leased")).get(workspace)!
    spending = false
    await spender
    expect(leased).toBeGreaterThan(0)
    const charged = Date.now()
    while ((await pool(a)) !== 1500 - paid * PRICE && Date.now() - charged < 10_000) await new Promise((r) => setTimeout(r, 100))
    expect(await pool(a)).toBe(1500 - paid * PRICE)
    await new Promise((r) => setTimeout(r, 1_100))
    expect((await gauge(a, "modelgate_workspace_credits")).get(workspace)).toBe(1500 - paid * PRICE)
    expect((await gauge(b, "modelgate_workspace_credits")).get(workspace)).toBe(1500 - paid * PRICE)

    // B's store stops answering (a partition: no reset, no FIN): its scrape still answers, in
    // about the probe's bound, without the pool's samples rather than with a false value.
    await new Promise((r) => setTimeout(r, 1_100))
    proxy.cut()
    const started = Date.now()
    const cut = await gauge(b, "modelgate_workspace_credits")
    expect(Date.now() - started).toBeLessThan(4_000)
    expect(cut.size).toBe(0)
  }, 60_000)
})
