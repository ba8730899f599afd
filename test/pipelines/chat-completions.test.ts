/**
 * POST /v1/chat/completions end to end, as a client sees it: the official `openai` SDK against
 * the real gateway, which forwards to a fake upstream speaking OpenAI's exact wire format.
 * Success paths: text and tool calls in both modes, the SDK's stream helpers, what the upstream
 * receives, stream framing, usage chunks, upstream quirks, the built-in echo model and audit.
 */
import OpenAI from "openai"
import { Effect } from "effect"
import { beforeAll, describe, expect, it } from "vitest"
import type { FakeUpstream } from "../support/fake-common.ts"
import { auditFor, awaitAuditOf, startGateway, type TestGateway } from "../support/gateway.ts"
import { OPENAI_KEY, useModelGateway } from "../support/model-gateway.ts"
import { openaiFor } from "../support/sdk-clients.ts"

/** The fixture's upstream key, given to the gateway through the environment. */
const UPSTREAM_KEY = OPENAI_KEY
const MODEL_ID = "gpt-4o-mini-2024-07-18"
const CAP = 50

const weatherTool = {
  type: "function" as const,
  function: {
    name: "get_weather",
    description: "Weather for a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] }
  }
}

/** Everything either side saw, checked at the end for the provider's key. */
const seen: Array<string> = []

let fake: FakeUpstream
let gw: TestGateway
let key: string
let keyId: string
let client: OpenAI

const fixture = useModelGateway({
  gptId: MODEL_ID,
  providers: (_, urls) => [{ name: "fake-openai", kind: "openai", base_url: urls.openai, api_key_env: "FAKE_OPENAI_KEY" }],
  models: () => [
    { alias: "fast", id: MODEL_ID, provider: "fake-openai", max_tokens: CAP },
    { alias: "echo", id: "echo-1", provider: "echo" }
  ],
  env: { FAKE_OPENAI_KEY: UPSTREAM_KEY }
})

beforeAll(async () => {
  gw = fixture.gateway()
  fake = fixture.openaiFake()
  ;({ key, id: keyId } = await gw.createKey())
  client = openaiFor(gw.url, key)
})

const upstreamBody = (i = 0) => fake.requests[i]!.body!

/** A stream's audit record is written when the stream ends, which may be just after the client saw [DONE]. */
const auditOf = async (requestId: string, gateway: TestGateway = gw) => {
  const records = await awaitAuditOf(gateway, requestId)
  seen.push(JSON.stringify(records))
  return records
}

/** POSTs with fetch so framing, headers and bytes are visible exactly as sent. */
const rawChat = async (body: unknown) => {
  const response = await fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
    body: JSON.stringify(body)
  })
  const text = await response.text()
  seen.push(text, JSON.stringify([...response.headers]))
  return { status: response.status, headers: response.headers, text }
}

/** The `data:` payloads of an SSE body, after checking every frame is exactly one data line and a blank line. */
const dataFrames = (text: string): Array<string> => {
  expect(text).toMatch(/^(data: [^\n]*\n\n)+$/)
  return text.split("\n\n").filter((frame) => frame !== "").map((frame) => frame.slice("data: ".length))
}

const chunksOf = (frames: ReadonlyArray<string>) => frames.filter((f) => f !== "[DONE]").map((f) => JSON.parse(f))

