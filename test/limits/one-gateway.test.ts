/**
 * Limits and money on one gateway, as clients and the operator see them over HTTP: the rate
 * limit and its headers, concurrent streams, request budgets, credits with their ledger, and the
 * order in which the checks refuse (docs/decisions.md sections 4 and 5). Refunds around a failing
 * provider are in refunds.test.ts, on the scripted provider layer.
 *
 * Everything runs twice: on the embedded default (in-process limits, SQLite store) and on the
 * scale-out backends (Redis limits, Postgres store) of the machine.
 */
import { randomBytes } from "node:crypto"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { createPostgresDatabase, type TempDatabase } from "../support/databases.ts"
import { startFakeOpenAI, type FakeUpstream } from "../support/fake-openai.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { WAIT_MS } from "../support/wait.ts"
import {
  adminCall,
  balance,
  burst,
  chat,
  count,
  dataPayloads,
  expectError,
  expectLedgerExplains,
  expectOpen,
  expectRateHeaders,
  expectRateLimited,
  isOpen,
  keyView,
  summary,
  rateBurst,
  warmConnections,
  ledger,
  ledgerOf,
  newKey,
  openStream,
  REDIS_URL,
  type OpenStream,
  type Reply,
  sleep,
  userMessage,
  waitFor
} from "./support.ts"

const UPSTREAM_KEY = `sk-upstream-${randomBytes(12).toString("hex")}`
const MAX_BODY = 8192
const quick = { connect_ms: 300, first_byte_ms: 300, idle_ms: 300 }
// Far beyond any test: a stream held open here ends only when the test ends it.
const patient = { connect_ms: 10_000, first_byte_ms: 10_000, idle_ms: 10_000 }

const PRICES = { paid: 3, dear: 97, pricey: 1_000_000, upstream: 2, held: 1 }

const config = (fakeUrl: string, backend: Record<string, unknown>) =>
  testConfig({
    ...backend,
    workspace: { credits: 1000 },
    limits: { requests_per_minute: 50, concurrent_streams: 5, max_body_bytes: MAX_BODY },
    providers: [
      { name: "echo", kind: "echo" },
      { name: "fake", kind: "openai", base_url: fakeUrl, api_key: UPSTREAM_KEY, timeouts: quick },
      { name: "fake-patient", kind: "openai", base_url: fakeUrl, api_key: UPSTREAM_KEY, timeouts: patient }
    ],
    models: [
      { alias: "free", id: "echo-free", provider: "echo", credits: 0 },
      { alias: "paid", id: "echo-paid", provider: "echo", credits: PRICES.paid },
      { alias: "dear", id: "echo-dear", provider: "echo", credits: PRICES.dear },
      { alias: "pricey", id: "echo-pricey", provider: "echo", credits: PRICES.pricey },
      { alias: "upstream", id: "gpt-4o-mini-2024-07-18", provider: "fake", credits: PRICES.upstream },
      { alias: "upstream-pricey", id: "gpt-4o-2024-08-06", provider: "fake", credits: PRICES.pricey },
      { alias: "held", id: "gpt-4.1-mini", provider: "fake-patient", credits: PRICES.held }
    ]
  })

const backends = [
  { name: "in-process limits, SQLite store", postgres: false },
  { name: "Redis limits, Postgres store", postgres: true }
]

let fake: FakeUpstream

beforeAll(async () => {
  fake = await startFakeOpenAI({ apiKey: UPSTREAM_KEY })
})

afterAll(async () => {
  await fake?.close()
})

beforeEach(() => fake.reset())

