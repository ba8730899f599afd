/**
 * Refunds and stream slots around a failing provider, as clients and the operator see them over
 * HTTP: a 5xx before or during a stream gives the charge back (the ledger has the charge and the
 * refund), a client that leaves is charged (a 499 is not a 5xx), and a slot comes back however a
 * stream ends. The provider is the in-memory scripted layer (no HTTP fake: the provider clients'
 * own contract is tested in test/pipelines/chat-completions-failures.test.ts and the matrix), and
 * audit records are collected in memory and waited for as events, so nothing here polls.
 *
 * Everything runs twice: on the embedded default (in-process limits, SQLite store) and on the
 * scale-out backends (Redis limits, Postgres store) of the machine, whose ledgers and slots are
 * what is being tested.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { ProviderError, UpstreamTimeout } from "../../src/domain/errors.ts"
import { scriptedProviders, type Script } from "../../src/services/providers/scripted.ts"
import type { ChatChunk, ChatResponse } from "../../src/wire/openai-chat.ts"
import { collectedAudit } from "../support/collected-audit.ts"
import { createPostgresDatabase, type TempDatabase } from "../support/databases.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import {
  balance,
  chat,
  chatRequest,
  dataPayloads,
  expectError,
  expectLedgerExplains,
  expectOpen,
  ledger,
  ledgerOf,
  newKey,
  openStream,
  REDIS_URL,
  userMessage
} from "./support.ts"

const PRICES = { upstream: 2, held: 1 }

const chunk = (content: string, finish: string | null = null): ChatChunk =>
  ({ id: "chatcmpl-r", object: "chat.completion.chunk", created: 1, model: "up", choices: [{ index: 0, delta: { content }, logprobs: null, finish_reason: finish }] }) as ChatChunk

const completion = (text: string): ChatResponse =>
  ({
    id: "chatcmpl-r",
    object: "chat.completion",
    created: 1,
    model: "up",
    choices: [{ index: 0, message: { role: "assistant", content: text }, logprobs: null, finish_reason: "stop" }],
    usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 }
  }) as ChatResponse

const upstream500 = new ProviderError({
  message: "provider \"up\" answered 500: boom",
  details: { provider: "up", upstream_status: 500, upstream_error: { message: "boom" } }
})
const timedOut = (timeout: "first_byte" | "idle") =>
  new UpstreamTimeout({ message: `provider "up" timed out (${timeout})`, details: { provider: "up", timeout } })

/** What the next provider call does; set per test. */
let next: Script = {}

const backends = [
  { name: "in-process limits, SQLite store", postgres: false },
  { name: "Redis limits, Postgres store", postgres: true }
]

