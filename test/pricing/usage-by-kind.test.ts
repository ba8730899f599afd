/**
 * Issue 33: token counts by kind from every vendor's usage, plain and streamed, through the real
 * pipelines against fakes that speak each vendor's exact format (passthrough and translated
 * paths alike). The audit record holds `prompt_tokens` (the whole input, cache included),
 * `cache_read_tokens`, `cache_write_tokens` and `completion_tokens`, each vendor's shape read as
 * its SDK documents it (../shared/reference/usage-shapes.md).
 */
import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { countTokens } from "gpt-tokenizer/encoding/o200k_base"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { costMicros, priceMicros } from "../../src/domain/pricing.ts"
import { collectedAudit } from "../support/collected-audit.ts"
import { startFakeAnthropic } from "../support/fake-anthropic.ts"
import { type FakeBedrock, startFakeBedrock } from "../support/fake-bedrock.ts"
import type { FakeUpstream, UsageSpec } from "../support/fake-common.ts"
import { type FakeGemini, startFakeGemini } from "../support/fake-gemini.ts"
import { startFakeOpenAI } from "../support/fake-openai.ts"
import { startFakeOpenAIResponses } from "../support/fake-openai-responses.ts"
import { type FakeVertex, startFakeVertex } from "../support/fake-vertex.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

const OPENAI_KEY = "sk-fake-openai-0123456789abcdef"
const ANTHROPIC_KEY = "sk-ant-fake-0123456789abcdef"
const GEMINI_KEY = "AIzaSyFAKE-gemini-key-0123456789abcdef"
const REGION = "us-east-1"
const KEY_ID = "AKIAPRICINGBYKIND001"
const SECRET = "pricing/kind+0123456789abcdefghijklmnop"
const PROJECT = "pricing-1"
const LOCATION = "us-east5"
const CAP = 8_000

/** Prices in credits per million tokens, every kind different so a misplaced count changes the cost. */
export const PRICE = { input: 3, output: 15, cache_read: 0.3, cache_write: 3.75 }

let openai: FakeUpstream
let openaiResponses: FakeUpstream
let anthropic: FakeUpstream
let bedrock: FakeBedrock
let vertex: FakeVertex
let gemini: FakeGemini
let gateway: TestGateway
let key: string
const audit = collectedAudit()

beforeAll(async () => {
  ;[openai, openaiResponses, anthropic, bedrock, vertex, gemini] = await Promise.all([
    startFakeOpenAI({ apiKey: OPENAI_KEY, models: ["gpt-5.5"] }),
    startFakeOpenAIResponses({ apiKey: OPENAI_KEY }),
    startFakeAnthropic({ apiKey: ANTHROPIC_KEY, models: ["claude-sonnet-4-5-20250929"] }),
    startFakeBedrock({ region: REGION, accessKeyId: KEY_ID, secretAccessKey: SECRET }),
    startFakeVertex({ project: PROJECT, location: LOCATION, claude: ["claude-sonnet-4-5@20250929"], gemini: ["gemini-2.5-pro"] }),
    startFakeGemini({ apiKey: GEMINI_KEY, models: ["gemini-2.5-flash"] })
  ])
  const credentials = join(mkdtempSync(join(tmpdir(), "pricing-kind-")), "sa.json")
  writeFileSync(credentials, JSON.stringify(vertex.serviceAccount))
  const model = (alias: string, id: string, provider: string) => ({ alias, id, provider, max_tokens: CAP, credits: 0, price: PRICE })
  gateway = await startGateway(testConfig({
    workspace: { credits: 1_000_000 },
    limits: { requests_per_minute: 100_000, concurrent_streams: 100 },
    providers: [
      { name: "openai", kind: "openai", base_url: openai.url, api_key: OPENAI_KEY },
      { name: "openai-responses", kind: "openai", base_url: openaiResponses.url, api_key: OPENAI_KEY, responses_api: true },
      { name: "anthropic", kind: "anthropic", base_url: anthropic.url, api_key: ANTHROPIC_KEY },
      { name: "bedrock", kind: "bedrock", region: REGION, base_url: bedrock.url, access_key_id: KEY_ID, secret_access_key: SECRET },
      { name: "vertex", kind: "vertex", base_url: vertex.url, project: PROJECT, location: LOCATION, credentials_file: credentials },
      { name: "gemini", kind: "gemini", base_url: gemini.url, api_key: GEMINI_KEY }
    ],
    models: [
      model("on-openai", "gpt-5.5", "openai"),
      model("on-openai-responses", "gpt-5.5-r", "openai-responses"),
      model("on-anthropic", "claude-sonnet-4-5-20250929", "anthropic"),
      model("on-bedrock", "us.anthropic.claude-sonnet-4-5-20250929-v1:0", "bedrock"),
      model("on-vertex-claude", "claude-sonnet-4-5@20250929", "vertex"),
      model("on-vertex-gemini", "gemini-2.5-pro", "vertex"),
      model("on-gemini", "gemini-2.5-flash", "gemini")
    ]
  }), { audit: audit.layer })
  key = (await gateway.createKey()).key
})

