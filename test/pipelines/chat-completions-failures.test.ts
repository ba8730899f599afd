/**
 * POST /v1/chat/completions when the upstream misbehaves, as a client sees it: error answers
 * become 502 `provider_error` with the upstream's status and code, silence becomes 504
 * `upstream_timeout`, an unreachable host 502; once a stream has started, a failure ends it
 * in-band with one envelope frame and `[DONE]`; a client that leaves releases the upstream at
 * once; and each outcome leaves exactly one audit record.
 */
import OpenAI from "openai"
import { Effect } from "effect"
import { createServer } from "node:net"
import { createServer as createHttpServer, type Server } from "node:http"
import { randomBytes } from "node:crypto"
import { Agent, fetch as undiciFetch } from "undici"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { FakeUpstream } from "../support/fake-common.ts"
import { auditFor, awaitAuditOf, type TestGateway } from "../support/gateway.ts"
import { OPENAI_KEY, useModelGateway } from "../support/model-gateway.ts"
import { waitFor } from "../support/wait.ts"
import { openaiFor } from "../support/sdk-clients.ts"

const UPSTREAM_KEY = OPENAI_KEY
const WRONG_KEY = `sk-wrong-${randomBytes(12).toString("hex")}`
const TIMEOUT_MS = 300
const quick = { connect_ms: TIMEOUT_MS, first_byte_ms: TIMEOUT_MS, idle_ms: TIMEOUT_MS }
// Far beyond any test's duration, so a prompt release can only come from the client leaving.
const patient = { connect_ms: 10_000, first_byte_ms: 10_000, idle_ms: 10_000 }

const seen: Array<string> = []

/**
 * The clients' own connection pool, closed before the gateway: Node's built-in fetch keeps a
 * spare connection open after an aborted request, which would hold the gateway's graceful
 * shutdown for its full grace period.
 */
const clientAgent = new Agent()
const clientFetch = ((url: string, init?: Record<string, unknown>) =>
  undiciFetch(url, { ...init, dispatcher: clientAgent } as never)) as unknown as typeof fetch

let fake: FakeUpstream
let truncating: Server
let gw: TestGateway
let key: string
let client: OpenAI

/**
 * An OpenAI-compatible upstream that closes its event stream cleanly after two content chunks,
 * without a finish_reason or [DONE]: a proxy that gave up. The fake upstream has no such
 * scenario, since the real API never does it.
 */