describe.each(backends)("$name", ({ postgres }) => {
  let gw: TestGateway
  let db: TempDatabase | undefined
  let url: string
  const audit = collectedAudit()

  beforeAll(async () => {
    db = postgres ? await createPostgresDatabase("mg_refunds") : undefined
    const scripted = scriptedProviders([{ name: "up", kind: "openai" }], { openai: (call) => next.openai!(call) })
    gw = await startGateway(
      testConfig({
        ...(db === undefined ? {} : { store: db.url, redis: REDIS_URL }),
        workspace: { credits: 1000 },
        limits: { requests_per_minute: 50, concurrent_streams: 5 },
        providers: [{ name: "up", kind: "openai", base_url: "http://scripted.invalid/v1" }],
        models: [
          { alias: "upstream", id: "gpt-4o-mini-2024-07-18", provider: "up", credits: PRICES.upstream },
          { alias: "held", id: "gpt-4.1-mini", provider: "up", credits: PRICES.held }
        ]
      }),
      { providers: scripted.layer, audit: audit.layer }
    )
    url = gw.url
  })

  afterAll(async () => {
    await gw?.close()
    await db?.drop()
  })

  beforeEach(() => {
    next = {}
  })

  const messages = (key: string, body: Record<string, unknown>) =>
    fetch(`${url}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": key, "anthropic-version": "2023-06-01" },
      body: JSON.stringify({ max_tokens: 32, messages: userMessage(), ...body })
    })

  const expectRefunded = async (requestId: string, keyId: string, price: number, model = "upstream") => {
    const rows = await ledgerOf(url, requestId)
    expect(rows.map((r) => [r.kind, r.amount])).toEqual([["charge", -price], ["refund", price]])
    for (const row of rows) expect(row).toMatchObject({ key_id: keyId, actor: keyId, request_id: requestId, model })
  }

  it("an upstream 500 is a 502 and is refunded: the ledger has the charge and the refund", async () => {
    const { key, id } = await newKey(url)
    const before = await balance(url)
    next = { openai: () => ({ fail: upstream500 }) }
    const reply = await chat(url, key, { model: "upstream" })
    expectError(reply, 502, "provider_error")
    // The audit trail records what was finally charged; it is written last, after the refund.
    expect(await audit.recordOf(reply.requestId)).toMatchObject({ key_id: id, status: 502, error: "provider_error", credits: 0 })
    await expectRefunded(reply.requestId, id, PRICES.upstream)
    expect(await balance(url)).toBe(before)
    next = { openai: () => ({ respond: completion("fine now") }) }
    const retried = await chat(url, key, { model: "upstream" })
    expect(retried.status, retried.text).toBe(200)
    expect(await audit.recordOf(retried.requestId)).toMatchObject({ status: 200, error: null, credits: PRICES.upstream * 1_000_000 })
    expect(await balance(url)).toBe(before - PRICES.upstream)
  })

  it("the same holds on /v1/messages: an upstream 500 is refunded", async () => {
    const { key, id } = await newKey(url)
    const before = await balance(url)
    next = { openai: () => ({ fail: upstream500 }) }
    const response = await messages(key, { model: "upstream" })
    expect(response.status).toBe(502)
    const requestId = response.headers.get("x-request-id")!
    expect(await response.json()).toMatchObject({ error: "provider_error", request_id: requestId })
    await audit.recordOf(requestId)
    await expectRefunded(requestId, id, PRICES.upstream)
    expect(await balance(url)).toBe(before)
  })

  it("an upstream timeout is a 504 and is refunded", async () => {
    const { key, id } = await newKey(url)
    const before = await balance(url)
    next = { openai: () => ({ fail: timedOut("first_byte"), delay: "20 millis" }) }
    const reply = await chat(url, key, { model: "upstream" })
    expectError(reply, 504, "upstream_timeout")
    await audit.recordOf(reply.requestId)
    await expectRefunded(reply.requestId, id, PRICES.upstream)
    expect(await balance(url)).toBe(before)
  })

  it("a stream that fails mid-way is refunded and frees its slot", async () => {
    const { key, id } = await newKey(url, { limits: { concurrent_streams: 1 } })
    const before = await balance(url)
    next = { openai: () => ({ events: [{ event: chunk("word0 ") }, { event: chunk("word1") }, { fail: upstream500 }] }) }
    const reply = await chat(url, key, { model: "upstream", stream: true })
    expect(reply.status).toBe(200)
    const frames = dataPayloads(reply.text)
    expect(frames.at(-1)).toBe("[DONE]")
    expect(JSON.parse(frames.at(-2)!)).toMatchObject({ error: "provider_error", request_id: reply.requestId })
    expect(await audit.recordOf(reply.requestId)).toMatchObject({ status: 200, error: "provider_error", stream: true, credits: 0 })
    await expectRefunded(reply.requestId, id, PRICES.upstream)
    expect(await balance(url)).toBe(before)
    // The key's one slot is free again: the next stream is admitted at once.
    next = { openai: () => ({ events: [{ event: chunk("ok", "stop") }] }) }
    const again = await chat(url, key, { model: "upstream", stream: true })
    expect(again.status, again.text).toBe(200)
    expect(await balance(url)).toBe(before - PRICES.upstream)
  })

  it("a stream that times out mid-way is refunded", async () => {
    const { key, id } = await newKey(url)
    const before = await balance(url)
    next = { openai: () => ({ events: [{ event: chunk("word0 ") }, { event: chunk("word1") }, { delay: "20 millis" }, { fail: timedOut("idle") }] }) }
    const reply = await chat(url, key, { model: "upstream", stream: true })
    expect(reply.status).toBe(200)
    expect(JSON.parse(dataPayloads(reply.text).at(-2)!)).toMatchObject({ error: "upstream_timeout" })
    await audit.recordOf(reply.requestId)
    await expectRefunded(reply.requestId, id, PRICES.upstream)
    expect(await balance(url)).toBe(before)
  })

  it("a client that leaves a stream is charged once (no 5xx, no refund) and frees its slot", async () => {
    const { key, id } = await newKey(url, { limits: { concurrent_streams: 1 } })
    const before = await balance(url)
    // Far beyond the test: the stream ends only because the client leaves.
    next = { openai: () => ({ events: [{ event: chunk("first") }, { delay: "30 seconds" }, { event: chunk("never", "stop") }] }) }
    const stream = expectOpen(await openStream(url, key, { model: "held" }))
    stream.abandon()
    expect(await audit.recordOf(stream.requestId)).toMatchObject({ status: 200, error: "client_closed_request", stream: true, credits: PRICES.held * 1_000_000 })
    // The record is written after the slot went back: the key's one slot is free now.
    next = { openai: () => ({ events: [{ event: chunk("next", "stop") }] }) }
    const reply = await chat(url, key, { model: "held", stream: true })
    expect(reply.status, reply.text).toBe(200)
    const rows = await ledgerOf(url, stream.requestId)
    expect(rows.map((r) => [r.kind, r.amount, r.key_id])).toEqual([["charge", -PRICES.held, id]])
    expect(await balance(url)).toBe(before - 2 * PRICES.held)
  })

  it("a client that leaves before the answer is charged once: a 499 is not a 5xx", async () => {
    const { key, id } = await newKey(url)
    const before = await balance(url)
    let called!: () => void
    const providerCalled = new Promise<void>((resolve) => (called = resolve))
    next = {
      openai: () => {
        called()
        return { respond: completion("too late"), delay: "30 seconds" }
      }
    }
    const recorded = audit.next()
    const controller = new AbortController()
    const pending = chatRequest(url, key, { model: "held" }, controller.signal).catch((error: unknown) => error)
    await providerCalled
    controller.abort()
    expect(await pending).toBeInstanceOf(Error)
    const record = await recorded
    expect(record).toMatchObject({ key_id: id, status: 499, error: "client_closed_request", credits: PRICES.held * 1_000_000 })
    const rows = await ledgerOf(url, record.request_id)
    expect(rows.map((r) => [r.kind, r.amount, r.key_id])).toEqual([["charge", -PRICES.held, id]])
    expect(await balance(url)).toBe(before - PRICES.held)
  })

  it("the ledger explains every change, refunds included, and adds up to the balance", async () => {
    const rows = await ledger(url)
    expect(rows.filter((r) => r.kind === "refund").length).toBeGreaterThanOrEqual(5)
    expectLedgerExplains(rows, await balance(url))
  })
})
