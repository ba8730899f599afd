/**
 * Routing (issue 20) on the scripted providers layer: deployments, retries, cooldowns,
 * Retry-After, fallbacks across vendors in every client format, money charged once at the
 * answering model's price, one audit record per request with its attempts, and stream
 * continuation. The real gateway serves on port 0; clients are the official SDKs or fetch.
 * Each test uses models of its own, so one test's cooldowns never route another's requests.
 */
import Anthropic from "@anthropic-ai/sdk"
import { Effect } from "effect"
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ProviderError, UpstreamTimeout, ValidationFailed } from "../../src/domain/errors.ts"
import { scriptedProviders, type ScriptedAnswer, type ScriptedCall } from "../../src/services/providers/scripted.ts"
import type { AnthropicResponse, AnthropicStreamEvent } from "../../src/wire/anthropic-messages.ts"
import type { ChatChunk, ChatResponse } from "../../src/wire/openai-chat.ts"
import type { EmbeddingsResponse } from "../../src/wire/openai-embeddings.ts"
import { collectedAudit } from "../support/collected-audit.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { chatCompletion } from "../support/chat-answers.ts"
import { anthropicFor, openaiFor } from "../support/sdk-clients.ts"

const chunk = (delta: Record<string, unknown>, finish: string | null = null, id = "chatcmpl-r"): ChatChunk =>
  ({ id, object: "chat.completion.chunk", created: 1, model: "up", choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] }) as ChatChunk

const completion = (text: string) => chatCompletion(text, { id: "chatcmpl-r", usage: [3, 2] })

const answered = (provider: string) => ({ respond: completion(`from ${provider}`) })

const failure = (provider: string, status: number, retryAfter?: string) =>
  new ProviderError({
    message: `provider "${provider}" answered ${status}`,
    details: { provider, upstream_status: status, upstream_error: { message: "boom" } },
    ...(retryAfter === undefined ? {} : { retryAfter })
  })

const unreachable = (provider: string) =>
  new ProviderError({
    message: `provider "${provider}" is unreachable: connection refused`,
    details: { provider, upstream_status: null, upstream_error: { code: "ECONNREFUSED", message: "connection refused" } }
  })

type OpenAIScript = (call: ScriptedCall) => ScriptedAnswer<ChatResponse, ChatChunk>
type AnthropicScript = (call: ScriptedCall) => ScriptedAnswer<AnthropicResponse, AnthropicStreamEvent>

/** Per provider name: what it answers. */
const openaiScripts = new Map<string, OpenAIScript>()
const anthropicScripts = new Map<string, AnthropicScript>()
const embeddingScripts = new Map<string, (call: ScriptedCall) => ScriptedAnswer<EmbeddingsResponse, never>>()
/** What the Anthropic-kind `count_tokens` deployments (k1, k2) answer. */
let countScript: (call: ScriptedCall) => ScriptedAnswer<{ readonly input_tokens: number }, never> = () => ({ respond: { input_tokens: 42 } })

const OPENAI = ["a1", "b1", "a2", "b2", "a3", "b3", "gptfb", "d1", "d2", "c1", "c2", "s1", "s2", "cont1", "cont2", "t1", "t2", "w1", "w2", "cw1", "cwfb", "e1", "e2"]
const ANTHROPIC = ["claude-down", "claude-cont", "k1", "k2"]

const PRICE = 5
const FALLBACK_PRICE = 2
const POOL = 100_000

let gateway: TestGateway
let calls: ReturnType<typeof scriptedProviders>["calls"]
const audit = collectedAudit()

const duo = (alias: string, first: string, second: string, extra: Record<string, unknown> = {}) => ({
  alias,
  id: `${alias}-model`,
  deployments: [{ provider: first }, { provider: second }],
  credits: PRICE,
  max_tokens: 100,
  ...extra
})

