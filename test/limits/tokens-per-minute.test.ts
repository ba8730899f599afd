/**
 * Tokens per minute over HTTP (issue 33), as a client and an operator see it: the headers of an
 * answer, the correction to the real count after it (plain and streamed), the refusal with its
 * slug, `details.limit` and Retry-After, the config's default and a key's own limit (API and
 * validation). Twice: in-process limits on SQLite, and two replicas on one Redis and one Postgres
 * (a hold taken on one replica is seen by the other).
 *
 * The echo provider counts tokens in words, so the real counts are known: "one two three four
 * five" with max_tokens 10 uses 5 + 5. Bucket state is awaited through the request's audit record:
 * the correction runs before the record is written (both when the request's scope closes).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { estimateRequestTokens } from "../../src/pipelines/token-admission.ts"
import { createPostgresDatabase, type TempDatabase } from "../support/databases.ts"
import { auditFor, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { adminCall, chat, expectError, newKey, REDIS_URL, waitFor } from "./support.ts"

const FIVE = "one two three four five"
const body = { model: "free", messages: [{ role: "user", content: FIVE }], max_tokens: 10 }
/** What the gateway holds for `body` at admission, and what the echo provider then reports. */
const ESTIMATE = estimateRequestTokens(body, { embeddings: false, modelMaxTokens: 4096 })
const REAL = 5 + 5
/**
 * Room short of a third request: large against what drains meanwhile (at about 31 tokens a
 * minute, 8 tokens take 15 s), smaller than one request's real use so the second still fits.
 */
const MARGIN = 8

const config = (backend: Record<string, unknown>, tokensPerMinute?: number) =>
  testConfig({
    ...backend,
    workspace: { credits: 1000 },
    limits: { requests_per_minute: 10_000, ...(tokensPerMinute === undefined ? {} : { tokens_per_minute: tokensPerMinute }) },
    providers: [
      { name: "echo", kind: "echo" },
      // Nothing listens on port 1: a request to it fails after admission with a 502.
      { name: "gone", kind: "openai", base_url: "http://127.0.0.1:1", api_key: "sk-none", timeouts: { connect_ms: 300, first_byte_ms: 300, idle_ms: 300 } }
    ],
    models: [
      { alias: "free", id: "echo-free", provider: "echo", credits: 0 },
      { alias: "gone", id: "gpt-gone", provider: "gone", credits: 0 }
    ],
    routing: { retries: 0 }
  })

/** Waits until the request's audit record is written: its tokens-per-minute correction ran before. */
const settled = async (gw: TestGateway, requestId: string) => {
  await waitFor(`audit record of ${requestId}`, async () => (await auditFor(gw, requestId)).length === 1, 10_000)
}

const tokenHeaders = (headers: Headers) => ({
  limit: headers.get("x-ratelimit-limit-tokens"),
  remaining: headers.get("x-ratelimit-remaining-tokens")
})

