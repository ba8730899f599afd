// The fakes are the only stand-in for the real vendors, so they are checked against the official
// SDKs (which must accept every answer) and against the refusals the real APIs are known for.
import Anthropic from "@anthropic-ai/sdk"
import OpenAI from "openai"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { startFakeAnthropic } from "./fake-anthropic.ts"
import type { FakeUpstream, JsonBody } from "./fake-common.ts"
import { startFakeOpenAI } from "./fake-openai.ts"
import { waitFor } from "./wait.ts"
import { sseFrames } from "./sse.ts"
import { anthropicFor } from "./sdk-clients.ts"

const KEY = "sk-test-upstream"

interface RawResponse {
  readonly status: number
  readonly headers: Headers
  readonly text: string
  readonly json: JsonBody
}

const post = async (url: string, body: unknown, headers: Record<string, string>): Promise<RawResponse> => {
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body)
  })
  const text = await response.text()
  let json: JsonBody = {}
  try {
    json = JSON.parse(text) as JsonBody
  } catch {
    // Streams and deliberately broken bodies are inspected through `text`.
  }
  return { status: response.status, headers: response.headers, text, json }
}

const sseEvents = sseFrames

const weatherTool = {
  type: "function" as const,
  function: {
    name: "get_weather",
    description: "Weather for a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] }
  }
}