beforeAll(async () => {
  const scripted = scriptedProviders(
    [...OPENAI.map((name) => ({ name, kind: "openai" as const })), ...ANTHROPIC.map((name) => ({ name, kind: "anthropic" as const }))],
    {
      openai: (call) => openaiScripts.get(call.provider)!(call),
      anthropic: (call) => anthropicScripts.get(call.provider)!(call),
      openaiEmbeddings: (call) => embeddingScripts.get(call.provider)!(call),
      anthropicCount: (call) => countScript(call)
    }
  )
  calls = scripted.calls
  gateway = await startGateway(
    testConfig({
      workspace: { credits: POOL },
      limits: { requests_per_minute: 100_000, concurrent_streams: 100 },
      routing: { backoff_ms: 1, cooldown_seconds: 60, allowed_fails: 0 },
      providers: [
        ...OPENAI.map((name) => ({ name, kind: "openai", base_url: "http://scripted.invalid/v1" })),
        ...ANTHROPIC.map((name) => ({ name, kind: "anthropic", base_url: "http://scripted.invalid" }))
      ],
      models: [
        duo("m503", "a1", "b1"),
        duo("m429", "a2", "b2"),
        duo("mstream", "a3", "b3"),
        duo("mdown", "d1", "d2"),
        duo("mslow", "t1", "t2"),
        { alias: "gpt-fallback", id: "gpt-fb-model", provider: "gptfb", credits: FALLBACK_PRICE, max_tokens: 100 },
        { alias: "claude-main", id: "claude-main-model", provider: "claude-down", credits: PRICE, max_tokens: 100, fallbacks: ["gpt-fallback"] },
        duo("mcont", "cont1", "cont2"),
        { alias: "claude-cont", id: "claude-cont-model", deployments: [{ provider: "claude-cont" }, { provider: "cont2", id: "cont-on-openai" }], credits: PRICE, max_tokens: 100 },
        { alias: "restricted", id: "restricted-model", provider: "c1", credits: PRICE, max_tokens: 100, fallbacks: ["hidden"] },
        { alias: "hidden", id: "hidden-model", provider: "c2", credits: PRICE, max_tokens: 100 },
        { alias: "mwait", id: "mwait-model", provider: "w1", credits: PRICE, max_tokens: 100 },
        { alias: "mwait-long", id: "mwait-long-model", provider: "w2", credits: PRICE, max_tokens: 100 },
        { alias: "small-window", id: "small-model", provider: "cw1", credits: PRICE, max_tokens: 100, fallbacks: ["big-window"] },
        { alias: "big-window", id: "big-model", provider: "cwfb", credits: FALLBACK_PRICE, max_tokens: 100 },
        { ...duo("membed", "e1", "e2"), endpoints: ["embeddings"] },
        duo("mcount", "k1", "k2")
      ]
    }),
    { providers: scripted.layer, audit: audit.layer }
  )
})

afterAll(() => gateway.close())

/** The pool in credits (the store holds micro-credits, issue 33). */
const balance = async () => (await Effect.runPromise(gateway.store.credits.getWorkspace)).credits / 1_000_000
const openai = (key: string) => openaiFor(gateway.url, key)
const anthropic = (key: string) => anthropicFor(gateway.url, key)
const callsTo = (provider: string) => calls.filter((c) => c.provider === provider).length

