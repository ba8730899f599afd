/**
 * What the gateway does around a provider call, with the provider and the audit trail swapped
 * for in-memory test layers (scripted providers, a collecting audit): refunds before and during
 * a stream, stream slots given back however a stream ends, the one audit record of each
 * request, and key expiry driven by the clock. No HTTP fake is involved; the real gateway
 * serves on port 0 and the official SDKs call it.
 */
import Anthropic from "@anthropic-ai/sdk"
import { Effect } from "effect"
import OpenAI from "openai"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { ProviderError, UpstreamTimeout } from "../../src/domain/errors.ts"
import { scriptedProviders, type Script, type ScriptedStreamItem } from "../../src/services/providers/scripted.ts"
import type { ChatChunk, ChatResponse } from "../../src/wire/openai-chat.ts"
import type { AnthropicStreamEvent } from "../../src/wire/anthropic-messages.ts"
import { collectedAudit } from "../support/collected-audit.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { movableClock } from "../support/movable-clock.ts"
import { chatCompletion } from "../support/chat-answers.ts"
import { anthropicFor, openaiFor } from "../support/sdk-clients.ts"

const POOL = 1000
const PRICE = 7

const chunk = (delta: Record<string, unknown>, finish: string | null = null): ChatChunk =>
  ({ id: "chatcmpl-s", object: "chat.completion.chunk", created: 1, model: "up", choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] }) as ChatChunk

const completion = chatCompletion("hi there", { id: "chatcmpl-s", usage: [3, 2] })

const upstreamDown = new ProviderError({
  message: "provider \"up\" answered 500: boom",
  details: { provider: "up", upstream_status: 500, upstream_error: { message: "boom" } }
})

const anthropicStart: AnthropicStreamEvent = {
  type: "message_start",
  message: {
    id: "msg_s", type: "message", role: "assistant", model: "claude-up", content: [], stop_reason: null, stop_sequence: null,
    usage: { input_tokens: 4, output_tokens: 1 }
  }
} as unknown as AnthropicStreamEvent

/** What the next call does; set per test. */
let next: Script = {}

/** Time for the gateway, moved past an expiry by the tests below. */
const time = movableClock()

let gateway: TestGateway
let calls: ReturnType<typeof scriptedProviders>["calls"]
const audit = collectedAudit()

beforeAll(async () => {
  const providers = [{ name: "up", kind: "openai" as const }, { name: "claude", kind: "anthropic" as const }]
  const scripted = scriptedProviders(providers, {
    openai: (call) => next.openai!(call),
    anthropic: (call) => next.anthropic!(call),
    anthropicCount: (call) => next.anthropicCount!(call)
  })
  calls = scripted.calls
  gateway = await startGateway(
    testConfig({
      workspace: { credits: POOL },
      providers: [
        { name: "up", kind: "openai", base_url: "http://scripted.invalid/v1" },
        { name: "claude", kind: "anthropic", base_url: "http://scripted.invalid" }
      ],
      models: [
        { alias: "paid", id: "up-model", provider: "up", credits: PRICE, max_tokens: 100 },
        { alias: "claude", id: "claude-up", provider: "claude", credits: PRICE, max_tokens: 100 }
      ]
    }),
    { providers: scripted.layer, audit: audit.layer, clock: time.clock }
  )
})

afterAll(() => gateway.close())

beforeEach(() => {
  next = {}
  time.reset()
})

const balance = async () => (await Effect.runPromise(gateway.store.credits.getWorkspace)).credits / 1_000_000 // credits (the store holds micro-credits, issue 33)
// The record is the request scope's last finalizer: written when the answer or the stream ended.
const recordOf = (requestId: string | null) => audit.recordsOf(requestId)
const openai = (key: string) => openaiFor(gateway.url, key)
const anthropic = (key: string) => anthropicFor(gateway.url, key)

