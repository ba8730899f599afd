/**
 * POST /v1/messages as an Anthropic client sees it, over both provider kinds and the built-in
 * echo model: authentication headers, the tolerated Anthropic headers and `?beta=true`, the
 * response and stream shapes byte for byte, validation and untranslatable requests, and audit.
 * (The full conversation matrix is in matrix.test.ts.)
 */
import Anthropic from "@anthropic-ai/sdk"
import { Effect } from "effect"
import { beforeAll, describe, expect, it } from "vitest"
import type { FakeUpstream, JsonBody } from "../support/fake-common.ts"
import { awaitAuditOf, type TestGateway } from "../support/gateway.ts"
import { ANTHROPIC_KEY, OPENAI_KEY, useModelGateway } from "../support/model-gateway.ts"
import { anthropicFor } from "../support/sdk-clients.ts"

type AnthropicApiError = InstanceType<typeof Anthropic.APIError>

const GPT_ID = "gpt-4o-2024-08-06"
const CLAUDE_ID = "claude-haiku-4-5-20251001"
const CAP = 3000

let openaiFake: FakeUpstream
let anthropicFake: FakeUpstream
let gw: TestGateway
let key: string
let keyId: string
let client: Anthropic

const fixture = useModelGateway({
  gptId: GPT_ID,
  claudeId: CLAUDE_ID,
  cap: CAP,
  models: (defaults) => [...defaults, { alias: "echo", id: "echo-1", provider: "echo" }]
})

beforeAll(async () => {
  gw = fixture.gateway()
  openaiFake = fixture.openaiFake()
  anthropicFake = fixture.anthropicFake()
  ;({ key, id: keyId } = await gw.createKey())
  client = anthropicFor(gw.url, key)
})

const PROVIDERS = [
  { kind: "openai", alias: "gpt", modelId: GPT_ID, name: "up-openai", fake: () => openaiFake },
  { kind: "anthropic", alias: "claude", modelId: CLAUDE_ID, name: "up-anthropic", fake: () => anthropicFake }
] as const

const post = async (body: unknown, headers: Record<string, string> = { authorization: `Bearer ${key}` }, path = "/v1/messages") => {
  const response = await fetch(gw.url + path, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body)
  })
  const text = await response.text()
  return { status: response.status, headers: response.headers, text, json: () => JSON.parse(text) as JsonBody }
}

interface Frame {
  readonly event: string
  readonly data: JsonBody
}

/** Every frame of an Anthropic-format stream, after checking each is exactly `event:` + `data:` + blank line. */
const framesOf = (text: string): Array<Frame> => {
  expect(text).toMatch(/^(event: [a-z_]+\ndata: [^\n]+\n\n)+$/)
  return text.split("\n\n").filter((f) => f !== "").map((frame) => {
    const [event, data] = frame.split("\n")
    const parsed = { event: event!.slice("event: ".length), data: JSON.parse(data!.slice("data: ".length)) as JsonBody }
    expect(parsed.data.type).toBe(parsed.event)
    return parsed
  })
}

/** The exact event grammar of wire-formats 2.4, as a regular expression over event names. */
const STREAM_GRAMMAR = /^message_start( ping)*( content_block_start( ping)*( content_block_delta( ping)*)* content_block_stop( ping)*)* message_delta message_stop$/

const auditOf = (requestId: string) => awaitAuditOf(gw, requestId, keyId)