describe("fake OpenAI", () => {
  let fake: FakeUpstream
  let client: OpenAI
  const chat = (body: unknown, headers: Record<string, string> = { authorization: `Bearer ${KEY}` }) =>
    post(`${fake.url}/chat/completions`, body, headers)

  beforeAll(async () => {
    fake = await startFakeOpenAI({ apiKey: KEY })
    client = new OpenAI({ apiKey: KEY, baseURL: fake.url, maxRetries: 0 })
  })
  afterAll(() => fake.close())
  beforeEach(() => fake.reset())

  it("refuses unknown fields at the top and in messages; accepts name on tool messages", async () => {
    const call = { id: "call_1", type: "function", function: { name: "get_weather", arguments: "{}" } }
    const loop = [
      { role: "user", content: "weather?" },
      { role: "assistant", content: null, tool_calls: [call] },
      { role: "tool", tool_call_id: "call_1", content: "sunny", name: "get_weather" }
    ]
    expect((await chat({ model: "gpt-x", messages: loop, tools: [weatherTool] })).status).toBe(200)
    const unknownTop = await chat({ model: "gpt-x", messages: loop, tools: [weatherTool], reasoning: {} })
    expect(unknownTop.status).toBe(400)
    expect(unknownTop.json.error.message).toBe("Unrecognized request argument supplied: reasoning")
    const unknownInMessage = await chat({ model: "gpt-x", messages: [{ role: "user", content: "x", cache_control: {} }] })
    expect(unknownInMessage.status).toBe(400)
    expect(unknownInMessage.json.error.message).toBe("Additional properties are not allowed ('cache_control' was unexpected) - 'messages[0]'")
    const unknownInPart = await chat({ model: "gpt-x", messages: [{ role: "user", content: [{ type: "text", text: "x", cache_control: {} }] }] })
    expect(unknownInPart.status).toBe(400)
    expect(unknownInPart.json.error.message).toBe("Additional properties are not allowed ('cache_control' was unexpected) - 'messages[0].content[0]'")
  })

  it("echoes the last user message with deterministic usage", async () => {
    const completion = await client.chat.completions.create({
      model: "gpt-4o-mini",
      messages: [
        { role: "system", content: "be brief" },
        { role: "user", content: "hello there" }
      ]
    })
    expect(completion.object).toBe("chat.completion")
    expect(completion.id).toMatch(/^chatcmpl-/)
    expect(completion.model).toBe("gpt-4o-mini")
    expect(completion.choices[0]?.message).toMatchObject({ role: "assistant", content: "echo: hello there" })
    expect(completion.choices[0]?.finish_reason).toBe("stop")
    expect(completion.usage).toMatchObject({
      prompt_tokens: 4,
      completion_tokens: 3,
      total_tokens: 7,
      prompt_tokens_details: { cached_tokens: 0 }
    })
    expect(completion._request_id).toMatch(/^req_/)
    expect(fake.requests).toHaveLength(1)
    expect(fake.requests[0]?.path).toBe("/v1/chat/completions")
    expect(fake.requests[0]?.headers.authorization).toBe(`Bearer ${KEY}`)
    expect(fake.requests[0]?.body?.messages[1].content).toBe("hello there")
  })

  it("streams text in the exact chunk format, usage only when asked", async () => {
    fake.enqueue({ kind: "text", text: "one two three", usage: { input: 10, output: 3, cacheRead: 4 } })
    const withUsage = await chat({
      model: "gpt-4o",
      messages: [{ role: "user", content: "hi" }],
      stream: true,
      stream_options: { include_usage: true }
    })
    expect(withUsage.status).toBe(200)
    expect(withUsage.headers.get("content-type")).toMatch(/^text\/event-stream/)
    expect(withUsage.text).not.toMatch(/^(id|event):/m)
    const events = sseEvents(withUsage.text)
    expect(events.at(-1)?.data).toBe("[DONE]")
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e.data!) as JsonBody)
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1)
    expect(new Set(chunks.map((c) => c.created)).size).toBe(1)
    expect(chunks.every((c) => c.object === "chat.completion.chunk")).toBe(true)
    expect(chunks[0]?.choices[0].delta.role).toBe("assistant")
    const content = chunks.flatMap((c) => c.choices.map((choice: JsonBody) => choice.delta.content ?? "")).join("")
    expect(content).toBe("one two three")
    expect(chunks.filter((c) => c.choices.length === 1 && c.choices[0].delta.content !== undefined).length).toBe(4)
    const usageChunk = chunks.at(-1)!
    expect(usageChunk.choices).toEqual([])
    expect(usageChunk.usage).toMatchObject({ prompt_tokens: 10, completion_tokens: 3, total_tokens: 13 })
    expect(usageChunk.usage.prompt_tokens_details.cached_tokens).toBe(4)
    expect(chunks.slice(0, -1).every((c) => c.usage === null)).toBe(true)
    expect(chunks.at(-2)?.choices[0].finish_reason).toBe("stop")

    const without = await chat({ model: "gpt-4o", messages: [{ role: "user", content: "hi" }], stream: true })
    const plain = sseEvents(without.text).slice(0, -1).map((e) => JSON.parse(e.data!) as JsonBody)
    expect(plain.every((c) => c.usage === null && c.choices.length === 1)).toBe(true)
  })

  it("is accepted by the SDK stream helper, text and parallel tool calls", async () => {
    fake.enqueue(
      { kind: "text", text: "streamed words here" },
      {
        kind: "tool_calls",
        text: "Checking.",
        calls: [
          { id: "call_paris", name: "get_weather", arguments: { city: "Paris" } },
          { name: "get_weather", arguments: { city: "Tokyo", units: "metric" } }
        ]
      }
    )
    const text = await client.chat.completions
      .stream({ model: "gpt-4o", messages: [{ role: "user", content: "x" }], stream_options: { include_usage: true } })
      .finalChatCompletion()
    expect(text.choices[0]?.message.content).toBe("streamed words here")
    expect(text.usage?.completion_tokens).toBe(3)

    const tools = await client.chat.completions
      .stream({ model: "gpt-4o", messages: [{ role: "user", content: "weather?" }], tools: [weatherTool] })
      .finalChatCompletion()
    const message = tools.choices[0]!.message
    expect(tools.choices[0]?.finish_reason).toBe("tool_calls")
    expect(message.content).toBe("Checking.")
    expect(message.tool_calls).toHaveLength(2)
    const [first, second] = message.tool_calls as Array<{ id: string; function: { name: string; arguments: string } }>
    expect(first?.id).toBe("call_paris")
    expect(JSON.parse(first!.function.arguments)).toEqual({ city: "Paris" })
    expect(second?.id).toMatch(/^call_/)
    expect(JSON.parse(second!.function.arguments)).toEqual({ city: "Tokyo", units: "metric" })
  })

  it("streams tool calls the way OpenAI does: identity once, then argument fragments", async () => {
    fake.enqueue({ kind: "tool_calls", calls: [{ name: "get_weather", arguments: { city: "Paris" } }] })
    const raw = await chat({
      model: "gpt-4o",
      messages: [{ role: "user", content: "weather?" }],
      tools: [weatherTool],
      stream: true
    })
    const chunks = sseEvents(raw.text).slice(0, -1).map((e) => JSON.parse(e.data!) as JsonBody)
    const deltas = chunks.map((c) => c.choices[0].delta as JsonBody)
    expect(deltas[0]).toMatchObject({ role: "assistant", content: null })
    expect(deltas[0]?.tool_calls[0]).toMatchObject({
      index: 0,
      type: "function",
      function: { name: "get_weather", arguments: "" }
    })
    const fragments = deltas.slice(1).filter((d) => d.tool_calls !== undefined)
    expect(fragments.length).toBeGreaterThan(1)
    for (const d of fragments) {
      expect(Object.keys(d.tool_calls[0]).sort()).toEqual(["function", "index"])
      expect(Object.keys(d.tool_calls[0].function)).toEqual(["arguments"])
    }
    expect(fragments.map((d) => d.tool_calls[0].function.arguments).join("")).toBe('{"city":"Paris"}')
    expect(chunks.at(-1)?.choices[0].finish_reason).toBe("tool_calls")
  })

  it("answers tool calls without streaming, and accepts a well-formed tool loop", async () => {
    fake.enqueue({ kind: "tool_calls", calls: [{ id: "call_1", name: "get_weather", arguments: { city: "Oslo" } }] })
    const completion = await client.chat.completions.create({
      model: "gpt-4o",
      messages: [{ role: "user", content: "weather?" }],
      tools: [weatherTool]
    })
    expect(completion.choices[0]?.finish_reason).toBe("tool_calls")
    expect(completion.choices[0]?.message.content).toBeNull()
    expect(completion.choices[0]?.message.tool_calls?.[0]).toEqual({
      id: "call_1",
      type: "function",
      function: { name: "get_weather", arguments: '{"city":"Oslo"}' }
    })
    const next = await client.chat.completions.create({
      model: "gpt-4o",
      messages: [
        { role: "user", content: "weather?" },
        completion.choices[0]!.message,
        { role: "tool", tool_call_id: "call_1", content: "sunny" }
      ],
      tools: [weatherTool]
    })
    expect(next.choices[0]?.message.content).toBe("echo: sunny")
  })

  it("keep-alive comments, a duplicate usage chunk and chunk delays still parse", async () => {
    fake.enqueue({ kind: "text", text: "a b", keepAlive: true, extraUsageChunk: true, chunkDelayMs: 5 })
    const raw = await chat({ model: "gpt-4o", messages: [{ role: "user", content: "x" }], stream: true })
    const events = sseEvents(raw.text)
    expect(events.filter((e) => e.comment === ": keep-alive").length).toBeGreaterThan(0)
    expect(events.filter((e) => e.data?.includes('"choices":[]')).length).toBe(2)

    fake.enqueue({ kind: "text", text: "a b", keepAlive: true, extraUsageChunk: true })
    const final = await client.chat.completions
      .stream({ model: "gpt-4o", messages: [{ role: "user", content: "x" }] })
      .finalChatCompletion()
    expect(final.choices[0]?.message.content).toBe("a b")
  })

  it("truncates at max_tokens like a real model, and n yields several choices", async () => {
    fake.enqueue({ kind: "text", text: "one two three four" }, { kind: "text", text: "same" })
    const cut = await client.chat.completions.create({
      model: "gpt-4o",
      messages: [{ role: "user", content: "x" }],
      max_completion_tokens: 2
    })
    expect(cut.choices[0]?.message.content).toBe("one two")
    expect(cut.choices[0]?.finish_reason).toBe("length")
    const many = await client.chat.completions
      .stream({ model: "gpt-4o", messages: [{ role: "user", content: "x" }], n: 2 })
      .finalChatCompletion()
    expect(many.choices.map((c) => c.message.content)).toEqual(["same", "same"])
  })

  it("returns vendor error bodies with retry-after on 429", async () => {
    fake.enqueue({ kind: "error", status: 429 }, { kind: "error", status: 500, message: "boom" })
    const limited = await client.chat.completions
      .create({ model: "gpt-4o", messages: [{ role: "user", content: "x" }] })
      .catch((e: unknown) => e)
    expect(limited).toBeInstanceOf(OpenAI.RateLimitError)
    const rate = limited as InstanceType<typeof OpenAI.RateLimitError>
    expect(rate.headers.get("retry-after")).toBe("1")
    expect(rate.code).toBe("rate_limit_exceeded")
    expect(rate.requestID).toMatch(/^req_/)
    const server = await chat({ model: "gpt-4o", messages: [{ role: "user", content: "x" }] })
    expect(server.status).toBe(500)
    expect(server.json).toEqual({ error: { message: "boom", type: "server_error", param: null, code: null } })
  })

  it("mid-stream errors surface as APIError in the SDK", async () => {
    fake.enqueue({ kind: "mid_stream_error", message: "upstream fell over" })
    const stream = client.chat.completions.stream({ model: "gpt-4o", messages: [{ role: "user", content: "x" }] })
    const error = await stream.finalChatCompletion().catch((e: unknown) => e)
    expect(error).toBeInstanceOf(OpenAI.APIError)
    expect((error as Error).message).toContain("upstream fell over")
  })

  it("hang, delay and stalls: counts open streams and client aborts", async () => {
    fake.enqueue({ kind: "hang" })
    const controller = new AbortController()
    const pending = fetch(`${fake.url}/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "gpt-4o", messages: [{ role: "user", content: "x" }] }),
      signal: controller.signal
    }).catch((e: unknown) => e)
    await waitFor("the fake's state", () => fake.openStreams() === 1)
    controller.abort()
    await pending
    await waitFor("the fake's state", () => fake.openStreams() === 0 && fake.aborted === 1)

    fake.enqueue({ kind: "delay", ms: 60, then: { kind: "text", text: "late" } })
    const started = Date.now()
    const late = await chat({ model: "gpt-4o", messages: [{ role: "user", content: "x" }] })
    expect(Date.now() - started).toBeGreaterThanOrEqual(55)
    expect(late.json.choices[0].message.content).toBe("late")

    fake.enqueue({ kind: "stall_after", chunks: 3, then: "destroy" })
    const broken = await client.chat.completions
      .stream({ model: "gpt-4o", messages: [{ role: "user", content: "x" }] })
      .finalChatCompletion()
      .catch((e: unknown) => e)
    expect(broken).toBeInstanceOf(Error)
    expect(fake.aborted).toBe(1)

    fake.enqueue({ kind: "stall_after", chunks: 2 })
    const stalled = new AbortController()
    const response = await fetch(`${fake.url}/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "gpt-4o", messages: [{ role: "user", content: "x" }], stream: true }),
      signal: stalled.signal
    })
    const reader = response.body!.getReader()
    let received = ""
    while ((received.match(/\n\n/g) ?? []).length < 2) received += new TextDecoder().decode((await reader.read()).value)
    expect(received).toContain('"content":"word0"')
    expect(fake.openStreams()).toBe(1)
    stalled.abort()
    await waitFor("the fake's state", () => fake.openStreams() === 0 && fake.aborted === 2)
  })

  it("setDefault replaces the echo", async () => {
    fake.setDefault((body) => ({ kind: "text", text: `model was ${body.model}` }))
    const completion = await client.chat.completions.create({ model: "m1", messages: [{ role: "user", content: "x" }] })
    expect(completion.choices[0]?.message.content).toBe("model was m1")
  })

  const user = [{ role: "user", content: "hi" }]
  const refusals: Array<[string, unknown, number, string, Record<string, string>?]> = [
    ["missing key", { model: "m", messages: user }, 401, "You didn't provide an API key", {}],
    ["wrong key", { model: "m", messages: user }, 401, "Incorrect API key provided", { authorization: "Bearer sk-nope" }],
    ["unknown parameter", { model: "m", messages: user, top_k: 3 }, 400, "Unrecognized request argument supplied: top_k"],
    ["missing model", { messages: user }, 400, "you must provide a model parameter"],
    ["missing messages", { model: "m" }, 400, "Missing required parameter: 'messages'"],
    ["empty messages", { model: "m", messages: [] }, 400, "empty array"],
    ["stream_options without stream", { model: "m", messages: user, stream_options: { include_usage: true } }, 400, "only allowed when 'stream' is enabled"],
    ["invalid role", { model: "m", messages: [{ role: "human", content: "hi" }] }, 400, "Invalid value: 'human'"],
    ["orphan tool message", { model: "m", messages: [...user, { role: "tool", tool_call_id: "call_x", content: "r" }] }, 400, "must be a response to a preceeding message with 'tool_calls'"],
    [
      "unanswered tool call",
      {
        model: "m",
        messages: [
          ...user,
          { role: "assistant", content: null, tool_calls: [{ id: "call_a", type: "function", function: { name: "f", arguments: "{}" } }] },
          { role: "user", content: "and?" }
        ]
      },
      400,
      "did not have response messages: call_a"
    ],
    [
      "tool message answering another id",
      {
        model: "m",
        messages: [
          ...user,
          { role: "assistant", content: null, tool_calls: [{ id: "call_a", type: "function", function: { name: "f", arguments: "{}" } }] },
          { role: "tool", tool_call_id: "call_b", content: "r" }
        ]
      },
      400,
      "must be a response to a preceeding message"
    ],
    ["temperature above 2", { model: "m", messages: user, temperature: 2.5 }, 400, "Expected a value <= 2"],
    ["n below 1", { model: "m", messages: user, n: 0 }, 400, "Invalid 'n'"],
    ["too many stops", { model: "m", messages: user, stop: ["a", "b", "c", "d", "e"] }, 400, "maximum length 4"],
    ["tool_choice without tools", { model: "m", messages: user, tool_choice: "auto" }, 400, "only allowed when 'tools' are specified"],
    ["json mode without the word", { model: "m", messages: user, response_format: { type: "json_object" } }, 400, "must contain the word 'json'"],
    ["broken JSON", "{nope", 400, "could not parse the JSON body"]
  ]
  it.each(refusals)("refuses: %s", async (_name, body, status, message, headers) => {
    fake.enqueue({ kind: "text", text: "never sent" })
    const response = await chat(body, headers ?? { authorization: `Bearer ${KEY}` })
    expect(response.status).toBe(status)
    expect(response.json.error.message).toContain(message)
    expect(Object.keys(response.json.error).sort()).toEqual(["code", "message", "param", "type"])
    // A refused request never reaches the model, so the queued scenario is still there.
    const next = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "x" }] })
    expect(next.choices[0]?.message.content).toBe("never sent")
  })

  it("refuses unknown paths and unlisted models with 404", async () => {
    const path = await post(`${fake.url}/completions`, {}, { authorization: `Bearer ${KEY}` })
    expect(path.status).toBe(404)
    const restricted = await startFakeOpenAI({ apiKey: KEY, models: ["gpt-4o"] })
    try {
      const missing = await post(`${restricted.url}/chat/completions`, { model: "gpt-9", messages: user }, { authorization: `Bearer ${KEY}` })
      expect(missing.status).toBe(404)
      expect(missing.json.error.code).toBe("model_not_found")
    } finally {
      await restricted.close()
    }
  })
})

