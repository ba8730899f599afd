/**
 * `/v1/responses` and `/v1/embeddings` with the clients that use them, unmodified: the official
 * `openai` SDK (responses.create / stream, a function-call loop, structured output,
 * embeddings.create), the AI SDK's default `openai(model)` provider (generateText, streamText,
 * a multi-step tool loop, generateObject, embed) and Codex CLI's captured requests replayed.
 * Each goes three ways: forwarded to a provider that serves the Responses API, translated to
 * Chat Completions for an OpenAI-compatible one, and onward to Messages for an Anthropic-kind
 * one. The fakes speak (and refuse) what the real APIs do.
 */
import { createOpenAI } from "@ai-sdk/openai"
import { embed, generateObject, generateText, stepCountIs, streamText, tool } from "ai"
import OpenAI from "openai"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { z } from "zod"
import { loadFixture, modelRequests, replayHeaders } from "../support/client-fixtures.ts"
import { startFakeAnthropic } from "../support/fake-anthropic.ts"
import type { FakeUpstream, JsonBody } from "../support/fake-common.ts"
import { startFakeOpenAI } from "../support/fake-openai.ts"
import { startFakeOpenAIResponses } from "../support/fake-openai-responses.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { openaiFor } from "../support/sdk-clients.ts"

const OPENAI_KEY = "sk-fake-openai-0123456789abcdef"
const ANTHROPIC_KEY = "sk-ant-fake-0123456789abcdef"

let responsesFake: FakeUpstream
let chatFake: FakeUpstream
let anthropicFake: FakeUpstream
let gateway: TestGateway
let key: string

beforeAll(async () => {
  ;[responsesFake, chatFake, anthropicFake] = await Promise.all([
    startFakeOpenAIResponses({ apiKey: OPENAI_KEY }),
    startFakeOpenAI({ apiKey: OPENAI_KEY }),
    startFakeAnthropic({ apiKey: ANTHROPIC_KEY })
  ])
  gateway = await startGateway(testConfig({
    workspace: { credits: 1_000_000 },
    limits: { requests_per_minute: 100_000, concurrent_streams: 100 },
    providers: [
      { name: "openai-responses", kind: "openai", base_url: responsesFake.url, api_key: OPENAI_KEY, responses_api: true },
      { name: "openai-chat", kind: "openai", base_url: chatFake.url, api_key: OPENAI_KEY },
      { name: "anthropic", kind: "anthropic", base_url: anthropicFake.url, api_key: ANTHROPIC_KEY },
      { name: "echo", kind: "echo" }
    ],
    models: [
      { alias: "gpt-r", id: "gpt-5.5", provider: "openai-responses", max_tokens: 32000 },
      { alias: "gpt-c", id: "gpt-4o-mini-2024-07-18", provider: "openai-chat", max_tokens: 16000 },
      { alias: "claude", id: "claude-sonnet-4-5-20250929", provider: "anthropic", max_tokens: 16000 },
      { alias: "embed", id: "text-embedding-3-small", provider: "openai-responses", endpoints: ["embeddings"] },
      { alias: "echo", id: "echo-1", provider: "echo", credits: 0, endpoints: ["chat", "embeddings"] }
    ]
  }))
  key = (await gateway.createKey()).key
})

afterAll(async () => {
  await gateway?.close()
  await Promise.all([responsesFake?.close(), chatFake?.close(), anthropicFake?.close()])
})

beforeEach(() => {
  responsesFake.reset()
  chatFake.reset()
  anthropicFake.reset()
})

interface Route {
  readonly name: string
  readonly model: string
  readonly fake: () => FakeUpstream
  readonly path: string
}

const ROUTES: ReadonlyArray<Route> = [
  { name: "forwarded to a Responses provider", model: "gpt-r", fake: () => responsesFake, path: "/v1/responses" },
  { name: "translated to Chat Completions", model: "gpt-c", fake: () => chatFake, path: "/v1/chat/completions" },
  { name: "translated to Messages", model: "claude", fake: () => anthropicFake, path: "/v1/messages" }
]

const openai = () => openaiFor(gateway.url, key)
const aiSdk = () => createOpenAI({ apiKey: key, baseURL: `${gateway.url}/v1` })