afterAll(async () => {
  await gateway?.close()
  await Promise.all([openai?.close(), openaiResponses?.close(), anthropic?.close(), bedrock?.close(), vertex?.close(), gemini?.close()])
})

beforeEach(() => {
  for (const fake of [openai, openaiResponses, anthropic, bedrock, vertex, gemini]) fake.reset()
})

export interface Counts {
  readonly prompt: number
  readonly cacheRead: number
  readonly cacheWrite: number
  readonly output: number
}

/**
 * Each vendor's shape of the same conversation: 700 uncached input tokens, 300 read from the
 * cache, 200 written to it (where the vendor reports writes) and 40 output tokens.
 * OpenAI, Responses and Gemini count the cache inside the input; Anthropic and Bedrock beside it.
 */
export const KINDS = {
  openai: { spec: { input: 1000, cacheRead: 300, output: 40 }, counts: { prompt: 1000, cacheRead: 300, cacheWrite: 0, output: 40 } },
  "openai-responses": { spec: { input: 1000, cacheRead: 300, output: 40 }, counts: { prompt: 1000, cacheRead: 300, cacheWrite: 0, output: 40 } },
  anthropic: { spec: { input: 700, cacheRead: 300, cacheWrite: 200, output: 40 }, counts: { prompt: 1200, cacheRead: 300, cacheWrite: 200, output: 40 } },
  bedrock: { spec: { input: 700, cacheRead: 300, cacheWrite: 200, output: 40 }, counts: { prompt: 1200, cacheRead: 300, cacheWrite: 200, output: 40 } },
  "vertex-claude": { spec: { input: 700, cacheRead: 300, cacheWrite: 200, output: 40 }, counts: { prompt: 1200, cacheRead: 300, cacheWrite: 200, output: 40 } },
  // Gemini reports thinking beside the answer (thoughtsTokenCount): output at the output price.
  "vertex-gemini": { spec: { input: 1000, cacheRead: 300, output: 25, thoughts: 15 }, counts: { prompt: 1000, cacheRead: 300, cacheWrite: 0, output: 40 } },
  gemini: { spec: { input: 1000, cacheRead: 300, output: 25, thoughts: 15 }, counts: { prompt: 1000, cacheRead: 300, cacheWrite: 0, output: 40 } }
} satisfies Record<string, { spec: UsageSpec; counts: Counts }>
type Kind = keyof typeof KINDS

/** The exact cost of counts at PRICE, in micro-credits (credits: 0). */
const costOf = (counts: Counts) =>
  costMicros({ credits_micros: 0, price: priceMicros(PRICE)! }, {
    input: counts.prompt - counts.cacheRead - counts.cacheWrite,
    cache_read: counts.cacheRead,
    cache_write: counts.cacheWrite,
    output: counts.output
  })

