/**
 * Issue 24 item 4: the SDKs' retry hint on every gateway error, and Claude Code's start probe.
 * Every non-retryable 4xx says `x-should-retry: false` (so Codex and opencode stop retrying an
 * unknown model at once); 408, 409, 429 (except a used-up budget) and 5xx do not.
 */
import { Effect } from "effect"
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startFakeOpenAI } from "../support/fake-openai.ts"
import type { FakeUpstream } from "../support/fake-common.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

const OPENAI_KEY = "sk-fake-openai-0123456789abcdef"

describe("x-should-retry on gateway errors", () => {
  let gw: TestGateway
  let fake: FakeUpstream
  let key: string
  beforeAll(async () => {
    fake = await startFakeOpenAI({ apiKey: OPENAI_KEY, models: ["gpt-4o-mini"] })
    gw = await startGateway(testConfig({
      limits: { requests_per_minute: 3 },
      providers: [{ name: "up", kind: "openai", base_url: fake.url, api_key: OPENAI_KEY }],
      models: [{ alias: "gpt", id: "gpt-4o-mini", provider: "up" }]
    }))
    key = (await gw.createKey()).key
  })
  afterAll(async () => {
    await gw.close()
    await fake.close()
  })

  const chat = (apiKey: string, body: unknown) =>
    fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
      body: JSON.stringify(body)
    })

  it("says false on 404 for an unknown model, and the OpenAI SDK gives up at once", async () => {
    const before = fake.requests.length
    const own = await gw.createKey()
    const response = await chat(own.key, { model: "no-such-model", messages: [{ role: "user", content: "hi" }] })
    expect(response.status).toBe(404)
    expect(response.headers.get("x-should-retry")).toBe("false")
    expect(((await response.json()) as any).error).toBe("not_found")

    // The SDK with its default retries: one request reaches the gateway, not three.
    const sdkKey = await gw.createKey()
    const sdk = new OpenAI({ apiKey: sdkKey.key, baseURL: `${gw.url}/v1`, maxRetries: 2 })
    const error = await sdk.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "hi" }] })
      .then(() => undefined, (e: unknown) => e)
    expect(error).toBeInstanceOf(OpenAI.NotFoundError)
    expect(fake.requests.length).toBe(before)
    await Effect.runPromise(gw.audit.flush)
    const page = await Effect.runPromise(gw.store.audit.queryAudit({ key_id: sdkKey.id, limit: 10 }))
    expect(page.items.length).toBe(1)
  })

  it("says false on 400, 401, 405", async () => {
    const own = await gw.createKey()
    const invalid = await chat(own.key, { model: "gpt", messages: "not a list" })
    expect(invalid.status).toBe(400)
    expect(invalid.headers.get("x-should-retry")).toBe("false")

    const unauthorized = await chat("sk-mg-00000000000000000000000000000000", { model: "gpt", messages: [] })
    expect(unauthorized.status).toBe(401)
    expect(unauthorized.headers.get("x-should-retry")).toBe("false")

    const wrongMethod = await fetch(`${gw.url}/healthz`, { method: "POST" })
    expect(wrongMethod.status).toBe(405)
    expect(wrongMethod.headers.get("x-should-retry")).toBe("false")
  })

  it("says nothing on 409, 429 rate_limited and 502", async () => {
    const conflict = await gw.admin("POST", "/connections", { id: 7, name: "a", dialect: "postgres", url: "postgres://a@127.0.0.1:1/x" })
    expect(conflict.status).toBe(201)
    const again = await gw.admin("POST", "/connections", { id: 7, name: "b", dialect: "postgres", url: "postgres://a@127.0.0.1:1/x" })
    expect(again.status).toBe(409)
    expect(again.headers.get("x-should-retry")).toBeNull()

    const own = await gw.createKey()
    fake.enqueue({ kind: "error", status: 500 })
    const failed = await chat(own.key, { model: "gpt", messages: [{ role: "user", content: "hi" }] })
    expect(failed.status).toBe(502)
    expect(failed.headers.get("x-should-retry")).toBeNull()

    let limited: Response | undefined
    for (let i = 0; i < 5 && limited === undefined; i++) {
      const response = await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${own.key}` } })
      if (response.status === 429) limited = response
      else await response.arrayBuffer()
    }
    expect(limited?.status).toBe(429)
    expect(((await limited!.json()) as any).error).toBe("rate_limited")
    expect(limited!.headers.get("x-should-retry")).toBeNull()
  })

  it("says false on a used-up budget (429 that does not refill)", async () => {
    const own = await gw.createKey({ budget: { max_requests: 1 } })
    const first = await chat(own.key, { model: "gpt", messages: [{ role: "user", content: "hi" }] })
    expect(first.status).toBe(200)
    const second = await chat(own.key, { model: "gpt", messages: [{ role: "user", content: "hi" }] })
    expect(second.status).toBe(429)
    expect(((await second.json()) as any).error).toBe("budget_exhausted")
    expect(second.headers.get("x-should-retry")).toBe("false")
  })
})

describe("Claude Code's start probe", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway()
  })
  afterAll(() => gw.close())

  it("HEAD and GET /api/hello answer 200 without a key", async () => {
    const head = await fetch(`${gw.url}/api/hello`, { method: "HEAD" })
    expect(head.status).toBe(200)
    expect(await head.text()).toBe("")
    expect(head.headers.get("x-request-id")).toMatch(/^req_/)
    const get = await fetch(`${gw.url}/api/hello`)
    expect(get.status).toBe(200)
    expect(await get.json()).toEqual({ status: "ok" })
  })
})
