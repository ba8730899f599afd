/**
 * The Azure OpenAI kind through the real server and the fake Azure resource (which checks the
 * deployment route, `api-version` and `api-key`, and opens its streams with a chunk without
 * choices): the fake against the openai SDK's AzureOpenAI client first, so it cannot drift from
 * what Azure speaks; then each client format (chat completions, responses, messages) x {a plain
 * answer, a stream ending the way the format ends, a tool call and its result turn, a vendor
 * error}, and embeddings, asserting what the client sees and what reached Azure.
 */
import Anthropic from "@anthropic-ai/sdk"
import OpenAI, { AzureOpenAI } from "openai"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { type FakeAzure, startFakeAzure } from "../support/fake-azure.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { sseData } from "../support/sse.ts"
import { anthropicFor, openaiFor } from "../support/sdk-clients.ts"

const AZURE_KEY = "3f9a1c0e7b2d4a6f8e1c3b5d7f9a2c4e"
const VERSION = "2025-04-01-preview"
const DEPLOYMENT = "gpt-4o-prod"
const EMBEDDER = "text-embedding-3-small"
const CAP = 1000

let fake: FakeAzure
let gw: TestGateway
let key: string

beforeAll(async () => {
  fake = await startFakeAzure({ apiKey: AZURE_KEY, deployments: [DEPLOYMENT, EMBEDDER] })
  gw = await startGateway(
    testConfig({
      workspace: { credits: 1_000_000 },
      limits: { requests_per_minute: 100_000, concurrent_streams: 100 },
      providers: [
        { name: "up-azure", kind: "azure", base_url: fake.url, api_key_env: "TEST_AZURE_KEY", api_version: VERSION },
        { name: "up-azure-wrong", kind: "azure", base_url: fake.url, api_key: "0000000000000000deadbeefdeadbeef", api_version: VERSION }
      ],
      models: [
        { alias: "gpt-az", id: DEPLOYMENT, provider: "up-azure", max_tokens: CAP },
        { alias: "gpt-gone", id: "no-such-deployment", provider: "up-azure", max_tokens: CAP },
        { alias: "gpt-wrong", id: "gpt-4o-elsewhere", provider: "up-azure-wrong", max_tokens: CAP },
        { alias: "embed-az", id: EMBEDDER, provider: "up-azure", endpoints: ["embeddings"] }
      ]
    }, { TEST_AZURE_KEY: AZURE_KEY }),
    { env: { TEST_AZURE_KEY: AZURE_KEY } }
  )
})

afterAll(async () => {
  await gw?.close()
  await fake?.close()
})

beforeEach(async () => {
  fake.reset()
  ;({ key } = await gw.createKey())
})

const openai = () => openaiFor(gw.url, key)
const anthropic = () => anthropicFor(gw.url, key)
const WEATHER = { type: "object", properties: { city: { type: "string" } }, required: ["city"] }

const expectAzureCall = (index: number, path: string) => {
  const request = fake.requests[index]!
  expect(request.path).toBe(`${path}?api-version=${VERSION}`)
  expect(request.headers["api-key"]).toBe(AZURE_KEY)
  expect(request.headers.authorization).toBeUndefined()
}

describe("the fake Azure against the openai SDK's AzureOpenAI", () => {
  const sdk = () => new AzureOpenAI({ endpoint: fake.url, apiKey: AZURE_KEY, apiVersion: VERSION, deployment: DEPLOYMENT, maxRetries: 0 })

  it("chat completions, plain and streamed (the opening chunk has no choices)", async () => {
    fake.chat.enqueue({ kind: "text", text: "Hello there." }, { kind: "text", text: "one two" })
    const completion = await sdk().chat.completions.create({ model: "ignored", messages: [{ role: "user", content: "hi" }] })
    expect(completion.choices[0]!.message.content).toBe("Hello there.")
    expectAzureCall(0, `/openai/deployments/${DEPLOYMENT}/chat/completions`)
    const chunks: Array<OpenAI.Chat.ChatCompletionChunk> = []
    const stream = await sdk().chat.completions.create({ model: "ignored", messages: [{ role: "user", content: "hi" }], stream: true })
    for await (const chunk of stream) chunks.push(chunk)
    expect(chunks[0]!.choices).toEqual([])
    expect(chunks.map((chunk) => chunk.choices[0]?.delta.content ?? "").join("")).toBe("one two")
  })

  it("responses and embeddings; a wrong key and an unknown deployment as Azure answers them", async () => {
    const response = await sdk().responses.create({ model: DEPLOYMENT, input: "hi" })
    expect(response.output_text).toBe("echo: hi")
    expectAzureCall(0, "/openai/responses")
    const embedded = await new AzureOpenAI({ endpoint: fake.url, apiKey: AZURE_KEY, apiVersion: VERSION, deployment: EMBEDDER })
      .embeddings.create({ model: EMBEDDER, input: ["a", "b"] })
    expect(embedded.data).toHaveLength(2)
    const denied = await new AzureOpenAI({ endpoint: fake.url, apiKey: "wrong", apiVersion: VERSION, deployment: DEPLOYMENT, maxRetries: 0 })
      .chat.completions.create({ model: "x", messages: [{ role: "user", content: "hi" }] }).catch((e: unknown) => e)
    expect((denied as InstanceType<typeof OpenAI.APIError>).status).toBe(401)
    const missing = await new AzureOpenAI({ endpoint: fake.url, apiKey: AZURE_KEY, apiVersion: VERSION, deployment: "nope", maxRetries: 0 })
      .chat.completions.create({ model: "x", messages: [{ role: "user", content: "hi" }] }).catch((e: unknown) => e)
    expect((missing as InstanceType<typeof OpenAI.APIError>).status).toBe(404)
    expect((missing as InstanceType<typeof OpenAI.APIError>).code).toBe("DeploymentNotFound")
  })
})