describe("non-streaming", () => {
  it("answers text in OpenAI's format, forwards the request with the provider's model id and audits it", async () => {
    fake.enqueue({ kind: "text", text: "Hello there, friend.", usage: { input: 11, output: 7 } })
    const completion = await client.chat.completions.create({
      model: "fast",
      messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Say hello" }],
      temperature: 0.2,
      top_p: 0.9,
      stop: ["\n\n", "END"],
      user: "end-user-42"
    })
    seen.push(JSON.stringify(completion))
    expect(completion.id).toMatch(/^chatcmpl-/)
    expect(completion.object).toBe("chat.completion")
    expect(Number.isInteger(completion.created)).toBe(true)
    expect(completion.choices).toHaveLength(1)
    expect(completion.choices[0]).toMatchObject({
      index: 0,
      message: { role: "assistant", content: "Hello there, friend." },
      finish_reason: "stop"
    })
    expect(completion.usage).toMatchObject({ prompt_tokens: 11, completion_tokens: 7, total_tokens: 18 })
    expect(completion._request_id).toMatch(/^req_/)

    expect(fake.requests).toHaveLength(1)
    const sent = fake.requests[0]!
    expect(sent.headers.authorization).toBe(`Bearer ${UPSTREAM_KEY}`)
    expect(sent.body).toEqual({
      model: MODEL_ID,
      messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Say hello" }],
      temperature: 0.2,
      top_p: 0.9,
      stop: ["\n\n", "END"],
      user: "end-user-42",
      // No limit named: the model's cap, so the operator's ceiling holds (issue 22, finding 2).
      max_completion_tokens: CAP
    })

    const records = await auditOf(completion._request_id!)
    expect(records).toHaveLength(1)
    expect(records[0]).toMatchObject({
      endpoint: "/v1/chat/completions",
      method: "POST",
      key_id: keyId,
      model: MODEL_ID,
      provider: "fake-openai",
      status: 200,
      error: null,
      prompt_tokens: 11,
      completion_tokens: 7,
      stream: false
    })
    expect(records[0]!.duration_ms).toBeGreaterThan(0)
  })

  it("clamps max_tokens and max_completion_tokens above the model's cap and leaves smaller ones alone", async () => {
    await client.chat.completions.create({ model: "fast", messages: [{ role: "user", content: "hi" }], max_tokens: 10_000 })
    await client.chat.completions.create({ model: "fast", messages: [{ role: "user", content: "hi" }], max_completion_tokens: CAP + 1 })
    await client.chat.completions.create({ model: MODEL_ID, messages: [{ role: "user", content: "hi" }], max_tokens: 3 })
    expect(upstreamBody(0).max_tokens).toBe(CAP)
    expect(upstreamBody(1).max_completion_tokens).toBe(CAP)
    expect(upstreamBody(1)).not.toHaveProperty("max_tokens")
    expect(upstreamBody(2).max_tokens).toBe(3)
    expect(upstreamBody(2).model).toBe(MODEL_ID)
  })

  it("passes tools, tool_choice and response_format through, and the tool call back untouched", async () => {
    fake.enqueue({ kind: "tool_calls", calls: [{ id: "call_weather_1", name: "get_weather", arguments: { city: "Paris", days: [1, 2] } }] })
    const completion = await client.chat.completions.create({
      model: "fast",
      messages: [{ role: "user", content: "Weather in Paris? Answer in JSON." }],
      tools: [weatherTool],
      tool_choice: { type: "function", function: { name: "get_weather" } },
      parallel_tool_calls: false,
      response_format: { type: "json_object" }
    })
    expect(upstreamBody().tools).toEqual([weatherTool])
    expect(upstreamBody().tool_choice).toEqual({ type: "function", function: { name: "get_weather" } })
    expect(upstreamBody().parallel_tool_calls).toBe(false)
    expect(upstreamBody().response_format).toEqual({ type: "json_object" })
    const choice = completion.choices[0]!
    expect(choice.finish_reason).toBe("tool_calls")
    expect(choice.message.content).toBeNull()
    expect(choice.message.tool_calls).toEqual([
      { id: "call_weather_1", type: "function", function: { name: "get_weather", arguments: JSON.stringify({ city: "Paris", days: [1, 2] }) } }
    ])
  })

  it("runs a full tool loop: the model asks, the client answers with a tool message, the model replies", async () => {
    fake.enqueue(
      { kind: "tool_calls", calls: [{ id: "call_loop_1", name: "get_weather", arguments: { city: "Oslo" } }] },
      { kind: "text", text: "It is 4 degrees in Oslo." }
    )
    const messages: Array<OpenAI.Chat.ChatCompletionMessageParam> = [{ role: "user", content: "Weather in Oslo?" }]
    const first = await client.chat.completions.create({ model: "fast", messages, tools: [weatherTool] })
    const call = first.choices[0]!.message.tool_calls![0]!
    expect(call.type).toBe("function")
    // What a client does: append the returned message as it came, then the tool's answer.
    messages.push(first.choices[0]!.message)
    messages.push({ role: "tool", tool_call_id: call.id, content: JSON.stringify({ celsius: 4 }) })
    const second = await client.chat.completions.create({ model: "fast", messages, tools: [weatherTool] })
    expect(second.choices[0]!.message.content).toBe("It is 4 degrees in Oslo.")
    expect(second.choices[0]!.finish_reason).toBe("stop")
    // The fake refuses a tool message that does not answer a preceding call, so reaching it proves the order held.
    const forwarded = upstreamBody(1).messages
    expect(forwarded[1]).toMatchObject({ role: "assistant", tool_calls: [{ id: "call_loop_1", type: "function" }] })
    expect(forwarded[2]).toEqual({ role: "tool", tool_call_id: "call_loop_1", content: '{"celsius":4}' })
  })

  it("runs the SDK's runTools helper through the gateway", async () => {
    fake.enqueue(
      { kind: "tool_calls", calls: [{ name: "get_weather", arguments: { city: "Rome" } }] },
      { kind: "text", text: "Sunny in Rome." }
    )
    const calls: Array<unknown> = []
    const runner = client.chat.completions.runTools({
      model: "fast",
      messages: [{ role: "user", content: "Weather in Rome?" }],
      tools: [{
        type: "function",
        function: {
          name: "get_weather",
          description: "Weather for a city",
          parameters: weatherTool.function.parameters,
          parse: JSON.parse,
          function: (args: { city: string }) => {
            calls.push(args)
            return { sky: "clear" }
          }
        }
      }]
    })
    expect(await runner.finalContent()).toBe("Sunny in Rome.")
    expect(calls).toEqual([{ city: "Rome" }])
    expect(fake.requests).toHaveLength(2)
  })
})

