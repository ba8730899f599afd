/**
 * Issue 33 end to end: a token-priced model reserves the request's bound and keeps its exact
 * cost. The audit record's `credits` is the cost, the workspace balance moves by exactly the
 * cost, and a pool that cannot hold the bound answers 402 with `details.required_credits` = the
 * bound (with and without a named output limit).
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { fromMicros } from "../../src/domain/money.ts"
import { boundMicros, costMicros, effectiveMaxOutputTokens, estimateInput, priceMicros } from "../../src/domain/pricing.ts"
import { collectedAudit } from "../support/collected-audit.ts"
import { startFakeAnthropic } from "../support/fake-anthropic.ts"
import type { FakeUpstream } from "../support/fake-common.ts"
import { startFakeOpenAI } from "../support/fake-openai.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { waitFor } from "../limits/support.ts"

const OPENAI_KEY = "sk-fake-openai-0123456789abcdef"
const ANTHROPIC_KEY = "sk-ant-fake-0123456789abcdef"
const CAP = 8_000
const PRICE = { input: 3, output: 15, cache_read: 0.3, cache_write: 3.75 }
const pricing = { credits_micros: 250_000, price: priceMicros(PRICE)! }

let openai: FakeUpstream
let anthropic: FakeUpstream
const audit = collectedAudit()
const gateways: Array<TestGateway> = []

const start = async (poolCredits: number) => {
  const gateway = await startGateway(testConfig({
    workspace: { credits: poolCredits },
    limits: { requests_per_minute: 100_000, concurrent_streams: 100 },
    providers: [
      { name: "openai", kind: "openai", base_url: openai.url, api_key: OPENAI_KEY },
      { name: "anthropic", kind: "anthropic", base_url: anthropic.url, api_key: ANTHROPIC_KEY }
    ],
    routing: { retries: 1, backoff_ms: 0 },
    models: [
      { alias: "gpt", id: "gpt-5.5", provider: "openai", max_tokens: CAP, credits: 0.25, price: PRICE },
      // Answered by gpt when Anthropic fails: the request pays gpt's price.
      { alias: "claude-or-gpt", id: "claude-dear", deployments: [{ provider: "anthropic", id: "claude-sonnet-4-5-20250929" }], max_tokens: CAP, credits: 0, price: { input: 15, output: 75 }, fallbacks: ["gpt"] },
      { alias: "claude", id: "claude-sonnet-4-5-20250929", provider: "anthropic", max_tokens: CAP, credits: 0.25, price: PRICE }
    ]
  }), { audit: audit.layer })
  gateways.push(gateway)
  return { gateway, key: (await gateway.createKey()).key }
}

beforeAll(async () => {
  ;[openai, anthropic] = await Promise.all([
    startFakeOpenAI({ apiKey: OPENAI_KEY, models: ["gpt-5.5"] }),
    startFakeAnthropic({ apiKey: ANTHROPIC_KEY, models: ["claude-sonnet-4-5-20250929"] })
  ])
})

afterAll(async () => {
  await Promise.all(gateways.map((gateway) => gateway.close()))
  await Promise.all([openai?.close(), anthropic?.close()])
})

beforeEach(() => {
  openai.reset()
  anthropic.reset()
})

const post = (gateway: TestGateway, key: string, path: string, body: Record<string, unknown>) =>
  fetch(gateway.url + path, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "anthropic-version": "2023-06-01" },
    body: JSON.stringify(body)
  })

/** The balance once every movement reached the store (a settlement is written after the answer). */
const settledBalance = async (gateway: TestGateway) => {
  await waitFor("credit movements written", () => gateway.credits.pending() === 0)
  return balance(gateway)
}

/** Waits until the balance is `expected`: the settlement that returns the rest of the bound lands after the answer. */
const balanceBecomes = async (gateway: TestGateway, expected: number) => {
  let last = NaN
  await waitFor(`balance ${expected} (last seen ${last})`, async () => (last = await balance(gateway)) === expected).catch(() => undefined)
  expect(last).toBe(expected)
}

const balance = async (gateway: TestGateway) => ((await (await gateway.admin("GET", "/workspace")).json()) as { credits: number }).credits

