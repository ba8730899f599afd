/**
 * The Gemini kind through the real server and the fake Gemini (which checks `x-goog-api-key`,
 * refuses JSON Schema keywords outside Gemini's subset and, for a Gemini 3 model, a function call
 * sent back without its thoughtSignature): the fake against Google's own SDK (@google/genai)
 * first, so it cannot drift from what Gemini speaks; then each client format (chat completions,
 * responses, messages) x {a plain answer, a stream ending the way the format ends, a tool call
 * and its result turn, a vendor error}, asserting what the client sees and what reached Gemini.
 */
import Anthropic from "@anthropic-ai/sdk"
import { GoogleGenAI } from "@google/genai"
import OpenAI from "openai"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { type FakeGemini, startFakeGemini } from "../support/fake-gemini.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { sseData } from "../support/sse.ts"
import { anthropicFor, openaiFor } from "../support/sdk-clients.ts"

const GEMINI_KEY = "AIzaSyFAKE-gemini-key-0123456789abcdef"
const FLASH = "gemini-2.5-flash"
const PRO3 = "gemini-3-pro-preview"
const EMBED = "gemini-embedding-001"
const CAP = 1000

let fake: FakeGemini
let gw: TestGateway
let key: string

beforeAll(async () => {
  fake = await startFakeGemini({ apiKey: GEMINI_KEY, models: [FLASH, PRO3, EMBED], signing: [PRO3] })
  gw = await startGateway(
    testConfig({
      workspace: { credits: 1_000_000 },
      limits: { requests_per_minute: 100_000, concurrent_streams: 100 },
      providers: [
        { name: "up-gemini", kind: "gemini", base_url: fake.url, api_key_env: "TEST_GEMINI_KEY" },
        { name: "up-gemini-wrong", kind: "gemini", base_url: fake.url, api_key: "AIzaSyWRONG-0000000000000000000000000" }
      ],
      models: [
        { alias: "flash", id: FLASH, provider: "up-gemini", max_tokens: CAP },
        { alias: "pro3", id: PRO3, provider: "up-gemini", max_tokens: CAP },
        { alias: "gone", id: "gemini-0-nothing", provider: "up-gemini", max_tokens: CAP },
        { alias: "wrong", id: "gemini-2.5-pro", provider: "up-gemini-wrong", max_tokens: CAP },
        { alias: "embed", id: EMBED, provider: "up-gemini", endpoints: ["embeddings"] }
      ]
    }, { TEST_GEMINI_KEY: GEMINI_KEY }),
    { env: { TEST_GEMINI_KEY: GEMINI_KEY } }
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
const post = (path: string, body: unknown) =>
  fetch(`${gw.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: JSON.stringify(body) })
const sent = (index = 0) => fake.requests[index]!.body!
/** A JSON Schema as clients write it, with the keywords Gemini refuses. */
const WEATHER = {
  $schema: "http://json-schema.org/draft-07/schema#",
  type: "object",
  properties: { city: { type: "string", description: "City name" }, unit: { type: ["string", "null"], enum: ["c", "f"] } },
  required: ["city"],
  additionalProperties: false
}
const GEMINI_WEATHER = {
  type: "OBJECT",
  properties: { city: { type: "STRING", description: "City name" }, unit: { type: "STRING", nullable: true, enum: ["c", "f"] } },
  required: ["city"]
}

describe("the fake Gemini against @google/genai", () => {
  const sdk = () => new GoogleGenAI({ apiKey: GEMINI_KEY, httpOptions: { baseUrl: fake.url } })

  it("generateContent and its stream, a function call with its signature sent back, countTokens, embeddings", async () => {
    fake.enqueue({ kind: "text", text: "Hello there." }, { kind: "text", text: "one two three" })
    const answer = await sdk().models.generateContent({ model: FLASH, contents: "hi", config: { maxOutputTokens: 50 } })
    expect(answer.text).toBe("Hello there.")
    expect(fake.requests[0]!.path).toBe(`/v1beta/models/${FLASH}:generateContent`)
    let streamed = ""
    for await (const chunk of await sdk().models.generateContentStream({ model: FLASH, contents: "go" })) streamed += chunk.text ?? ""
    expect(streamed).toBe("one two three")
    expect(fake.requests[1]!.path).toBe(`/v1beta/models/${FLASH}:streamGenerateContent?alt=sse`)

    fake.enqueue({ kind: "tool_calls", calls: [{ name: "get_weather", arguments: { city: "Paris" } }] }, { kind: "text", text: "Sunny." })
    const tools = [{ functionDeclarations: [{ name: "get_weather", parameters: GEMINI_WEATHER as never }] }]
    const first = await sdk().models.generateContent({ model: PRO3, contents: "Weather?", config: { tools } })
    expect(first.functionCalls).toEqual([{ name: "get_weather", args: { city: "Paris" } }])
    const modelTurn = first.candidates![0]!.content!
    expect(modelTurn.parts![0]!.thoughtSignature).toBe(fake.signature)
    const second = await sdk().models.generateContent({
      model: PRO3,
      contents: [{ role: "user", parts: [{ text: "Weather?" }] }, modelTurn, { role: "user", parts: [{ functionResponse: { name: "get_weather", response: { result: "sunny" } } }] }],
      config: { tools }
    })
    expect(second.text).toBe("Sunny.")

    const counted = await sdk().models.countTokens({ model: FLASH, contents: "three little words" })
    expect(counted.totalTokens).toBe(3)
    const embedded = await sdk().models.embedContent({ model: EMBED, contents: ["a", "bb"], config: { outputDimensionality: 4 } })
    expect(embedded.embeddings!.map((e) => e.values!.length)).toEqual([4, 4])
  })

  it("refuses what Gemini refuses: a wrong key, JSON Schema keywords, an unsigned Gemini 3 call", async () => {
    const wrong = await new GoogleGenAI({ apiKey: "nope", httpOptions: { baseUrl: fake.url } }).models.generateContent({ model: FLASH, contents: "hi" }).catch((e: unknown) => e)
    expect(String(wrong)).toContain("API key not valid")
    // Sent as JSON as is (the SDK moves a JSON Schema it recognises out of `parameters` itself).
    const schema = await fetch(`${fake.url}/v1beta/models/${FLASH}:generateContent`, {
      method: "POST",
      headers: { "x-goog-api-key": GEMINI_KEY, "content-type": "application/json" },
      body: JSON.stringify({ contents: [{ role: "user", parts: [{ text: "hi" }] }], tools: [{ functionDeclarations: [{ name: "f", parameters: WEATHER }] }] })
    })
    expect(schema.status).toBe(400)
    expect(await schema.text()).toContain('Unknown name \\"$schema\\"')
    const unsigned = await sdk().models.generateContent({
      model: PRO3,
      contents: [
        { role: "user", parts: [{ text: "Weather?" }] },
        { role: "model", parts: [{ functionCall: { name: "get_weather", args: {} } }] },
        { role: "user", parts: [{ functionResponse: { name: "get_weather", response: { result: "x" } } }] }
      ]
    }).catch((e: unknown) => e)
    expect(String(unsigned)).toContain("thought_signature")
  })
})

describe("openai SDK on /v1/chat/completions -> Gemini", () => {
  it("a plain answer: the generateContent request field by field, usage with cached tokens", async () => {
    fake.enqueue({ kind: "text", text: "Paris.", usage: { input: 20, output: 2, cacheRead: 8 } })
    const completion = await openai().chat.completions.create({
      model: "flash",
      messages: [{ role: "system", content: "Be terse." }, { role: "user", content: "Capital of France?" }],
      temperature: 0.2,
      top_p: 0.9,
      stop: ["END"],
      max_tokens: 5000,
      reasoning_effort: "low"
    })
    expect(completion.choices[0]!.message.content).toBe("Paris.")
    expect(completion.choices[0]!.finish_reason).toBe("stop")
    expect(completion.model).toBe("flash")
    expect(completion.usage).toMatchObject({ prompt_tokens: 20, completion_tokens: 2, prompt_tokens_details: { cached_tokens: 8 } })
    expect(fake.requests[0]!.headers["x-goog-api-key"]).toBe(GEMINI_KEY)
    expect(sent()).toEqual({
      contents: [{ role: "user", parts: [{ text: "Capital of France?" }] }],
      systemInstruction: { parts: [{ text: "Be terse." }] },
      generationConfig: { maxOutputTokens: CAP, temperature: 0.2, topP: 0.9, stopSequences: ["END"], thinkingConfig: { thinkingBudget: 1024 } }
    })
  })

  it("a stream ends with a finish chunk, the usage chunk and [DONE]", async () => {
    fake.enqueue({ kind: "text", text: "alpha beta gamma", usage: { input: 7, output: 3 } })
    const response = await post("/v1/chat/completions", { model: "flash", messages: [{ role: "user", content: "go" }], stream: true, stream_options: { include_usage: true } })
    expect(response.status).toBe(200)
    const frames = sseData(await response.text())
    expect(frames.at(-1)).toBe("[DONE]")
    const chunks = frames.slice(0, -1).map((frame) => JSON.parse(frame) as OpenAI.Chat.ChatCompletionChunk)
    expect(chunks.map((chunk) => chunk.choices[0]?.delta.content ?? "").join("")).toBe("alpha beta gamma")
    expect(chunks.filter((chunk) => chunk.choices[0]?.finish_reason != null).map((chunk) => chunk.choices[0]!.finish_reason)).toEqual(["stop"])
    expect(chunks.at(-1)!.usage).toMatchObject({ prompt_tokens: 7, completion_tokens: 3 })
  })

  it("a tool call and its result turn on Gemini 3: schema keywords stripped, the thoughtSignature back with the call (streamed and not)", async () => {
    for (const streamed of [false, true]) {
      fake.reset()
      fake.enqueue({ kind: "tool_calls", calls: [{ name: "get_weather", arguments: { city: "Paris" } }] }, { kind: "text", text: "Sunny in Paris." })
      const tools: Array<OpenAI.Chat.ChatCompletionFunctionTool> = [{ type: "function", function: { name: "get_weather", description: "Weather", parameters: WEATHER } }]
      const messages: Array<OpenAI.Chat.ChatCompletionMessageParam> = [{ role: "user", content: "Weather in Paris?" }]
      const ask = (params: OpenAI.Chat.ChatCompletionCreateParamsNonStreaming) =>
        streamed ? openai().chat.completions.stream(params as never).finalChatCompletion() : openai().chat.completions.create(params)
      const first = await ask({ model: "pro3", messages, tools, tool_choice: "required" })
      expect(first.choices[0]!.finish_reason).toBe("tool_calls")
      const call = first.choices[0]!.message.tool_calls![0]! as OpenAI.Chat.ChatCompletionMessageFunctionToolCall
      expect(call.function.name).toBe("get_weather")
      expect(JSON.parse(call.function.arguments)).toEqual({ city: "Paris" })
      expect(call.id).toMatch(/^call_[A-Za-z0-9]{12}_ts_/)
      expect(sent(0).tools).toEqual([{ functionDeclarations: [{ name: "get_weather", description: "Weather", parameters: GEMINI_WEATHER }] }])
      expect(sent(0).toolConfig).toEqual({ functionCallingConfig: { mode: "ANY" } })
      messages.push({ role: "assistant", content: null, tool_calls: [{ id: call.id, type: "function", function: call.function }] }, { role: "tool", tool_call_id: call.id, content: "sunny" })
      const second = await ask({ model: "pro3", messages, tools })
      expect(second.choices[0]!.message.content).toBe("Sunny in Paris.")
      expect(sent(1).contents).toEqual([
        { role: "user", parts: [{ text: "Weather in Paris?" }] },
        { role: "model", parts: [{ functionCall: { name: "get_weather", args: { city: "Paris" } }, thoughtSignature: fake.signature }] },
        { role: "user", parts: [{ functionResponse: { name: "get_weather", response: { result: "sunny" } } }] }
      ])
    }
  })

  it("JSON mode with a schema: responseMimeType and the schema in Gemini's subset", async () => {
    fake.enqueue({ kind: "text", text: '{"city":"Paris"}' })
    const completion = await openai().chat.completions.create({
      model: "flash",
      messages: [{ role: "user", content: "City?" }],
      response_format: { type: "json_schema", json_schema: { name: "city", schema: WEATHER } }
    })
    expect(JSON.parse(completion.choices[0]!.message.content!)).toEqual({ city: "Paris" })
    expect(sent().generationConfig).toMatchObject({ responseMimeType: "application/json", responseSchema: GEMINI_WEATHER })
  })

  it("vendor errors: 429 a 502 with upstream_status, a refusal a 400 with Gemini's message, a bad key a 502 never echoing it, an unknown model a 404", async () => {
    fake.enqueue({ kind: "error", status: 429 })
    const throttled = await post("/v1/chat/completions", { model: "flash", messages: [{ role: "user", content: "hi" }] })
    expect(throttled.status).toBe(502)
    expect(await throttled.json()).toMatchObject({ error: "provider_error", details: { provider: "up-gemini", upstream_status: 429, upstream_error: { type: "RESOURCE_EXHAUSTED" } } })
    fake.enqueue({ kind: "error", status: 400, message: "The input token count exceeds the maximum number of tokens allowed." })
    const refused = await post("/v1/chat/completions", { model: "flash", messages: [{ role: "user", content: "hi" }], stream: true })
    expect(refused.status).toBe(400)
    expect(await refused.json()).toMatchObject({ error: "validation_failed", message: expect.stringContaining("exceeds the maximum"), details: { upstream_status: 400 } })
    const wrong = await post("/v1/chat/completions", { model: "wrong", messages: [{ role: "user", content: "hi" }] })
    expect(wrong.status).toBe(502)
    const wrongText = await wrong.text()
    expect(wrongText).toContain("API key not valid")
    expect(wrongText).not.toContain("AIzaSyWRONG")
    const gone = await post("/v1/chat/completions", { model: "gone", messages: [{ role: "user", content: "hi" }] })
    expect(gone.status).toBe(404)
  })

  it("an error inside the stream: the envelope in-band, then [DONE]", async () => {
    fake.enqueue({ kind: "mid_stream_error", text: "alpha beta gamma", afterChunks: 2, message: "The model is overloaded." })
    const response = await post("/v1/chat/completions", { model: "flash", messages: [{ role: "user", content: "hi" }], stream: true })
    const frames = sseData(await response.text())
    expect(frames.at(-1)).toBe("[DONE]")
    expect(JSON.parse(frames.at(-2)!)).toMatchObject({ error: "provider_error", details: { upstream_error: { type: "UNAVAILABLE", message: "The model is overloaded." } } })
  })
})

describe("openai SDK on /v1/responses -> Gemini", () => {
  it("plain, streamed (response.completed last), a tool turn with its signature, an error", async () => {
    fake.enqueue({ kind: "text", text: "Bonjour." })
    const plain = await openai().responses.create({ model: "flash", input: "hello", instructions: "Be brief." })
    expect(plain.output_text).toBe("Bonjour.")
    expect(sent().systemInstruction).toEqual({ parts: [{ text: "Be brief." }] })

    fake.enqueue({ kind: "text", text: "streamed words here" })
    const stream = openai().responses.stream({ model: "flash", input: "go" })
    const types: Array<string> = []
    stream.on("event", (event) => types.push(event.type))
    expect((await stream.finalResponse()).output_text).toBe("streamed words here")
    expect(types.at(-1)).toBe("response.completed")

    fake.reset()
    fake.enqueue({ kind: "tool_calls", calls: [{ name: "get_weather", arguments: { city: "Oslo" } }] }, { kind: "text", text: "Snow." })
    const tools: Array<OpenAI.Responses.FunctionTool> = [{ type: "function", name: "get_weather", parameters: WEATHER, strict: true }]
    const first = await openai().responses.create({ model: "pro3", input: "Weather in Oslo?", tools })
    const call = first.output.find((item) => item.type === "function_call")!
    expect(call).toMatchObject({ name: "get_weather", arguments: JSON.stringify({ city: "Oslo" }) })
    const second = await openai().responses.create({
      model: "pro3",
      input: [{ role: "user", content: "Weather in Oslo?" }, call, { type: "function_call_output", call_id: call.call_id, output: "snow" }],
      tools
    })
    expect(second.output_text).toBe("Snow.")
    expect(sent(1).contents[1]).toEqual({ role: "model", parts: [{ functionCall: { name: "get_weather", args: { city: "Oslo" } }, thoughtSignature: fake.signature }] })

    fake.enqueue({ kind: "error", status: 503 })
    const failed = await openai().responses.create({ model: "flash", input: "x" }).catch((e: unknown) => e)
    expect((failed as InstanceType<typeof OpenAI.APIError>).status).toBe(502)
  })
})

describe("Anthropic SDK on /v1/messages -> Gemini", () => {
  it("plain, streamed (message_stop last), a tool turn with its signature, an error", async () => {
    fake.enqueue({ kind: "text", text: "Ciao.", usage: { input: 9, output: 1 } })
    const plain = await anthropic().messages.create({ model: "flash", max_tokens: 100, system: "Be brief.", messages: [{ role: "user", content: "hi" }] })
    expect(plain).toMatchObject({ content: [{ type: "text", text: "Ciao." }], stop_reason: "end_turn", usage: { input_tokens: 9, output_tokens: 1 } })
    expect(sent()).toMatchObject({ systemInstruction: { parts: [{ text: "Be brief." }] }, generationConfig: { maxOutputTokens: 100 } })

    fake.enqueue({ kind: "text", text: "one two three", usage: { input: 4, output: 3 } })
    const stream = anthropic().messages.stream({ model: "flash", max_tokens: 100, messages: [{ role: "user", content: "go" }] })
    const types: Array<string> = []
    stream.on("streamEvent", (event) => types.push(event.type))
    const streamed = await stream.finalMessage()
    expect(streamed.content).toEqual([{ type: "text", text: "one two three" }])
    expect(streamed.usage).toMatchObject({ input_tokens: 4, output_tokens: 3 })
    expect(types[0]).toBe("message_start")
    expect(types.slice(-2)).toEqual(["message_delta", "message_stop"])

    fake.reset()
    fake.enqueue({ kind: "tool_calls", calls: [{ name: "get_weather", arguments: { city: "Rome" } }] }, { kind: "text", text: "Warm." })
    const tools: Array<Anthropic.Tool> = [{ name: "get_weather", input_schema: WEATHER as Anthropic.Tool.InputSchema }]
    const messages: Array<Anthropic.MessageParam> = [{ role: "user", content: "Weather in Rome?" }]
    const first = await anthropic().messages.stream({ model: "pro3", max_tokens: 100, messages, tools }).finalMessage()
    expect(first.stop_reason).toBe("tool_use")
    const use = first.content.find((block) => block.type === "tool_use")!
    expect(use).toMatchObject({ name: "get_weather", input: { city: "Rome" } })
    messages.push({ role: "assistant", content: first.content }, { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "warm" }] })
    const second = await anthropic().messages.create({ model: "pro3", max_tokens: 100, messages, tools })
    expect(second.content).toEqual([{ type: "text", text: "Warm." }])
    expect(sent(1).contents[1].parts[0].thoughtSignature).toBe(fake.signature)

    fake.enqueue({ kind: "error", status: 500 })
    const failed = await anthropic().messages.create({ model: "flash", max_tokens: 100, messages: [{ role: "user", content: "x" }] }).catch((e: unknown) => e)
    expect((failed as InstanceType<typeof Anthropic.APIError>).status).toBe(502)
  })
})

describe("count_tokens -> Gemini", () => {
  it("counts through :countTokens with the translated request", async () => {
    const counted = await anthropic().messages.countTokens({ model: "flash", system: "Be brief.", messages: [{ role: "user", content: "three little words" }] })
    // The fake counts words: the system prompt's two and the message's three.
    expect(counted.input_tokens).toBe(5)
    expect(fake.requests[0]!.path).toBe(`/v1beta/models/${FLASH}:countTokens`)
    expect(sent().generateContentRequest).toMatchObject({ model: `models/${FLASH}`, contents: [{ role: "user", parts: [{ text: "three little words" }] }] })
  })
})

describe("embeddings -> Gemini", () => {
  it("go up as :batchEmbedContents, in input order, with the dimensions asked for", async () => {
    const embedded = await openai().embeddings.create({ model: "embed", input: ["alpha", "beta gamma"], dimensions: 4 })
    expect(embedded.data.map((item) => [item.index, item.embedding.length])).toEqual([[0, 4], [1, 4]])
    expect(fake.requests[0]!.path).toBe(`/v1beta/models/${EMBED}:batchEmbedContents`)
    expect(sent().requests).toEqual([
      { model: `models/${EMBED}`, content: { parts: [{ text: "alpha" }] }, outputDimensionality: 4 },
      { model: `models/${EMBED}`, content: { parts: [{ text: "beta gamma" }] }, outputDimensionality: 4 }
    ])
    expect(embedded.usage.prompt_tokens).toBeGreaterThan(0)
  })
})