describe.each(backends)("$name", ({ postgres }) => {
  let gw: TestGateway
  let db: TempDatabase | undefined
  let url: string

  beforeAll(async () => {
    db = postgres ? await createPostgresDatabase("mg_limits") : undefined
    gw = await startGateway(config(fake.url, db === undefined ? {} : { store: db.url, redis: REDIS_URL }))
    url = gw.url
  })

  afterAll(async () => {
    await gw?.close()
    await db?.drop()
  })

  const messages = (key: string, body: Record<string, unknown>, signal?: AbortSignal) =>
    fetch(`${url}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": key, "anthropic-version": "2023-06-01" },
      body: JSON.stringify({ max_tokens: 32, messages: userMessage(), ...body }),
      ...(signal === undefined ? {} : { signal })
    })

  describe("rate limit", () => {
    it("a key's requests at once over its limit: exactly the limit admitted, the rest refused with Retry-After and the headers", async () => {
      // The configured 50/min applies to a key without its own limit.
      const plain = await newKey(url)
      expectRateHeaders((await chat(url, plain.key, { model: "free" })).headers, 50)
      // The burst against 12/min: one request every 5 s, an interval a loaded machine's burst of 15
      // stays well within, so the count is exact (50/min refilled every 1.2 s, which a burst at
      // load 10 outlasted).
      const { key } = await newKey(url, { limits: { requests_per_minute: 12 } })
      await warmConnections([url], 15)
      const { replies } = await rateBurst(15, () => url, key, 12)
      const remaining = replies.filter((r) => r.status === 200).map((r) => expectRateHeaders(r.headers, 12).remaining)
      // Each admission spent one request of the burst: the remainders count down 11..0 without repeats.
      expect(new Set(remaining).size).toBe(12)
      expect(Math.min(...remaining)).toBe(0)
      for (const reply of replies.filter((r) => r.status === 429)) expectRateLimited(reply, 12)
    })

    it("a request sent after Retry-After seconds is admitted (a per-key 60/min: one request per second)", async () => {
      const { key } = await newKey(url, { limits: { requests_per_minute: 60 } })
      await warmConnections([url], 61)
      // Not a count (rateBurst's): a burst at load 10 may outlast the 1 s refill. What matters is a
      // refusal, so requests go on, one at a time, until one is refused (the state), however slow.
      const replies = await burst(61, () => url, key, { model: "free" })
      expect(count(replies, 200) + count(replies, 429), summary(replies)).toBe(61)
      let refusal = replies.filter((r) => r.status === 429).at(-1)
      await waitFor("a refusal", async () => {
        refusal ??= await chat(url, key, { model: "free" }).then((r) => (r.status === 429 ? r : undefined))
        return refusal !== undefined
      })
      // Nothing else spends this key's requests, so the last refusal is one interval (1 s) from a retry.
      const retryAfter = expectRateLimited(refusal!, 60)
      expect(retryAfter).toBe(1)
      await sleep(retryAfter * 1000)
      const retried = await chat(url, key, { model: "free" })
      expect(retried.status, retried.text).toBe(200)
      expectRateHeaders(retried.headers, 60)
    })

    it("a per-key requests_per_minute override sets the limit, and a change applies to the next request", async () => {
      const { key, id } = await newKey(url, { limits: { requests_per_minute: 10 } })
      const replies = await burst(15, () => url, key, { model: "free" })
      expect(count(replies, 200), summary(replies)).toBe(10)
      for (const reply of replies.filter((r) => r.status === 200)) expectRateHeaders(reply.headers, 10)
      for (const reply of replies.filter((r) => r.status === 429)) expectRateLimited(reply, 10)

      const patched = await adminCall(url, "PATCH", `/api-keys/${id}`, { limits: { requests_per_minute: 20 } })
      expect(patched.status, patched.text).toBe(200)
      // Raising 10 -> 20 keeps the 10 requests already spent, so 10 more are there.
      const after = await burst(12, () => url, key, { model: "free" })
      expect(count(after, 200), summary(after)).toBe(10)
      for (const reply of after.filter((r) => r.status === 200)) expectRateHeaders(reply.headers, 20)
      for (const reply of after.filter((r) => r.status === 429)) expectRateLimited(reply, 20)
    })

    it("every authenticated request counts, on every endpoint, refused ones included", async () => {
      const { key } = await newKey(url, { limits: { requests_per_minute: 4 } })
      const viaChat = await chat(url, key, { model: "free" })
      expect(viaChat.status, viaChat.text).toBe(200)
      expectRateHeaders(viaChat.headers, 4)
      const viaMessages = await messages(key, { model: "free" })
      expect(viaMessages.status, await viaMessages.clone().text()).toBe(200)
      expectRateHeaders(viaMessages.headers, 4)
      const models = await fetch(`${url}/v1/models`, { headers: { authorization: `Bearer ${key}` } })
      expect(models.status).toBe(200)
      expect(expectRateHeaders(models.headers, 4).remaining).toBe(1)
      const invalid = await chat(url, key, { model: "free", messages: "not a list" })
      expectError(invalid, 400, "validation_failed")
      expectRateLimited(await chat(url, key, { model: "free" }), 4)
      const refusedMessages = await messages(key, { model: "free" })
      expect(refusedMessages.status).toBe(429)
      expect(Number(refusedMessages.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
    })

    it("limits each key on its own", async () => {
      const first = await newKey(url, { limits: { requests_per_minute: 3 } })
      const second = await newKey(url, { limits: { requests_per_minute: 3 } })
      expect(count(await burst(5, () => url, first.key, { model: "free" }), 200)).toBe(3)
      expect(count(await burst(5, () => url, second.key, { model: "free" }), 200)).toBe(3)
    })
  })

  describe("concurrent streams", () => {
    const openAll = async (key: string, n: number) => {
      const streams: Array<OpenStream> = []
      // One at a time, so which streams hold the slots is known.
      for (let i = 0; i < n; i++) streams.push(expectOpen(await openStream(url, key, { model: "held" })))
      return streams
    }

    const expectStreamRefused = (value: OpenStream | Reply, max: number) => {
      expect(isOpen(value), "expected a refusal").toBe(false)
      const reply = value as Reply
      expectError(reply, 429, "rate_limited")
      expect(reply.body.details.limit).toBe("concurrent_streams")
      expect(reply.body.message).toContain(`${max}`)
      expect(Number(reply.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
      for (const name of ["x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"]) {
        expect(reply.headers.get(name) ?? "").toMatch(/^\d+$/)
      }
    }

    /**
     * A slot freed by a client that left is noticed by the server shortly after, not at once:
     * tries until a stream is admitted (the state), each refusal the right one meanwhile. How
     * soon is not asserted (a machine at load 10 notices the disconnect late, not wrongly).
     */
    const admittedSoon = async (key: string, max = 5) => {
      let admitted: OpenStream | undefined
      await waitFor("a stream slot freed after the client left", async () => {
        const attempt = await openStream(url, key, { model: "held" })
        if (isOpen(attempt)) admitted = attempt
        else expectStreamRefused(attempt, max)
        return admitted !== undefined
      }, WAIT_MS, 20)
      return admitted!
    }

    it("six concurrent streams: the sixth is refused; after one ends a new one is admitted; after a client leaves too", async () => {
      const { key } = await newKey(url)
      // The first stream ends when released (once the sixth was refused); the others stay open until abandoned.
      let release!: () => void
      const released = new Promise<void>((resolve) => (release = resolve))
      fake.enqueue({ kind: "text", text: Array.from({ length: 15 }, (_, i) => `w${i}`).join(" "), until: released })
      fake.setDefault(() => ({ kind: "stall_after", chunks: 1 }))
      const streams = await openAll(key, 5)
      for (const stream of streams) expectRateHeaders(stream.headers, 50)
      expectStreamRefused(await openStream(url, key, { model: "held" }), 5)

      release()
      const ended = await streams[0]!.finish()
      expect(dataPayloads(ended).at(-1)).toBe("[DONE]")
      const next = expectOpen(await openStream(url, key, { model: "held" }))
      expectStreamRefused(await openStream(url, key, { model: "held" }), 5)

      streams[1]!.abandon()
      const afterLeaving = await admittedSoon(key)
      expectStreamRefused(await openStream(url, key, { model: "held" }), 5)

      for (const stream of [...streams.slice(2), next, afterLeaving]) stream.abandon()
      // With every client gone, all five slots come back.
      await waitFor("upstream streams closed", () => fake.openStreams() === 0)
      const again: Array<OpenStream> = []
      for (let i = 0; i < 5; i++) again.push(await admittedSoon(key))
      for (const stream of again) stream.abandon()
    })

    it("a per-key concurrent_streams override applies; a client leaving before the upstream answered frees its slot", async () => {
      const { key } = await newKey(url, { limits: { concurrent_streams: 1 } })
      fake.setDefault(() => ({ kind: "hang" }))
      const controller = new AbortController()
      const pending = fetch(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
        body: JSON.stringify({ model: "held", stream: true, messages: userMessage() }),
        signal: controller.signal
      }).catch((error: unknown) => error)
      await waitFor("upstream request open", () => fake.openStreams() === 1)
      expectStreamRefused(await openStream(url, key, { model: "held" }), 1)
      controller.abort()
      await pending
      await waitFor("upstream request abandoned", () => fake.openStreams() === 0)
      fake.setDefault(() => ({ kind: "text", text: "back again" }))
      let reply: Reply | undefined
      await waitFor("slot freed", async () => {
        reply = await chat(url, key, { model: "held", stream: true })
        return reply.status === 200
      })
      expect(dataPayloads(reply!.text).at(-1)).toBe("[DONE]")
    })

    it("streams on /v1/messages share the key's slots with chat completions streams", async () => {
      const { key } = await newKey(url, { limits: { concurrent_streams: 2 } })
      fake.setDefault(() => ({ kind: "stall_after", chunks: 1 }))
      const viaChat = expectOpen(await openStream(url, key, { model: "held" }))
      const controller = new AbortController()
      const viaMessages = await messages(key, { model: "held", stream: true }, controller.signal)
      expect(viaMessages.status).toBe(200)
      expectRateHeaders(viaMessages.headers, 50)
      const reader = viaMessages.body!.getReader()
      expect(new TextDecoder().decode((await reader.read()).value)).toContain("event: ")
      expectStreamRefused(await openStream(url, key, { model: "held" }), 2)
      const refused = await messages(key, { model: "held", stream: true })
      expect(refused.status).toBe(429)
      expect(await refused.json()).toMatchObject({ error: "rate_limited", details: { limit: "concurrent_streams" } })
      controller.abort()
      const next = await admittedSoon(key, 2)
      for (const stream of [viaChat, next]) stream.abandon()
      await waitFor("upstream streams closed", () => fake.openStreams() === 0)
    })

    it("a stream refused after taking its slot (budget, credits, upstream error) gives the slot back", async () => {
      const { key, id } = await newKey(url, { limits: { concurrent_streams: 1 }, budget: { max_requests: 3 } })
      expectError(await chat(url, key, { model: "pricey", stream: true }), 402, "insufficient_credits")
      fake.enqueue({ kind: "error", status: 500 })
      expectError(await chat(url, key, { model: "upstream", stream: true }), 502, "provider_error")
      expect((await chat(url, key, { model: "free", stream: true })).status).toBe(200)
      expectError(await chat(url, key, { model: "free", stream: true }), 429, "budget_exhausted")
      expect((await adminCall(url, "POST", `/api-keys/${id}/budget/reset`)).status).toBe(200)
      const after = await chat(url, key, { model: "free", stream: true })
      expect(after.status, after.text).toBe(200)
    })
  })

  describe("request budget", () => {
    it("is visible on the key, enforced with 429 budget_exhausted, and resettable", async () => {
      const { key, id } = await newKey(url, { budget: { max_requests: 3 } })
      expect((await keyView(url, id)).budget).toMatchObject({ max_requests: 3, used: 0, remaining: 3, used_requests: 0, remaining_requests: 3, max_credits: null, period: null, resets_at: null })
      for (let i = 0; i < 3; i++) expect((await chat(url, key, { model: "free" })).status).toBe(200)
      const refused = await chat(url, key, { model: "free" })
      expectError(refused, 429, "budget_exhausted")
      // Waiting does not refill a budget: the SDKs are told not to retry.
      expect(refused.headers.get("x-should-retry")).toBe("false")
      expect(refused.headers.get("retry-after")).toBeNull()
      expect(refused.body.details.max_requests).toBe(3)
      expect(refused.body.message).toContain("3")
      expect((await keyView(url, id)).budget).toMatchObject({ max_requests: 3, used: 3, remaining: 0, used_requests: 3, remaining_requests: 0, max_credits: null, period: null, resets_at: null })

      const reset = await adminCall(url, "POST", `/api-keys/${id}/budget/reset`)
      expect(reset.status, reset.text).toBe(200)
      expect(reset.body.budget).toMatchObject({ max_requests: 3, used: 0, remaining: 3, used_requests: 0, remaining_requests: 3, max_credits: null, period: null, resets_at: null })
      expect((await chat(url, key, { model: "free" })).status).toBe(200)
      expect((await keyView(url, id)).budget).toMatchObject({ max_requests: 3, used: 1, remaining: 2, used_requests: 1, remaining_requests: 2, max_credits: null, period: null, resets_at: null })
    })

    it("100 concurrent requests against a budget of 20: exactly 20 admitted", async () => {
      const { key, id } = await newKey(url, { budget: { max_requests: 20 }, limits: { requests_per_minute: 1000 } })
      const replies = await burst(100, () => url, key, { model: "free" })
      expect(count(replies, 200), summary(replies)).toBe(20)
      expect(count(replies, 429), summary(replies)).toBe(80)
      for (const reply of replies.filter((r) => r.status === 429)) expectError(reply, 429, "budget_exhausted")
      expect((await keyView(url, id)).budget).toMatchObject({ max_requests: 20, used: 20, remaining: 0, used_requests: 20, remaining_requests: 0, max_credits: null, period: null, resets_at: null })
    })

    it("100 concurrent paid requests against a budget of 20: exactly 20 admitted and charged, the 80 refused charge nothing", async () => {
      // A budgeted paid request's count and charge go in one commit, the charge only if the count admitted it.
      const { key, id } = await newKey(url, { budget: { max_requests: 20 }, limits: { requests_per_minute: 1000 } })
      const before = await balance(url)
      const replies = await burst(100, () => url, key, { model: "paid" })
      expect(count(replies, 200), summary(replies)).toBe(20)
      expect(count(replies, 429), summary(replies)).toBe(80)
      for (const reply of replies.filter((r) => r.status === 429)) expectError(reply, 429, "budget_exhausted")
      expect((await keyView(url, id)).budget).toMatchObject({ max_requests: 20, used: 20, remaining: 0, used_requests: 20, remaining_requests: 0, max_credits: null, period: null, resets_at: null })
      expect(await balance(url)).toBe(before - 20 * PRICES.paid)
      const charged = (await ledger(url)).filter((row) => row.key_id === id)
      expect(charged.map((row) => row.amount)).toEqual(Array.from({ length: 20 }, () => -PRICES.paid))
      expect(new Set(charged.map((row) => row.request_id))).toEqual(new Set(replies.filter((r) => r.status === 200).map((r) => r.requestId)))
    })

    it("a stream refused for want of a slot does not spend the budget", async () => {
      const { key, id } = await newKey(url, { budget: { max_requests: 5 }, limits: { concurrent_streams: 1 } })
      fake.setDefault(() => ({ kind: "stall_after", chunks: 1 }))
      const held = expectOpen(await openStream(url, key, { model: "held" }))
      const refused = await openStream(url, key, { model: "held" })
      expect(isOpen(refused)).toBe(false)
      expect((refused as Reply).body.details.limit).toBe("concurrent_streams")
      held.abandon()
      expect((await keyView(url, id)).budget).toMatchObject({ max_requests: 5, used: 1, remaining: 4, used_requests: 1, remaining_requests: 4, max_credits: null, period: null, resets_at: null })
    })
  })

  describe("credits", () => {
    it("a paid request is charged its model's price once; the ledger says who, what, when and which request", async () => {
      const { key, id } = await newKey(url)
      const before = await balance(url)
      const reply = await chat(url, key, { model: "paid" })
      expect(reply.status, reply.text).toBe(200)
      expect(await balance(url)).toBe(before - PRICES.paid)
      const rows = await ledgerOf(url, reply.requestId)
      expect(rows).toHaveLength(1)
      expect(rows[0]).toMatchObject({
        kind: "charge",
        amount: -PRICES.paid,
        balance_after: before - PRICES.paid,
        actor: id,
        key_id: id,
        request_id: reply.requestId,
        model: "paid"
      })
      expect(Math.abs(Date.parse(rows[0]!.ts) - Date.now())).toBeLessThan(60_000)
      // A free model moves nothing.
      const free = await chat(url, key, { model: "free" })
      expect(free.status).toBe(200)
      expect(await ledgerOf(url, free.requestId)).toEqual([])
      expect(await balance(url)).toBe(before - PRICES.paid)
    })

    it("402 insufficient_credits names the model, its price and the balance, and charges nothing", async () => {
      const { key } = await newKey(url)
      const before = await balance(url)
      for (const stream of [false, true]) {
        const reply = await chat(url, key, { model: "pricey", stream })
        expectError(reply, 402, "insufficient_credits")
        expect(reply.body.details).toEqual({ model: "pricey", required_credits: PRICES.pricey, available_credits: before })
        expect(await ledgerOf(url, reply.requestId)).toEqual([])
      }
      expect(await balance(url)).toBe(before)
    })

    it("concurrent paid requests empty the pool exactly and never below zero", async () => {
      const { key } = await newKey(url, { limits: { requests_per_minute: 10_000 } })
      const before = await balance(url)
      const affordable = Math.floor(before / PRICES.dear)
      const replies = await burst(affordable + 10, () => url, key, { model: "dear" })
      expect(count(replies, 200), summary(replies)).toBe(affordable)
      expect(count(replies, 402), summary(replies)).toBe(10)
      expect(await balance(url)).toBe(before % PRICES.dear)
      for (const reply of replies.filter((r) => r.status === 402)) {
        expect(reply.body.details.available_credits).toBe(before % PRICES.dear)
      }
      // Every served request paid, exactly once.
      for (const reply of replies.filter((r) => r.status === 200)) {
        expect((await ledgerOf(url, reply.requestId)).map((r) => r.amount)).toEqual([-PRICES.dear])
      }
      // Nor can an operator take the pool below zero: top-ups are positive, with at most six fractional digits (issue 33).
      for (const credits of [-1000, 0, 0.0000001, 1.1234567]) {
        expectError(await adminCall(url, "POST", "/workspace/credits", { credits }), 400, "validation_failed")
      }
      expect(await balance(url)).toBe(before % PRICES.dear)
      const topup = await adminCall(url, "POST", "/workspace/credits", { credits: 1000, note: "refill after the drain test" })
      expect(topup.status, topup.text).toBe(200)
      expect(topup.body.credits).toBe((before % PRICES.dear) + 1000)
      expect(await balance(url)).toBe((before % PRICES.dear) + 1000)
    })

    // Refunds of 5xx answers and of streams failing mid-way, and the charge of a client that
    // leaves, are in refunds.test.ts, on the scripted provider layer.

    it("the ledger explains every change and adds up to the balance", async () => {
      expectLedgerExplains(await ledger(url), await balance(url))
      const topups = (await ledger(url)).filter((r) => r.kind === "topup")
      expect(topups.length).toBeGreaterThanOrEqual(1)
      expect(topups[0]).toMatchObject({ actor: "admin", amount: 1000, note: "refill after the drain test" })
    })
  })

  describe("order of checks (docs/decisions.md section 4)", () => {
    const oversized = { model: "free", messages: userMessage("x".repeat(MAX_BODY)) }

    it("413 body too large comes before 401", async () => {
      const noKey = await fetch(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(oversized)
      })
      expect(noKey.status).toBe(413)
      expect(((await noKey.json()) as { error: string }).error).toBe("request_too_large")
      const badKey = await chat(url, `sk-mg-${"0".repeat(32)}`, oversized)
      expectError(badKey, 413, "request_too_large")
    })

    it("401 comes before 429: a key whose rate is spent, once revoked, gets key_inactive", async () => {
      const { key, id } = await newKey(url, { limits: { requests_per_minute: 1 } })
      expect((await chat(url, key, { model: "free" })).status).toBe(200)
      expectRateLimited(await chat(url, key, { model: "free" }), 1)
      expect((await adminCall(url, "POST", `/api-keys/${id}/revoke`)).status).toBe(200)
      expectError(await chat(url, key, { model: "free" }), 401, "key_inactive")
      expectError(await chat(url, `sk-mg-${"0".repeat(32)}`, { model: "free" }), 401, "unauthorized")
      expectError(await chat(url, "", { model: "free" }), 401, "unauthorized")
    })

    it("429 rate_limited comes before 400 validation_failed", async () => {
      const { key } = await newKey(url, { limits: { requests_per_minute: 2 } })
      const invalid = { model: "free", messages: [], temperature: "hot" }
      expectError(await chat(url, key, invalid), 400, "validation_failed")
      expectError(await chat(url, key, invalid), 400, "validation_failed")
      expectRateLimited(await chat(url, key, invalid), 2)
    })

    it("400 comes before 404 (unknown model)", async () => {
      const { key } = await newKey(url)
      expectError(await chat(url, key, { model: "no-such-model", messages: "nope" }), 400, "validation_failed")
      expectError(await chat(url, key, { model: "no-such-model" }), 404, "not_found")
    })

    it("404 comes before 403 scope_violation, which comes before 429 budget_exhausted; neither spends the budget", async () => {
      const { key, id } = await newKey(url, { allowed_models: ["free"], budget: { max_requests: 1 } })
      expectError(await chat(url, key, { model: "no-such-model" }), 404, "not_found")
      expectError(await chat(url, key, { model: "paid" }), 403, "scope_violation")
      expect((await keyView(url, id)).budget).toMatchObject({ used: 0, remaining: 1 })
      expect((await chat(url, key, { model: "free" })).status).toBe(200)
      expectError(await chat(url, key, { model: "paid" }), 403, "scope_violation")
      expectError(await chat(url, key, { model: "no-such-model" }), 404, "not_found")
      expectError(await chat(url, key, { model: "free" }), 429, "budget_exhausted")
    })

    it("a request refused by validation does not spend the budget", async () => {
      const { key, id } = await newKey(url, { budget: { max_requests: 1 } })
      expectError(await chat(url, key, { model: "free", messages: [] }), 400, "validation_failed")
      expect((await keyView(url, id)).budget).toMatchObject({ used: 0 })
      expect((await chat(url, key, { model: "free" })).status).toBe(200)
    })

    it("429 budget_exhausted comes before 402 insufficient_credits", async () => {
      const { key } = await newKey(url, { budget: { max_requests: 1 } })
      expectError(await chat(url, key, { model: "pricey" }), 402, "insufficient_credits")
      expectError(await chat(url, key, { model: "pricey" }), 429, "budget_exhausted")
    })

    it("402 comes before the provider: the upstream is never called", async () => {
      const { key } = await newKey(url)
      expectError(await chat(url, key, { model: "upstream-pricey" }), 402, "insufficient_credits")
      expectError(await chat(url, key, { model: "upstream-pricey", stream: true }), 402, "insufficient_credits")
      expect(fake.requests).toHaveLength(0)
    })
  })
})