const startTruncatingUpstream = async () => {
  const server = createHttpServer((req, res) => {
    req.resume()
    req.on("end", () => {
      res.writeHead(200, { "content-type": "text/event-stream" })
      const chunk = (content: string) =>
        `data: ${JSON.stringify({ id: "chatcmpl-cut", object: "chat.completion.chunk", created: 1, model: "cut", choices: [{ index: 0, delta: { content }, finish_reason: null }] })}\n\n`
      res.write(chunk("Hello "))
      res.end(chunk("wor"))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  return server
}

/** A loopback port nothing listens on: bound once, then released. */
const closedPort = async (): Promise<number> => {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const port = (server.address() as { port: number }).port
  await new Promise<void>((resolve) => server.close(() => resolve()))
  return port
}

let deadPort: number
let truncatingPort: number

// Registered before the fixture's, so it runs first: the providers below point at these.
beforeAll(async () => {
  deadPort = await closedPort()
  truncating = await startTruncatingUpstream()
  truncatingPort = (truncating.address() as { port: number }).port
})

const fixture = useModelGateway({
  openaiModels: "any",
  providers: (_, urls) => [
    { name: "fake-openai", kind: "openai", base_url: urls.openai, api_key_env: "FAKE_OPENAI_KEY", timeouts: quick },
    { name: "patient-openai", kind: "openai", base_url: urls.openai, api_key_env: "FAKE_OPENAI_KEY", timeouts: patient },
    { name: "wrong-key", kind: "openai", base_url: urls.openai, api_key: WRONG_KEY, timeouts: quick },
    { name: "nowhere", kind: "openai", base_url: `http://127.0.0.1:${deadPort}/v1`, api_key: UPSTREAM_KEY, timeouts: quick },
    { name: "truncating", kind: "openai", base_url: `http://127.0.0.1:${truncatingPort}/v1`, api_key: UPSTREAM_KEY, timeouts: quick }
  ],
  models: () => [
    { alias: "fast", id: "gpt-4o-mini-2024-07-18", provider: "fake-openai" },
    { alias: "slow", id: "gpt-4o-2024-08-06", provider: "patient-openai" },
    { alias: "misconfigured", id: "gpt-4.1-mini", provider: "wrong-key" },
    { alias: "offline", id: "gpt-4.1", provider: "nowhere" },
    { alias: "cut", id: "gpt-4.1-nano", provider: "truncating" }
  ],
  env: { FAKE_OPENAI_KEY: UPSTREAM_KEY }
})

beforeAll(async () => {
  gw = fixture.gateway()
  fake = fixture.openaiFake()
  ;({ key } = await gw.createKey())
  client = openaiFor(gw.url, key, { fetch: clientFetch })
})

// Runs before the fixture closes the gateway (after-hooks run in reverse): the clients'
// connections first, so the gateway's graceful stop does not wait on them.
afterAll(async () => {
  await clientAgent.destroy()
  truncating?.closeAllConnections()
  await new Promise((resolve) => truncating?.close(resolve))
})

const messages = [{ role: "user" as const, content: "Say something long" }]

const post = async (body: Record<string, unknown>, signal?: AbortSignal) =>
  clientFetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
    body: JSON.stringify(body),
    ...(signal === undefined ? {} : { signal })
  })

const postJson = async (body: Record<string, unknown>) => {
  const response = await post(body)
  const text = await response.text()
  seen.push(text, JSON.stringify([...response.headers]))
  return { status: response.status, headers: response.headers, body: JSON.parse(text) as any }
}

const postStream = async (body: Record<string, unknown>) => {
  const response = await post({ ...body, stream: true })
  const text = await response.text()
  seen.push(text)
  return { status: response.status, headers: response.headers, text }
}

const dataFrames = (text: string): Array<string> => {
  expect(text).toMatch(/^(data: [^\n]*\n\n)+$/)
  return text.split("\n\n").filter((frame) => frame !== "").map((frame) => frame.slice("data: ".length))
}

/** The one audit record of a request; a stream's is written when it ends, so it is waited for. */
const auditOf = async (requestId: string) => {
  const records = await awaitAuditOf(gw, requestId)
  seen.push(JSON.stringify(records))
  expect(records).toHaveLength(1)
  return records[0]!
}

/** The request still works afterwards: a failure must not poison the provider's connection pool. */
const stillServes = async (model = "fast") => {
  fake.enqueue({ kind: "text", text: "still here" })
  const completion = await client.chat.completions.create({ model, messages })
  expect(completion.choices[0]!.message.content).toBe("still here")
}

describe("upstream error answers", () => {
  it("turns an upstream 500 into 502 provider_error with the provider, upstream status and error", async () => {
    fake.enqueue({ kind: "error", status: 500 })
    const response = await postJson({ model: "fast", messages })
    expect(response.status).toBe(502)
    expect(response.body).toMatchObject({
      status: 502,
      error: "provider_error",
      details: {
        provider: "fake-openai",
        upstream_status: 500,
        upstream_error: { type: "server_error", code: null, message: expect.stringContaining("The server had an error") }
      }
    })
    expect(response.body.request_id).toBe(response.headers.get("x-request-id"))
    expect(await auditOf(response.body.request_id)).toMatchObject({
      status: 502,
      error: "provider_error",
      model: "gpt-4o-mini-2024-07-18",
      provider: "fake-openai",
      stream: false
    })

    fake.enqueue({ kind: "error", status: 500 })
    const error = await client.chat.completions.create({ model: "fast", messages }).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(OpenAI.InternalServerError)
    expect((error as InstanceType<typeof OpenAI.InternalServerError>).status).toBe(502)
    expect((error as InstanceType<typeof OpenAI.InternalServerError>).error).toBe("provider_error")
    expect((error as InstanceType<typeof OpenAI.InternalServerError>).requestID).toMatch(/^req_/)
  })

  it("turns an upstream 429 into 502 provider_error carrying the upstream's code and its retry-after", async () => {
    fake.enqueue({ kind: "error", status: 429, retryAfter: 7 })
    const response = await postJson({ model: "fast", messages })
    expect(response.status).toBe(502)
    expect(response.body).toMatchObject({
      error: "provider_error",
      details: { provider: "fake-openai", upstream_status: 429, upstream_error: { type: "requests", code: "rate_limit_exceeded" } }
    })
    expect(response.headers.get("retry-after")).toBe("7")
  })

  it("answers a streaming request whose upstream refuses with a JSON 502, not an event stream", async () => {
    fake.enqueue({ kind: "error", status: 503 })
    const response = await post({ model: "fast", messages, stream: true })
    expect(response.status).toBe(502)
    expect(response.headers.get("content-type")).toMatch(/^application\/json/)
    const body = (await response.json()) as any
    expect(body).toMatchObject({
      error: "provider_error",
      details: { upstream_status: 503, upstream_error: { code: "server_is_overloaded" } }
    })
    expect(await auditOf(body.request_id)).toMatchObject({ status: 502, error: "provider_error", stream: true })
  })

  it("keeps the text of an upstream error that is not JSON", async () => {
    fake.enqueue({ kind: "error", status: 502, body: "<html><body>Bad Gateway</body></html>" })
    const response = await postJson({ model: "fast", messages })
    expect(response.status).toBe(502)
    expect(response.body.details).toMatchObject({ upstream_status: 502, upstream_error: { message: "<html><body>Bad Gateway</body></html>" } })
  })

  it("reports an upstream 400 (a request the real API refuses) as the client's 400, with the provider's message, not to be retried", async () => {
    // OpenAI refuses JSON mode unless a message mentions JSON; the gateway does not police that.
    const response = await postJson({ model: "fast", messages, response_format: { type: "json_object" } })
    expect(fake.requests).toHaveLength(1)
    expect(response.status).toBe(400)
    expect(response.body.error).toBe("validation_failed")
    expect(response.body.message).toContain("json")
    expect(response.headers.get("x-should-retry")).toBe("false")
    expect(response.body.details).toMatchObject({
      provider: "fake-openai",
      upstream_status: 400,
      upstream_error: { type: "invalid_request_error", message: expect.stringContaining("json") }
    })
  })

  it("reports the provider refusing the gateway's key without showing that key", async () => {
    const response = await postJson({ model: "misconfigured", messages })
    expect(fake.requests[0]!.headers.authorization).toBe(`Bearer ${WRONG_KEY}`)
    expect(response.status).toBe(502)
    expect(response.body.details).toMatchObject({ provider: "wrong-key", upstream_status: 401, upstream_error: { code: "invalid_api_key" } })
    expect(JSON.stringify(response.body)).not.toContain(WRONG_KEY)
  })
})

describe("unreachable and silent upstreams", () => {
  it("answers 502 provider_error when the connection is refused", async () => {
    const response = await postJson({ model: "offline", messages })
    expect(response.status).toBe(502)
    expect(response.body).toMatchObject({
      error: "provider_error",
      details: { provider: "nowhere", upstream_status: null, upstream_error: { code: "ECONNREFUSED" } }
    })
    expect(await auditOf(response.body.request_id)).toMatchObject({ status: 502, error: "provider_error", provider: "nowhere" })
    const streamed = await post({ model: "offline", messages, stream: true })
    expect(streamed.status).toBe(502)
    expect(((await streamed.json()) as any).error).toBe("provider_error")
  })

  it("answers 504 upstream_timeout when the upstream sends nothing within first_byte_ms, and aborts it", async () => {
    fake.enqueue({ kind: "hang" })
    const started = Date.now()
    const response = await postJson({ model: "fast", messages })
    const elapsed = Date.now() - started
    expect(response.status).toBe(504)
    // The first-byte timer fired (not connect or idle), no sooner than its 300 ms; the upper bound
    // only tells the configured timeout from the 60 s default, so a loaded machine cannot trip it.
    expect(response.body).toMatchObject({
      status: 504,
      error: "upstream_timeout",
      details: { provider: "fake-openai", timeout: "first_byte" }
    })
    expect(elapsed).toBeGreaterThanOrEqual(TIMEOUT_MS - 20)
    expect(elapsed).toBeLessThan(10_000)
    await waitFor("upstream released", () => fake.openStreams() === 0)
    expect(await auditOf(response.body.request_id)).toMatchObject({ status: 504, error: "upstream_timeout", stream: false })

    fake.enqueue({ kind: "hang" })
    const error = await client.chat.completions.create({ model: "fast", messages, stream: true }).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(OpenAI.InternalServerError)
    expect((error as InstanceType<typeof OpenAI.InternalServerError>).status).toBe(504)
    expect((error as InstanceType<typeof OpenAI.InternalServerError>).error).toBe("upstream_timeout")
    await stillServes()
  })

  it("answers 504 when a non-streaming body stops arriving for idle_ms", async () => {
    fake.enqueue({ kind: "stall_after", chunks: 1 })
    const response = await postJson({ model: "fast", messages })
    expect(response.status).toBe(504)
    expect(response.body.error).toBe("upstream_timeout")
    await waitFor("upstream released", () => fake.openStreams() === 0)
    await stillServes()
  })
})

describe("failures after the stream started", () => {
  /** A stream's last two frames when it failed: the envelope, then [DONE]. */
  const failureTail = (text: string) => {
    const frames = dataFrames(text)
    expect(frames.at(-1)).toBe("[DONE]")
    const envelope = JSON.parse(frames.at(-2)!)
    // Nothing else in the stream is an error: exactly one envelope frame.
    expect(frames.filter((f) => f.includes('"error"'))).toHaveLength(1)
    return { envelope, chunks: frames.slice(0, -2).map((f) => JSON.parse(f)) }
  }

  it("ends a stream the upstream stops feeding with an upstream_timeout envelope frame and [DONE]", async () => {
    fake.enqueue({ kind: "stall_after", chunks: 3 })
    const response = await postStream({ model: "fast", messages })
    expect(response.status).toBe(200)
    const { envelope, chunks } = failureTail(response.text)
    expect(chunks.map((c) => c.choices[0].delta.content ?? "").join("")).toBe("word0 word1")
    const requestId = response.headers.get("x-request-id")!
    expect(envelope).toMatchObject({ status: 504, error: "upstream_timeout", request_id: requestId, details: { provider: "fake-openai" } })
    expect(await auditOf(requestId)).toMatchObject({ status: 200, error: "upstream_timeout", stream: true, provider: "fake-openai" })
    await waitFor("upstream released", () => fake.openStreams() === 0)
  })

  it("ends a stream whose upstream connection breaks off with a provider_error envelope frame and [DONE]", async () => {
    fake.enqueue({ kind: "stall_after", chunks: 2, then: "destroy" })
    const response = await postStream({ model: "fast", messages })
    expect(response.status).toBe(200)
    const { envelope, chunks } = failureTail(response.text)
    expect(chunks.length).toBe(2)
    expect(envelope).toMatchObject({ status: 502, error: "provider_error", details: { provider: "fake-openai", upstream_status: null } })
    expect(await auditOf(response.headers.get("x-request-id")!)).toMatchObject({ status: 200, error: "provider_error", stream: true })
    await stillServes()
  })

  it("does not pass off a stream the upstream closed before the answer was whole as complete", async () => {
    const response = await postStream({ model: "cut", messages })
    expect(response.status).toBe(200)
    const { envelope, chunks } = failureTail(response.text)
    expect(chunks.map((c) => c.choices[0].delta.content).join("")).toBe("Hello wor")
    expect(envelope).toMatchObject({ status: 502, error: "provider_error", details: { provider: "truncating" } })
    expect(await auditOf(response.headers.get("x-request-id")!)).toMatchObject({ status: 200, error: "provider_error", stream: true })
  })

  it("relays an upstream's in-band error as the gateway's envelope, which the SDK raises", async () => {
    fake.enqueue({ kind: "mid_stream_error", afterChunks: 2, message: "The engine melted." })
    const response = await postStream({ model: "fast", messages })
    const { envelope } = failureTail(response.text)
    expect(envelope).toMatchObject({
      status: 502,
      error: "provider_error",
      details: { provider: "fake-openai", upstream_error: { type: "server_error", message: "The engine melted." } }
    })

    fake.enqueue({ kind: "mid_stream_error", afterChunks: 2, message: "The engine melted." })
    const stream = await client.chat.completions.create({ model: "fast", messages, stream: true })
    const received: Array<string> = []
    const error = await (async () => {
      for await (const chunk of stream) received.push(chunk.choices[0]?.delta.content ?? "")
    })().catch((e: unknown) => e)
    expect(error).toBeInstanceOf(OpenAI.APIError)
    expect((error as InstanceType<typeof OpenAI.APIError>).error).toBe("provider_error")
    expect(received.join("")).toBe("word0")
  })

  it("makes the SDK's stream helper reject on a broken stream instead of returning a partial answer", async () => {
    fake.enqueue({ kind: "stall_after", chunks: 2, then: "destroy" })
    const error = await client.chat.completions.stream({ model: "fast", messages }).finalChatCompletion().catch((e: unknown) => e)
    expect(error).toBeInstanceOf(OpenAI.APIError)
  })
})

describe("a client that goes away", () => {
  it("aborts the upstream stream at once when the client disconnects mid-stream, and audits it", async () => {
    fake.enqueue({ kind: "text", text: Array.from({ length: 200 }, (_, i) => `w${i}`).join(" "), chunkDelayMs: 20 })
    const controller = new AbortController()
    const response = await post({ model: "slow", messages, stream: true }, controller.signal)
    expect(response.status).toBe(200)
    const requestId = response.headers.get("x-request-id")!
    const reader = response.body!.getReader()
    const first = await reader.read()
    expect(new TextDecoder().decode(first.value)).toMatch(/^data: /)
    await waitFor("upstream stream open", () => fake.openStreams() === 1)
    const leftAt = Date.now()
    controller.abort()
    await waitFor("upstream aborted", () => fake.aborted === 1 && fake.openStreams() === 0, 5000)
    // The release came from the client leaving: the audit says so, and it came well under the
    // provider's 10 s timeouts (half of them, a bound no loaded machine reaches for a prompt abort).
    expect(Date.now() - leftAt).toBeLessThan(5000)
    expect(await auditOf(requestId)).toMatchObject({ status: 200, error: "client_closed_request", stream: true, provider: "patient-openai" })
    await stillServes("slow")
  })

  /** Records of requests whose client left before any answer; the client never saw their ids. */
  const gaveUpRecords = async () => {
    const page = await Effect.runPromise(Effect.andThen(gw.audit.flush, gw.store.audit.queryAudit({ limit: 1000 })))
    return page.items.filter((r) => r.error === "client_closed_request" && !r.stream)
  }

  it("aborts the upstream request when the client gives up before any answer", async () => {
    const before = (await gaveUpRecords()).length
    fake.enqueue({ kind: "hang" })
    const controller = new AbortController()
    const pending = post({ model: "slow", messages }, controller.signal).catch((e: unknown) => e)
    await waitFor("upstream request open", () => fake.openStreams() === 1)
    controller.abort()
    expect(await pending).toBeInstanceOf(Error)
    // A state waited for; the bound only keeps a broken release from hanging the file (load 10 is slow).
    await waitFor("upstream aborted", () => fake.aborted === 1 && fake.openStreams() === 0, 10_000)
    const gaveUp = await gaveUpRecords()
    expect(gaveUp).toHaveLength(before + 1)
    // Newest first.
    expect(gaveUp[0]).toMatchObject({ status: 499, provider: "patient-openai", endpoint: "/v1/chat/completions" })
  })

  it("releases the upstream when an SDK client breaks out of the stream", async () => {
    fake.enqueue({ kind: "text", text: Array.from({ length: 200 }, (_, i) => `w${i}`).join(" "), chunkDelayMs: 10 })
    const stream = await client.chat.completions.create({ model: "slow", messages, stream: true })
    let count = 0
    for await (const _ of stream) {
      if (++count === 3) break
    }
    // A state waited for; the bound only keeps a broken release from hanging the file (load 10 is slow).
    await waitFor("upstream aborted", () => fake.aborted === 1 && fake.openStreams() === 0, 10_000)
  })

  it("releases an upstream whose non-streaming body stalled when the client gives up", async () => {
    const before = (await gaveUpRecords()).length
    fake.enqueue({ kind: "stall_after", chunks: 1 })
    const controller = new AbortController()
    const pending = post({ model: "slow", messages }, controller.signal).catch((e: unknown) => e)
    // Headers and half the body arrive, then nothing: the gateway is reading the body.
    await waitFor("upstream request open", () => fake.openStreams() === 1)
    await new Promise((resolve) => setTimeout(resolve, 50))
    controller.abort()
    expect(await pending).toBeInstanceOf(Error)
    // A state waited for; the bound only keeps a broken release from hanging the file (load 10 is slow).
    await waitFor("upstream aborted", () => fake.aborted === 1 && fake.openStreams() === 0, 10_000)
    expect(await gaveUpRecords()).toHaveLength(before + 1)
  })
})

describe("secrets", () => {
  it("never shows the provider's key, nor the wrong one configured, in any response or audit record", async () => {
    const everything = JSON.stringify(await Effect.runPromise(gw.store.audit.queryAudit({ limit: 1000 })))
    expect(seen.length).toBeGreaterThan(10)
    for (const text of [...seen, everything]) {
      expect(text).not.toContain(UPSTREAM_KEY)
      expect(text).not.toContain(WRONG_KEY)
      expect(text).not.toContain(key)
    }
  })
})