const fakeOf = (kind: Kind): FakeUpstream => {
  switch (kind) {
    case "openai":
      return openai
    case "openai-responses":
      return openaiResponses
    case "anthropic":
      return anthropic
    case "bedrock":
      return bedrock
    case "vertex-claude":
      return vertex.anthropic
    case "vertex-gemini":
      return vertex.gemini
    case "gemini":
      return gemini
  }
}

/** A Responses client reaches the Responses-API provider; other formats reach its Chat Completions twin. */
const modelFor = (format: Format, kind: Kind) => (kind === "openai-responses" ? (format === "responses" ? "on-openai-responses" : "on-openai") : `on-${kind}`)

type Format = "chat" | "messages" | "responses"

const request = (format: Format, model: string, stream: boolean) => {
  const path = format === "chat" ? "/v1/chat/completions" : format === "messages" ? "/v1/messages" : "/v1/responses"
  const body = format === "responses"
    ? { model, input: "Say hello", stream, max_output_tokens: 500 }
    : { model, max_tokens: 500, stream, messages: [{ role: "user", content: "Say hello" }] }
  return fetch(gateway.url + path, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "anthropic-version": "2023-06-01" },
    body: JSON.stringify(body)
  })
}

/** Sends one request whose upstream answers with `kind`'s usage; the audit record once written, and the client's body. */
export const send = async (format: Format, kind: Kind, stream: boolean) => {
  // The Responses-API provider serves only the Responses client; Chat and Messages go to the OpenAI fake.
  const fake = kind === "openai-responses" && format !== "responses" ? openai : fakeOf(kind)
  fake.enqueue({ kind: "text", text: "Hello there, how are you today", usage: KINDS[kind].spec })
  const response = await request(format, modelFor(format, kind), stream)
  const text = await response.text()
  expect(response.status, text.slice(0, 400)).toBe(200)
  const record = await audit.recordOf(response.headers.get("x-request-id"))
  return { record, text }
}

const FORMATS: ReadonlyArray<Format> = ["chat", "messages", "responses"]
const CASES = FORMATS.flatMap((format) =>
  (Object.keys(KINDS) as Array<Kind>)
    .filter((kind) => kind !== "openai-responses" || format === "responses")
    .flatMap((kind) => [false, true].map((stream) => ({ format, kind, stream })))
)

describe("token counts by kind in the audit record", () => {
  it.each(CASES)("$format client, $kind provider, stream $stream", async ({ format, kind, stream }) => {
    const { record } = await send(format, kind, stream)
    const expected = KINDS[kind].counts
    expect({
      prompt: record.prompt_tokens,
      cacheRead: record.cache_read_tokens,
      cacheWrite: record.cache_write_tokens,
      output: record.completion_tokens
    }).toEqual(expected)
    // The audit record's credits are the cost: each kind at its own price, in micro-credits.
    expect(record.credits).toBe(costOf(expected))
  })
})

describe("OpenAI stream usage", () => {
  const chatStream = async (includeUsage: boolean) => {
    openai.enqueue({ kind: "text", text: "Hello there", usage: KINDS.openai.spec })
    const response = await fetch(gateway.url + "/v1/chat/completions", {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({
        model: "on-openai",
        stream: true,
        messages: [{ role: "user", content: "Say hello" }],
        ...(includeUsage ? { stream_options: { include_usage: true } } : {})
      })
    })
    const text = await response.text()
    const chunks = text.split("\n\n").filter((frame) => frame.startsWith("data: {")).map((frame) => JSON.parse(frame.slice(6)))
    return { chunks, upstream: openai.requests.at(-1)!.body!, record: await audit.recordOf(response.headers.get("x-request-id")) }
  }

  it("is asked for upstream, and a client that did not ask sees no usage chunk", async () => {
    const { chunks, upstream, record } = await chatStream(false)
    expect(upstream.stream_options).toEqual({ include_usage: true })
    expect(chunks.filter((chunk) => Array.isArray(chunk.choices) && chunk.choices.length === 0)).toEqual([])
    expect(chunks.some((chunk) => chunk.usage != null)).toBe(false)
    expect(record.prompt_tokens).toBe(1000)
    expect(record.completion_tokens).toBe(40)
  })

  it("a client that asked gets the usage chunk last", async () => {
    const { chunks } = await chatStream(true)
    expect(chunks.at(-1)).toMatchObject({ choices: [], usage: { prompt_tokens: 1000, completion_tokens: 40, prompt_tokens_details: { cached_tokens: 300 } } })
  })
})