const chat = (key: string, model: string) =>
  fetch(`${gateway.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }] })
  })

/**
 * A pair of deployments of which the first one called fails with `status` from then on and the
 * other answers: whichever order the router picks them in, the first request meets the failing
 * one and fails over, so every run exercises the failover (a deployment failing by name would be
 * met only when the router happened to pick it first).
 */
const firstCalledFails = () => {
  let broken: string | undefined
  return {
    fails: (provider: string) => {
      broken ??= provider
      return broken === provider
    },
    broken: () => broken
  }
}

/** `count` requests, `width` at a time. */
const inBatches = async <A>(count: number, width: number, one: (i: number) => Promise<A>) => {
  const out: Array<A> = []
  for (let i = 0; i < count; i += width) {
    out.push(...await Promise.all(Array.from({ length: Math.min(width, count - i) }, (_, j) => one(i + j))))
  }
  return out
}

describe("deployments, retries and cooldowns", () => {
  it("a deployment answering 503 is retried on the other and cooled: 100 requests all succeed, few reach it", async () => {
    openaiScripts.set("a1", () => ({ fail: failure("a1", 503) }))
    openaiScripts.set("b1", () => answered("b1"))
    const { key } = await gateway.createKey()
    const before = await balance()
    const responses = await inBatches(100, 10, async () => {
      const { data, response } = await openai(key).chat.completions.create({ model: "m503", messages: [{ role: "user", content: "hi" }] }).withResponse()
      return { text: data.choices[0]!.message.content, id: response.headers.get("x-request-id") }
    })
    expect(responses.every((r) => r.text === "from b1")).toBe(true)
    expect(callsTo("a1")).toBeLessThanOrEqual(15)
    expect(callsTo("b1")).toBe(100)
    // Charged once per request, at the model's price.
    expect(await balance()).toBe(before - 100 * PRICE)
    const records = (await Promise.all(responses.map((r) => audit.recordsOf(r.id)))).flat()
    expect(records).toHaveLength(100)
    expect(records.every((r) => r.credits === PRICE * 1_000_000 && r.provider === "b1" && r.status === 200)).toBe(true)
    const retried = records.find((r) => (r.details?.attempts as Array<unknown>).length === 2)!
    expect(retried.details!.attempts).toMatchObject([
      { deployment: "a1", model: "m503-model", status: 502, error: "provider_error", upstream_status: 503 },
      { deployment: "b1", model: "m503-model", status: 200, error: null }
    ])
    // The cooldown shows in /metrics.
    const metrics = await (await fetch(`${gateway.url}/metrics`)).text()
    expect(metrics).toMatch(/modelgate_deployments_cooling\{deployment="a1\/m503-model",provider="a1"\} 1/)
    expect(metrics).toMatch(/modelgate_upstream_attempts_total\{deployment="a1\/m503-model",provider="a1",result="failed"\} \d+/)
  })

  it("20 streams through a model whose first deployment answers 503 all end normally", async () => {
    openaiScripts.set("a3", () => ({ fail: failure("a3", 503) }))
    openaiScripts.set("b3", () => ({ events: [{ event: chunk({ role: "assistant", content: "str" }) }, { event: chunk({ content: "eam" }, "stop") }] }))
    const { key } = await gateway.createKey()
    const texts = await inBatches(20, 10, async () => {
      const stream = await openai(key).chat.completions.create({ model: "mstream", stream: true, messages: [{ role: "user", content: "hi" }] })
      let text = ""
      for await (const part of stream) text += part.choices[0]?.delta?.content ?? ""
      return text
    })
    expect(texts).toEqual(Array(20).fill("stream"))
    expect(callsTo("a3")).toBeLessThanOrEqual(10)
  })

  it("a deployment answering 429 with a long Retry-After moves all its requests to the other at once", async () => {
    openaiScripts.set("a2", () => ({ fail: failure("a2", 429, "120") }))
    openaiScripts.set("b2", () => answered("b2"))
    const { key } = await gateway.createKey()
    for (let i = 0; i < 20; i++) {
      const response = await chat(key, "m429")
      expect(response.status).toBe(200)
    }
    expect(callsTo("a2")).toBeLessThanOrEqual(1)
    expect(callsTo("b2")).toBe(20)
  })

  it("a deployment slow to its first byte (timed out) is retried on the other, and not cooled for a non-streamed request (issue 32.3)", async () => {
    const slow = new UpstreamTimeout({ message: "provider \"t1\" timed out (first_byte)", details: { provider: "t1", timeout: "first_byte" } })
    openaiScripts.set("t1", () => ({ fail: slow, delay: "50 millis" }))
    openaiScripts.set("t2", () => answered("t2"))
    const { key } = await gateway.createKey()
    for (let i = 0; i < 10; i++) {
      const response = await chat(key, "mslow")
      expect(response.status).toBe(200)
      expect(((await response.json()) as ChatResponse).choices[0]!.message.content).toBe("from t2")
    }
    // A non-streamed answer arrives whole: timing out before it is the request's length, not the deployment's trouble.
    expect(await (await fetch(`${gateway.url}/readyz`)).text()).not.toContain("t1/mslow-model")
  })

  it("a single deployment asking for a short wait (Retry-After: 1) is tried again after it; a long wait is answered at once", async () => {
    let w1Calls = 0
    openaiScripts.set("w1", () => (++w1Calls === 1 ? { fail: failure("w1", 429, "1") } : answered("w1")))
    const { key } = await gateway.createKey()
    const started = Date.now()
    const response = await chat(key, "mwait")
    expect(response.status).toBe(200)
    expect(((await response.json()) as ChatResponse).choices[0]!.message.content).toBe("from w1")
    // The second attempt waited the second the upstream asked for (a lower bound: never early).
    expect(Date.now() - started).toBeGreaterThanOrEqual(950)
    expect(callsTo("w1")).toBe(2)
    const [record] = await audit.recordsOf(response.headers.get("x-request-id"))
    expect(record).toMatchObject({ status: 200, provider: "w1", credits: PRICE * 1_000_000 })
    expect(record!.details!.attempts).toMatchObject([
      { deployment: "w1", status: 502, error: "provider_error", upstream_status: 429 },
      { deployment: "w1", status: 200, error: null }
    ])

    // 30 s is longer than max_retry_wait_ms: no wait, the client has the 502 and the upstream's Retry-After.
    openaiScripts.set("w2", () => ({ fail: failure("w2", 429, "30") }))
    const long = await chat(key, "mwait-long")
    expect(long.status).toBe(502)
    expect(long.headers.get("retry-after")).toBe("30")
    expect(callsTo("w2")).toBe(1)
  })

  it("a context-window refusal goes to the fallback with the larger window, charged at its price; another refusal is answered at once", async () => {
    const refusal = (code: string | null, message: string) =>
      new ValidationFailed({
        message: `provider "cw1" refused the request (400): ${message}`,
        details: { provider: "cw1", upstream_status: 400, upstream_error: { type: "invalid_request_error", code, message } }
      })
    openaiScripts.set("cw1", () => ({ fail: refusal("context_length_exceeded", "This model's maximum context length is 8192 tokens.") }))
    openaiScripts.set("cwfb", () => answered("cwfb"))
    const { key } = await gateway.createKey()
    const before = await balance()
    const response = await chat(key, "small-window")
    expect(response.status).toBe(200)
    expect(((await response.json()) as ChatResponse).choices[0]!.message.content).toBe("from cwfb")
    // Not retried on its own deployment: the window does not grow.
    expect(callsTo("cw1")).toBe(1)
    expect(await balance()).toBe(before - FALLBACK_PRICE)
    const [record] = await audit.recordsOf(response.headers.get("x-request-id"))
    expect(record).toMatchObject({ status: 200, model: "big-model", provider: "cwfb", credits: FALLBACK_PRICE * 1_000_000 })
    expect(record!.details!.attempts).toMatchObject([
      { deployment: "cw1", status: 400, error: "validation_failed", upstream_status: 400 },
      { deployment: "cwfb", status: 200, error: null, fallback_of: "small-window" }
    ])

    // Anthropic's wording without a code counts too.
    openaiScripts.set("cw1", () => ({ fail: refusal(null, "prompt is too long: 210000 tokens > 200000 maximum") }))
    expect((await chat(key, "small-window")).status).toBe(200)
    expect(callsTo("cwfb")).toBe(2)

    // Any other refusal of the request is the client's to fix: answered as it is, no fallback.
    openaiScripts.set("cw1", () => ({ fail: refusal("invalid_value", "temperature: must be at most 2") }))
    const refused = await chat(key, "small-window")
    expect(refused.status).toBe(400)
    expect(((await refused.json()) as { error: string }).error).toBe("validation_failed")
    expect(callsTo("cwfb")).toBe(2)
  })

  it("embeddings are routed too: the deployment met first answers 503, the request is answered by the other and the first is cooled", async () => {
    const pair = firstCalledFails()
    const embedding = (call: ScriptedCall): ScriptedAnswer<EmbeddingsResponse, never> =>
      pair.fails(call.provider)
        ? { fail: failure(call.provider, 503) }
        : { respond: { object: "list", data: [{ object: "embedding", index: 0, embedding: [0.5, 0.25] }], model: String(call.body.model), usage: { prompt_tokens: 4, total_tokens: 4 } } }
    embeddingScripts.set("e1", embedding)
    embeddingScripts.set("e2", embedding)
    const { key } = await gateway.createKey()
    const before = await balance()
    const ids: Array<string | null> = []
    for (let i = 0; i < 5; i++) {
      const response = await fetch(`${gateway.url}/v1/embeddings`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "membed", input: "hello" })
      })
      expect(response.status).toBe(200)
      expect(((await response.json()) as EmbeddingsResponse).data[0]!.embedding).toEqual([0.5, 0.25])
      ids.push(response.headers.get("x-request-id"))
    }
    const broken = pair.broken()!
    const healthy = broken === "e1" ? "e2" : "e1"
    // The first request met the failing deployment and failed over; it then cooled down.
    expect(callsTo(broken)).toBe(1)
    expect(callsTo(healthy)).toBe(5)
    expect(await balance()).toBe(before - 5 * PRICE)
    const records = (await Promise.all(ids.map((id) => audit.recordsOf(id)))).flat()
    expect(records.every((r) => r.provider === healthy && r.prompt_tokens === 4 && r.credits === PRICE * 1_000_000)).toBe(true)
    expect(records[0]!.details!.attempts).toMatchObject([
      { deployment: broken, status: 502, error: "provider_error", upstream_status: 503 },
      { deployment: healthy, status: 200, error: null }
    ])
  })

  it("count_tokens is routed over the model's deployments: the one met first answers 529, the count comes from the other, the first is cooled", async () => {
    const pair = firstCalledFails()
    countScript = (call) => (pair.fails(call.provider) ? { fail: failure(call.provider, 529) } : { respond: { input_tokens: 42 } })
    const { key } = await gateway.createKey()
    const ids: Array<string | null> = []
    for (let i = 0; i < 5; i++) {
      const { data: counted, response } = await anthropic(key).messages.countTokens({ model: "mcount", messages: [{ role: "user", content: "hi" }] }).withResponse()
      expect(counted.input_tokens).toBe(42)
      ids.push(response.headers.get("x-request-id"))
    }
    const broken = pair.broken()!
    const healthy = broken === "k1" ? "k2" : "k1"
    expect(callsTo(broken)).toBe(1)
    expect(callsTo(healthy)).toBe(5)
    const [first] = await audit.recordsOf(ids[0]!)
    expect(first!.details!.attempts).toMatchObject([
      { deployment: broken, status: 502, error: "provider_error", upstream_status: 529 },
      { deployment: healthy, status: 200, error: null }
    ])
  })

  it("every deployment down: 502 provider_error, nothing charged, every attempt audited", async () => {
    openaiScripts.set("d1", () => ({ fail: unreachable("d1") }))
    openaiScripts.set("d2", () => ({ fail: failure("d2", 500) }))
    const { key } = await gateway.createKey()
    const before = await balance()
    const response = await chat(key, "mdown")
    expect(response.status).toBe(502)
    expect(((await response.json()) as { error: string }).error).toBe("provider_error")
    expect(await balance()).toBe(before)
    const records = await audit.recordsOf(response.headers.get("x-request-id"))
    expect(records).toHaveLength(1)
    expect(records[0]).toMatchObject({ status: 502, error: "provider_error", credits: 0 })
    const attempts = records[0]!.details!.attempts as Array<{ deployment: string }>
    expect(attempts.map((a) => a.deployment).sort()).toEqual(["d1", "d2"])
  })

  it("a refusal of the request itself (400) is answered at once, not retried", async () => {
    const { key } = await gateway.createKey()
    const refused = new ValidationFailed({ message: "provider refused (400)", details: { provider: "d1", upstream_status: 400, upstream_error: { message: "bad" } } })
    openaiScripts.set("d1", () => ({ fail: refused }))
    openaiScripts.set("d2", () => ({ fail: refused }))
    const before = calls.length
    const response = await chat(key, "mdown")
    expect(response.status).toBe(400)
    expect(calls.length - before).toBe(1)
  })
})

describe("fallbacks across vendors", () => {
  const claudeDown = () => anthropicScripts.set("claude-down", () => ({ fail: failure("claude-down", 529) }))

  it("a failing Anthropic model answers a chat client from its OpenAI-kind fallback, charged the fallback's price", async () => {
    claudeDown()
    openaiScripts.set("gptfb", () => answered("gptfb"))
    const { key } = await gateway.createKey()
    const before = await balance()
    const { data, response } = await openai(key).chat.completions.create({ model: "claude-main", messages: [{ role: "user", content: "hi" }] }).withResponse()
    expect(data.choices[0]!.message.content).toBe("from gptfb")
    expect(await balance()).toBe(before - FALLBACK_PRICE)
    const [record] = await audit.recordsOf(response.headers.get("x-request-id"))
    expect(record).toMatchObject({ status: 200, credits: FALLBACK_PRICE * 1_000_000, model: "gpt-fb-model", provider: "gptfb" })
    expect(record!.details!.attempts).toMatchObject([
      { deployment: "claude-down", model: "claude-main-model", error: "provider_error", upstream_status: 529 },
      { deployment: "gptfb", model: "gpt-fb-model", status: 200, fallback_of: "claude-main" }
    ])
  })

  it("answers a Messages client in the Messages format", async () => {
    claudeDown()
    openaiScripts.set("gptfb", () => answered("gptfb"))
    const { key } = await gateway.createKey()
    const message = await anthropic(key).messages.create({ model: "claude-main", max_tokens: 50, messages: [{ role: "user", content: "hi" }] })
    expect(message.type).toBe("message")
    expect(message.content).toEqual([expect.objectContaining({ type: "text", text: "from gptfb" })])
    expect(calls.at(-1)).toMatchObject({ provider: "gptfb", stream: false })
    expect(calls.at(-1)!.body.model).toBe("gpt-fb-model")
  })

  it("answers a streaming Messages client with Messages events", async () => {
    claudeDown()
    openaiScripts.set("gptfb", () => ({
      events: [{ event: chunk({ role: "assistant", content: "fall" }) }, { event: chunk({ content: "back" }, "stop") }]
    }))
    const { key } = await gateway.createKey()
    const before = await balance()
    const stream = anthropic(key).messages.stream({ model: "claude-main", max_tokens: 50, messages: [{ role: "user", content: "hi" }] })
    const final = await stream.finalMessage()
    expect(final.content).toEqual([expect.objectContaining({ type: "text", text: "fallback" })])
    expect(final.stop_reason).toBe("end_turn")
    expect(await balance()).toBe(before - FALLBACK_PRICE)
  })

  it("a key that may not name the fallback is not answered by it (allow_via_fallback off)", async () => {
    openaiScripts.set("c1", () => ({ fail: failure("c1", 503) }))
    openaiScripts.set("c2", () => answered("c2"))
    const { key } = await gateway.createKey({ allowed_models: ["restricted"] })
    const before = calls.filter((c) => c.provider === "c2").length
    const response = await chat(key, "restricted")
    expect(response.status).toBe(502)
    expect(callsTo("c2")).toBe(before)
    const { key: open } = await gateway.createKey()
    expect((await chat(open, "restricted")).status).toBe(200)
  })
})

describe("stream continuation", () => {
  let continuing: TestGateway
  let contCalls: ReturnType<typeof scriptedProviders>["calls"]
  /** The first call of each test is cut after two chunks; the next one streams the rest. */
  let served = 0
  const cutThenRest: OpenAIScript = () => {
    served++
    return served === 1
      ? { events: [{ event: chunk({ role: "assistant", content: "Hello" }, null, "chatcmpl-first") }, { event: chunk({ content: " wor" }, null, "chatcmpl-first") }, { fail: unreachable("cut") }] }
      : { events: [{ event: chunk({ role: "assistant", content: "" }, null, "chatcmpl-second") }, { event: chunk({ content: "ld!" }, "stop", "chatcmpl-second") }] }
  }
  const anthropicCutThenRest: AnthropicScript = () => {
    served++
    if (served !== 1) throw new Error("the Anthropic deployment is only the first")
    return {
      events: [
        { event: { type: "message_start", message: { id: "msg_1", type: "message", role: "assistant", model: "m", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 4, output_tokens: 1 } } } as unknown as AnthropicStreamEvent },
        { event: { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } } as unknown as AnthropicStreamEvent },
        { event: { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Hello wor" } } as unknown as AnthropicStreamEvent },
        { fail: unreachable("claude-cont") }
      ]
    }
  }

  beforeAll(async () => {
    const scripted = scriptedProviders(
      [{ name: "cont1", kind: "openai" }, { name: "cont2", kind: "openai" }, { name: "claude-cont", kind: "anthropic" }],
      { openai: (call) => cutThenRest(call), anthropic: (call) => anthropicCutThenRest(call) }
    )
    contCalls = scripted.calls
    continuing = await startGateway(
      testConfig({
        workspace: { credits: POOL },
        routing: { backoff_ms: 1, stream_continuation: true, allowed_fails: 0 },
        providers: [
          { name: "cont1", kind: "openai", base_url: "http://scripted.invalid/v1" },
          { name: "cont2", kind: "openai", base_url: "http://scripted.invalid/v1" },
          { name: "claude-cont", kind: "anthropic", base_url: "http://scripted.invalid" }
        ],
        models: [
          duo("mcont", "cont1", "cont2"),
          // Weighted so the Anthropic deployment comes first in practice; the test checks it did.
          {
            alias: "claude-cont",
            id: "claude-cont-model",
            deployments: [{ provider: "claude-cont", weight: 1_000_000 }, { provider: "cont2", id: "cont-on-openai", weight: 0.000001 }],
            credits: PRICE,
            max_tokens: 100
          }
        ]
      }),
      { providers: scripted.layer, audit: audit.layer }
    )
  })
  afterAll(() => continuing.close())

  it("a chat stream cut after two chunks ends with [DONE] and no error frame, continued on the other deployment", async () => {
    served = 0
    const { key } = await continuing.createKey()
    const before = (await Effect.runPromise(continuing.store.credits.getWorkspace)).credits
    const response = await fetch(`${continuing.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "mcont", stream: true, messages: [{ role: "user", content: "hi" }] })
    })
    const text = await response.text()
    expect(text.trimEnd().endsWith("data: [DONE]")).toBe(true)
    expect(text).not.toContain("error")
    const chunks = text.split("\n\n").filter((f) => f.startsWith("data: {")).map((f) => JSON.parse(f.slice(6)) as ChatChunk)
    expect(chunks.map((c) => c.choices[0]?.delta?.content ?? "").join("")).toBe("Hello world!")
    expect(new Set(chunks.map((c) => c.id))).toEqual(new Set(["chatcmpl-first"]))
    expect(chunks.filter((c) => c.choices[0]?.delta?.role !== undefined)).toHaveLength(1)
    // The second deployment was asked for the rest: the partial turn and the instruction to continue.
    const second = contCalls.at(-1)!
    expect(second.provider).not.toBe(contCalls.at(-2)!.provider)
    const messages = second.body.messages as Array<{ role: string; content: string }>
    expect(messages.slice(-2)).toEqual([
      { role: "assistant", content: "Hello wor" },
      { role: "user", content: expect.stringContaining("Continue") }
    ])
    const [record] = await audit.recordsOf(response.headers.get("x-request-id"))
    expect(record).toMatchObject({ status: 200, error: null, credits: PRICE * 1_000_000 })
    expect((record!.details!.attempts as Array<{ continuation?: boolean }>).map((a) => a.continuation ?? false)).toEqual([false, true])
    expect((await Effect.runPromise(continuing.store.credits.getWorkspace)).credits).toBe(before - PRICE * 1_000_000)
  })

  it("a Messages stream cut on Anthropic is continued on an OpenAI-kind deployment as one message", async () => {
    served = 0
    const { key } = await continuing.createKey()
    const stream = anthropicFor(continuing.url, key).messages.stream({
      model: "claude-cont",
      max_tokens: 50,
      messages: [{ role: "user", content: "hi" }]
    })
    const final = await stream.finalMessage()
    expect(contCalls.at(-2)!.provider).toBe("claude-cont")
    expect(contCalls.at(-1)!.provider).toBe("cont2")
    expect(final.content).toEqual([expect.objectContaining({ type: "text", text: "Hello world!" })])
    expect(final.id).toBe("msg_1")
  })
})
