import { describe, expect, it } from "vitest"
import {
  type AnthropicContentBlock,
  type AnthropicResponse,
  anthropicResponseToChat,
  type AnthropicStreamEvent,
  AnthropicToChatStream,
  type AnthropicToChatStreamOptions,
  type ChatChunk,
  type JsonMode
} from "../../src/wire/index.ts"
import { assembleChat } from "./sdk.ts"

const options: AnthropicToChatStreamOptions = { id: "chatcmpl-abc", model: "smart", created: 1700000000, includeUsage: true }
const usage = { input_tokens: 12, output_tokens: 1, cache_creation_input_tokens: 100, cache_read_input_tokens: 1000 }

const messageStart = (): AnthropicStreamEvent => ({
  type: "message_start",
  message: {
    id: "msg_01",
    type: "message",
    role: "assistant",
    model: "claude-sonnet-4-5",
    content: [],
    stop_reason: null,
    stop_sequence: null,
    usage
  }
})
const start = (index: number, content_block: AnthropicContentBlock): AnthropicStreamEvent => ({ type: "content_block_start", index, content_block })
const text = (index: number, value: string): AnthropicStreamEvent => ({ type: "content_block_delta", index, delta: { type: "text_delta", text: value } })
const json = (index: number, partial_json: string): AnthropicStreamEvent => ({ type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json } })
const stop = (index: number): AnthropicStreamEvent => ({ type: "content_block_stop", index })
const messageDelta = (stop_reason: AnthropicResponse["stop_reason"], output_tokens = 40): AnthropicStreamEvent => ({
  type: "message_delta",
  delta: { stop_reason, stop_sequence: null },
  usage: { output_tokens }
})
const ping: AnthropicStreamEvent = { type: "ping" }
const messageStop: AnthropicStreamEvent = { type: "message_stop" }

const run = (events: ReadonlyArray<AnthropicStreamEvent>, opts: Partial<AnthropicToChatStreamOptions> = {}) => {
  const machine = new AnthropicToChatStream({ ...options, ...opts })
  const chunks = [...events.flatMap((event) => machine.push(event)), ...machine.end()]
  return { machine, chunks }
}

const deltas = (chunks: ReadonlyArray<ChatChunk>) => chunks.map((chunk) => chunk.choices[0] === undefined ? { usage: chunk.usage } : { delta: chunk.choices[0].delta, finish: chunk.choices[0].finish_reason })

/** What every client may rely on, whatever the upstream did. */
const expectChatInvariants = (chunks: ReadonlyArray<ChatChunk>, includeUsage: boolean) => {
  expect(chunks.length).toBeGreaterThan(0)
  for (const chunk of chunks) {
    expect(chunk).toMatchObject({ id: options.id, created: options.created, model: options.model, object: "chat.completion.chunk" })
    if (includeUsage) expect(chunk).toHaveProperty("usage")
    else expect(chunk).not.toHaveProperty("usage")
  }
  expect(chunks[0]?.choices[0]?.delta.role).toBe("assistant")
  expect(chunks.slice(1).every((chunk) => chunk.choices[0]?.delta.role === undefined)).toBe(true)
  const finishes = chunks.filter((chunk) => chunk.choices[0]?.finish_reason != null)
  expect(finishes).toHaveLength(1)
  const seen = new Set<number>()
  for (const chunk of chunks) {
    for (const call of chunk.choices[0]?.delta.tool_calls ?? []) {
      const index = call.index ?? -1
      if (seen.has(index)) expect(call).toEqual({ index, function: { arguments: call.function?.arguments } })
      else expect(call).toMatchObject({ type: "function", id: expect.any(String), function: { name: expect.any(String) } })
      seen.add(index)
    }
  }
  if (includeUsage) {
    expect(chunks.at(-1)?.choices).toEqual([])
    expect(chunks.at(-1)?.usage).not.toBeNull()
  }
}