describe("fake Anthropic", () => {
  let fake: FakeUpstream
  let client: Anthropic
  const headers = { "x-api-key": KEY, "anthropic-version": "2023-06-01" }
  const messages = (body: unknown, h: Record<string, string> = headers, query = "") =>
    post(`${fake.url}/v1/messages${query}`, body, h)

  beforeAll(async () => {
    fake = await startFakeAnthropic({ apiKey: KEY })
    client = anthropicFor(fake.url, KEY)
  })
  afterAll(() => fake.close())
  beforeEach(() => fake.reset())

  it("echoes the last user message with deterministic usage", async () => {
    const message = await client.messages.create({
      model: "claude-sonnet-4-5",
      max_tokens: 100,
      system: "be brief",
      messages: [{ role: "user", content: "hello there" }]
    })
    expect(message.id).toMatch(/^msg_/)
    expect(message.content).toEqual([{ type: "text", text: "echo: hello there" }])
    expect(message.stop_reason).toBe("end_turn")
    expect(message.usage).toMatchObject({
      input_tokens: 4,
      output_tokens: 3,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0
    })
    expect(message._request_id).toMatch(/^req_/)
    // The SDK major in use sends the 2026-10-21 API version and the key as a Bearer token.
    expect(fake.requests[0]?.headers["anthropic-version"]).toBe("2026-10-21")
    expect(fake.requests[0]?.headers.authorization).toBe(`Bearer ${KEY}`)
  })

  it("keeps the 2023-06-01 sampling parameters within their limits", async () => {
    const ok = await messages({ model: "claude-x", max_tokens: 5, temperature: 0.3, top_k: 5, messages: [{ role: "user", content: "x" }] })
    expect(ok.status).toBe(200)
    expect(ok.json).toMatchObject({ type: "message", role: "assistant", stop_reason: "end_turn", stop_sequence: null })
  })

  it("streams with event lines in the section 2.4 order", async () => {
    fake.enqueue({ kind: "text", text: "one two", usage: { input: 7, cacheRead: 3, cacheWrite: 2, output: 9 } })
    const raw = await messages({ model: "claude-x", max_tokens: 50, stream: true, messages: [{ role: "user", content: "hi" }] })
    expect(raw.headers.get("request-id")).toMatch(/^req_/)
    expect(raw.text).not.toContain("[DONE]")
    const events = sseEvents(raw.text)
    for (const e of events) expect(JSON.parse(e.data!).type).toBe(e.event)
    expect(events.map((e) => e.event)).toEqual([
      "message_start",
      "content_block_start",
      "ping",
      "content_block_delta",
      "content_block_delta",
      "content_block_stop",
      "message_delta",
      "message_stop"
    ])
    const start = JSON.parse(events[0]!.data!).message
    expect(start.usage).toMatchObject({ input_tokens: 7, cache_read_input_tokens: 3, cache_creation_input_tokens: 2 })
    const delta = JSON.parse(events.at(-2)!.data!)
    expect(delta.delta.stop_reason).toBe("end_turn")
    expect(delta.usage.output_tokens).toBe(9)
  })

  it("is accepted by the SDK stream helper, text and parallel tool calls", async () => {
    fake.enqueue(
      { kind: "text", text: "streamed words here" },
      {
        kind: "tool_calls",
        text: "Checking.",
        calls: [
          { id: "toolu_paris", name: "get_weather", arguments: { city: "Paris" } },
          { name: "get_weather", arguments: { city: "Tokyo", units: "metric" } }
        ]
      }
    )
    const text = await client.messages
      .stream({ model: "claude-x", max_tokens: 50, messages: [{ role: "user", content: "x" }] })
      .finalMessage()
    expect(text.content).toEqual([expect.objectContaining({ type: "text", text: "streamed words here" })])
    expect(text.usage.output_tokens).toBe(3)

    const tools = await client.messages
      .stream({
        model: "claude-x",
        max_tokens: 50,
        messages: [{ role: "user", content: "weather?" }],
        tools: [{ name: "get_weather", input_schema: { type: "object", properties: { city: { type: "string" } } } }]
      })
      .finalMessage()
    expect(tools.stop_reason).toBe("tool_use")
    expect(tools.content.map((b) => b.type)).toEqual(["text", "tool_use", "tool_use"])
    expect(tools.content[1]).toMatchObject({ type: "tool_use", id: "toolu_paris", name: "get_weather", input: { city: "Paris" } })
    expect(tools.content[2]).toMatchObject({ type: "tool_use", input: { city: "Tokyo", units: "metric" } })
    expect((tools.content[2] as { id: string }).id).toMatch(/^toolu_[a-zA-Z0-9_-]+$/)
  })

  it("answers tool calls without streaming and accepts merged tool results (?beta=true too)", async () => {
    fake.enqueue({ kind: "tool_calls", calls: [{ id: "toolu_a", name: "f", arguments: {} }, { id: "toolu_b", name: "f", arguments: { x: 1 } }] })
    const tools = [{ name: "f", input_schema: { type: "object" as const } }]
    const first = await client.messages.create({ model: "claude-x", max_tokens: 50, tools, messages: [{ role: "user", content: "go" }] })
    expect(first.stop_reason).toBe("tool_use")
    expect(first.content).toEqual([
      { type: "tool_use", id: "toolu_a", name: "f", input: {} },
      { type: "tool_use", id: "toolu_b", name: "f", input: { x: 1 } }
    ])
    // Results split over two consecutive user messages: the API combines them into one turn.
    const next = await messages(
      {
        model: "claude-x",
        max_tokens: 50,
        tools,
        messages: [
          { role: "user", content: "go" },
          { role: "assistant", content: first.content },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_a", content: "A" }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_b", content: [{ type: "text", text: "B" }] }] }
        ]
      },
      headers,
      "?beta=true"
    )
    expect(next.status).toBe(200)
    expect(next.json.content[0].text).toBe("echo: A\nB")
  })

  it("returns vendor error bodies with retry-after on 429 and 529", async () => {
    fake.enqueue({ kind: "error", status: 429 }, { kind: "error", status: 529 })
    const limited = await client.messages
      .create({ model: "claude-x", max_tokens: 5, messages: [{ role: "user", content: "x" }] })
      .catch((e: unknown) => e)
    expect(limited).toBeInstanceOf(Anthropic.RateLimitError)
    const rate = limited as InstanceType<typeof Anthropic.RateLimitError>
    expect(rate.headers.get("retry-after")).toBe("1")
    expect(rate.error).toMatchObject({ type: "error", error: { type: "rate_limit_error" } })
    const overloaded = await messages({ model: "claude-x", max_tokens: 5, messages: [{ role: "user", content: "x" }] })
    expect(overloaded.status).toBe(529)
    expect(overloaded.headers.get("retry-after")).toBe("1")
    expect(overloaded.json).toMatchObject({ type: "error", error: { type: "overloaded_error", message: "Overloaded" } })
    expect(overloaded.json.request_id).toBe(overloaded.headers.get("request-id"))
  })

  it("mid-stream errors arrive as event: error and fail the SDK stream", async () => {
    fake.enqueue({ kind: "mid_stream_error" })
    const error = await client.messages
      .stream({ model: "claude-x", max_tokens: 50, messages: [{ role: "user", content: "x" }] })
      .finalMessage()
      .catch((e: unknown) => e)
    expect(error).toBeInstanceOf(Anthropic.APIError)
    expect(String((error as Error).message)).toContain("Overloaded")

    fake.enqueue({ kind: "mid_stream_error" })
    const raw = await messages({ model: "claude-x", max_tokens: 50, stream: true, messages: [{ role: "user", content: "x" }] })
    const events = sseEvents(raw.text)
    expect(events.map((e) => e.event)).toEqual(["message_start", "content_block_start", "ping", "content_block_delta", "error"])
  })

  it("hang and stall_after count open streams and aborts", async () => {
    fake.enqueue({ kind: "stall_after", chunks: 4, keepAlive: true })
    const controller = new AbortController()
    const stream = client.messages.stream(
      { model: "claude-x", max_tokens: 50, messages: [{ role: "user", content: "x" }] },
      { signal: controller.signal }
    )
    const firstText = new Promise<string>((resolve) => stream.on("text", (delta) => resolve(delta)))
    expect(await firstText).toBe("word0")
    expect(fake.openStreams()).toBe(1)
    controller.abort()
    await stream.done().catch(() => undefined)
    await waitFor("the fake's state", () => fake.openStreams() === 0 && fake.aborted === 1)

    fake.enqueue({ kind: "stall_after", chunks: 2, then: "destroy" })
    const broken = await client.messages
      .stream({ model: "claude-x", max_tokens: 50, messages: [{ role: "user", content: "x" }] })
      .finalMessage()
      .catch((e: unknown) => e)
    expect(broken).toBeInstanceOf(Error)
    expect(fake.aborted).toBe(1)
  })

  const user = [{ role: "user", content: "hi" }]
  const v2026 = { authorization: `Bearer ${KEY}`, "anthropic-version": "2026-10-21" }
  const toolUse = { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "f", input: {} }] }
  const tools = [{ name: "f", input_schema: { type: "object" } }]
  const refusals: Array<[string, unknown, number, string, Record<string, string>?]> = [
    ["missing x-api-key", { model: "m", max_tokens: 5, messages: user }, 401, "x-api-key header is required", { "anthropic-version": "2023-06-01" }],
    ["wrong bearer token", { model: "m", max_tokens: 5, messages: user }, 401, "invalid bearer token", { authorization: "Bearer nope", "anthropic-version": "2023-06-01" }],
    ["x-api-key wins over bearer", { model: "m", max_tokens: 5, messages: user }, 401, "invalid x-api-key", { "x-api-key": "nope", authorization: `Bearer ${KEY}`, "anthropic-version": "2023-06-01" }],
    ["unknown anthropic-version", { model: "m", max_tokens: 5, messages: user }, 400, "anthropic-version: invalid version", { "x-api-key": KEY, "anthropic-version": "2024-01-01" }],
    ["any temperature on 2026-10-21", { model: "m", max_tokens: 5, messages: user, temperature: 1 }, 400, "temperature: Extra inputs are not permitted", { ...v2026 }],
    ["top_k on 2026-10-21", { model: "m", max_tokens: 5, messages: user, top_k: 5 }, 400, "top_k: Extra inputs are not permitted", { ...v2026 }],
    [
      "document in an assistant message on 2026-10-21",
      { model: "m", max_tokens: 5, messages: [...user, { role: "assistant", content: [{ type: "document", source: { type: "text", media_type: "text/plain", data: "d" } }] }, ...user] },
      400,
      "document blocks are not permitted in assistant messages",
      { ...v2026 }
    ],
    ["wrong key", { model: "m", max_tokens: 5, messages: user }, 401, "invalid x-api-key", { "x-api-key": "nope", "anthropic-version": "2023-06-01" }],
    ["missing anthropic-version", { model: "m", max_tokens: 5, messages: user }, 400, "anthropic-version: header is required", { "x-api-key": KEY }],
    ["missing max_tokens", { model: "m", messages: user }, 400, "max_tokens: Field required"],
    ["temperature above 1", { model: "m", max_tokens: 5, messages: user, temperature: 1.5 }, 400, "temperature: Input should be less than or equal to 1"],
    ["temperature with top_p on 4.5", { model: "claude-sonnet-4-5-20250929", max_tokens: 5, messages: user, temperature: 0.5, top_p: 0.9 }, 400, "cannot both be specified"],
    ["empty text block", { model: "m", max_tokens: 5, messages: [{ role: "user", content: [{ type: "text", text: "" }] }] }, 400, "messages: text content blocks must be non-empty"],
    ["empty content", { model: "m", max_tokens: 5, messages: [{ role: "user", content: "" }] }, 400, "must have non-empty content"],
    // The beta format has system messages inside messages; other roles are still refused.
    ["tool role", { model: "m", max_tokens: 5, messages: [{ role: "tool", content: "x" }, ...user] }, 400, "messages.0.role: Input should be 'user', 'assistant' or 'system'"],
    ["a system message with an unknown field", { model: "m", max_tokens: 5, messages: [{ role: "system", content: "x", name: "n" }, ...user] }, 400, "messages.0.name: Extra inputs are not permitted"],
    ["unknown field", { model: "m", max_tokens: 5, messages: user, n: 1 }, 400, "n: Extra inputs are not permitted"],
    ["tool_use without tools", { model: "m", max_tokens: 5, messages: [...user, toolUse, { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "r" }] }] }, 400, "must define tools"],
    ["tool_use without tool_result", { model: "m", max_tokens: 5, tools, messages: [...user, toolUse, ...user] }, 400, "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_1"],
    ["tool_result without tool_use", { model: "m", max_tokens: 5, tools, messages: [{ role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_9", content: "r" }] }] }, 400, "unexpected `tool_use_id`"],
    ["bad tool_use id", { model: "m", max_tokens: 5, tools, messages: [...user, { role: "assistant", content: [{ type: "tool_use", id: "functions.f:0", name: "f", input: {} }] }] }, 400, "String should match pattern"],
    ["tool_choice without tools", { model: "m", max_tokens: 5, messages: user, tool_choice: { type: "auto" } }, 400, "tool_choice may only be specified while providing tools"],
    ["whitespace stop sequence", { model: "m", max_tokens: 5, messages: user, stop_sequences: [" "] }, 400, "non-whitespace"],
    ["prefill with trailing whitespace", { model: "m", max_tokens: 5, messages: [...user, { role: "assistant", content: "Sure " }] }, 400, "trailing whitespace"]
  ]
  it.each(refusals)("refuses: %s", async (_name, body, status, message, h) => {
    fake.enqueue({ kind: "text", text: "never sent" })
    const response = await messages(body, h ?? headers)
    expect(response.status).toBe(status)
    expect(response.json.type).toBe("error")
    expect(response.json.error.message).toContain(message)
    expect(response.json.request_id).toMatch(/^req_/)
    const next = await client.messages.create({ model: "m", max_tokens: 5, messages: [{ role: "user", content: "x" }] })
    expect(next.content).toEqual([{ type: "text", text: "never sent" }])
  })

  it("accepts system messages inside messages (beta) and refuses what the API refuses", async () => {
    const base = { model: "claude-x", max_tokens: 4000, messages: [{ role: "user", content: "hi" }] }
    const withSystem = await messages({
      ...base,
      messages: [
        { role: "user", content: "hi" },
        { role: "system", content: "<reminder>be brief</reminder>", clear_at: "never" },
        { role: "assistant", content: "ok" },
        { role: "user", content: "again" }
      ]
    })
    expect(withSystem.status).toBe(200)
    const refusals: ReadonlyArray<readonly [unknown, string]> = [
      [{ ...base, thinking: { type: "enabled", budget_tokens: 4000 } }, "`max_tokens` must be greater than `thinking.budget_tokens`"],
      [{ ...base, brand_new: 1 }, "brand_new: Extra inputs are not permitted"],
      [{ ...base, messages: [{ role: "user", content: "hi", name: "x" }] }, "messages.0.name: Extra inputs are not permitted"],
      [{ ...base, messages: [{ role: "user", content: [{ type: "text", text: "hi", name: "x" }] }] }, "messages.0.content.0.text.name: Extra inputs are not permitted"],
      [{ ...base, messages: [{ role: "tool", content: "hi" }] }, "messages.0.role: Input should be 'user', 'assistant' or 'system'"],
      [{ ...base, tools: [{ name: "f", input_schema: { type: "object" }, eager: true }] }, "tools.0.custom.eager: Extra inputs are not permitted"]
    ]
    for (const [body, message] of refusals) {
      const response = await messages(body)
      expect(response.status).toBe(400)
      expect(response.json.error).toEqual({ type: "invalid_request_error", message })
    }
  })

  it("refuses unknown paths with not_found_error", async () => {
    const response = await post(`${fake.url}/v1/complete`, {}, headers)
    expect(response.status).toBe(404)
    expect(response.json.error.type).toBe("not_found_error")
  })
})