describe("openai SDK on /v1/chat/completions -> Azure", () => {
  it("a plain answer goes to the deployment with api-version and api-key", async () => {
    fake.chat.enqueue({ kind: "text", text: "Paris.", usage: { input: 12, output: 1, cacheRead: 4 } })
    const completion = await openai().chat.completions.create({ model: "gpt-az", messages: [{ role: "user", content: "Capital?" }], max_tokens: 5000 })
    expect(completion.choices[0]!.message.content).toBe("Paris.")
    expect(completion.usage).toMatchObject({ prompt_tokens: 12, completion_tokens: 1, prompt_tokens_details: { cached_tokens: 4 } })
    expectAzureCall(0, `/openai/deployments/${DEPLOYMENT}/chat/completions`)
    expect(fake.requests[0]!.body).toMatchObject({ model: DEPLOYMENT, max_tokens: CAP })
  })

  it("a stream: Azure's opening chunk without choices never reaches the client; it ends with [DONE]", async () => {
    fake.chat.enqueue({ kind: "text", text: "alpha beta gamma" })
    const response = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "gpt-az", messages: [{ role: "user", content: "go" }], stream: true })
    })
    const frames = sseData(await response.text())
    expect(frames.at(-1)).toBe("[DONE]")
    const chunks = frames.slice(0, -1).map((frame) => JSON.parse(frame) as OpenAI.Chat.ChatCompletionChunk)
    expect(chunks.every((chunk) => chunk.choices.length === 1)).toBe(true)
    expect(chunks.map((chunk) => chunk.choices[0]!.delta.content ?? "").join("")).toBe("alpha beta gamma")
  })

  it("a tool call and its result turn", async () => {
    fake.chat.enqueue(
      { kind: "tool_calls", calls: [{ id: "call_az1", name: "get_weather", arguments: { city: "Paris" } }] },
      { kind: "text", text: "Sunny." }
    )
    const tools: Array<OpenAI.Chat.ChatCompletionFunctionTool> = [{ type: "function", function: { name: "get_weather", parameters: WEATHER } }]
    const messages: Array<OpenAI.Chat.ChatCompletionMessageParam> = [{ role: "user", content: "Weather?" }]
    const first = await openai().chat.completions.create({ model: "gpt-az", messages, tools })
    const call = first.choices[0]!.message.tool_calls![0]! as OpenAI.Chat.ChatCompletionMessageFunctionToolCall
    expect(call).toMatchObject({ id: "call_az1", function: { name: "get_weather" } })
    messages.push({ role: "assistant", content: null, tool_calls: [call] }, { role: "tool", tool_call_id: call.id, content: "sunny" })
    const second = await openai().chat.completions.create({ model: "gpt-az", messages, tools })
    expect(second.choices[0]!.message.content).toBe("Sunny.")
    expect(fake.requests[1]!.body!.messages.at(-1)).toEqual({ role: "tool", tool_call_id: "call_az1", content: "sunny" })
  })

  it("vendor errors: a 429 is a 502 with upstream_status; a wrong key a 502 that never echoes it", async () => {
    fake.chat.enqueue({ kind: "error", status: 429 })
    const throttled = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "gpt-az", messages: [{ role: "user", content: "hi" }] })
    })
    expect(throttled.status).toBe(502)
    expect(await throttled.json()).toMatchObject({ error: "provider_error", details: { provider: "up-azure", upstream_status: 429 } })
    const wrong = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "gpt-wrong", messages: [{ role: "user", content: "hi" }] })
    })
    expect(wrong.status).toBe(502)
    const text = await wrong.text()
    expect(text).toContain("Access denied")
    expect(text).not.toContain("deadbeef")
    const gone = await openai().chat.completions.create({ model: "gpt-gone", messages: [{ role: "user", content: "hi" }] }).catch((e: unknown) => e)
    expect((gone as InstanceType<typeof OpenAI.APIError>).status).toBe(502)
  })
})