describe("a stream cut before its usage", () => {
  /** Reads a stream until `enough` holds for what arrived, then leaves; what arrived. */
  const readThenLeave = async (path: string, body: Record<string, unknown>, enough: (text: string) => boolean) => {
    const controller = new AbortController()
    const response = await fetch(gateway.url + path, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "anthropic-version": "2023-06-01" },
      body: JSON.stringify(body),
      signal: controller.signal
    })
    expect(response.status).toBe(200)
    const reader = response.body!.getReader()
    const decoder = new TextDecoder()
    let text = ""
    while (!enough(text)) {
      const { value, done } = await reader.read()
      if (done) break
      text += decoder.decode(value, { stream: true })
    }
    controller.abort()
    return { text, requestId: response.headers.get("x-request-id") }
  }
  const dataOf = (text: string) => text.split("\n").filter((line) => line.startsWith("data: {")).map((line) => JSON.parse(line.slice(6)))

  it("by the client, from an OpenAI stream: the text relayed and the request's text, by the gateway's count", async () => {
    openai.enqueue({ kind: "stall_after", chunks: 4, of: { kind: "text", text: "Photosynthesis converts sunlight into chemical energy stored in glucose" } })
    const body = { model: "on-openai", stream: true, messages: [{ role: "user", content: "Say hello" }] }
    const { text, requestId } = await readThenLeave("/v1/chat/completions", body, (received) => dataOf(received).length >= 4)
    const relayed = dataOf(text).map((chunk) => chunk.choices?.[0]?.delta?.content ?? "").join("")
    expect(relayed.length).toBeGreaterThan(0)
    const record = await audit.recordOf(requestId)
    expect(record.status).toBe(200)
    expect(record.completion_tokens).toBe(countTokens(relayed))
    // The request's text as the gateway reads it (its string values), by the same count.
    expect(record.prompt_tokens).toBe(countTokens("on-openai\nuser\nSay hello\n"))
    expect(record.cache_read_tokens).toBe(0)
    expect(record.credits).toBe(costOf({ prompt: record.prompt_tokens!, cacheRead: 0, cacheWrite: 0, output: record.completion_tokens! }))
  })

  it("by the client, from an Anthropic stream: the input message_start reported, the output relayed", async () => {
    anthropic.enqueue({ kind: "stall_after", chunks: 6, of: { kind: "text", text: "Photosynthesis converts sunlight into chemical energy stored in glucose", usage: KINDS.anthropic.spec } })
    const body = { model: "on-anthropic", stream: true, max_tokens: 500, messages: [{ role: "user", content: "Say hello" }] }
    const deltas = (received: string) => dataOf(received).filter((event) => event.type === "content_block_delta")
    const { text, requestId } = await readThenLeave("/v1/messages", body, (received) => deltas(received).length >= 3)
    const relayed = deltas(text).map((event) => event.delta.text).join("")
    const record = await audit.recordOf(requestId)
    expect(record.status).toBe(200)
    expect({ prompt: record.prompt_tokens, cacheRead: record.cache_read_tokens, cacheWrite: record.cache_write_tokens }).toEqual({ prompt: 1200, cacheRead: 300, cacheWrite: 200 })
    expect(record.completion_tokens).toBe(countTokens(relayed))
    expect(record.credits).toBe(costOf({ prompt: 1200, cacheRead: 300, cacheWrite: 200, output: record.completion_tokens! }))
  })
})