describe("streaming", () => {
  it("streams text the SDK assembles, as data-only frames ending with [DONE], and audits it when it ends", async () => {
    fake.enqueue({ kind: "text", text: "one two three four", usage: { input: 5, output: 4 } })
    const { data: stream, request_id: requestId } = await client.chat.completions.create({
      model: "fast",
      messages: [{ role: "user", content: "count" }],
      stream: true,
      user: "end-user-7"
    }).withResponse()
    let text = ""
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? ""
    expect(text).toBe("one two three four")
    expect(upstreamBody().user).toBe("end-user-7")
    expect(upstreamBody().stream).toBe(true)
    // Usage is always requested upstream so the audit trail has tokens, even when the client did not ask.
    expect(upstreamBody().stream_options).toEqual({ include_usage: true })

    expect(requestId).toMatch(/^req_/)
    const records = await auditOf(requestId!)
    expect(records).toHaveLength(1)
    expect(records[0]).toMatchObject({
      model: MODEL_ID,
      provider: "fake-openai",
      status: 200,
      error: null,
      prompt_tokens: 5,
      completion_tokens: 4,
      stream: true,
      key_id: keyId
    })
    expect(records[0]!.duration_ms).toBeGreaterThan(0)
  })

  // When a stream's audit record is written (at its end, not at its 200) is tested in
  // scripted.test.ts, on the scripted provider layer.

  it("frames the stream as OpenAI does: text/event-stream, no id: lines, one blank line after each frame, [DONE] last", async () => {
    fake.enqueue({ kind: "text", text: "alpha beta gamma" })
    const response = await rawChat({ model: "fast", messages: [{ role: "user", content: "go" }], stream: true })
    expect(response.status).toBe(200)
    expect(response.headers.get("content-type")).toMatch(/^text\/event-stream/)
    expect(response.headers.get("x-request-id")).toMatch(/^req_/)
    expect(response.text).not.toMatch(/^id:/m)
    expect(response.text).not.toMatch(/^event:/m)
    expect(response.text).not.toMatch(/^:/m)
    const frames = dataFrames(response.text)
    expect(frames.at(-1)).toBe("[DONE]")
    expect(frames.filter((f) => f === "[DONE]")).toHaveLength(1)
    const chunks = chunksOf(frames)
    expect(chunks.length).toBeGreaterThanOrEqual(4)
    for (const chunk of chunks) {
      expect(chunk.object).toBe("chat.completion.chunk")
      expect(chunk.id).toBe(chunks[0].id)
      expect(chunk.created).toBe(chunks[0].created)
      expect(chunk.choices).toHaveLength(1)
    }
    expect(chunks[0].id).toMatch(/^chatcmpl-/)
    expect(chunks[0].choices[0].delta.role).toBe("assistant")
    expect(chunks.at(-1).choices[0].finish_reason).toBe("stop")
    expect(chunks.map((c) => c.choices[0].delta.content ?? "").join("")).toBe("alpha beta gamma")
  })

  it("sends the usage chunk only when the client asked, once, just before [DONE]", async () => {
    fake.enqueue({ kind: "text", text: "a b c", usage: { input: 3, output: 3 } })
    const without = dataFrames((await rawChat({ model: "fast", messages: [{ role: "user", content: "x" }], stream: true })).text)
    expect(chunksOf(without).some((c) => c.choices.length === 0 || (c.usage !== null && c.usage !== undefined))).toBe(false)

    fake.enqueue({ kind: "text", text: "a b c", usage: { input: 3, output: 3 } })
    const withUsage = dataFrames((await rawChat({
      model: "fast",
      messages: [{ role: "user", content: "x" }],
      stream: true,
      stream_options: { include_usage: true }
    })).text)
    const chunks = chunksOf(withUsage)
    const usageChunks = chunks.filter((c) => c.choices.length === 0)
    expect(usageChunks).toHaveLength(1)
    expect(chunks.at(-1)).toBe(usageChunks[0])
    expect(usageChunks[0].usage).toMatchObject({ prompt_tokens: 3, completion_tokens: 3, total_tokens: 6 })
    expect(withUsage.at(-1)).toBe("[DONE]")
  })

  it("passes streamed tool-call deltas through untouched and the SDK's stream helper assembles them", async () => {
    const args = { city: "Lisbon", unit: "celsius", note: "a longer argument string to split" }
    fake.enqueue({ kind: "tool_calls", calls: [{ id: "call_stream_1", name: "get_weather", arguments: args }] })
    const raw = await rawChat({ model: "fast", messages: [{ role: "user", content: "Weather in Lisbon?" }], stream: true, tools: [weatherTool] })
    const chunks = chunksOf(dataFrames(raw.text))
    const deltas = chunks.flatMap((c) => c.choices[0]?.delta.tool_calls ?? [])
    expect(deltas.length).toBeGreaterThanOrEqual(3)
    expect(deltas[0]).toEqual({ index: 0, id: "call_stream_1", type: "function", function: { name: "get_weather", arguments: "" } })
    for (const later of deltas.slice(1)) expect(Object.keys(later).sort()).toEqual(["function", "index"])
    expect(deltas.map((d) => d.function.arguments).join("")).toBe(JSON.stringify(args))
    expect(chunks.at(-1).choices[0].finish_reason).toBe("tool_calls")
    // The upstream's own fields (here its obfuscation padding) survive: the chunks are forwarded as sent.
    expect(chunks.every((c) => typeof c.obfuscation === "string")).toBe(true)

    fake.enqueue({ kind: "tool_calls", calls: [{ id: "call_stream_2", name: "get_weather", arguments: args }] })
    const stream = client.chat.completions.stream({
      model: "fast",
      messages: [{ role: "user", content: "Weather in Lisbon?" }],
      tools: [weatherTool]
    })
    const final = await stream.finalChatCompletion()
    expect(final.choices[0]!.finish_reason).toBe("tool_calls")
    expect(final.choices[0]!.message.tool_calls).toEqual([
      { id: "call_stream_2", type: "function", function: { name: "get_weather", arguments: JSON.stringify(args) } }
    ])
  })

  it("runs a full tool loop in streaming mode", async () => {
    fake.enqueue(
      { kind: "tool_calls", calls: [{ id: "call_sloop_1", name: "get_weather", arguments: { city: "Bern" } }] },
      { kind: "text", text: "Cold in Bern." }
    )
    const messages: Array<OpenAI.Chat.ChatCompletionMessageParam> = [{ role: "user", content: "Weather in Bern?" }]
    const first = await client.chat.completions.stream({ model: "fast", messages, tools: [weatherTool] }).finalChatCompletion()
    const message = first.choices[0]!.message
    messages.push({ role: "assistant", content: message.content, tool_calls: message.tool_calls! })
    messages.push({ role: "tool", tool_call_id: message.tool_calls![0]!.id, content: "-3" })
    const stream = client.chat.completions.stream({ model: "fast", messages, tools: [weatherTool] })
    const deltas: Array<string> = []
    stream.on("content", (delta) => deltas.push(delta))
    expect(await stream.finalContent()).toBe("Cold in Bern.")
    expect(deltas.join("")).toBe("Cold in Bern.")
    expect(upstreamBody(1).messages[2]).toEqual({ role: "tool", tool_call_id: "call_sloop_1", content: "-3" })
  })

  it("runs the SDK's streaming runTools helper through the gateway", async () => {
    fake.enqueue(
      { kind: "tool_calls", text: "Let me check.", calls: [{ name: "get_weather", arguments: { city: "Kyiv" } }] },
      { kind: "text", text: "Mild in Kyiv." }
    )
    const runner = client.chat.completions.runTools({
      model: "fast",
      stream: true,
      messages: [{ role: "user", content: "Weather in Kyiv?" }],
      tools: [{
        type: "function",
        function: {
          name: "get_weather",
          description: "Weather for a city",
          parameters: weatherTool.function.parameters,
          parse: JSON.parse,
          function: () => ({ sky: "cloudy" })
        }
      }]
    })
    expect(await runner.finalContent()).toBe("Mild in Kyiv.")
    expect(upstreamBody(1).messages.at(-1)).toMatchObject({ role: "tool", content: JSON.stringify({ sky: "cloudy" }) })
  })

  it("tolerates OpenRouter-style `: comment` keep-alives, which never reach the client", async () => {
    fake.enqueue({ kind: "text", text: "kept alive text", keepAlive: true, usage: { input: 2, output: 3 } })
    const raw = await rawChat({ model: "fast", messages: [{ role: "user", content: "x" }], stream: true })
    expect(raw.text).not.toContain("keep-alive")
    const chunks = chunksOf(dataFrames(raw.text))
    expect(chunks.map((c) => c.choices[0].delta.content ?? "").join("")).toBe("kept alive text")

    fake.enqueue({ kind: "text", text: "kept alive text", keepAlive: true })
    const final = await client.chat.completions.stream({ model: "fast", messages: [{ role: "user", content: "x" }] }).finalChatCompletion()
    expect(final.choices[0]!.message.content).toBe("kept alive text")
  })

  it("tolerates an upstream that sends the usage chunk twice, or unasked: the client gets it once, or not at all", async () => {
    fake.enqueue({ kind: "text", text: "double usage", extraUsageChunk: true, usage: { input: 4, output: 2 } })
    const unasked = await rawChat({ model: "fast", messages: [{ role: "user", content: "x" }], stream: true })
    const unaskedChunks = chunksOf(dataFrames(unasked.text))
    expect(unaskedChunks.some((c) => c.choices.length === 0)).toBe(false)
    const records = await auditOf(unasked.headers.get("x-request-id")!)
    expect(records[0]).toMatchObject({ prompt_tokens: 4, completion_tokens: 2, stream: true })

    fake.enqueue({ kind: "text", text: "double usage", extraUsageChunk: true, usage: { input: 4, output: 2 } })
    const stream = await client.chat.completions.create({
      model: "fast",
      messages: [{ role: "user", content: "x" }],
      stream: true,
      stream_options: { include_usage: true }
    })
    const usages: Array<unknown> = []
    let text = ""
    for await (const chunk of stream) {
      if (chunk.usage) usages.push(chunk.usage)
      text += chunk.choices[0]?.delta.content ?? ""
    }
    expect(text).toBe("double usage")
    expect(usages).toHaveLength(1)
    expect(usages[0]).toMatchObject({ prompt_tokens: 4, completion_tokens: 2, total_tokens: 6 })
  })
})

