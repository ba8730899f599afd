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
import { sleep, waitFor, waitForValue } from "../support/wait.ts"

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
    await waitFor("a paid request served", () => paid > 0)
    // The leased gauge shows the block once a scrape reads past the second its reads are shared for:
    // waited for as a state (the first scrapes may still answer the read shared from before).
    const leased = await waitForValue("A's scrape to show credits leased", async () => (await gauge(a, "modelgate_workspace_credits_leased")).get(workspace) ?? 0, (n) => n > 0, 15_000, 100)
    spending = false
    await spender
    expect(leased).toBeGreaterThan(0)
    const charged = Date.now()
    while ((await pool(a)) !== 1500 - paid * PRICE && Date.now() - charged < 10_000) await new Promise((r) => setTimeout(r, 100))
    expect(await pool(a)).toBe(1500 - paid * PRICE)
    // Both replicas' scrapes come to the store's balance (once their shared second's read is past).
    for (const replica of [a, b]) {
      await waitFor(`${replica === a ? "A" : "B"}'s scrape to show the store's balance`, async () =>
        (await gauge(replica, "modelgate_workspace_credits")).get(workspace) === 1500 - paid * PRICE, 15_000, 100)
    }

    // B's store stops answering (a partition: no reset, no FIN): its scrape still answers, in
    // about the probe's bound, without the pool's samples rather than with a false value.
    // A clock, not a state: past the second B's last read is shared for, so its next scrape asks the store.
    await sleep(1_100)
    proxy.cut()
    const started = Date.now()
    const cut = await gauge(b, "modelgate_workspace_credits")
    // Within the store call's deadline (call_ms, 1 s), not when TCP gives up (minutes): the 9 s
    // above it are slack for a machine at load 10.
    expect(Date.now() - started).toBeLessThan(1_000 + 9_000)
    expect(cut.size).toBe(0)
  }, 60_000)
})