describe("refunds, slots and audit around a scripted provider", () => {
  it("a plain answer is charged once and audited with its tokens", async () => {
    next = { openai: () => ({ respond: completion }) }
    const { key, id } = await gateway.createKey()
    const before = await balance()
    const { data, response } = await openai(key).chat.completions.create({ model: "paid", messages: [{ role: "user", content: "hi" }] }).withResponse()
    expect(data.choices[0]!.message.content).toBe("hi there")
    expect(await balance()).toBe(before - PRICE)
    const [record] = await recordOf(response.headers.get("x-request-id"))
    expect(record).toMatchObject({ key_id: id, status: 200, error: null, credits: PRICE * 1_000_000, prompt_tokens: 3, completion_tokens: 2, model: "up-model", provider: "up" })
    expect(calls.at(-1)!.body.model).toBe("up-model")
  })

  it("a provider failure before the answer is a 502, refunded, audited with credits 0", async () => {
    next = { openai: () => ({ fail: upstreamDown }) }
    const { key } = await gateway.createKey()
    const before = await balance()
    const response = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "paid", messages: [{ role: "user", content: "hi" }] })
    })
    expect(response.status).toBe(502)
    expect(((await response.json()) as { error: string }).error).toBe("provider_error")
    expect(await balance()).toBe(before)
    const [record] = await recordOf(response.headers.get("x-request-id"))
    expect(record).toMatchObject({ status: 502, error: "provider_error", credits: 0 })
  })

  it("a stream that fails mid-way ends with an in-band error, is refunded, frees its slot, and is audited once", async () => {
    next = {
      openai: () => ({ events: [{ event: chunk({ role: "assistant", content: "par" }) }, { event: chunk({ content: "tial" }) }, { fail: upstreamDown }] })
    }
    const { key } = await gateway.createKey({ limits: { concurrent_streams: 1 } })
    const before = await balance()
    const stream = await openai(key).chat.completions.create({ model: "paid", stream: true, messages: [{ role: "user", content: "hi" }] }).withResponse()
    const seen: Array<string> = []
    const failure = await (async () => {
      try {
        for await (const part of stream.data) seen.push(part.choices[0]?.delta?.content ?? "")
      } catch (error) {
        return error as Error
      }
    })()
    expect(seen.join("")).toBe("partial")
    expect(failure?.message).toContain("provider_error")
    expect(await balance()).toBe(before)
    const records = await recordOf(stream.response.headers.get("x-request-id"))
    expect(records).toHaveLength(1)
    expect(records[0]).toMatchObject({ status: 200, error: "provider_error", credits: 0, stream: true })
    // The one slot is free again: another stream is admitted.
    next = { openai: () => ({ events: [{ event: chunk({ role: "assistant", content: "ok" }, "stop") }] }) }
    const again = await openai(key).chat.completions.create({ model: "paid", stream: true, messages: [{ role: "user", content: "hi" }] })
    let text = ""
    for await (const part of again) text += part.choices[0]?.delta?.content ?? ""
    expect(text).toBe("ok")
    expect(await balance()).toBe(before - PRICE)
  })

  it("a timeout mid-stream on the Messages surface is an `event: error` frame, refunded", async () => {
    next = {
      anthropic: () => ({
        events: [
          { event: anthropicStart },
          { delay: "20 millis" },
          { fail: new UpstreamTimeout({ message: "provider \"claude\" timed out (idle)", details: { provider: "claude", timeout: "idle" } }) }
        ]
      })
    }
    const { key } = await gateway.createKey()
    const before = await balance()
    const response = await fetch(`${gateway.url}/v1/messages`, {
      method: "POST",
      headers: { "x-api-key": key, "content-type": "application/json", "anthropic-version": "2023-06-01" },
      body: JSON.stringify({ model: "claude", max_tokens: 50, stream: true, messages: [{ role: "user", content: "hi" }] })
    })
    expect(response.status).toBe(200)
    const text = await response.text()
    expect(text).toContain("event: message_start")
    expect(text).toMatch(/event: error\ndata: \{"type":"error","status":504,"error":"upstream_timeout"/)
    expect(await balance()).toBe(before)
    const [record] = await recordOf(response.headers.get("x-request-id"))
    expect(record).toMatchObject({ status: 200, error: "upstream_timeout", credits: 0, prompt_tokens: 4 })
  })

  it("a client that leaves mid-stream is charged (no refund), its slot freed, audited as client_closed_request", async () => {
    next = {
      openai: () => ({ events: [{ event: chunk({ role: "assistant", content: "a" }) }, { delay: "5 seconds" }, { event: chunk({ content: "b" }, "stop") }] })
    }
    const { key } = await gateway.createKey({ limits: { concurrent_streams: 1 } })
    const before = await balance()
    const controller = new AbortController()
    const response = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "paid", stream: true, messages: [{ role: "user", content: "hi" }] }),
      signal: controller.signal
    })
    const reader = response.body!.getReader()
    await reader.read()
    controller.abort()
    const [record] = await recordOf(response.headers.get("x-request-id"))
    expect(record).toMatchObject({ status: 200, error: "client_closed_request", credits: PRICE * 1_000_000 })
    expect(await balance()).toBe(before - PRICE)
    next = { openai: () => ({ events: [{ event: chunk({ role: "assistant", content: "ok" }, "stop") }] }) }
    const again = await openai(key).chat.completions.create({ model: "paid", stream: true, messages: [{ role: "user", content: "hi" }] })
    for await (const _ of again) void _
  })

  it("writes a stream's audit record when the stream ends, not when its 200 is sent", async () => {
    const words = "one two three four five six seven eight".split(" ")
    next = {
      openai: () => ({
        events: [
          { event: chunk({ role: "assistant", content: "" }) },
          ...words.flatMap((word, i): Array<ScriptedStreamItem<ChatChunk>> => [
            { delay: "30 millis" },
            { event: chunk({ content: `${word} ` }, i === words.length - 1 ? "stop" : null) }
          ])
        ]
      })
    }
    const { key } = await gateway.createKey()
    const response = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "paid", stream: true, messages: [{ role: "user", content: "count slowly" }] })
    })
    const requestId = response.headers.get("x-request-id")
    const reader = response.body!.getReader()
    await reader.read()
    expect(audit.records.filter((r) => r.request_id === requestId)).toEqual([])
    while (!(await reader.read()).done) {
      // drain to the end
    }
    const records = await recordOf(requestId)
    expect(records).toHaveLength(1)
    expect(records[0]).toMatchObject({ status: 200, error: null, stream: true })
    // The duration covers the whole stream: eight upstream frames, 30 ms apart.
    expect(records[0]!.duration_ms).toBeGreaterThanOrEqual(200)
  })

  it("a Chat Completions client reaches an Anthropic-kind provider through the adapter table", async () => {
    next = {
      anthropic: (call) => {
        expect(call.body).toMatchObject({ model: "claude-up", max_tokens: 100 })
        return {
          respond: {
            id: "msg_1", type: "message", role: "assistant", model: "claude-up", stop_reason: "end_turn", stop_sequence: null,
            content: [{ type: "text", text: "hello from claude" }], usage: { input_tokens: 5, output_tokens: 3 }
          } as never
        }
      }
    }
    const { key } = await gateway.createKey()
    const reply = await openai(key).chat.completions.create({ model: "claude", messages: [{ role: "user", content: "hi" }] })
    expect(reply.choices[0]!.message.content).toBe("hello from claude")
    expect(reply.usage).toMatchObject({ prompt_tokens: 5, completion_tokens: 3 })
  })

  it("an Anthropic client reaches an OpenAI-kind provider, streamed", async () => {
    next = { openai: () => ({ events: [{ event: chunk({ role: "assistant", content: "hel" }) }, { event: chunk({ content: "lo" }, "stop") }] }) }
    const { key } = await gateway.createKey()
    const stream = anthropic(key).messages.stream({ model: "paid", max_tokens: 50, messages: [{ role: "user", content: "hi" }] })
    const message = await stream.finalMessage()
    expect(message.content).toEqual([{ type: "text", text: "hello", citations: null }].map(({ citations: _, ...rest }) => expect.objectContaining(rest)))
  })
})

