/**
 * One replica cut off from Postgres while its group commit holds the workspace row (issue 21,
 * item 1). Two replicas share a private Postgres; one reaches it through a TCP proxy that the
 * test cuts at the moment the server has told that replica it is inside a transaction, so its
 * session is left idle in transaction holding the row every paid request's commit takes.
 *
 * Before the fix the other replica served no paid request for as long as the dead connection
 * lived. Now the server ends the cut session after `store_timeouts.idle_in_transaction_ms`, so
 * the healthy replica's commits wait at most that (or fail with a lock timeout: a 503, not a
 * hang) and then serve everything; the cut replica answers its own requests with 503 within its
 * call deadline instead of hanging; once the network heals it serves again, and the books agree.
 */
import { randomBytes } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Client } from "../support/pg-admin.ts"
import { startFakeOpenAI, type FakeUpstream } from "../support/fake-openai.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { canRunPostgres, startPostgres, type Throwaway } from "../support/throwaway.ts"
import { startTcpProxy, type TcpProxy } from "../support/tcp-proxy.ts"
import { chat, newKey, sleep, waitFor } from "../limits/support.ts"

const UPSTREAM_KEY = `sk-upstream-${randomBytes(12).toString("hex")}`
const PRICE = 2
const IDLE_IN_TRANSACTION_MS = 1500
const CALL_MS = 2500

let pg: Throwaway
let proxy: TcpProxy
let fake: FakeUpstream
let cutOff: TestGateway
let healthy: TestGateway

const config = (store: string) =>
  testConfig({
    store,
    workspace: { credits: 100_000 },
    store_timeouts: { idle_in_transaction_ms: IDLE_IN_TRANSACTION_MS, lock_ms: 1000, statement_ms: 2000, call_ms: CALL_MS },
    credits: { block_size: 20 },
    providers: [{ name: "fake", kind: "openai", base_url: fake.url, api_key: UPSTREAM_KEY }],
    models: [{ alias: "paid", id: "gpt-4o-mini-2024-07-18", provider: "fake", credits: PRICE }]
  })

beforeAll(async () => {
  if (!canRunPostgres) return
  ;[pg, fake] = await Promise.all([startPostgres(), startFakeOpenAI({ apiKey: UPSTREAM_KEY })])
  proxy = await startTcpProxy(pg.port)
  healthy = await startGateway(config(pg.url))
  cutOff = await startGateway(config(`postgres://postgres@127.0.0.1:${proxy.port}/postgres`))
}, 60_000)

afterAll(async () => {
  proxy?.heal()
  await healthy?.close()
  // Bounded although statements of the cut are still stuck on its dead connections.
  await cutOff?.close()
  await proxy?.close()
  await fake?.close()
  await pg?.destroy()
})

describe.skipIf(!canRunPostgres)("one replica partitioned inside its group commit", () => {
  it("holds the workspace row only until the server ends its session; the others serve, the cut one fails fast", async () => {
    const { key } = await newKey(healthy.url)
    for (const gw of [healthy, cutOff]) expect((await chat(gw.url, key, { model: "paid" })).status).toBe(200)

    // Paid traffic on the doomed replica until the cut lands inside one of its transactions.
    const cut = proxy.cutInTransaction()
    let landed = false
    void cut.then(() => (landed = true))
    const background: Array<Promise<unknown>> = []
    while (!landed) {
      background.push(chat(cutOff.url, key, { model: "paid" }).catch(() => undefined))
      await sleep(2)
    }
    const cutAt = Date.now()
    const db = new Client(pg.url)
    const stuck = await db.query<{ state: string }>(
      "SELECT state FROM pg_stat_activity WHERE application_name = 'modelgate' AND state = 'idle in transaction'"
    )
    expect(stuck.length).toBeGreaterThan(0)

    // The healthy replica: a few requests may wait out the lock (or get a 503 lock timeout)...
    const early = await Promise.all(Array.from({ length: 5 }, () => chat(healthy.url, key, { model: "paid" })))
    for (const reply of early) expect([200, 503]).toContain(reply.status)
    // ...and once the server has ended the cut session, every paid request is served.
    await waitFor("the stuck session to be ended by the server", async () =>
      (await db.query("SELECT 1 FROM pg_stat_activity WHERE application_name = 'modelgate' AND state = 'idle in transaction'"))
        .length === 0, IDLE_IN_TRANSACTION_MS + 5000)
    const served = []
    for (let i = 0; i < 20; i++) served.push(await chat(healthy.url, key, { model: "paid" }))
    expect(served.map((r) => r.status)).toEqual(served.map(() => 200))

    // The cut replica answers its own paid requests and unknown keys with 503, within its deadline.
    const { key: unseen } = await newKey(healthy.url)
    const started = Date.now()
    const [paid, lookup] = await Promise.all([chat(cutOff.url, key, { model: "paid" }), chat(cutOff.url, unseen, { model: "paid" })])
    expect(paid.status).toBe(503)
    expect(paid.body?.error).toBe("dependency_unavailable")
    expect(lookup.status).toBe(503)
    // Within the store call's deadline, not when TCP gives up (minutes): slack for a machine at load 10.
    expect(Date.now() - started).toBeLessThan(CALL_MS + 10_000)
    await Promise.all(background)
    // The cut lasted well past the session timeout; the healthy replica never waited for the network.
    expect(Date.now() - cutAt).toBeGreaterThan(IDLE_IN_TRANSACTION_MS)

    proxy.heal()
    await waitFor("the cut replica to serve again", async () => (await chat(cutOff.url, key, { model: "paid" })).status === 200, 30_000)

    // The books agree: every ledger row explains the balance, and no charge is lost or doubled.
    await waitFor("no open reservation", async () => (await db.query("SELECT 1 FROM credit_reservations")).length === 0, 15_000)
    const [ws] = await db.query<{ credits: string }>("SELECT credits FROM workspaces")
    const [sum] = await db.query<{ total: string }>("SELECT SUM(amount) AS total FROM credit_ledger")
    expect(Number(sum!.total)).toBe(Number(ws!.credits))
    const [dupes] = await db.query<{ n: string }>(
      "SELECT COUNT(*) AS n FROM (SELECT request_id FROM credit_ledger WHERE kind = 'charge' GROUP BY request_id HAVING COUNT(*) > 1) d"
    )
    expect(Number(dupes!.n)).toBe(0)
  }, 90_000)
})