const weatherTool = {
  type: "function" as const,
  name: "weather",
  description: "The weather in a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"], additionalProperties: false },
  strict: true
}

/** The fake answers with the tool the request forces, or the JSON as text. */
const scriptObject = (fake: FakeUpstream, value: Record<string, unknown>) =>
  fake.setDefault((body: JsonBody) => {
    const forced: unknown = body.tool_choice?.function?.name ?? body.tool_choice?.name
    return typeof forced === "string"
      ? { kind: "tool_calls", calls: [{ name: forced, arguments: value }] }
      : { kind: "text", text: JSON.stringify(value) }
  })

describe.each(ROUTES)("openai SDK, $name", (route) => {
  it("responses.create", async () => {
    const response = await openai().responses.create({ model: route.model, input: "hello there", store: false })
    expect(response.output_text).toBe("echo: hello there")
    expect(response.status).toBe("completed")
    expect(response.usage?.input_tokens).toBeGreaterThan(0)
    expect(route.fake().requests).toHaveLength(1)
    expect(route.fake().requests[0]!.path.split("?")[0]).toMatch(new RegExp(`${route.path.replace("/v1", "")}$`))
  })

  it("responses.stream", async () => {
    const stream = openai().responses.stream({ model: route.model, input: "stream me", instructions: "be brief", store: false })
    let text = ""
    for await (const event of stream) if (event.type === "response.output_text.delta") text += event.delta
    const final = await stream.finalResponse()
    expect(text).toBe("echo: stream me")
    expect(final.output_text).toBe("echo: stream me")
  })

  it("a function-call loop with function_call_output", async () => {
    route.fake().enqueue(
      { kind: "tool_calls", calls: [{ name: "weather", arguments: { city: "Oslo" } }] },
      { kind: "text", text: "It is 21 degrees in Oslo." }
    )
    const input: Array<OpenAI.Responses.ResponseInputItem> = [{ role: "user", content: "Weather in Oslo?" }]
    const first = await openai().responses.create({ model: route.model, input, tools: [weatherTool], store: false })
    const call = first.output.find((item) => item.type === "function_call")
    expect(call).toMatchObject({ type: "function_call", name: "weather" })
    expect(JSON.parse((call as OpenAI.Responses.ResponseFunctionToolCall).arguments)).toEqual({ city: "Oslo" })
    input.push(...first.output as Array<OpenAI.Responses.ResponseInputItem>, {
      type: "function_call_output",
      call_id: (call as OpenAI.Responses.ResponseFunctionToolCall).call_id,
      output: JSON.stringify({ celsius: 21 })
    })
    const second = await openai().responses.create({ model: route.model, input, tools: [weatherTool], store: false })
    expect(second.output_text).toBe("It is 21 degrees in Oslo.")
  })

  it("structured output with text.format json_schema", async () => {
    scriptObject(route.fake(), { name: "Ada", year: 1815 })
    const response = await openai().responses.create({
      model: route.model,
      input: "Describe Ada as JSON",
      store: false,
      text: {
        format: {
          type: "json_schema",
          name: "person",
          strict: true,
          schema: { type: "object", properties: { name: { type: "string" }, year: { type: "integer" } }, required: ["name", "year"], additionalProperties: false }
        }
      }
    })
    expect(JSON.parse(response.output_text)).toEqual({ name: "Ada", year: 1815 })
  })
})