const response = (content: AnthropicResponse["content"], stop_reason: AnthropicResponse["stop_reason"], output_tokens = 40): AnthropicResponse => ({
  id: "msg_01",
  type: "message",
  role: "assistant",
  model: "claude-sonnet-4-5",
  content,
  stop_reason,
  stop_sequence: null,
  usage: { ...usage, output_tokens }
})

/** The SDK-assembled stream must equal the non-streaming translation of the same answer. */
const expectSameAsNonStreaming = async (chunks: ReadonlyArray<ChatChunk>, whole: AnthropicResponse, jsonMode?: JsonMode) => {
  const assembled = await assembleChat(chunks)
  const expected = anthropicResponseToChat(whole, { model: options.model, id: options.id, created: options.created, jsonMode })
  const choice = assembled.choices[0]
  const expectedChoice = expected.choices[0]
  expect(assembled.id).toBe(expected.id)
  expect(choice?.finish_reason).toBe(expectedChoice?.finish_reason)
  expect(choice?.message.content).toBe(expectedChoice?.message.content)
  // Streamed arguments are the model's own JSON text; compare them as JSON.
  const parsed = (calls: ReadonlyArray<{ id: string; function: { name: string; arguments: string } }> | undefined) =>
    (calls ?? []).map((call) => ({ id: call.id, name: call.function.name, arguments: JSON.parse(call.function.arguments) }))
  expect(parsed(choice?.message.tool_calls as never)).toEqual(parsed(expectedChoice?.message.tool_calls))
  expect(assembled.usage).toEqual(expected.usage)
}

