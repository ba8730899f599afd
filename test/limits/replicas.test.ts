/**
 * The limits and the money across replicas (docs/decisions.md sections 1, 4 and 5): two
 * `modelgate serve` replicas on one Postgres store and one Redis, with requests spread over
 * both. Every guarantee must hold for the pair exactly as for one process: the burst of 50, the
 * stream slots, request budgets, the credit pool and its ledger, refunds, and revocation. The
 * replicas run in this process (each its own command line, layers, pools and replica id: they
 * share nothing but the store and Redis); the process boundary itself is the subject of
 * credit-blocks, lease-clock and the fault suites, which spawn real ones.
 */
import { randomBytes } from "node:crypto"
import { rmSync } from "node:fs"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { createPostgresDatabase, type TempDatabase } from "../support/databases.ts"
import { startFakeOpenAI, type FakeUpstream } from "../support/fake-openai.ts"
import { serveInProcess, type ServeInProcess, tempDir, writeConfig } from "../support/process.ts"
import {
  adminCall,
  ADMIN_TOKEN,
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
  type OpenStream,
  REDIS_URL,
  type Reply,
  sleep,
  waitFor
} from "./support.ts"

const UPSTREAM_KEY = `sk-upstream-${randomBytes(12).toString("hex")}`
const POOL = 100
const PRICE = 3

let fake: FakeUpstream
let db: TempDatabase
let dir: string
let a: ServeInProcess
let b: ServeInProcess
/** The i-th request of a burst goes to replica A when i is even, B when odd. */
const spread = (i: number) => (i % 2 === 0 ? a.url : b.url)

beforeAll(async () => {
  ;[fake, db] = await Promise.all([startFakeOpenAI({ apiKey: UPSTREAM_KEY }), createPostgresDatabase("mg_replicas")])
  dir = tempDir("modelgate-replicas-")
  const configPath = writeConfig(dir, {
    // No grace: a stop must not wait for the streams some tests leave hanging on purpose.
    server: { host: "127.0.0.1", shutdown_grace_seconds: 0 },
    store: db.url,
    redis: REDIS_URL,
    // A loaded machine's Redis bound, not the default 1 s: this file is about exact limits across
    // replicas, and a burst beside two other suites had one call answered 503 "no reply within 1000 ms".
    redis_timeouts: { command_ms: 10_000 },
    admin: { token: ADMIN_TOKEN },
    workspace: { credits: POOL },
    limits: { requests_per_minute: 50, concurrent_streams: 5 },
    audit: { flush_interval_ms: 50 },
    providers: [
      { name: "echo", kind: "echo" },
      { name: "fake", kind: "openai", base_url: fake.url, api_key: UPSTREAM_KEY, timeouts: { connect_ms: 300, first_byte_ms: 300, idle_ms: 300 } },
      { name: "fake-patient", kind: "openai", base_url: fake.url, api_key: UPSTREAM_KEY }
    ],
    models: [
      { alias: "free", id: "echo-free", provider: "echo", credits: 0 },
      { alias: "paid", id: "echo-paid", provider: "echo", credits: PRICE },
      { alias: "upstream", id: "gpt-4o-mini-2024-07-18", provider: "fake", credits: 2 },
      { alias: "held", id: "gpt-4.1-mini", provider: "fake-patient", credits: 0 }
    ]
  })
  const serve = ["--config", configPath, "serve", "--port", "0"]
  ;[a, b] = await Promise.all([serveInProcess(serve), serveInProcess(serve)])
})

afterAll(async () => {
  await Promise.all([a?.stop(), b?.stop()])
  await fake?.close()
  await db?.drop()
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true })
})

beforeEach(() => fake.reset())