describe.each(ROUTES)("AI SDK default openai(model), $name", (route) => {
  // The AI SDK stores responses by default and then refers to earlier output by id; the
  // gateway keeps no conversation state, so a stateless client sets store: false.
  const providerOptions = { openai: { store: false } }

  it("generateText and streamText", async () => {
    const generated = await generateText({ model: aiSdk()(route.model), prompt: "hello there", providerOptions, maxRetries: 0 })
    expect(generated.text).toBe("echo: hello there")
    const streamed = streamText({ model: aiSdk()(route.model), prompt: "stream me", providerOptions, maxRetries: 0 })
    let text = ""
    for await (const delta of streamed.textStream) text += delta
    expect(text).toBe("echo: stream me")
  })

  it("a multi-step tool loop, streamed", async () => {
    route.fake().enqueue(
      { kind: "tool_calls", calls: [{ name: "weather", arguments: { city: "Oslo" } }] },
      { kind: "text", text: "It is 21 degrees in Oslo." }
    )
    const result = streamText({
      model: aiSdk()(route.model),
      prompt: "Weather in Oslo?",
      tools: { weather: tool({ description: "The weather", inputSchema: z.object({ city: z.string() }), execute: async () => ({ celsius: 21 }) }) },
      stopWhen: stepCountIs(3),
      providerOptions,
      maxRetries: 0
    })
    let text = ""
    for await (const delta of result.textStream) text += delta
    expect(text).toBe("It is 21 degrees in Oslo.")
    expect(await result.steps).toHaveLength(2)
  })

  it("generateObject", async () => {
    scriptObject(route.fake(), { name: "Ada", languages: ["en"] })
    const result = await generateObject({
      model: aiSdk()(route.model),
      schema: z.object({ name: z.string(), languages: z.array(z.string()) }),
      prompt: "Describe Ada as JSON",
      providerOptions,
      maxRetries: 0
    })
    expect(result.object).toEqual({ name: "Ada", languages: ["en"] })
  })
})

describe("Codex CLI's captured requests", () => {
  const MODEL_FOR: Record<string, string> = { passthrough: "gpt-r", chat: "gpt-c", anthropic: "claude" }
  describe.each(["plain", "tool", "reasoning-high", "image", "apply-patch"])("%s", (scenario) => {
    it.each(Object.keys(MODEL_FOR))("replays through %s and ends each turn with response.completed", async (target) => {
      const fixture = loadFixture("codex", scenario, { apiKey: key, model: MODEL_FOR[target]! })
      for (const request of modelRequests(fixture)) {
        const response = await fetch(`${gateway.url}${request.path}`, {
          method: "POST",
          headers: replayHeaders(request),
          body: JSON.stringify(request.body)
        })
        const text = await response.text()
        expect(response.status, text.slice(0, 500)).toBe(200)
        expect(text).toContain("event: response.created")
        expect(text).toMatch(/event: response\.completed\ndata: /)
        expect(text).not.toContain("event: error")
      }
    })
  })
})

describe("embeddings", () => {
  it("are forwarded to an OpenAI-kind provider and decoded by the SDK (base64 by default)", async () => {
    const result = await openai().embeddings.create({ model: "embed", input: ["one", "two"] })
    expect(result.data).toHaveLength(2)
    expect(result.data[0]!.embedding.length).toBeGreaterThan(0)
    expect(responsesFake.requests[0]!.body).toMatchObject({ model: "text-embedding-3-small", input: ["one", "two"] })
  })

  it("are answered offline by echo, deterministic, with dimensions", async () => {
    const a = await openai().embeddings.create({ model: "echo", input: "same text", dimensions: 64 })
    const b = await openai().embeddings.create({ model: "echo", input: "same text", dimensions: 64, encoding_format: "float" })
    expect(a.data[0]!.embedding).toHaveLength(64)
    expect(b.data[0]!.embedding.map((x) => x.toFixed(5))).toEqual(a.data[0]!.embedding.map((x) => x.toFixed(5)))
    const { embedding } = await embed({ model: aiSdk().embedding("echo"), value: "same text", maxRetries: 0 })
    expect(embedding).toHaveLength(256)
  })

  it("refuse a chat-only model, an Anthropic model, and an embedding model on chat, naming the model", async () => {
    const post = (path: string, body: unknown) =>
      fetch(`${gateway.url}/v1${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify(body)
      }).then(async (r) => ({ status: r.status, body: (await r.json()) as { error: string; message: string; details: { field: string } } }))
    for (const model of ["gpt-c", "claude"]) {
      const refused = await post("/embeddings", { model, input: "x" })
      expect(refused.status).toBe(400)
      expect(refused.body).toMatchObject({ error: "validation_failed", details: { field: "model" } })
      expect(refused.body.message).toContain(`model "${model}"`)
    }
    const refused = await post("/chat/completions", { model: "embed", messages: [{ role: "user", content: "x" }] })
    expect(refused.status).toBe(400)
    expect(refused.body.message).toContain('model "embed" does not serve chat')
  })
})
