/**
 * The translation matrix's Bedrock cells, through the real server and the fake Bedrock (which
 * verifies every SigV4 signature and refuses what Converse refuses): each client format (openai
 * SDK on /v1/chat/completions and /v1/responses, Anthropic SDK on /v1/messages) x {a plain answer,
 * a stream ending the way the format ends, a tool call and its result turn, a vendor error before
 * and after the first byte}, asserting what the client sees, what reached Bedrock and the audit
 * record. Around it: thinking kept across turns for a Messages client, count_tokens through
 * CountTokens (and the estimate where Bedrock offers none), embeddings on Titan and Cohere, and
 * credentials never echoed.
 */
import Anthropic from "@anthropic-ai/sdk"
import { Effect } from "effect"
import OpenAI from "openai"
import type { ChatCompletionStreamParams } from "openai/lib/ChatCompletionStream"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import type { JsonBody } from "../support/fake-common.ts"
import { type FakeBedrock, startFakeBedrock } from "../support/fake-bedrock.ts"
import { awaitKeyAudit, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { sseData } from "../support/sse.ts"
import { anthropicFor, openaiFor } from "../support/sdk-clients.ts"

const REGION = "eu-central-1"
const KEY_ID = "AKIAGATEWAYTEST00042"
const SECRET = "gateway/test+secret/abcdefghijklmnopqrstuv"
const TOKEN = "IQoJb3JpZ2luX2VjEFAKESESSIONTOKENforTests0123"
const CLAUDE = "eu.anthropic.claude-sonnet-4-5-20250929-v1:0"
const OPUS = "global.anthropic.claude-opus-4-5-20251101-v1:0"
const HAIKU = "eu.anthropic.claude-haiku-4-5-20251001-v1:0"
const NOVA = "amazon.nova-pro-v1:0"
const TITAN = "amazon.titan-embed-text-v2:0"
const COHERE = "cohere.embed-multilingual-v3"
const CAP = 1000

let fake: FakeBedrock
let gw: TestGateway
let key: string
let keyId: string

beforeAll(async () => {
  fake = await startFakeBedrock({
    region: REGION,
    accessKeyId: KEY_ID,
    secretAccessKey: SECRET,
    sessionToken: TOKEN,
    models: [CLAUDE, OPUS, HAIKU, NOVA, TITAN, COHERE],
    noCountTokens: [NOVA]
  })
  gw = await startGateway(
    testConfig({
      workspace: { credits: 1_000_000 },
      limits: { requests_per_minute: 100_000, concurrent_streams: 100 },
      providers: [
        {
          name: "up-bedrock",
          kind: "bedrock",
          region: REGION,
          base_url: fake.url,
          access_key_id: KEY_ID,
          secret_access_key_env: "TEST_BEDROCK_SECRET",
          session_token_env: "TEST_BEDROCK_TOKEN"
        },
        {
          name: "up-bedrock-wrong",
          kind: "bedrock",
          region: REGION,
          base_url: fake.url,
          access_key_id: KEY_ID,
          secret_access_key: "an-old-rotated-secret-000000000000000000",
          session_token: TOKEN
        }
      ],
      models: [
        { alias: "claude-br", id: CLAUDE, provider: "up-bedrock", max_tokens: CAP },
        { alias: "claude-big", id: OPUS, provider: "up-bedrock", max_tokens: 8000 },
        { alias: "nova", id: NOVA, provider: "up-bedrock", max_tokens: CAP },
        { alias: "claude-wrong", id: HAIKU, provider: "up-bedrock-wrong", max_tokens: CAP },
        { alias: "titan", id: TITAN, provider: "up-bedrock", endpoints: ["embeddings"] },
        { alias: "cohere", id: COHERE, provider: "up-bedrock", endpoints: ["embeddings"] }
      ]
    }, { TEST_BEDROCK_SECRET: SECRET, TEST_BEDROCK_TOKEN: TOKEN }),
    { env: { TEST_BEDROCK_SECRET: SECRET, TEST_BEDROCK_TOKEN: TOKEN } }
  )
})

afterAll(async () => {
  await gw?.close()
  await fake?.close()
})

beforeEach(async () => {
  fake.reset()
  ;({ key, id: keyId } = await gw.createKey())
})

const openai = () => openaiFor(gw.url, key)
const anthropic = () => anthropicFor(gw.url, key)

const auditRecords = (count: number) => awaitKeyAudit(gw, keyId, count)

const sentBody = (index = 0): JsonBody => fake.requests[index]!.body!

const WEATHER = { type: "object", properties: { city: { type: "string" } }, required: ["city"] }
const TOOL_ID = "tooluse_Xq81ParisVb7"

describe("openai SDK on /v1/chat/completions -> Bedrock", () => {
  it("a plain answer: Converse request field by field, usage with the cache buckets", async () => {
    fake.enqueue({ kind: "text", text: "Paris is the capital of France.", usage: { input: 14, output: 6, cacheRead: 6, cacheWrite: 2 } })
    const completion = await openai().chat.completions.create({
      model: "claude-br",
      messages: [{ role: "system", content: "Be terse." }, { role: "user", content: "Capital of France?" }],
      temperature: 0.3,
      stop: ["END"]
    })
    expect(completion.choices[0]!.message.content).toBe("Paris is the capital of France.")
    expect(completion.choices[0]!.finish_reason).toBe("stop")
    expect(completion.model).toBe(CLAUDE)
    expect(completion.usage).toMatchObject({ prompt_tokens: 22, completion_tokens: 6, total_tokens: 28, prompt_tokens_details: { cached_tokens: 6 } })
    expect(fake.modelIds()).toEqual([CLAUDE])
    expect(sentBody()).toEqual({
      messages: [{ role: "user", content: [{ text: "Capital of France?" }] }],
      system: [{ text: "Be terse." }],
      inferenceConfig: { maxTokens: CAP, temperature: 0.3, stopSequences: ["END"] }
    })
    const [record] = await auditRecords(1)
    expect(record).toMatchObject({ status: 200, model: CLAUDE, provider: "up-bedrock", prompt_tokens: 22, completion_tokens: 6 })
  })

  it("a stream ends with a usage chunk and [DONE]; input tokens come from Bedrock's last event", async () => {
    fake.enqueue({ kind: "text", text: "one two three four", usage: { input: 9, output: 4 } })
    const stream = openai().chat.completions.stream({ model: "claude-br", messages: [{ role: "user", content: "count" }], stream_options: { include_usage: true } })
    const chunks: Array<OpenAI.Chat.ChatCompletionChunk> = []
    stream.on("chunk", (chunk) => chunks.push(chunk))
    const completion = await stream.finalChatCompletion()
    expect(completion.choices[0]!.message.content).toBe("one two three four")
    expect(chunks.filter((chunk) => chunk.choices.some((c) => c.finish_reason !== null))).toHaveLength(1)
    expect(chunks.at(-1)!.usage).toMatchObject({ prompt_tokens: 9, completion_tokens: 4 })
    expect(fake.requests[0]!.path).toMatch(/\/converse-stream$/)

    fake.enqueue({ kind: "text", text: "raw frames" })
    const raw = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "claude-br", messages: [{ role: "user", content: "hi" }], stream: true })
    })
    expect((await raw.text()).trimEnd().endsWith("data: [DONE]")).toBe(true)
  })

  it("a tool call and its result turn (streamed and not)", async () => {
    for (const streamed of [false, true]) {
      fake.reset()
      fake.enqueue(
        { kind: "tool_calls", text: "Checking.", calls: [{ id: TOOL_ID, name: "get_weather", arguments: { city: "Paris" } }] },
        { kind: "text", text: "Sunny in Paris." }
      )
      const messages: Array<OpenAI.Chat.ChatCompletionMessageParam> = [{ role: "user", content: "Weather in Paris?" }]
      const tools: Array<OpenAI.Chat.ChatCompletionFunctionTool> = [{ type: "function", function: { name: "get_weather", description: "Weather", parameters: WEATHER } }]
      const ask = (params: OpenAI.Chat.ChatCompletionCreateParamsNonStreaming) =>
        streamed ? openai().chat.completions.stream(params as ChatCompletionStreamParams).finalChatCompletion() : openai().chat.completions.create(params)
      const first = await ask({ model: "claude-br", messages, tools })
      expect(first.choices[0]!.finish_reason).toBe("tool_calls")
      const call = first.choices[0]!.message.tool_calls![0]! as OpenAI.Chat.ChatCompletionMessageFunctionToolCall
      expect(call).toMatchObject({ id: TOOL_ID, function: { name: "get_weather" } })
      expect(JSON.parse(call.function.arguments)).toEqual({ city: "Paris" })
      // The request-side shape of the answer (the stream helper's message also has `parsed`, which is not a request field).
      messages.push({ role: "assistant", content: first.choices[0]!.message.content, tool_calls: [call] }, { role: "tool", tool_call_id: call.id, content: "sunny" })
      const second = await ask({ model: "claude-br", messages, tools })
      expect(second.choices[0]!.message.content).toBe("Sunny in Paris.")
      expect(sentBody(0).toolConfig).toEqual({ tools: [{ toolSpec: { name: "get_weather", description: "Weather", inputSchema: { json: WEATHER } } }] })
      expect(sentBody(1).messages).toEqual([
        { role: "user", content: [{ text: "Weather in Paris?" }] },
        { role: "assistant", content: [{ text: "Checking." }, { toolUse: { toolUseId: TOOL_ID, name: "get_weather", input: { city: "Paris" } } }] },
        { role: "user", content: [{ toolResult: { toolUseId: TOOL_ID, content: [{ text: "sunny" }] } }] }
      ])
    }
  })

  it("JSON mode: a forced tool on Converse, the JSON back as content", async () => {
    fake.enqueue({ kind: "tool_calls", calls: [{ name: "json_response", arguments: { city: "Paris" } }] })
    const completion = await openai().chat.completions.create({
      model: "claude-br",
      messages: [{ role: "user", content: "City?" }],
      response_format: { type: "json_schema", json_schema: { name: "city", schema: WEATHER } }
    })
    expect(JSON.parse(completion.choices[0]!.message.content!)).toEqual({ city: "Paris" })
    expect(completion.choices[0]!.finish_reason).toBe("stop")
    expect(sentBody().toolConfig.toolChoice).toEqual({ tool: { name: "json_response" } })
  })

  it("vendor errors: throttling is a 502 with upstream_status 429, a ValidationException a 400 with Bedrock's message", async () => {
    fake.enqueue({ kind: "error", status: 429 })
    const throttled = await openai().chat.completions.create({ model: "claude-br", messages: [{ role: "user", content: "hi" }] }).catch((e: unknown) => e)
    expect(throttled).toBeInstanceOf(OpenAI.APIError)
    expect((throttled as InstanceType<typeof OpenAI.APIError>).status).toBe(502)
    // The SDK keeps the envelope's `error` (the slug); the rest is in the raw body.
    expect((throttled as InstanceType<typeof OpenAI.APIError>).error).toBe("provider_error")
    fake.enqueue({ kind: "error", status: 429 })
    const raw = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "claude-br", messages: [{ role: "user", content: "hi" }] })
    })
    expect(raw.status).toBe(502)
    expect(await raw.json()).toMatchObject({
      error: "provider_error",
      details: { provider: "up-bedrock", upstream_status: 429, upstream_error: { type: "ThrottlingException", message: "Too many requests, please wait before trying again." } }
    })

    // Bedrock itself refuses a conversation that does not alternate... the gateway merges turns, so
    // a request the vendor refuses is one with a value out of Converse's range.
    fake.enqueue({ kind: "error", status: 400, message: "The model returned the following errors: prompt is too long" })
    const refused = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "claude-br", messages: [{ role: "user", content: "hi" }], stream: true })
    })
    expect(refused.status).toBe(400)
    expect(await refused.json()).toMatchObject({
      error: "validation_failed",
      message: expect.stringContaining("prompt is too long"),
      details: { upstream_status: 400, upstream_error: { type: "ValidationException" } }
    })
  })

  it("an exception inside the stream: the envelope in-band, then [DONE]", async () => {
    fake.enqueue({ kind: "mid_stream_error", text: "alpha beta gamma delta", afterChunks: 3, errorType: "throttlingException", message: "Too many tokens" })
    const response = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "claude-br", messages: [{ role: "user", content: "hi" }], stream: true })
    })
    expect(response.status).toBe(200)
    const frames = sseData(await response.text())
    expect(frames.at(-1)).toBe("[DONE]")
    expect(JSON.parse(frames.at(-2)!)).toMatchObject({
      error: "provider_error",
      details: { provider: "up-bedrock", upstream_status: null, upstream_error: { type: "throttlingException", message: "Too many tokens" } }
    })
    expect(frames.slice(0, -2).map((frame) => (JSON.parse(frame) as OpenAI.Chat.ChatCompletionChunk).choices[0]?.delta.content ?? "").join("")).toMatch(/^alpha/)
  })
})