describe("authentication and Anthropic headers", () => {
  it.each(PROVIDERS)("accepts x-api-key or Bearer, with anthropic-version, anthropic-beta and ?beta=true ($kind-kind provider)", async (provider) => {
    const body = { model: provider.alias, max_tokens: 20, messages: [{ role: "user", content: "hi" }] }
    const variants: Array<{ headers: Record<string, string>; path?: string }> = [
      { headers: { "x-api-key": key, "anthropic-version": "2023-06-01" } },
      { headers: { authorization: `Bearer ${key}`, "anthropic-version": "2026-10-21" } },
      { headers: { "x-api-key": key, authorization: `Bearer ${key}` } },
      {
        headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "anthropic-beta": "prompt-caching-2024-07-31,token-efficient-tools-2025-02-19" },
        path: "/v1/messages?beta=true"
      }
    ]
    for (const variant of variants) {
      const response = await post(body, variant.headers, variant.path)
      expect(response.status, response.text).toBe(200)
      expect(response.json()).toMatchObject({ type: "message", role: "assistant", content: [{ type: "text", text: "echo: hi" }] })
    }
    // The upstream always gets the gateway's own credentials; an Anthropic-kind one also gets the
    // client's anthropic-version and anthropic-beta (the vendor judges its own format), or the
    // configured version when the client sent none.
    expect(provider.fake().requests).toHaveLength(variants.length)
    provider.fake().requests.forEach((request, i) => {
      expect(request.headers["x-api-key"] ?? request.headers.authorization).toBe(provider.kind === "anthropic" ? ANTHROPIC_KEY : `Bearer ${OPENAI_KEY}`)
      if (provider.kind !== "anthropic") return
      expect(request.headers["anthropic-version"]).toBe(variants[i]!.headers["anthropic-version"] ?? "2023-06-01")
      expect(request.headers["anthropic-beta"]).toBe(variants[i]!.headers["anthropic-beta"])
    })
  })

  it("refuses a missing, unknown or conflicting key with the envelope; the SDK sees an AuthenticationError", async () => {
    const body = { model: "claude", max_tokens: 20, messages: [{ role: "user", content: "hi" }] }
    const other = (await gw.createKey()).key
    const attempts: Array<Record<string, string>> = [
      { "anthropic-version": "2023-06-01" },
      { "x-api-key": `sk-mg-${"0".repeat(32)}` },
      { "x-api-key": key, authorization: `Bearer ${other}` }
    ]
    for (const headers of attempts) {
      const response = await post(body, headers)
      expect(response.status).toBe(401)
      expect(response.json()).toMatchObject({ status: 401, error: "unauthorized", request_id: response.headers.get("request-id") })
    }
    const sdk = anthropicFor(gw.url, `sk-mg-${"1".repeat(32)}`)
    const error = await sdk.messages.create(body as Anthropic.MessageCreateParamsNonStreaming).then(() => undefined, (e: unknown) => e)
    expect(error).toBeInstanceOf(Anthropic.AuthenticationError)
    expect((error as AnthropicApiError).error).toMatchObject({ status: 401, error: "unauthorized" })
    expect(anthropicFake.requests).toHaveLength(0)
  })

  it("serves the SDK's beta surface (POST /v1/messages?beta=true with anthropic-beta) on both provider kinds", async () => {
    for (const provider of PROVIDERS) {
      const message = await client.beta.messages.create({
        model: provider.alias,
        max_tokens: 20,
        messages: [{ role: "user", content: "beta hello" }],
        betas: ["token-efficient-tools-2025-02-19"]
      })
      expect(message).toMatchObject({ type: "message", content: [{ type: "text", text: "echo: beta hello" }], stop_reason: "end_turn" })
    }
  })
})

describe("non-streaming responses", () => {
  it.each(PROVIDERS)("have a msg_ id, type message, content blocks, stop_reason, stop_sequence and usage ($kind-kind provider)", async (provider) => {
    provider.fake().enqueue({
      kind: "tool_calls",
      text: "Let me look.",
      calls: [{ id: provider.kind === "openai" ? "call_Ab12" : "toolu_01Ab12", name: "lookup", arguments: { q: "tides" } }],
      usage: provider.kind === "openai" ? { input: 40, output: 9, cacheRead: 30 } : { input: 10, output: 9, cacheRead: 30 }
    })
    const response = await post({
      model: provider.alias,
      max_tokens: 100,
      messages: [{ role: "user", content: "When is high tide?" }],
      tools: [{ name: "lookup", input_schema: { type: "object", properties: { q: { type: "string" } } } }]
    })
    expect(response.status).toBe(200)
    expect(response.headers.get("content-type")).toMatch(/^application\/json/)
    const requestId = response.headers.get("request-id")
    expect(requestId).toMatch(/^req_/)
    expect(response.headers.get("x-request-id")).toBe(requestId)
    const message = response.json()
    expect(message.id).toMatch(/^msg_[a-zA-Z0-9_-]+$/)
    expect(message).toMatchObject({
      type: "message",
      role: "assistant",
      content: [
        { type: "text", text: "Let me look." },
        { type: "tool_use", id: provider.kind === "openai" ? "toolu_Ab12" : "toolu_01Ab12", name: "lookup", input: { q: "tides" } }
      ],
      stop_reason: "tool_use",
      stop_sequence: null,
      usage: { input_tokens: 10, output_tokens: 9, cache_read_input_tokens: 30, cache_creation_input_tokens: 0 }
    })
    expect(message.content).toHaveLength(2)

    const [record] = await auditOf(requestId!)
    expect(record).toMatchObject({
      endpoint: "/v1/messages",
      status: 200,
      error: null,
      model: provider.modelId,
      provider: provider.name,
      prompt_tokens: 40,
      completion_tokens: 9,
      stream: false
    })
  })
})