describe("the built-in echo model", () => {
  it("answers in both modes with no upstream at all", async () => {
    // The embedded default: no providers or models configured, nothing listening anywhere.
    const bare = await startGateway()
    try {
      const { key: bareKey } = await bare.createKey()
      const echo = openaiFor(bare.url, bareKey)
      const completion = await echo.chat.completions.create({ model: "echo", messages: [{ role: "user", content: "ping pong ball" }] })
      expect(completion.id).toMatch(/^chatcmpl-/)
      expect(completion.choices[0]!.message.content).toBe("ping pong ball")
      expect(completion.choices[0]!.finish_reason).toBe("stop")
      expect(completion.usage).toMatchObject({ prompt_tokens: 3, completion_tokens: 3, total_tokens: 6 })

      const { data: stream, request_id: requestId } = await echo.chat.completions.create({
        model: "echo",
        messages: [{ role: "user", content: "stream these words back" }],
        stream: true,
        stream_options: { include_usage: true }
      }).withResponse()
      let text = ""
      let usage: unknown
      for await (const chunk of stream) {
        text += chunk.choices[0]?.delta.content ?? ""
        if (chunk.usage) usage = chunk.usage
      }
      expect(text).toBe("stream these words back")
      expect(usage).toMatchObject({ prompt_tokens: 4, completion_tokens: 4 })
      const records = await auditOf(requestId!, bare)
      expect(records[0]).toMatchObject({ model: "echo-1", provider: "echo", status: 200, stream: true, completion_tokens: 4 })
    } finally {
      await bare.close()
    }
  })

  it("honours max_tokens (as words) and stop through the same pipeline as any provider", async () => {
    const completion = await client.chat.completions.create({
      model: "echo",
      messages: [{ role: "user", content: "one two three four five" }],
      max_tokens: 2
    })
    expect(completion.choices[0]!.message.content).toBe("one two ")
    expect(completion.choices[0]!.finish_reason).toBe("length")
    const stopped = await client.chat.completions.stream({
      model: "echo",
      messages: [{ role: "user", content: "keep this STOP drop this" }],
      stop: "STOP"
    }).finalContent()
    expect(stopped).toBe("keep this ")
    expect(fake.requests).toHaveLength(0)
  })
})

describe("secrets", () => {
  it("never shows the provider's key in any response or audit record", async () => {
    const everything = JSON.stringify(await Effect.runPromise(gw.store.audit.queryAudit({ limit: 1000 })))
    expect(seen.length).toBeGreaterThan(5)
    for (const text of [...seen, everything]) {
      expect(text).not.toContain(UPSTREAM_KEY)
      expect(text).not.toContain(key)
    }
  })
})