describe("Anthropic SDK on /v1/messages -> Bedrock", () => {
  it("a plain answer keeps system, cache points and sampling; usage as Anthropic counts it", async () => {
    fake.enqueue({ kind: "text", text: "Paris.", usage: { input: 20, output: 2, cacheRead: 100, cacheWrite: 0 } })
    const message = await anthropic().messages.create({
      model: "claude-br",
      max_tokens: 5000,
      system: [{ type: "text", text: "You are terse.", cache_control: { type: "ephemeral" } }],
      messages: [{ role: "user", content: [{ type: "text", text: "Capital of France?", cache_control: { type: "ephemeral", ttl: "1h" } }] }],
      // Dropped from the newest SDK types, still sent by clients on API version 2023-06-01.
      ...({ top_k: 40 } as object),
      stop_sequences: ["END"]
    })
    expect(message).toMatchObject({
      type: "message",
      role: "assistant",
      model: CLAUDE,
      content: [{ type: "text", text: "Paris." }],
      stop_reason: "end_turn",
      usage: { input_tokens: 20, output_tokens: 2, cache_read_input_tokens: 100, cache_creation_input_tokens: 0 }
    })
    expect(message.id).toMatch(/^msg_/)
    expect(sentBody()).toEqual({
      messages: [{ role: "user", content: [{ text: "Capital of France?" }, { cachePoint: { type: "default", ttl: "1h" } }] }],
      system: [{ text: "You are terse." }, { cachePoint: { type: "default" } }],
      // max_tokens is clamped to the model's cap, and always sent.
      inferenceConfig: { maxTokens: CAP, stopSequences: ["END"] },
      additionalModelRequestFields: { top_k: 40 }
    })
  })

  it("a stream ends with one message_delta (input tokens included) and message_stop", async () => {
    fake.enqueue({ kind: "text", text: "alpha beta gamma", usage: { input: 11, output: 3 } })
    const stream = anthropic().messages.stream({ model: "claude-br", max_tokens: 100, messages: [{ role: "user", content: "go" }] })
    const events: Array<Anthropic.RawMessageStreamEvent> = []
    stream.on("streamEvent", (event) => events.push(structuredClone(event)))
    const message = await stream.finalMessage()
    expect(message.content).toEqual([{ type: "text", text: "alpha beta gamma" }])
    expect(message.usage).toMatchObject({ input_tokens: 11, output_tokens: 3 })
    const types = events.map((event) => event.type)
    expect(types[0]).toBe("message_start")
    expect(types.slice(-2)).toEqual(["message_delta", "message_stop"])
    expect(types.filter((type) => type === "content_block_start")).toHaveLength(1)
    const [record] = await auditRecords(1)
    expect(record).toMatchObject({ status: 200, stream: true, prompt_tokens: 11, completion_tokens: 3 })
  })

  it("a tool call and its result turn (streamed and not), ids as Bedrock made them", async () => {
    for (const streamed of [false, true]) {
      fake.reset()
      fake.enqueue(
        { kind: "tool_calls", calls: [{ id: TOOL_ID, name: "get_weather", arguments: { city: "Paris" } }] },
        { kind: "text", text: "Sunny." }
      )
      const tools: Array<Anthropic.Tool> = [{ name: "get_weather", description: "Weather", input_schema: WEATHER as Anthropic.Tool.InputSchema }]
      const messages: Array<Anthropic.MessageParam> = [{ role: "user", content: "Weather in Paris?" }]
      const ask = (params: Anthropic.MessageCreateParamsNonStreaming) =>
        streamed ? anthropic().messages.stream(params).finalMessage() : anthropic().messages.create(params)
      const first = await ask({ model: "claude-br", max_tokens: 200, messages, tools })
      expect(first.stop_reason).toBe("tool_use")
      expect(first.content).toEqual([{ type: "tool_use", id: TOOL_ID, name: "get_weather", input: { city: "Paris" } }])
      messages.push({ role: "assistant", content: first.content }, { role: "user", content: [{ type: "tool_result", tool_use_id: TOOL_ID, content: "sunny", is_error: false }] })
      const second = await ask({ model: "claude-br", max_tokens: 200, messages, tools })
      expect(second.content).toEqual([{ type: "text", text: "Sunny." }])
      expect(sentBody(1).messages.slice(1)).toEqual([
        { role: "assistant", content: [{ toolUse: { toolUseId: TOOL_ID, name: "get_weather", input: { city: "Paris" } } }] },
        { role: "user", content: [{ toolResult: { toolUseId: TOOL_ID, content: [{ text: "sunny" }] } }] }
      ])
    }
  })

  it("thinking: the signed reasoning comes back as a thinking block and goes up again as reasoningContent", async () => {
    const reasoning = { text: "The user wants the sum.", signature: "EqQBCkYIARgCIkBsig" }
    for (const streamed of [false, true]) {
      fake.reset()
      fake.enqueue({ kind: "text", text: "Four.", reasoning } as never, { kind: "text", text: "Six." })
      const params = { model: "claude-big", max_tokens: 4000, thinking: { type: "enabled" as const, budget_tokens: 2000 }, messages: [{ role: "user" as const, content: "2+2?" }] }
      const first = streamed ? await anthropic().messages.stream(params).finalMessage() : await anthropic().messages.create(params)
      expect(first.content).toEqual([{ type: "thinking", thinking: reasoning.text, signature: reasoning.signature }, { type: "text", text: "Four." }])
      expect(sentBody(0).additionalModelRequestFields).toEqual({ thinking: { type: "enabled", budget_tokens: 2000 } })
      await anthropic().messages.create({ ...params, messages: [...params.messages, { role: "assistant", content: first.content }, { role: "user", content: "3+3?" }] })
      expect(sentBody(1).messages[1]).toEqual({
        role: "assistant",
        content: [{ reasoningContent: { reasoningText: reasoning } }, { text: "Four." }]
      })
    }
  })

  it("vendor errors reach the client as Anthropic errors; a mid-stream exception as an error event", async () => {
    fake.enqueue({ kind: "error", status: 503 })
    const error = await anthropic().messages.create({ model: "claude-br", max_tokens: 10, messages: [{ role: "user", content: "hi" }] }).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(Anthropic.InternalServerError)
    expect((error as InstanceType<typeof Anthropic.APIError>).status).toBe(502)
    expect((error as InstanceType<typeof Anthropic.APIError>).error).toMatchObject({ error: "provider_error", details: { upstream_status: 503, upstream_error: { type: "ServiceUnavailableException" } } })

    fake.enqueue({ kind: "mid_stream_error", afterChunks: 3, text: "alpha beta gamma" })
    const response = await fetch(`${gw.url}/v1/messages`, {
      method: "POST",
      headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" },
      body: JSON.stringify({ model: "claude-br", max_tokens: 50, messages: [{ role: "user", content: "hi" }], stream: true })
    })
    const frames = (await response.text()).split("\n\n").filter((frame) => frame !== "")
    expect(frames[0]).toMatch(/^event: message_start/)
    expect(frames.at(-1)).toMatch(/^event: error\ndata: /)
    expect(JSON.parse(frames.at(-1)!.split("\ndata: ")[1]!)).toMatchObject({ type: "error", error: "provider_error", details: { upstream_error: { type: "modelStreamErrorException" } } })
    expect(frames.some((frame) => frame.startsWith("event: message_stop"))).toBe(false)
  })

  it("what Converse lacks is refused by name, before any call", async () => {
    const response = await fetch(`${gw.url}/v1/messages`, {
      method: "POST",
      headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" },
      body: JSON.stringify({
        model: "claude-br",
        max_tokens: 50,
        messages: [{ role: "user", content: [{ type: "image", source: { type: "url", url: "https://example.com/cat.png" } }] }]
      })
    })
    expect(response.status).toBe(400)
    expect(await response.json()).toMatchObject({ error: "validation_failed", details: { field: "messages.0.content.0.source", reason: "untranslatable" } })
    expect(fake.requests).toHaveLength(0)
  })
})

