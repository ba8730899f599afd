/**
 * `POST /v1/completions` and `POST /v1/moderations` (issue 24 item 3) with the official openai
 * SDK: forwarded to an OpenAI-kind provider (model id replaced, the cap applied), streamed, and
 * admitted, charged and audited like any model call; a model of another kind is refused by name,
 * as is a field the format does not have; moderations without a configured provider are 404.
 */
import OpenAI from "openai"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { startFakeAnthropic } from "../support/fake-anthropic.ts"
import type { FakeUpstream } from "../support/fake-common.ts"
import { type FakeLegacy, startFakeOpenAILegacy } from "../support/fake-openai-legacy.ts"
import { auditFor, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { openaiFor } from "../support/sdk-clients.ts"

const OPENAI_KEY = "sk-fake-openai-0123456789abcdef"
const ANTHROPIC_KEY = "sk-ant-fake-0123456789abcdef"

let legacy: FakeLegacy
let anthropic: FakeUpstream
let gateway: TestGateway
let key: string

beforeAll(async () => {
  ;[legacy, anthropic] = await Promise.all([startFakeOpenAILegacy({ apiKey: OPENAI_KEY }), startFakeAnthropic({ apiKey: ANTHROPIC_KEY })])
  gateway = await startGateway(testConfig({
    workspace: { credits: 1_000 },
    providers: [
      { name: "openai", kind: "openai", base_url: legacy.url, api_key: OPENAI_KEY },
      { name: "anthropic", kind: "anthropic", base_url: anthropic.url, api_key: ANTHROPIC_KEY }
    ],
    models: [
      { alias: "instruct", id: "gpt-3.5-turbo-instruct", provider: "openai", credits: 2, max_tokens: 100 },
      { alias: "claude", id: "claude-sonnet-4-5-20250929", provider: "anthropic" }
    ],
    moderations: { provider: "openai", credits: 1 }
  }))
  key = (await gateway.createKey()).key
})

afterAll(async () => {
  await gateway?.close()
  await Promise.all([legacy?.close(), anthropic?.close()])
})

beforeEach(() => {
  legacy.requests.length = 0
})

const client = (apiKey = key, url = gateway.url) => openaiFor(url, apiKey)

const post = (path: string, body: unknown, url = gateway.url, apiKey = key) =>
  fetch(`${url}${path}`, { method: "POST", headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" }, body: JSON.stringify(body) })

describe("POST /v1/completions", () => {
  it("is forwarded with the provider's model id and the cap, then charged and audited", async () => {
    const { data, response } = await client().completions
      .create({ model: "instruct", prompt: "def add(a, b):", suffix: "\n", max_tokens: 500, temperature: 0 })
      .withResponse()
    expect(data.object).toBe("text_completion")
    expect(data.choices[0]!.text).toBe(" continued(def add(a, b):)")
    expect(legacy.requests[0]).toMatchObject({
      path: "/v1/completions",
      body: { model: "gpt-3.5-turbo-instruct", prompt: "def add(a, b):", suffix: "\n", max_tokens: 100, temperature: 0 }
    })
    const [record] = await auditFor(gateway, response.headers.get("x-request-id")!)
    expect(record).toMatchObject({ endpoint: "/v1/completions", status: 200, credits: 2_000_000, model: "gpt-3.5-turbo-instruct", provider: "openai", prompt_tokens: 3, completion_tokens: 2 })
  })

  it("streams the provider's chunks, then [DONE]", async () => {
    const stream = await client().completions.create({ model: "instruct", prompt: "hello", stream: true, stream_options: { include_usage: true } })
    let text = ""
    let usage: unknown
    for await (const chunk of stream) {
      text += chunk.choices[0]?.text ?? ""
      if (chunk.usage) usage = chunk.usage
    }
    expect(text).toBe(" continued(hello)")
    expect(usage).toMatchObject({ prompt_tokens: 1, completion_tokens: 2 })
  })

  it("asks the provider for a stream's usage the client did not ask for: the record has the counts, the client no usage chunk", async () => {
    const { data: stream, response } = await client().completions.create({ model: "instruct", prompt: "hello", stream: true }).withResponse()
    const chunks: Array<{ choices: Array<unknown>; usage?: unknown }> = []
    for await (const chunk of stream) chunks.push(chunk)
    expect(legacy.requests[0]!.body).toMatchObject({ stream: true, stream_options: { include_usage: true } })
    expect(chunks.length).toBeGreaterThan(0)
    expect(chunks.every((chunk) => chunk.choices.length > 0 && !chunk.usage)).toBe(true)
    const [record] = await auditFor(gateway, response.headers.get("x-request-id")!)
    expect(record).toMatchObject({ endpoint: "/v1/completions", status: 200, stream: true, prompt_tokens: 1, completion_tokens: 2 })
  })

  it("refuses a model of another provider kind, and a field the format does not have, by name", async () => {
    const other = await post("/v1/completions", { model: "claude", prompt: "x" })
    expect(other.status).toBe(400)
    const envelope = await other.json() as { error: string; message: string; details: Record<string, unknown> }
    expect(envelope).toMatchObject({ error: "validation_failed", details: { field: "model", model: "claude" } })
    expect(envelope.message).toContain("/v1/chat/completions")

    const unknown = await post("/v1/completions", { model: "instruct", prompt: "x", messages: [] })
    expect(unknown.status).toBe(400)
    expect(await unknown.json()).toMatchObject({ error: "validation_failed", details: { field: "messages" } })
    const unknownModel = await post("/v1/completions", { model: "nope", prompt: "x" })
    expect(unknownModel.status).toBe(404)
    expect(legacy.requests).toHaveLength(0)
  })

  it("answers one completion per request: n, best_of and several prompts, which would buy many for one price, are refused by name (issue 32.5)", async () => {
    for (const [body, field] of [
      [{ n: 128 }, "n"],
      [{ best_of: 20 }, "best_of"],
      [{ prompt: ["a", "b", "c"] }, "prompt"],
      [{ prompt: [[1, 2], [3]] }, "prompt"]
    ] as const) {
      const refused = await post("/v1/completions", { model: "instruct", prompt: "x", ...body })
      expect(refused.status, JSON.stringify(body)).toBe(400)
      expect(await refused.json()).toMatchObject({ error: "validation_failed", details: { field } })
    }
    expect(legacy.requests).toHaveLength(0)
    // One prompt in a list, and n/best_of of 1, are what the SDKs send: still forwarded.
    const one = await post("/v1/completions", { model: "instruct", prompt: ["only"], n: 1, best_of: 1 })
    expect(one.status).toBe(200)
    expect(legacy.requests).toHaveLength(1)
  })
})

describe("POST /v1/moderations", () => {
  it("is forwarded to the configured provider, charged and audited", async () => {
    const { data, response } = await client().moderations.create({ input: ["a nice day", "I will kill the process"] }).withResponse()
    expect(data.results.map((result) => result.flagged)).toEqual([false, true])
    expect(legacy.requests[0]).toMatchObject({ path: "/v1/moderations", body: { input: ["a nice day", "I will kill the process"] } })
    const [record] = await auditFor(gateway, response.headers.get("x-request-id")!)
    expect(record).toMatchObject({ endpoint: "/v1/moderations", status: 200, credits: 1_000_000, provider: "openai" })
  })

  it("refuses a body without input, by name", async () => {
    const refused = await post("/v1/moderations", { model: "omni-moderation-latest" })
    expect(refused.status).toBe(400)
    expect(await refused.json()).toMatchObject({ error: "validation_failed", details: { field: "input" } })
    expect(legacy.requests).toHaveLength(0)
  })

  it("needs an openai-kind provider in moderations.provider (checked at start)", () => {
    const providers = [{ name: "claude", kind: "anthropic", base_url: "https://api.anthropic.com" }]
    expect(() => testConfig({ providers, moderations: { provider: "claude" } })).toThrow(/moderations\.provider: "claude" is of kind anthropic/)
    expect(() => testConfig({ providers, moderations: { provider: "nope" } })).toThrow(/moderations\.provider: no provider named "nope"/)
  })

  it("is 404 naming the setting when no provider is configured", async () => {
    const bare = await startGateway(testConfig({ providers: [{ name: "echo", kind: "echo" }] }))
    try {
      const bareKey = (await bare.createKey()).key
      const refused = await post("/v1/moderations", { input: "x" }, bare.url, bareKey)
      expect(refused.status).toBe(404)
      expect(await refused.json()).toMatchObject({ error: "not_found", details: { setting: "moderations.provider" } })
    } finally {
      await bare.close()
    }
  })
})