describe("a token-priced request is charged its exact cost", () => {
  let gateway: TestGateway
  let key: string
  beforeAll(async () => {
    ;({ gateway, key } = await start(1_000))
  })

  it.each([false, true])("Anthropic Messages, stream %s", async (stream) => {
    anthropic.enqueue({ kind: "text", text: "Hello there", usage: { input: 700, cacheRead: 300, cacheWrite: 200, output: 40 } })
    const before = await settledBalance(gateway)
    const response = await post(gateway, key, "/v1/messages", { model: "claude", max_tokens: 500, stream, messages: [{ role: "user", content: "Say hello" }] })
    await response.text()
    expect(response.status).toBe(200)
    const record = await audit.recordOf(response.headers.get("x-request-id"))
    // 250,000 + 700 x 3 + 300 x 0.3 + 200 x 3.75 + 40 x 15 = 250,000 + 3,540 micros.
    const cost = costMicros(pricing, { input: 700, cache_read: 300, cache_write: 200, output: 40 })
    expect(cost).toBe(253_540)
    expect(record.credits).toBe(cost)
    await balanceBecomes(gateway, fromMicros(Math.round(before * 1_000_000) - cost))
  })

  it.each([false, true])("OpenAI Chat Completions, stream %s", async (stream) => {
    openai.enqueue({ kind: "text", text: "Hello there", usage: { input: 1000, cacheRead: 300, output: 40 } })
    const before = await settledBalance(gateway)
    const response = await post(gateway, key, "/v1/chat/completions", { model: "gpt", stream, messages: [{ role: "user", content: "Say hello" }] })
    await response.text()
    expect(response.status).toBe(200)
    const record = await audit.recordOf(response.headers.get("x-request-id"))
    const cost = costMicros(pricing, { input: 700, cache_read: 300, cache_write: 0, output: 40 })
    expect(cost).toBe(250_000 + 2_100 + 90 + 600)
    expect(record.credits).toBe(cost)
    await balanceBecomes(gateway, fromMicros(Math.round(before * 1_000_000) - cost))
  })
})

describe("a fallback", () => {
  it("charges the answering model's price and tokens", async () => {
    const { gateway, key } = await start(1_000)
    anthropic.enqueue({ kind: "error", status: 529 }, { kind: "error", status: 529 })
    openai.enqueue({ kind: "text", text: "Hello there", usage: { input: 1000, cacheRead: 300, output: 40 } })
    const before = await settledBalance(gateway)
    const response = await post(gateway, key, "/v1/chat/completions", { model: "claude-or-gpt", max_tokens: 500, messages: [{ role: "user", content: "Say hello" }] })
    expect(response.status, await response.text()).toBe(200)
    expect(openai.requests.length).toBe(1)
    const cost = costMicros(pricing, { input: 700, cache_read: 300, cache_write: 0, output: 40 })
    expect((await audit.recordOf(response.headers.get("x-request-id"))).credits).toBe(cost)
    await balanceBecomes(gateway, fromMicros(Math.round(before * 1_000_000) - cost))
  })
})

describe("a pool that cannot hold the bound", () => {
  let gateway: TestGateway
  let key: string
  beforeAll(async () => {
    ;({ gateway, key } = await start(0.3))
  })

  const boundOf = (body: Record<string, unknown>) => boundMicros(pricing, estimateInput(body).tokens, effectiveMaxOutputTokens(body, CAP))

  it("refuses a request without max tokens: the bound holds the model's cap", async () => {
    const body = { model: "gpt", messages: [{ role: "user", content: "Say hello" }] }
    const response = await post(gateway, key, "/v1/chat/completions", body)
    expect(response.status).toBe(402)
    const envelope = (await response.json()) as { error: string; details: { required_credits: number } }
    expect(envelope.error).toBe("insufficient_credits")
    // 0.25 credits flat and 8,000 output tokens at 15 credits per million (0.12): more than the pool's 0.3.
    expect(boundOf(body)).toBeGreaterThan(300_000)
    expect(envelope.details.required_credits).toBe(fromMicros(boundOf(body)))
    expect(openai.requests.length).toBe(0)
  })

  it("admits the same request with a small max_tokens, and keeps only its cost", async () => {
    const body = { model: "gpt", max_tokens: 100, messages: [{ role: "user", content: "Say hello" }] }
    expect(boundOf(body)).toBeLessThan(300_000)
    openai.enqueue({ kind: "text", text: "Hello", usage: { input: 20, output: 3 } })
    const before = await settledBalance(gateway)
    const response = await post(gateway, key, "/v1/chat/completions", body)
    expect(response.status, await response.text()).toBe(200)
    const cost = costMicros(pricing, { input: 20, cache_read: 0, cache_write: 0, output: 3 })
    expect((await audit.recordOf(response.headers.get("x-request-id"))).credits).toBe(cost)
    await balanceBecomes(gateway, fromMicros(Math.round(before * 1_000_000) - cost))
  })
})