describe("openai SDK on /v1/responses -> Azure's Responses API", () => {
  it("plain, streamed, a tool turn and an error", async () => {
    const plain = await openai().responses.create({ model: "gpt-az", input: "hello" })
    expect(plain.output_text).toBe("echo: hello")
    expectAzureCall(0, "/openai/responses")
    expect(fake.requests[0]!.body).toMatchObject({ model: DEPLOYMENT, input: "hello" })

    fake.openai.enqueue({ kind: "text", text: "streamed words" })
    const stream = openai().responses.stream({ model: "gpt-az", input: "go" })
    const types: Array<string> = []
    stream.on("event", (event) => types.push(event.type))
    const final = await stream.finalResponse()
    expect(final.output_text).toBe("streamed words")
    expect(types.at(-1)).toBe("response.completed")

    fake.openai.enqueue(
      { kind: "tool_calls", calls: [{ id: "call_r1", name: "get_weather", arguments: { city: "Oslo" } }] },
      { kind: "text", text: "Snow." }
    )
    const tools: Array<OpenAI.Responses.FunctionTool> = [{ type: "function", name: "get_weather", parameters: WEATHER, strict: false }]
    const first = await openai().responses.create({ model: "gpt-az", input: "Weather in Oslo?", tools, store: false })
    const call = first.output.find((item) => item.type === "function_call")!
    expect(call).toMatchObject({ name: "get_weather", call_id: "call_r1" })
    const second = await openai().responses.create({
      model: "gpt-az",
      input: [{ role: "user", content: "Weather in Oslo?" }, call, { type: "function_call_output", call_id: "call_r1", output: "snow" }],
      tools,
      store: false
    })
    expect(second.output_text).toBe("Snow.")

    fake.openai.enqueue({ kind: "error", status: 503 })
    const failed = await openai().responses.create({ model: "gpt-az", input: "x" }).catch((e: unknown) => e)
    expect((failed as InstanceType<typeof OpenAI.APIError>).status).toBe(502)
  })
})

describe("Anthropic SDK on /v1/messages -> Azure", () => {
  it("plain, streamed (message_stop last), a tool turn and an error", async () => {
    fake.chat.enqueue({ kind: "text", text: "Bonjour." })
    const plain = await anthropic().messages.create({ model: "gpt-az", max_tokens: 100, messages: [{ role: "user", content: "hi" }] })
    expect(plain.content).toEqual([{ type: "text", text: "Bonjour." }])
    expectAzureCall(0, `/openai/deployments/${DEPLOYMENT}/chat/completions`)

    fake.chat.enqueue({ kind: "text", text: "one two three" })
    const stream = anthropic().messages.stream({ model: "gpt-az", max_tokens: 100, messages: [{ role: "user", content: "go" }] })
    const types: Array<string> = []
    stream.on("streamEvent", (event) => types.push(event.type))
    const streamed = await stream.finalMessage()
    expect(streamed.content).toEqual([{ type: "text", text: "one two three" }])
    expect(types[0]).toBe("message_start")
    expect(types.slice(-2)).toEqual(["message_delta", "message_stop"])

    fake.chat.enqueue(
      { kind: "tool_calls", calls: [{ id: "call_m1", name: "get_weather", arguments: { city: "Rome" } }] },
      { kind: "text", text: "Warm." }
    )
    const tools: Array<Anthropic.Tool> = [{ name: "get_weather", input_schema: WEATHER as Anthropic.Tool.InputSchema }]
    const messages: Array<Anthropic.MessageParam> = [{ role: "user", content: "Weather in Rome?" }]
    const first = await anthropic().messages.stream({ model: "gpt-az", max_tokens: 100, messages, tools }).finalMessage()
    expect(first.stop_reason).toBe("tool_use")
    // The Messages client sees its own vendor's prefix; the next turn gives the upstream its own id back.
    expect(first.content).toEqual([{ type: "tool_use", id: "toolu_m1", name: "get_weather", input: { city: "Rome" } }])
    messages.push({ role: "assistant", content: first.content }, { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_m1", content: "warm" }] })
    const second = await anthropic().messages.create({ model: "gpt-az", max_tokens: 100, messages, tools })
    expect(second.content).toEqual([{ type: "text", text: "Warm." }])

    fake.chat.enqueue({ kind: "error", status: 500 })
    const failed = await anthropic().messages.create({ model: "gpt-az", max_tokens: 100, messages: [{ role: "user", content: "x" }] }).catch((e: unknown) => e)
    expect((failed as InstanceType<typeof Anthropic.APIError>).status).toBe(502)
  })
})

describe("embeddings -> Azure", () => {
  it("go to the embeddings deployment", async () => {
    const embedded = await openai().embeddings.create({ model: "embed-az", input: ["alpha", "beta"] })
    expect(embedded.data.map((item) => item.index)).toEqual([0, 1])
    expectAzureCall(0, `/openai/deployments/${EMBEDDER}/embeddings`)
  })
})
