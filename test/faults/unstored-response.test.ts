/**
 * A turn that follows a response the gateway could not store (issue 35 item 2), on a private
 * Postgres: the store is killed in the middle of a Responses stream, so the answer ends saying
 * `store: false`; once the store is back, the next turn names that response in
 * `previous_response_id` and gets 404. The gateway cannot serve it because of its own earlier
 * failure, and nothing was asked of a provider: it is not charged (the charge is refunded, and
 * its audit record says 0 credits). Before, it was charged 1 credit, never refunded.
 */
import { randomBytes } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startFakeOpenAI, type FakeUpstream } from "../support/fake-openai.ts"
import { auditFor, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { canRunPostgres, startPostgres, type Throwaway } from "../support/throwaway.ts"
import { ledgerOf, waitFor } from "../limits/support.ts"

const UPSTREAM_KEY = `sk-upstream-${randomBytes(12).toString("hex")}`
const PRICE = 1

let pg: Throwaway
let fake: FakeUpstream
let gateway: TestGateway

beforeAll(async () => {
  if (!canRunPostgres) return
  ;[pg, fake] = await Promise.all([startPostgres(), startFakeOpenAI({ apiKey: UPSTREAM_KEY })])
  gateway = await startGateway(testConfig({
    store: pg.url,
    workspace: { credits: 1000 },
    // The turn below is retried until the store is back; at load that took more than the
    // default 50 a minute, and the key's next try was a 429 instead of the 404 under test.
    limits: { requests_per_minute: 100_000 },
    providers: [{ name: "fake", kind: "openai", base_url: fake.url, api_key: UPSTREAM_KEY }],
    models: [{ alias: "paid", id: "gpt-4o-mini-2024-07-18", provider: "fake", credits: PRICE }]
  }))
}, 60_000)

afterAll(async () => {
  await gateway?.close()
  await fake?.close()
  await pg?.destroy()
})

const post = (key: string, body: Record<string, unknown>) =>
  fetch(`${gateway.url}/v1/responses`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "paid", ...body })
  })

describe.skipIf(!canRunPostgres)("a turn after a response that could not be stored", () => {
  it("gets 404 and is not charged", async () => {
    const { key } = await gateway.createKey()
    // Slow enough to stop the store in the middle.
    fake.enqueue({ kind: "text", text: "one two three four five six seven eight", chunkDelayMs: 150 })
    const response = await post(key, { input: "hello", stream: true })
    expect(response.status).toBe(200)
    const reader = response.body!.getReader()
    const decoder = new TextDecoder()
    let text = decoder.decode((await reader.read()).value, { stream: true })
    await pg.kill()
    for (let next = await reader.read(); !next.done; next = await reader.read()) text += decoder.decode(next.value, { stream: true })
    const completed = text.split("\n").filter((l) => l.startsWith("data: ")).map((l) => JSON.parse(l.slice(6)) as { type: string; response?: { id: string; store: boolean } })
      .find((e) => e.type === "response.completed")
    expect(completed?.response?.store).toBe(false)
    const id = completed!.response!.id

    await pg.start()
    // The store answers again (the gateway's pool reconnects).
    let refused: Response | undefined
    await waitFor("the store back", async () => {
      refused = await post(key, { input: "and then?", previous_response_id: id })
      return refused.status !== 503
    }, 20_000, 100)
    expect(refused!.status).toBe(404)
    expect(await refused!.json()).toMatchObject({ error: "not_found", details: { field: "previous_response_id", response_id: id } })
    const requestId = refused!.headers.get("x-request-id")!

    // Charged at admission, refunded when it ended: the ledger of that request sums to nothing.
    await waitFor("the refund in the ledger", async () => (await ledgerOf(gateway.url, requestId)).some((r) => r.kind === "refund"), 10_000)
    const rows = await ledgerOf(gateway.url, requestId)
    expect(rows.map((r) => r.kind)).toEqual(["charge", "refund"])
    expect(rows.reduce((sum, r) => sum + r.amount, 0)).toBe(0)
    const [record] = await auditFor(gateway, requestId)
    expect(record).toMatchObject({ status: 404, error: "not_found", credits: 0 })
    // Nothing was asked of the provider for it.
    expect(fake.requests).toHaveLength(1)
  }, 60_000)
})