describe("AnthropicToChatStream", () => {
  it("streams text: role first, content deltas, finish, then the usage chunk", async () => {
    const events = [messageStart(), start(0, { type: "text", text: "" }), ping, text(0, "Hel"), text(0, "lo"), stop(0), messageDelta("end_turn"), messageStop]
    const { machine, chunks } = run(events)
    expect(deltas(chunks)).toEqual([
      { delta: { role: "assistant", content: "Hel" }, finish: null },
      { delta: { content: "lo" }, finish: null },
      { delta: {}, finish: "stop" },
      {
        usage: {
          prompt_tokens: 1112,
          completion_tokens: 40,
          total_tokens: 1152,
          prompt_tokens_details: { cached_tokens: 1000, cache_write_tokens: 100 }
        }
      }
    ])
    expectChatInvariants(chunks, true)
    expect(machine.usage()).toEqual({ input_tokens: 12, output_tokens: 40, cache_read_tokens: 1000, cache_write_tokens: 100 })
    expect(machine.completed()).toBe(true)
    await expectSameAsNonStreaming(chunks, response([{ type: "text", text: "Hello" }], "end_turn"))
  })

  it("streams text then two tool calls with their own index counter", async () => {
    const events = [
      messageStart(),
      start(0, { type: "text", text: "" }),
      text(0, "Checking."),
      stop(0),
      start(1, { type: "tool_use", id: "toolu_A", name: "weather", input: {} }),
      json(1, ""),
      json(1, "{\"city\":"),
      json(1, "\"Paris\"}"),
      stop(1),
      start(2, { type: "tool_use", id: "toolu_B", name: "weather", input: {} }),
      json(2, "{\"city\":\"Rome\"}"),
      stop(2),
      messageDelta("tool_use"),
      messageStop
    ]
    const { chunks } = run(events)
    expect(deltas(chunks).slice(0, -1)).toEqual([
      { delta: { role: "assistant", content: "Checking." }, finish: null },
      { delta: { tool_calls: [{ index: 0, id: "call_A", type: "function", function: { name: "weather", arguments: "" } }] }, finish: null },
      { delta: { tool_calls: [{ index: 0, function: { arguments: "{\"city\":" } }] }, finish: null },
      { delta: { tool_calls: [{ index: 0, function: { arguments: "\"Paris\"}" } }] }, finish: null },
      { delta: { tool_calls: [{ index: 1, id: "call_B", type: "function", function: { name: "weather", arguments: "" } }] }, finish: null },
      { delta: { tool_calls: [{ index: 1, function: { arguments: "{\"city\":\"Rome\"}" } }] }, finish: null },
      { delta: {}, finish: "tool_calls" }
    ])
    expectChatInvariants(chunks, true)
    await expectSameAsNonStreaming(chunks, response([
      { type: "text", text: "Checking." },
      { type: "tool_use", id: "toolu_A", name: "weather", input: { city: "Paris" } },
      { type: "tool_use", id: "toolu_B", name: "weather", input: { city: "Rome" } }
    ], "tool_use"))
  })

  it("sends {} for a tool called without arguments", async () => {
    const events = [messageStart(), start(0, { type: "tool_use", id: "toolu_1", name: "now", input: {} }), json(0, ""), stop(0), messageDelta("tool_use"), messageStop]
    const { chunks } = run(events)
    expect(deltas(chunks).slice(0, -2)).toEqual([
      {
        delta: { role: "assistant", content: null, tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "now", arguments: "" } }] },
        finish: null
      },
      { delta: { tool_calls: [{ index: 0, function: { arguments: "{}" } }] }, finish: null }
    ])
    await expectSameAsNonStreaming(chunks, response([{ type: "tool_use", id: "toolu_1", name: "now", input: {} }], "tool_use"))
  })

  it("streams the JSON-mode tool as content with finish stop", async () => {
    const mode: JsonMode = { tool: "json_response", wrapped: false }
    const events = [
      messageStart(),
      start(0, { type: "tool_use", id: "toolu_1", name: "json_response", input: {} }),
      json(0, ""),
      json(0, "{\"answer\":"),
      json(0, "42}"),
      stop(0),
      messageDelta("tool_use"),
      messageStop
    ]
    const { chunks } = run(events, { jsonMode: mode })
    expect(deltas(chunks).slice(0, -1)).toEqual([
      { delta: { role: "assistant", content: "{\"answer\":" }, finish: null },
      { delta: { content: "42}" }, finish: null },
      { delta: {}, finish: "stop" }
    ])
    expectChatInvariants(chunks, true)
    await expectSameAsNonStreaming(chunks, response([{ type: "tool_use", id: "toolu_1", name: "json_response", input: { answer: 42 } }], "tool_use"), mode)
  })

  it("sends a wrapped JSON-mode answer in one piece, unwrapped", async () => {
    const mode: JsonMode = { tool: "json_response", wrapped: true }
    const events = [
      messageStart(),
      start(0, { type: "tool_use", id: "toolu_1", name: "json_response", input: {} }),
      json(0, "{\"values\":"),
      json(0, "[1,2]}"),
      stop(0),
      messageDelta("tool_use"),
      messageStop
    ]
    const { chunks } = run(events, { jsonMode: mode })
    expect(deltas(chunks).slice(0, -2)).toEqual([{ delta: { role: "assistant", content: "[1,2]" }, finish: null }])
    await expectSameAsNonStreaming(chunks, response([{ type: "tool_use", id: "toolu_1", name: "json_response", input: { values: [1, 2] } }], "tool_use"), mode)
  })

  it("streams thinking as reasoning_content (signature dropped) and maps max_tokens to length", async () => {
    const events = [
      messageStart(),
      start(0, { type: "thinking", thinking: "", signature: "" }),
      { type: "content_block_delta", index: 0, delta: { type: "thinking_delta", thinking: "Let me think" } } as AnthropicStreamEvent,
      { type: "content_block_delta", index: 0, delta: { type: "signature_delta", signature: "sig" } } as AnthropicStreamEvent,
      stop(0),
      start(1, { type: "text", text: "" }),
      text(1, "Partial"),
      stop(1),
      messageDelta("max_tokens"),
      messageStop
    ]
    const { chunks } = run(events)
    expect(deltas(chunks).slice(0, -1)).toEqual([
      { delta: { role: "assistant", content: "", reasoning_content: "Let me think" }, finish: null },
      { delta: { content: "Partial" }, finish: null },
      { delta: {}, finish: "length" }
    ])
    await expectSameAsNonStreaming(chunks, response([{ type: "thinking", thinking: "Let me think", signature: "sig" }, { type: "text", text: "Partial" }], "max_tokens"))
  })

  it("omits usage entirely unless include_usage was asked for", () => {
    const events = [messageStart(), start(0, { type: "text", text: "" }), text(0, "Hi"), stop(0), messageDelta("end_turn"), messageStop]
    const { chunks } = run(events, { includeUsage: false })
    expect(chunks).toHaveLength(2)
    expectChatInvariants(chunks, false)
  })

  it("takes revised counts from message_delta (cache reads reported late)", () => {
    const events: Array<AnthropicStreamEvent> = [
      messageStart(),
      { type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 5, cache_read_input_tokens: 2000, input_tokens: 7 } },
      messageStop
    ]
    const { machine, chunks } = run(events)
    expect(machine.usage()).toEqual({ input_tokens: 7, output_tokens: 5, cache_read_tokens: 2000, cache_write_tokens: 100 })
    expect(chunks.at(-1)?.usage).toMatchObject({ prompt_tokens: 2107, completion_tokens: 5, total_tokens: 2112 })
  })

  it("reports a stream cut short and ignores anything after message_stop", () => {
    const cut = run([messageStart(), start(0, { type: "text", text: "" }), text(0, "Hal")])
    expect(cut.machine.completed()).toBe(false)
    expect(deltas(cut.chunks)).toEqual([{ delta: { role: "assistant", content: "Hal" }, finish: null }])
    const machine = new AnthropicToChatStream(options)
    const first = [messageStart(), messageDelta("end_turn"), messageStop].flatMap((event) => machine.push(event))
    expect(deltas(first)).toEqual([{ delta: { role: "assistant", content: "" }, finish: "stop" }, { usage: expect.anything() }])
    expect(machine.push(text(0, "late"))).toEqual([])
    expect(machine.end()).toEqual([])
  })

  it("reports tool_calls when tools were called but the stop reason says end_turn", async () => {
    const events = [
      messageStart(),
      start(0, { type: "tool_use", id: "toolu_1", name: "weather", input: {} }),
      json(0, "{\"ci"),
      json(0, "ty\": \"Par"),
      json(0, "is\"}"),
      stop(0),
      messageDelta("end_turn"),
      messageStop
    ]
    const { chunks } = run(events)
    expect(chunks.flatMap((chunk) => chunk.choices[0]?.delta.tool_calls ?? []).map((call) => call.function?.arguments).join(""))
      .toBe("{\"city\": \"Paris\"}")
    expect(chunks.at(-2)?.choices[0]?.finish_reason).toBe("tool_calls")
    await expectSameAsNonStreaming(chunks, response([{ type: "tool_use", id: "toolu_1", name: "weather", input: { city: "Paris" } }], "end_turn"))
  })

  it("in JSON mode, streams only the JSON tool as content and keeps other tool calls", async () => {
    const mode: JsonMode = { tool: "json_response", wrapped: false }
    const events = [
      messageStart(),
      start(0, { type: "tool_use", id: "toolu_1", name: "search", input: {} }),
      json(0, "{\"q\":\"x\"}"),
      stop(0),
      start(1, { type: "tool_use", id: "toolu_2", name: "json_response", input: {} }),
      json(1, "{\"a\":1}"),
      stop(1),
      messageDelta("tool_use"),
      messageStop
    ]
    const { chunks } = run(events, { jsonMode: mode })
    expectChatInvariants(chunks, true)
    expect(chunks.at(-2)?.choices[0]?.finish_reason).toBe("tool_calls")
    await expectSameAsNonStreaming(chunks, response([
      { type: "tool_use", id: "toolu_1", name: "search", input: { q: "x" } },
      { type: "tool_use", id: "toolu_2", name: "json_response", input: { a: 1 } }
    ], "tool_use"), mode)
  })

  it("sends the usage chunk from end() when message_stop never came", () => {
    const { chunks } = run([messageStart(), messageDelta("end_turn")])
    expect(chunks.at(-1)?.choices).toEqual([])
  })
})