describe("credits across two replicas", () => {
  // First in the file: it needs the untouched initial pool.
  it("a pool of 100, a model costing 3, 200 concurrent requests: exactly 33 served, the pool ends at 1", async () => {
    expect(await balance(a.url)).toBe(POOL)
    const { key, id } = await newKey(a.url, { limits: { requests_per_minute: 1000 } })
    const replies = await burst(200, spread, key, { model: "paid" })
    const served = replies.filter((r) => r.status === 200)
    expect(served, summary(replies)).toHaveLength(33)
    expect(count(replies, 402), summary(replies)).toBe(167)
    expect(new Set(served.map((r) => r.requestId)).size).toBe(33)
    // Both replicas took part (requests alternate between them). Which one won the pool's
    // credits is a race: one replica may serve all 33 when the other's first store round trip
    // is slower, so only participation is asserted, not the split.
    expect(replies.filter((_, i) => i % 2 === 0).every((r) => r.status === 200 || r.status === 402)).toBe(true)
    expect(replies.filter((_, i) => i % 2 === 1).every((r) => r.status === 200 || r.status === 402)).toBe(true)
    for (const reply of replies.filter((r) => r.status === 402)) {
      expectError(reply, 402, "insufficient_credits")
      // Nothing is ever given back here, so every refusal saw the pool's last credit.
      expect(reply.body.details).toEqual({ model: "paid", required_credits: PRICE, available_credits: 1 })
    }
    expect(await balance(a.url)).toBe(1)
    expect(await balance(b.url)).toBe(1)

    const rows = await ledger(b.url)
    expectLedgerExplains(rows, 1)
    const charges = rows.filter((r) => r.kind === "charge")
    expect(charges).toHaveLength(33)
    // No request served without its charge, and no charge without a served request.
    expect(new Set(charges.map((r) => r.request_id))).toEqual(new Set(served.map((r) => r.requestId)))
    for (const charge of charges) expect(charge).toMatchObject({ amount: -PRICE, key_id: id, actor: id, model: "paid" })
    expect(rows[0]).toMatchObject({ kind: "initial", amount: POOL, balance_after: POOL })
  })

  it("a top-up on one replica is seen by the other, and provider failures on either are refunded", async () => {
    const topup = await adminCall(a.url, "POST", "/workspace/credits", { credits: 50, note: "replica test" })
    expect(topup.status, topup.text).toBe(200)
    expect(await balance(b.url)).toBe(51)
    const { key, id } = await newKey(a.url)

    fake.enqueue({ kind: "error", status: 500 })
    const failed = await chat(b.url, key, { model: "upstream" })
    expectError(failed, 502, "provider_error")
    fake.enqueue({ kind: "hang" })
    const timedOut = await chat(a.url, key, { model: "upstream" })
    expectError(timedOut, 504, "upstream_timeout")
    fake.enqueue({ kind: "mid_stream_error", afterChunks: 2 })
    const broken = await chat(b.url, key, { model: "upstream", stream: true })
    expect(broken.status).toBe(200)
    expect(JSON.parse(dataPayloads(broken.text).at(-2)!)).toMatchObject({ error: "provider_error" })

    for (const reply of [failed, timedOut, broken]) {
      const rows = await ledgerOf(a.url, reply.requestId)
      expect(rows.map((r) => [r.kind, r.amount, r.key_id, r.request_id])).toEqual([
        ["charge", -2, id, reply.requestId],
        ["refund", 2, id, reply.requestId]
      ])
    }
    expect(await balance(a.url)).toBe(51)
    const served = await chat(a.url, key, { model: "upstream" })
    expect(served.status, served.text).toBe(200)
    expect(await balance(b.url)).toBe(49)
    expectLedgerExplains(await ledger(a.url), 49)
  })
})

describe("rate limit across two replicas", () => {
  it("a burst spread over both replicas: still exactly the key's limit admitted", async () => {
    // 12/min (one request every 5 s): a burst of 15 on a loaded machine stays within one refill
    // interval, so the count is exact (50/min refilled every 1.2 s, which a burst at load 10 outlasted).
    const { key } = await newKey(a.url, { limits: { requests_per_minute: 12 } })
    await warmConnections([a.url, b.url], 8)
    const { replies } = await rateBurst(15, spread, key, 12)
    const remaining = replies.filter((r) => r.status === 200).map((r) => expectRateHeaders(r.headers, 12).remaining)
    // One bucket for both replicas: the remainders they hand out never repeat.
    expect(new Set(remaining).size).toBe(12)
    for (const reply of replies.filter((r) => r.status === 429)) expectRateLimited(reply, 12)
  })

  it("a request sent after Retry-After seconds is admitted, on the other replica", async () => {
    const { key } = await newKey(b.url, { limits: { requests_per_minute: 60 } })
    await warmConnections([a.url, b.url], 31)
    // Not a count (rateBurst's): a burst at load 10 may outlast the 1 s refill. What matters is a
    // refusal, so requests go on, one at a time, until one is refused (the state), however slow.
    const replies = await burst(61, spread, key, { model: "free" })
    expect(count(replies, 200) + count(replies, 429), summary(replies)).toBe(61)
    let refusal = replies.filter((r) => r.status === 429).at(-1)
    await waitFor("a refusal", async () => {
      refusal ??= await chat(b.url, key, { model: "free" }).then((r) => (r.status === 429 ? r : undefined))
      return refusal !== undefined
    })
    // Nothing else spends this key's requests, so the last refusal is one interval (1 s) from a retry.
    const retryAfter = expectRateLimited(refusal!, 60)
    expect(retryAfter).toBe(1)
    await sleep(retryAfter * 1000)
    const retried = await chat(b.url, key, { model: "free" })
    expect(retried.status, retried.text).toBe(200)
    expectRateHeaders(retried.headers, 60)
  })
})