const streamChat = async (base: string, key: string, payload: Record<string, unknown>) => {
  const response = await fetch(`${base}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
    body: JSON.stringify({ ...payload, stream: true })
  })
  const text = await response.text()
  return { status: response.status, headers: response.headers, text, requestId: response.headers.get("x-request-id") ?? "" }
}

const backends = [
  { name: "in-process limits, SQLite store", replicated: false },
  { name: "two replicas on one Redis and one Postgres", replicated: true }
]

describe.each(backends)("$name", ({ replicated }) => {
  let a: TestGateway
  let b: TestGateway
  let db: TempDatabase | undefined

  beforeAll(async () => {
    db = replicated ? await createPostgresDatabase("mg_tpm") : undefined
    const backend = db === undefined ? {} : { store: db.url, redis: REDIS_URL }
    a = await startGateway(config(backend, 100_000))
    b = replicated ? await startGateway(config(backend, 100_000)) : a
  })

  afterAll(async () => {
    if (b !== a) await b?.close()
    await a?.close()
    await db?.drop()
  })

  it("an answer carries the token headers (the config's default limit), its hold is the estimate, and the real count replaces it afterwards", async () => {
    const { key } = await newKey(a.url)
    const first = await chat(a.url, key, body)
    expect(first.status, first.text).toBe(200)
    expect(tokenHeaders(first.headers)).toEqual({ limit: "100000", remaining: String(100_000 - ESTIMATE) })
    // The request-rate headers are still there.
    expect(first.headers.get("x-ratelimit-limit")).toBe("10000")
    await settled(a, first.requestId)
    const second = await chat(b.url, key, body)
    expect(second.status, second.text).toBe(200)
    // Corrected to 10 real tokens; at 100,000 a minute the bucket drains ~1,667 tokens a second, so only a lower bound is exact.
    const remaining = Number(second.headers.get("x-ratelimit-remaining-tokens"))
    expect(remaining).toBeGreaterThanOrEqual(100_000 - REAL - ESTIMATE)
  })

  it("a key's own limit: admitted while the holds fit, then 429 rate_limited naming tokens_per_minute with Retry-After", async () => {
    // Room for two requests' real use and one estimate, not for three.
    const limit = 2 * REAL + ESTIMATE - MARGIN
    const { key, id } = await newKey(a.url, { limits: { tokens_per_minute: limit } })
    const view = await adminCall(a.url, "GET", `/api-keys/${id}`)
    expect(view.body.limits).toEqual({ tokens_per_minute: limit })

    const first = await chat(a.url, key, body)
    expect(first.status, first.text).toBe(200)
    expect(tokenHeaders(first.headers)).toEqual({ limit: String(limit), remaining: String(limit - ESTIMATE) })
    await settled(a, first.requestId)

    const second = await chat(b.url, key, body)
    expect(second.status, second.text).toBe(200)
    await settled(b, second.requestId)

    // 20 real tokens are held now (less what drained, about one every 2 s): another estimate does not fit.
    const third = await chat(a.url, key, body)
    expectError(third, 429, "rate_limited")
    expect(third.body.details).toMatchObject({ limit: "tokens_per_minute", tokens_per_minute: limit, scope: "key" })
    const retryAfter = Number(third.headers.get("retry-after"))
    expect(retryAfter).toBeGreaterThanOrEqual(1)
    expect(retryAfter).toBeLessThanOrEqual(Math.ceil(((2 * REAL + ESTIMATE - limit) * 60) / limit))
    expect(tokenHeaders(third.headers)).toEqual({ limit: String(limit), remaining: "0" })
    expect(third.headers.get("x-ratelimit-limit")).toBe("10000")
    const [record] = await auditFor(a, third.requestId)
    expect(record).toMatchObject({ status: 429, error: "rate_limited" })
  })

  it("a streamed answer is corrected when its stream ends", async () => {
    const limit = 2 * REAL + ESTIMATE - MARGIN
    const { key } = await newKey(a.url, { limits: { tokens_per_minute: limit } })
    const streamed = await streamChat(a.url, key, { ...body, stream_options: { include_usage: true } })
    expect(streamed.status, streamed.text).toBe(200)
    expect(tokenHeaders(streamed.headers)).toEqual({ limit: String(limit), remaining: String(limit - ESTIMATE) })
    expect(streamed.text).toContain("[DONE]")
    await settled(a, streamed.requestId)
    // Had the estimate stayed held, this one would not fit (2 x ESTIMATE > limit).
    expect(2 * ESTIMATE).toBeGreaterThan(limit)
    const next = await chat(b.url, key, body)
    expect(next.status, next.text).toBe(200)
  })

  it("a request that fails before any token is used gives its hold back", async () => {
    const limit = ESTIMATE + 2
    const { key } = await newKey(a.url, { limits: { tokens_per_minute: limit } })
    // "gone" is as long as "free": the same estimate is held, then the provider cannot be reached.
    const failed = await chat(a.url, key, { ...body, model: "gone" })
    expectError(failed, 502, "provider_error")
    expect(tokenHeaders(failed.headers)).toEqual({ limit: String(limit), remaining: "2" })
    await settled(a, failed.requestId)
    const ok = await chat(b.url, key, body)
    expect(ok.status, ok.text).toBe(200)
  })

  it("PATCH sets and clears a key's limit; nonsense is a 400 naming the field", async () => {
    const { key, id } = await newKey(a.url)
    const patched = await adminCall(a.url, "PATCH", `/api-keys/${id}`, { limits: { tokens_per_minute: 5_000 } })
    expect(patched.status, patched.text).toBe(200)
    expect(patched.body.limits).toEqual({ tokens_per_minute: 5_000 })
    await waitFor("the new limit applies", async () => {
      const reply = await chat(b.url, key, body)
      return reply.headers.get("x-ratelimit-limit-tokens") === "5000"
    }, 10_000)
    for (const bad of [0, -1, 1.5, 2_000_000_000, "many"]) {
      const refused = await adminCall(a.url, "PATCH", `/api-keys/${id}`, { limits: { tokens_per_minute: bad } })
      expectError(refused, 400, "validation_failed")
    }
  })
})

describe("no tokens-per-minute limit anywhere", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway(config({}))
  })
  afterAll(async () => {
    await gw?.close()
  })

  it("answers carry no token headers and nothing is held", async () => {
    const { key } = await newKey(gw.url)
    const reply = await chat(gw.url, key, body)
    expect(reply.status, reply.text).toBe(200)
    expect(tokenHeaders(reply.headers)).toEqual({ limit: null, remaining: null })
  })

  it("the config refuses a nonsense default", () => {
    expect(() => config({}, 0)).toThrow(/tokens_per_minute/)
  })
})