describe("client attribution", () => {
  it("records the coding client and its session from their headers in the audit record", async () => {
    next = { openai: () => ({ respond: completion }) }
    const { key } = await gateway.createKey()
    const send = (headers: Record<string, string>) =>
      fetch(`${gateway.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...headers },
        body: JSON.stringify({ model: "paid", messages: [{ role: "user", content: "hi" }] })
      })
    const claude = await send({ "x-app": "cli", "x-claude-code-session-id": "0b6c7a52-6a4e-4c1e-9d7e-1f2a3b4c5d6e" })
    const codex = await send({ originator: "codex_exec", "session-id": "019a-codex" })
    const plain = await send({ "x-session-id": "bad value with spaces" })
    expect((await recordOf(claude.headers.get("x-request-id")))[0]!.details).toEqual({
      client: { app: "cli", session: "0b6c7a52-6a4e-4c1e-9d7e-1f2a3b4c5d6e" }
    })
    expect((await recordOf(codex.headers.get("x-request-id")))[0]!.details).toEqual({ client: { app: "codex_exec", session: "019a-codex" } })
    expect((await recordOf(plain.headers.get("x-request-id")))[0]!.details).toBeNull()
  })
})

describe("POST /v1/messages/count_tokens", () => {
  it("is forwarded to an Anthropic-kind provider with the client's body, version and betas; free, audited", async () => {
    next = {
      anthropicCount: (call) => {
        expect(call.body).toMatchObject({ model: "claude-up", system: "be brief", thinking: { type: "enabled", budget_tokens: 2000 } })
        return { respond: { input_tokens: 42 } }
      }
    }
    const { key } = await gateway.createKey()
    const before = await balance()
    const { data, response } = await anthropic(key).messages.countTokens({
      model: "claude",
      system: "be brief",
      thinking: { type: "enabled", budget_tokens: 2000 },
      messages: [{ role: "user", content: "hello" }]
    }).withResponse()
    expect(data).toEqual({ input_tokens: 42 })
    expect(await balance()).toBe(before)
    const [record] = await recordOf(response.headers.get("x-request-id"))
    // A count is not consumption: in the details, never in prompt_tokens (issue 22, finding 10).
    expect(record).toMatchObject({
      endpoint: "/v1/messages/count_tokens", status: 200, credits: 0, prompt_tokens: null, model: "claude-up",
      details: { operation: "count_tokens", input_tokens: 42 }
    })
  })

  it("is estimated with a tokenizer for other providers, in the same shape", async () => {
    const { key } = await gateway.createKey()
    const short = await anthropic(key).messages.countTokens({ model: "paid", messages: [{ role: "user", content: "hello world" }] })
    const long = await anthropic(key).messages.countTokens({
      model: "paid",
      system: "You are a careful assistant.",
      messages: [{ role: "user", content: "hello world ".repeat(200) }],
      tools: [{ name: "lookup", description: "Look a thing up", input_schema: { type: "object", properties: { q: { type: "string" } } } }]
    })
    expect(short.input_tokens).toBeGreaterThanOrEqual(2)
    expect(short.input_tokens).toBeLessThan(10)
    expect(long.input_tokens).toBeGreaterThan(400)
    expect(calls.filter((c) => c.provider === "up" && c.body.messages === undefined)).toHaveLength(0)
  })

  it("is refused like any request: unknown model 404, outside allowed_models 403, bad body 400", async () => {
    const { key } = await gateway.createKey({ allowed_models: ["paid"] })
    const post = (body: unknown) =>
      fetch(`${gateway.url}/v1/messages/count_tokens`, {
        method: "POST",
        headers: { "x-api-key": key, "content-type": "application/json", "anthropic-version": "2023-06-01" },
        body: JSON.stringify(body)
      })
    expect((await post({ model: "nope", messages: [] })).status).toBe(404)
    expect((await post({ model: "claude", messages: [{ role: "user", content: "x" }] })).status).toBe(403)
    const bad = await post({ model: "paid", messages: [{ role: "robot", content: "x" }] })
    expect(bad.status).toBe(400)
    expect(((await bad.json()) as { message: string }).message).toContain("messages.0.role")
  })
})

describe("time from the clock layer", () => {
  it("a key past its expires_at is refused with key_inactive, without waiting, and audited under its key id", async () => {
    next = { openai: () => ({ respond: completion }) }
    const expires = new Date(Date.now() + 60 * 60 * 1000).toISOString()
    const { id, key } = await gateway.createKey({ expires_at: expires })
    await openai(key).chat.completions.create({ model: "paid", messages: [{ role: "user", content: "hi" }] })
    time.advance(2 * 60 * 60 * 1000)
    const response = await fetch(`${gateway.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } })
    expect(response.status).toBe(401)
    expect(((await response.json()) as { error: string }).error).toBe("key_inactive")
    const [record] = await recordOf(response.headers.get("x-request-id"))
    expect(record).toMatchObject({ status: 401, error: "key_inactive", key_id: id })
  })

  it("an MCP session past its TTL is session_expired, without waiting (expiry is the store's clock: the row is aged there)", async () => {
    const { key, id: keyId } = await gateway.createKey({ tools_enabled: true })
    const rpc = (body: unknown, session?: string) =>
      fetch(`${gateway.url}/v1/mcp`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${key}`,
          "content-type": "application/json",
          accept: "application/json, text/event-stream",
          ...(session === undefined ? {} : { "mcp-session-id": session, "mcp-protocol-version": "2025-11-25" })
        },
        body: JSON.stringify(body)
      })
    const init = await rpc({
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "t", version: "1" } }
    })
    const session = init.headers.get("mcp-session-id")!
    expect(session).toMatch(/^mcp_/)
    expect((await rpc({ jsonrpc: "2.0", id: 2, method: "ping" }, session)).status).toBe(200)
    // Sessions expire by the store's clock (issue 35.6: every replica judges one expiry), not this
    // process's clock layer: the session's expiry is moved an hour into the past in the store.
    await Effect.runPromise(gateway.store.mcpSessions.touchSession(session, keyId, -60 * 60 * 1000))
    const late = await rpc({ jsonrpc: "2.0", id: 3, method: "ping" }, session)
    expect(late.status).toBe(404)
    expect(((await late.json()) as { error: string }).error).toBe("session_expired")
  })
})