describe("streams", () => {
  it.each(PROVIDERS)("have the exact event sequence, each frame with its event: line, one message_delta, no [DONE] ($kind-kind provider)", async (provider) => {
    provider.fake().enqueue({
      kind: "tool_calls",
      text: "Checking the tide tables now.",
      calls: [
        { id: provider.kind === "openai" ? "call_T1" : "toolu_01T1", name: "lookup", arguments: { q: "tides", port: "Brest" } },
        { id: provider.kind === "openai" ? "call_T2" : "toolu_01T2", name: "lookup", arguments: { q: "moon" } }
      ],
      usage: provider.kind === "openai" ? { input: 50, output: 21, cacheRead: 8, cacheWrite: 2 } : { input: 40, output: 21, cacheRead: 8, cacheWrite: 2 },
      // Upstream quirks the client must not see: comment keep-alives, the usage frame twice.
      keepAlive: true,
      extraUsageChunk: true
    })
    const response = await post({
      model: provider.alias,
      max_tokens: 100,
      stream: true,
      messages: [{ role: "user", content: "When is high tide?" }],
      tools: [{ name: "lookup", input_schema: { type: "object", properties: { q: { type: "string" }, port: { type: "string" } } } }]
    })
    expect(response.status).toBe(200)
    expect(response.headers.get("content-type")).toBe("text/event-stream; charset=utf-8")
    expect(response.headers.get("cache-control")).toBe("no-cache")
    expect(response.text).not.toContain("[DONE]")
    const frames = framesOf(response.text)
    expect(frames.map((f) => f.event).join(" ")).toMatch(STREAM_GRAMMAR)
    const content = frames.filter((f) => f.event !== "ping")

    const start = content[0]!.data
    expect(start.message).toMatchObject({ type: "message", role: "assistant", content: [], stop_reason: null, stop_sequence: null })
    expect(start.message.id).toMatch(/^msg_[a-zA-Z0-9_-]+$/)
    expect(start.message.usage.output_tokens).toEqual(expect.any(Number))

    const blockStarts = content.filter((f) => f.event === "content_block_start").map((f) => f.data)
    expect(blockStarts).toEqual([
      { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
      {
        type: "content_block_start",
        index: 1,
        content_block: { type: "tool_use", id: provider.kind === "openai" ? "toolu_T1" : "toolu_01T1", name: "lookup", input: {} }
      },
      {
        type: "content_block_start",
        index: 2,
        content_block: { type: "tool_use", id: provider.kind === "openai" ? "toolu_T2" : "toolu_01T2", name: "lookup", input: {} }
      }
    ])
    const deltasOf = (index: number) => content.filter((f) => f.event === "content_block_delta" && f.data.index === index).map((f) => f.data.delta)
    expect(deltasOf(0).every((d) => d.type === "text_delta")).toBe(true)
    expect(deltasOf(0).map((d) => d.text).join("")).toBe("Checking the tide tables now.")
    for (const [index, input] of [[1, { q: "tides", port: "Brest" }], [2, { q: "moon" }]] as const) {
      expect(deltasOf(index).every((d) => d.type === "input_json_delta")).toBe(true)
      expect(JSON.parse(deltasOf(index).map((d) => d.partial_json).join(""))).toEqual(input)
    }
    const delta = content.at(-2)!.data
    expect(delta.delta).toMatchObject({ stop_reason: "tool_use", stop_sequence: null })
    expect(delta.usage).toMatchObject({ output_tokens: 21, input_tokens: 40, cache_read_input_tokens: 8, cache_creation_input_tokens: 2 })
    expect(content.at(-1)!.data).toEqual({ type: "message_stop" })

    const [record] = await auditOf(response.headers.get("request-id")!)
    expect(record).toMatchObject({ status: 200, error: null, model: provider.modelId, provider: provider.name, prompt_tokens: 50, completion_tokens: 21, stream: true })
  })
})

describe("validation", () => {
  const valid = { model: "claude", max_tokens: 50, messages: [{ role: "user", content: "hi" }] }
  // `gateway`: what the gateway itself relies on, refused on every route. The rest only matters
  // to the format: refused by the gateway when it translates (it must know every field), and
  // judged by the vendor on passthrough (decisions section 6).
  const cases: Array<{ name: string; body: Record<string, unknown>; field: string; gateway?: boolean }> = [
    { name: "missing max_tokens", body: { model: "claude", messages: valid.messages }, field: "max_tokens", gateway: true },
    { name: "max_tokens not an integer", body: { ...valid, max_tokens: 1.5 }, field: "max_tokens", gateway: true },
    { name: "unknown top-level field", body: { ...valid, frequency_penalty: 0.5 }, field: "frequency_penalty" },
    { name: "unknown field in a message", body: { ...valid, messages: [{ role: "user", content: "hi", name: "bob" }] }, field: "messages.0.name" },
    // The beta format has system messages inside messages; other roles are refused.
    { name: "tool role in messages", body: { ...valid, messages: [{ role: "tool", content: "hi" }] }, field: "messages.0.role", gateway: true },
    { name: "empty text block", body: { ...valid, messages: [{ role: "user", content: [{ type: "text", text: "" }] }] }, field: "messages.0.content.0.text" },
    { name: "temperature above 1", body: { ...valid, temperature: 1.5 }, field: "temperature" },
    { name: "empty messages", body: { ...valid, messages: [] }, field: "messages", gateway: true },
    {
      name: "tool_use id with a dot",
      body: { ...valid, messages: [{ role: "assistant", content: [{ type: "tool_use", id: "functions.x:0", name: "x", input: {} }] }] },
      field: "messages.0.content.0.id"
    },
    { name: "tool without input_schema", body: { ...valid, tools: [{ name: "lookup" }] }, field: "tools.0.input_schema" }
  ]

  it.each(cases)("$name -> 400 validation_failed naming $field when translating, nothing sent upstream", async ({ body, field }) => {
    const response = await post({ ...body, model: "gpt" })
    expect(response.status).toBe(400)
    const envelope = response.json()
    expect(envelope).toMatchObject({ status: 400, error: "validation_failed", request_id: response.headers.get("request-id"), details: { field } })
    expect(envelope.message).toContain(field)
    expect(openaiFake.requests).toHaveLength(0)
  })

  it.each(cases.filter((c) => c.gateway))("$name -> refused by the gateway on passthrough too", async ({ body, field }) => {
    const response = await post(body)
    expect(response.status).toBe(400)
    expect(response.json()).toMatchObject({ error: "validation_failed", details: { field } })
    expect(anthropicFake.requests).toHaveLength(0)
  })

  it.each(cases.filter((c) => !c.gateway))("$name -> judged by the vendor on passthrough: its 400, not to be retried", async ({ body }) => {
    const response = await post(body)
    expect(response.status).toBe(400)
    expect(response.headers.get("x-should-retry")).toBe("false")
    expect(response.json()).toMatchObject({ error: "validation_failed", details: { provider: "up-anthropic", upstream_status: 400 } })
    expect(anthropicFake.requests).toHaveLength(1)
  })

  it("the message names the offending field once, then says what is wrong with it", async () => {
    const response = await post({ model: "claude", messages: [{ role: "user", content: "hi" }] })
    expect(response.json().message).toBe("max_tokens: required field missing")
  })

  it("malformed JSON is a 400 envelope and the SDK sees a BadRequestError", async () => {
    const response = await post("{not json")
    expect(response.status).toBe(400)
    expect(response.json()).toMatchObject({ status: 400, error: "validation_failed" })
    const error = await client.messages.create({ model: "claude", max_tokens: 0, messages: [{ role: "user", content: "hi" }] })
      .then(() => undefined, (e: unknown) => e)
    expect(error).toBeInstanceOf(Anthropic.BadRequestError)
    expect((error as AnthropicApiError).error).toMatchObject({ status: 400, error: "validation_failed", details: { field: "max_tokens" } })
  })

  it("an unknown model is 404 and a model outside the key's scope 403, each as the envelope", async () => {
    const unknown = await post({ ...valid, model: "claude-9" })
    expect(unknown.status).toBe(404)
    expect(unknown.json()).toMatchObject({ status: 404, error: "not_found" })
    const scoped = await gw.createKey({ allowed_models: ["gpt"] })
    const refused = await post(valid, { "x-api-key": scoped.key })
    expect(refused.status).toBe(403)
    expect(refused.json()).toMatchObject({ status: 403, error: "scope_violation" })
    expect(anthropicFake.requests).toHaveLength(0)
  })
})

describe("what cannot be translated for an openai-kind provider", () => {
  const base = { model: "gpt", max_tokens: 50, messages: [{ role: "user", content: "hi" }] }
  it.each([
    // Thinking is translated (to reasoning_effort); what only Anthropic's servers do is refused.
    { name: "a server tool", body: { ...base, tools: [{ type: "web_search_20250305", name: "web_search", max_uses: 2 }] }, field: "tools.0.type" },
    { name: "top_k", body: { ...base, top_k: 5 }, field: "top_k" },
    { name: "five stop sequences", body: { ...base, stop_sequences: ["a", "b", "c", "d", "e"] }, field: "stop_sequences" }
  ])("$name -> 400 that says it cannot be translated, naming $field", async ({ body, field }) => {
    const response = await post(body)
    expect(response.status).toBe(400)
    const envelope = response.json()
    expect(envelope).toMatchObject({ status: 400, error: "validation_failed", details: { field, reason: "untranslatable" } })
    expect(envelope.message).toMatch(/cannot be translated/)
    expect(envelope.message).toContain(field)
    expect(openaiFake.requests).toHaveLength(0)
  })

  it("the same fields go through untouched to an anthropic-kind provider", async () => {
    const response = await post({ ...base, model: "claude", max_tokens: 5000, top_k: 5, thinking: { type: "enabled", budget_tokens: 2048 } })
    expect(response.status, response.text).toBe(200)
    // Above the model's cap, so clamped; thinking's budget is the client's business.
    expect(anthropicFake.requests[0]!.body).toMatchObject({ model: CLAUDE_ID, max_tokens: CAP, top_k: 5, thinking: { type: "enabled", budget_tokens: 2048 } })
  })
})

describe("the built-in echo model", () => {
  it("answers on /v1/messages without streaming", async () => {
    const message = await client.messages.create({
      model: "echo",
      max_tokens: 50,
      system: "ignored by echo",
      messages: [{ role: "user", content: "repeat after me please" }]
    })
    expect(message.id).toMatch(/^msg_/)
    expect(message).toMatchObject({
      type: "message",
      role: "assistant",
      // The answer names the provider's model (README "The model an answer names"), not the alias.
      model: "echo-1",
      content: [{ type: "text", text: "repeat after me please" }],
      stop_reason: "end_turn",
      stop_sequence: null,
      usage: { input_tokens: 7, output_tokens: 4 }
    })
    const [record] = await auditOf(message._request_id!)
    expect(record).toMatchObject({ model: "echo-1", provider: "echo", prompt_tokens: 7, completion_tokens: 4, stream: false, status: 200 })
  })

  it("streams on /v1/messages: exact frames, the SDK's MessageStream assembles the same message, max_tokens truncates", async () => {
    const response = await post({ model: "echo", max_tokens: 50, stream: true, messages: [{ role: "user", content: "one two three" }] })
    expect(response.status).toBe(200)
    const frames = framesOf(response.text)
    expect(frames.map((f) => f.event).join(" ")).toMatch(STREAM_GRAMMAR)
    expect(frames.filter((f) => f.event === "content_block_delta").map((f) => f.data.delta.text).join("")).toBe("one two three")

    const stream = client.messages.stream({ model: "echo", max_tokens: 50, messages: [{ role: "user", content: "one two three" }] })
    const text: Array<string> = []
    stream.on("text", (delta) => text.push(delta))
    const streamed = await stream.finalMessage()
    const plain = await client.messages.create({ model: "echo", max_tokens: 50, messages: [{ role: "user", content: "one two three" }] })
    expect(text.join("")).toBe("one two three")
    // finalMessage() adds the SDK's own parsed_output; everything the server sent must agree.
    const view = ({ type, role, model, content, stop_reason, stop_sequence, usage }: Anthropic.Message) =>
      ({ type, role, model, content, stop_reason, stop_sequence, usage })
    expect(view(streamed)).toEqual(view(plain))

    const cutStream = client.messages.stream({ model: "echo", max_tokens: 2, messages: [{ role: "user", content: "one two three" }] })
    const cut = await cutStream.finalMessage()
    expect(cut).toMatchObject({ content: [{ type: "text", text: "one two " }], stop_reason: "max_tokens", usage: { output_tokens: 2 } })
    const [record] = await auditOf(cutStream.request_id!)
    expect(record).toMatchObject({ model: "echo-1", provider: "echo", completion_tokens: 2, stream: true })
  })
})

describe("audit", () => {
  it("records a refused request once, with its error slug and no tokens", async () => {
    const response = await post({ model: "claude", messages: [{ role: "user", content: "hi" }] })
    expect(response.status).toBe(400)
    const records = await auditOf(response.headers.get("request-id")!)
    expect(records).toHaveLength(1)
    expect(records[0]).toMatchObject({ endpoint: "/v1/messages", status: 400, error: "validation_failed", prompt_tokens: null, completion_tokens: null })
  })
})