describe("budgets across two replicas", () => {
  it("a budget of 20 with 100 concurrent requests over both replicas: exactly 20 admitted; reset on one frees it on both", async () => {
    const { key, id } = await newKey(a.url, { budget: { max_requests: 20 }, limits: { requests_per_minute: 1000 } })
    const replies = await burst(100, spread, key, { model: "free" })
    expect(count(replies, 200), summary(replies)).toBe(20)
    expect(count(replies, 429), summary(replies)).toBe(80)
    for (const reply of replies.filter((r) => r.status === 429)) expectError(reply, 429, "budget_exhausted")
    expect((await keyView(b.url, id)).budget).toMatchObject({ max_requests: 20, used: 20, remaining: 0, used_requests: 20, remaining_requests: 0, max_credits: null, period: null, resets_at: null })

    const reset = await adminCall(a.url, "POST", `/api-keys/${id}/budget/reset`)
    expect(reset.status, reset.text).toBe(200)
    const again = await burst(30, spread, key, { model: "free" })
    expect(count(again, 200), summary(again)).toBe(20)
    expect((await keyView(a.url, id)).budget).toMatchObject({ max_requests: 20, used: 20, remaining: 0, used_requests: 20, remaining_requests: 0, max_credits: null, period: null, resets_at: null })
  })
})

describe("concurrent streams across two replicas", () => {
  it("five streams over both replicas fill the key's slots: the sixth is refused on either; a client leaving frees one", async () => {
    const { key } = await newKey(a.url)
    fake.setDefault(() => ({ kind: "stall_after", chunks: 1 }))
    const streams: Array<OpenStream> = []
    for (let i = 0; i < 5; i++) streams.push(expectOpen(await openStream(spread(i), key, { model: "held" })))
    for (const base of [a.url, b.url]) {
      const refused = await openStream(base, key, { model: "held" })
      expect(isOpen(refused)).toBe(false)
      expectError(refused as Reply, 429, "rate_limited")
      expect((refused as Reply).body.details.limit).toBe("concurrent_streams")
      expect(Number((refused as Reply).headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
    }

    // A client of replica A leaves; replica B admits the next stream.
    streams[0]!.abandon()
    let admitted: OpenStream | undefined
    await waitFor("a slot freed across replicas", async () => {
      const attempt = await openStream(b.url, key, { model: "held" })
      if (isOpen(attempt)) admitted = attempt
      return admitted !== undefined
    })
    expect(isOpen(await openStream(a.url, key, { model: "held" }))).toBe(false)

    // With every client gone, all five slots are free again, whichever replica asks.
    fake.setDefault(() => ({ kind: "text", text: "done" }))
    for (const stream of [...streams.slice(1), admitted!]) stream.abandon()
    await waitFor("upstream streams closed", () => fake.openStreams() === 0)
    await waitFor("all slots back", async () => {
      const replies = await Promise.all([0, 1, 2, 3, 4].map((i) => chat(spread(i), key, { model: "held", stream: true })))
      return replies.every((r) => r.status === 200)
    })
  })
})

describe("keys across two replicas", () => {
  // How soon is the key cache's poll of the store's change counter, whose next poll noticing a
  // change is test/http/auth.test.ts's (by counting polls): here, that the other replica does.
  it("revocation on one replica is seen by the other", async () => {
    const { key, id } = await newKey(a.url, { limits: { requests_per_minute: 1000 } })
    // B has the key cached from use.
    expect((await chat(b.url, key, { model: "free" })).status).toBe(200)
    const revoked = await adminCall(a.url, "POST", `/api-keys/${id}/revoke`)
    expect(revoked.status).toBe(200)
    let last: Reply | undefined
    await waitFor("revocation seen by replica B", async () => {
      last = await chat(b.url, key, { model: "free" })
      return last.status === 401
    })
    expectError(last!, 401, "key_inactive")
  })

  it("a per-key limit changed on one replica applies on the other", async () => {
    const { key, id } = await newKey(a.url)
    expect((await chat(b.url, key, { model: "free" })).status).toBe(200)
    const patched = await adminCall(a.url, "PATCH", `/api-keys/${id}`, { limits: { requests_per_minute: 7 } })
    expect(patched.status).toBe(200)
    await waitFor("new limit seen by replica B", async () => {
      const reply = await chat(b.url, key, { model: "free" })
      return reply.headers.get("x-ratelimit-limit") === "7"
    })
  })
})

describe("the whole ledger", () => {
  it("explains every change and adds up to the balance on both replicas", async () => {
    const final = await balance(a.url)
    expect(await balance(b.url)).toBe(final)
    expectLedgerExplains(await ledger(a.url), final)
    expect((await ledger(b.url)).filter((r) => r.kind === "topup")).toEqual([
      expect.objectContaining({ amount: 50, actor: "admin", note: "replica test", key_id: null, request_id: null })
    ])
  })
})