describe("openai SDK on /v1/responses -> Bedrock", () => {
  it("a plain answer", async () => {
    fake.enqueue({ kind: "text", text: "Hello from Bedrock.", usage: { input: 5, output: 4 } })
    const response = await openai().responses.create({ model: "claude-br", input: "hello", instructions: "be brief", store: false })
    expect(response.output_text).toBe("Hello from Bedrock.")
    expect(response.status).toBe("completed")
    expect(response.usage).toMatchObject({ input_tokens: 5, output_tokens: 4 })
    expect(sentBody().system).toEqual([{ text: "be brief" }])
  })

  it("a stream ends with response.completed", async () => {
    fake.enqueue({ kind: "text", text: "streamed words here" })
    const stream = openai().responses.stream({ model: "claude-br", input: "stream me", store: false })
    const types: Array<string> = []
    stream.on("event", (event) => types.push(event.type))
    const final = await stream.finalResponse()
    expect(final.output_text).toBe("streamed words here")
    expect(types[0]).toBe("response.created")
    expect(types.at(-1)).toBe("response.completed")
  })

  it("a function call and its output turn", async () => {
    fake.enqueue(
      { kind: "tool_calls", calls: [{ id: TOOL_ID, name: "get_weather", arguments: { city: "Paris" } }] },
      { kind: "text", text: "Sunny." }
    )
    const tools: Array<OpenAI.Responses.FunctionTool> = [{ type: "function", name: "get_weather", parameters: WEATHER, strict: false }]
    const input: Array<OpenAI.Responses.ResponseInputItem> = [{ role: "user", content: "Weather in Paris?" }]
    const first = await openai().responses.create({ model: "claude-br", input, tools, store: false })
    const call = first.output.find((item) => item.type === "function_call") as OpenAI.Responses.ResponseFunctionToolCall
    expect(call).toMatchObject({ call_id: TOOL_ID, name: "get_weather" })
    input.push(call, { type: "function_call_output", call_id: call.call_id, output: "sunny" })
    const second = await openai().responses.create({ model: "claude-br", input, tools, store: false })
    expect(second.output_text).toBe("Sunny.")
    expect(sentBody(1).messages.at(-1)).toEqual({ role: "user", content: [{ toolResult: { toolUseId: TOOL_ID, content: [{ text: "sunny" }] } }] })
  })

  it("a vendor error before the answer, and one inside the stream (error then response.failed)", async () => {
    fake.enqueue({ kind: "error", status: 429 })
    const error = await openai().responses.create({ model: "claude-br", input: "hi", store: false }).catch((e: unknown) => e)
    expect((error as InstanceType<typeof OpenAI.APIError>).status).toBe(502)

    fake.enqueue({ kind: "mid_stream_error", afterChunks: 3, text: "alpha beta gamma" })
    const response = await fetch(`${gw.url}/v1/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "claude-br", input: "hi", stream: true, store: false })
    })
    const events = (await response.text()).split("\n\n").filter((frame) => frame !== "").map((frame) => frame.split("\n")[0]!.slice("event: ".length))
    expect(events.slice(-2)).toEqual(["error", "response.failed"])
  })
})

describe("around the model path", () => {
  const countTokens = (model: string) =>
    fetch(`${gw.url}/v1/messages/count_tokens`, {
      method: "POST",
      headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" },
      body: JSON.stringify({ model, messages: [{ role: "user", content: "one two three four five" }] })
    })

  it("count_tokens: Bedrock's CountTokens where the model offers it, the estimate where not", async () => {
    const counted = await countTokens("claude-br")
    expect(await counted.json()).toEqual({ input_tokens: 5 })
    expect(fake.requests[0]!.path).toMatch(/\/count-tokens$/)
    expect(fake.requests[0]!.body).toEqual({ input: { converse: { messages: [{ role: "user", content: [{ text: "one two three four five" }] }] } } })

    const estimated = await countTokens("nova")
    expect(estimated.status).toBe(200)
    expect((await estimated.json() as { input_tokens: number }).input_tokens).toBeGreaterThan(0)
  })

  it("embeddings: Titan one input per call, Cohere in one call; floats or base64", async () => {
    const titan = await openai().embeddings.create({ model: "titan", input: ["one two", "three"], dimensions: 256, encoding_format: "float" })
    expect(titan.data.map((item) => item.embedding.length)).toEqual([256, 256])
    expect(titan.usage).toEqual({ prompt_tokens: 3, total_tokens: 3 })
    expect(fake.requests.map((request) => request.body)).toEqual([{ inputText: "one two", dimensions: 256 }, { inputText: "three", dimensions: 256 }])

    fake.reset()
    // The openai SDK asks for base64 by default and decodes it.
    const cohere = await openai().embeddings.create({ model: "cohere", input: ["alpha beta", "gamma"] })
    expect(cohere.data).toHaveLength(2)
    expect(cohere.data[0]!.embedding).toHaveLength(1024)
    expect(cohere.usage.prompt_tokens).toBe(3)
    expect(fake.requests).toHaveLength(1)
    expect(fake.requests[0]!.body).toEqual({ texts: ["alpha beta", "gamma"], input_type: "search_document" })

    const tokens = await fetch(`${gw.url}/v1/embeddings`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "titan", input: [1, 2, 3] })
    })
    expect(tokens.status).toBe(400)
    expect(await tokens.json()).toMatchObject({ details: { field: "input", reason: "untranslatable" } })
  })

  it("a wrong secret is the operator's problem (502), and no credential reaches the client", async () => {
    const response = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "claude-wrong", messages: [{ role: "user", content: "hi" }] })
    })
    expect(response.status).toBe(502)
    const text = await response.text()
    expect(JSON.parse(text)).toMatchObject({ details: { upstream_status: 403, upstream_error: { type: "InvalidSignatureException" } } })

    // An upstream that quotes the credentials back has them redacted.
    fake.enqueue({ kind: "error", status: 403, message: `User ${KEY_ID} with token ${TOKEN} and secret ${SECRET}: Credential=${KEY_ID}/20260101/${REGION}/bedrock/aws4_request denied` })
    const quoted = await (await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "claude-br", messages: [{ role: "user", content: "hi" }] })
    })).text()
    for (const secret of [KEY_ID, TOKEN, SECRET]) {
      expect(text).not.toContain(secret)
      expect(quoted).not.toContain(secret)
    }
    expect(quoted).toContain("[redacted]")
  })
})
