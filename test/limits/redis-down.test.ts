/**
 * A gateway configured with a Redis it cannot reach fails closed (docs/decisions.md section 5 and the
 * RedisClient policy): every request that needs a limit decision gets 503
 * `dependency_unavailable` naming redis, and nothing is admitted: no upstream call, no credits
 * taken, no budget spent. What needs no limit (auth refusals, the admin API) still answers.
 * The same holds when Redis goes away (or goes silent) under a running gateway, which serves
 * again by itself once Redis is back.
 */
import { randomBytes } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startFakeOpenAI, type FakeUpstream } from "../support/fake-openai.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { redisProxy, type RedisProxy } from "../services/limits/support.ts"
import { adminCall, balance, chat, expectError, keyView, ledger, ledgerOf, newKey, type Reply, userMessage, waitFor } from "./support.ts"

const UPSTREAM_KEY = `sk-upstream-${randomBytes(12).toString("hex")}`

let fake: FakeUpstream
let gw: TestGateway

beforeAll(async () => {
  fake = await startFakeOpenAI({ apiKey: UPSTREAM_KEY })
  gw = await startGateway(testConfig({
    redis: "redis://127.0.0.1:1",
    workspace: { credits: 100 },
    providers: [{ name: "fake", kind: "openai", base_url: fake.url, api_key: UPSTREAM_KEY }],
    models: [
      { alias: "free", id: "echo-free", provider: "echo", credits: 0 },
      { alias: "upstream", id: "gpt-4o-mini-2024-07-18", provider: "fake", credits: 5 }
    ]
  }))
})

afterAll(async () => {
  await gw?.close()
  await fake?.close()
})

const expectRedisDown = (reply: Reply) => {
  expectError(reply, 503, "dependency_unavailable")
  expect(reply.body.message).toMatch(/redis/i)
  expect(reply.body.message).toContain("127.0.0.1:1")
  expect(reply.body.details).toMatchObject({ dependency: "redis" })
  expect(reply.body.request_id).toBe(reply.requestId)
}

describe("Redis configured but unreachable", () => {
  it("refuses every model request with 503 dependency_unavailable naming redis, and admits none", async () => {
    const { key, id } = await newKey(gw.url, { budget: { max_requests: 10 } })
    const replies = await Promise.all([
      chat(gw.url, key, { model: "free" }),
      chat(gw.url, key, { model: "upstream" }),
      chat(gw.url, key, { model: "upstream", stream: true }),
      fetch(`${gw.url}/v1/messages`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-api-key": key },
        body: JSON.stringify({ model: "upstream", max_tokens: 16, messages: userMessage() })
      }).then(async (r) => ({ status: r.status, headers: r.headers, text: "", body: await r.json(), requestId: r.headers.get("x-request-id") ?? "" }))
    ])
    for (const reply of replies) {
      expectRedisDown(reply)
      expect(reply.headers.get("x-ratelimit-limit")).toBeNull()
    }
    const models = await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } })
    expect(models.status).toBe(503)

    expect(fake.requests).toHaveLength(0)
    expect(await balance(gw.url)).toBe(100)
    expect((await ledger(gw.url)).map((r) => r.kind)).toEqual(["initial"])
    expect((await keyView(gw.url, id)).budget).toMatchObject({ used: 0, remaining: 10 })
  })

  it("still answers what needs no limit: authentication refusals and the admin API", async () => {
    expectError(await chat(gw.url, `sk-mg-${"0".repeat(32)}`, { model: "free" }), 401, "unauthorized")
    const { key, id } = await newKey(gw.url)
    expect((await adminCall(gw.url, "POST", `/api-keys/${id}/revoke`)).status).toBe(200)
    expectError(await chat(gw.url, key, { model: "free" }), 401, "key_inactive")
  })
})

describe("Redis lost under a running gateway", () => {
  let proxy: RedisProxy
  let live: TestGateway

  beforeAll(async () => {
    proxy = await redisProxy()
    live = await startGateway(testConfig({
      redis: proxy.url,
      workspace: { credits: 100 },
      models: [{ alias: "paid", id: "echo-paid", provider: "echo", credits: 1 }]
    }))
  })

  afterAll(async () => {
    await live?.close()
    await proxy?.close()
  })

  const servesAgain = (key: string) =>
    waitFor("served again after Redis came back", async () => (await chat(live.url, key, { model: "paid" })).status === 200)

  it("stopped: requests fail closed at once and nothing is charged; served again when it is back", async () => {
    const { key } = await newKey(live.url)
    expect((await chat(live.url, key, { model: "paid" })).status).toBe(200)
    const before = await balance(live.url)
    await proxy.down()
    const startedAt = Date.now()
    const refused = await chat(live.url, key, { model: "paid" })
    expectError(refused, 503, "dependency_unavailable")
    expect(refused.body.details).toMatchObject({ dependency: "redis" })
    // Refused by the client's own deadline, not after TCP gave up (minutes): generous for a machine at load 10.
    expect(Date.now() - startedAt).toBeLessThan(5_000)
    expect(await ledgerOf(live.url, refused.requestId)).toEqual([])
    expect(await balance(live.url)).toBe(before)
    await proxy.up()
    await servesAgain(key)
  })

  it("silent (a partition): requests fail closed within the command deadline; served again when it answers", async () => {
    const { key } = await newKey(live.url)
    expect((await chat(live.url, key, { model: "paid" })).status).toBe(200)
    const before = await balance(live.url)
    proxy.freeze()
    const startedAt = Date.now()
    const refused = await chat(live.url, key, { model: "paid", stream: true })
    expectError(refused, 503, "dependency_unavailable")
    expect(refused.body.message).toMatch(/redis/i)
    // Refused by the client's own deadline, not after TCP gave up (minutes): generous for a machine at load 10.
    expect(Date.now() - startedAt).toBeLessThan(6_000)
    expect(await balance(live.url)).toBe(before)
    proxy.thaw()
    await servesAgain(key)
  })
})
