import { describe, expect, it } from "vitest"
import {
  type AnthropicStreamEvent,
  type ChatChunk,
  type ChatDelta,
  type ChatResponse,
  chatResponseToAnthropic,
  ChatToAnthropicStream,
  type ChatToolCallDelta,
  type ChatUsage
} from "../../src/wire/index.ts"
import { assembleMessage } from "./sdk.ts"

const msgId = "msg_test"
const usage: ChatUsage = { prompt_tokens: 2006, completion_tokens: 17, total_tokens: 2023, prompt_tokens_details: { cached_tokens: 1920 } }

const chunk = (delta: ChatDelta, finish: string | null = null, extra: Partial<ChatChunk> = {}): ChatChunk => ({
  id: "chatcmpl-up",
  object: "chat.completion.chunk",
  created: 1,
  model: "gpt-4o",
  choices: [{ index: 0, delta, finish_reason: finish as never, logprobs: null }],
  ...extra
})
const usageChunk = (value: ChatUsage = usage): ChatChunk => ({ id: "chatcmpl-up", object: "chat.completion.chunk", created: 1, model: "gpt-4o", choices: [], usage: value })
const toolStart = (index: number, id: string, name: string, args = ""): ChatToolCallDelta => ({ index, id, type: "function", function: { name, arguments: args } })
const toolArgs = (index: number, args: string): ChatToolCallDelta => ({ index, function: { arguments: args } })

const run = (chunks: ReadonlyArray<ChatChunk>, awaitUsage = true) => {
  const machine = new ChatToAnthropicStream({ model: "fast", id: msgId, awaitUsage })
  const events = [...chunks.flatMap((item) => machine.push(item)), ...machine.end()]
  return { machine, events }
}

/** Events without message_start, for compact expectations. */
const body = (events: ReadonlyArray<AnthropicStreamEvent>) => events.slice(1)

const expectAnthropicInvariants = (events: ReadonlyArray<AnthropicStreamEvent>) => {
  expect(events[0]?.type).toBe("message_start")
  expect(events.filter((event) => event.type === "message_start")).toHaveLength(1)
  expect(events.filter((event) => event.type === "message_delta")).toHaveLength(1)
  expect(events.at(-2)?.type).toBe("message_delta")
  expect(events.at(-1)?.type).toBe("message_stop")
  let open: number | undefined
  let next = 0
  for (const event of events) {
    if (event.type === "content_block_start") {
      expect(open).toBeUndefined()
      expect(event.index).toBe(next++)
      open = event.index
    } else if (event.type === "content_block_delta") {
      expect(event.index).toBe(open)
      if (event.delta.type === "input_json_delta") expect(event.delta.partial_json).not.toBe("")
      if (event.delta.type === "text_delta") expect(event.delta.text).not.toBe("")
    } else if (event.type === "content_block_stop") {
      expect(event.index).toBe(open)
      open = undefined
    } else if (event.type === "message_delta") {
      expect(open).toBeUndefined()
    }
  }
}

const textBlock = (index: number, ...texts: Array<string>): Array<AnthropicStreamEvent> => [
  { type: "content_block_start", index, content_block: { type: "text", text: "" } },
  ...texts.map((text): AnthropicStreamEvent => ({ type: "content_block_delta", index, delta: { type: "text_delta", text } })),
  { type: "content_block_stop", index }
]
const toolBlock = (index: number, id: string, name: string, ...fragments: Array<string>): Array<AnthropicStreamEvent> => [
  { type: "content_block_start", index, content_block: { type: "tool_use", id, name, input: {} } },
  ...fragments.map((partial_json): AnthropicStreamEvent => ({ type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json } })),
  { type: "content_block_stop", index }
]
const ending = (stop_reason: string, input_tokens = 86, output_tokens = 17, cache_read_input_tokens = 1920): Array<AnthropicStreamEvent> => [
  {
    type: "message_delta",
    delta: { stop_reason: stop_reason as never, stop_sequence: null },
    usage: { input_tokens, output_tokens, cache_creation_input_tokens: 0, cache_read_input_tokens }
  },
  { type: "message_stop" }
]

const whole = (message: ChatResponse["choices"][number]["message"], finish: string, withUsage: ChatUsage | null = usage): ChatResponse => ({
  id: "chatcmpl-up",
  object: "chat.completion",
  created: 1,
  model: "gpt-4o",
  choices: [{ index: 0, message, finish_reason: finish as never, logprobs: null }],
  usage: withUsage
})

/** The SDK-assembled stream must equal the non-streaming translation of the same answer. */
const expectSameAsNonStreaming = async (events: ReadonlyArray<AnthropicStreamEvent>, response: ChatResponse) => {
  // parsed_output is the SDK's own structured-output helper field, not part of the wire message.
  const { parsed_output: _parsed, ...assembled } = await assembleMessage(events)
  const expected = chatResponseToAnthropic(response, { model: "fast", id: msgId })
  expect(assembled).toEqual(expected)
}

describe("ChatToAnthropicStream", () => {
  it("streams text, holding the stop until the usage chunk", async () => {
    const machine = new ChatToAnthropicStream({ model: "fast", id: msgId })
    const first = machine.push(chunk({ role: "assistant", content: "" }))
    expect(first).toEqual([{
      type: "message_start",
      message: {
        id: msgId,
        type: "message",
        role: "assistant",
        model: "fast",
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { input_tokens: 0, output_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 }
      }
    }])
    const rest = [
      ...machine.push(chunk({ content: "Hel" })),
      ...machine.push(chunk({ content: "lo" })),
      ...machine.push(chunk({}, "stop"))
    ]
    expect(rest).toEqual(textBlock(0, "Hel", "lo"))
    const events = [...first, ...rest, ...machine.push(usageChunk()), ...machine.end()]
    expect(events.slice(-2)).toEqual(ending("end_turn"))
    expectAnthropicInvariants(events)
    expect(machine.usage()).toEqual({ input_tokens: 86, output_tokens: 17, cache_read_tokens: 1920, cache_write_tokens: 0 })
    await expectSameAsNonStreaming(events, whole({ role: "assistant", content: "Hello" }, "stop"))
  })

  it("streams OpenAI's sequential parallel tool calls live, one block each", async () => {
    const { events } = run([
      chunk({ role: "assistant", content: null, tool_calls: [toolStart(0, "call_a", "weather")] }),
      chunk({ tool_calls: [toolArgs(0, "{\"city\":")] }),
      chunk({ tool_calls: [toolArgs(0, "\"Paris\"}")] }),
      chunk({ tool_calls: [toolStart(1, "call_b", "weather")] }),
      chunk({ tool_calls: [toolArgs(1, "{\"city\":\"Rome\"}")] }),
      chunk({}, "tool_calls"),
      usageChunk()
    ])
    expect(body(events)).toEqual([
      ...toolBlock(0, "toolu_a", "weather", "{\"city\":", "\"Paris\"}"),
      ...toolBlock(1, "toolu_b", "weather", "{\"city\":\"Rome\"}"),
      ...ending("tool_use")
    ])
    expectAnthropicInvariants(events)
    await expectSameAsNonStreaming(events, whole({
      role: "assistant",
      content: null,
      tool_calls: [
        { id: "call_a", type: "function", function: { name: "weather", arguments: "{\"city\":\"Paris\"}" } },
        { id: "call_b", type: "function", function: { name: "weather", arguments: "{\"city\":\"Rome\"}" } }
      ]
    }, "tool_calls"))
  })

  it("buffers interleaved parallel tool fragments until the open call completes", async () => {
    const { events } = run([
      chunk({ role: "assistant", content: "Both:" }),
      chunk({ tool_calls: [toolStart(0, "call_a", "weather"), toolStart(1, "call_b", "weather")] }),
      chunk({ tool_calls: [toolArgs(1, "{\"city\":")] }),
      chunk({ tool_calls: [toolArgs(0, "{\"city\":")] }),
      chunk({ tool_calls: [toolArgs(1, "\"Rome\"}")] }),
      chunk({ tool_calls: [toolArgs(0, "\"Paris\"")] }),
      chunk({ tool_calls: [toolArgs(0, "}")] }),
      chunk({}, "tool_calls"),
      usageChunk()
    ])
    expect(body(events)).toEqual([
      ...textBlock(0, "Both:"),
      ...toolBlock(1, "toolu_a", "weather", "{\"city\":", "\"Paris\"", "}"),
      ...toolBlock(2, "toolu_b", "weather", "{\"city\":\"Rome\"}"),
      ...ending("tool_use")
    ])
    expectAnthropicInvariants(events)
    await expectSameAsNonStreaming(events, whole({
      role: "assistant",
      content: "Both:",
      tool_calls: [
        { id: "call_a", type: "function", function: { name: "weather", arguments: "{\"city\":\"Paris\"}" } },
        { id: "call_b", type: "function", function: { name: "weather", arguments: "{\"city\":\"Rome\"}" } }
      ]
    }, "tool_calls"))
  })

  it("emits arguments that arrive with the name at once (Gemini, xAI, Ollama)", async () => {
    const { events } = run([
      chunk({ role: "assistant", tool_calls: [toolStart(0, "call_1", "weather", "{\"city\":\"Paris\"}")] }),
      chunk({ tool_calls: [toolStart(1, "call_2", "weather", "{\"city\":\"Rome\"}")] }),
      chunk({}, "tool_calls"),
      usageChunk()
    ])
    expect(body(events)).toEqual([
      ...toolBlock(0, "toolu_1", "weather", "{\"city\":\"Paris\"}"),
      ...toolBlock(1, "toolu_2", "weather", "{\"city\":\"Rome\"}"),
      ...ending("tool_use")
    ])
    const machine = new ChatToAnthropicStream({ model: "fast", id: msgId })
    const early = machine.push(chunk({ role: "assistant", tool_calls: [toolStart(0, "call_1", "weather", "{\"city\":\"Paris\"}")] }))
    expect(early.map((event) => event.type)).toEqual(["message_start", "content_block_start", "content_block_delta"])
  })

  it("ignores vLLM's tool_calls: [] next to content", async () => {
    const { events } = run([
      chunk({ role: "assistant", content: "", tool_calls: [] }),
      chunk({ content: "Hi", tool_calls: [] }),
      chunk({ content: " there", tool_calls: [] }),
      chunk({ content: "", tool_calls: [] }, "stop"),
      usageChunk()
    ])
    expect(body(events)).toEqual([...textBlock(0, "Hi", " there"), ...ending("end_turn")])
    await expectSameAsNonStreaming(events, whole({ role: "assistant", content: "Hi there" }, "stop"))
  })

  it("reports tool_use for Ollama's finish_reason stop, without a blank leading text block", async () => {
    const { events } = run([
      chunk({ role: "assistant", content: "\n\n" }),
      chunk({ content: "", tool_calls: [{ id: "8f2c-uuid", function: { name: "weather", arguments: "{\"city\":\"Paris\"}" } }] }),
      chunk({ content: "" }, "stop"),
      usageChunk({ prompt_tokens: 50, completion_tokens: 10, total_tokens: 60 })
    ])
    expect(body(events)).toEqual([
      ...toolBlock(0, "toolu_8f2c-uuid", "weather", "{\"city\":\"Paris\"}"),
      ...ending("tool_use", 50, 10, 0)
    ])
    expectAnthropicInvariants(events)
  })

  it("sanitises tool ids and generates missing ones", () => {
    const { events } = run([
      chunk({ tool_calls: [{ index: 0, id: "functions.Bash:0", type: "function", function: { name: "Bash", arguments: "{}" } }] }),
      chunk({ tool_calls: [{ index: 1, function: { name: "Bash", arguments: "{}" } }] }),
      chunk({}, "tool_calls")
    ], false)
    const ids = events.flatMap((event) => event.type === "content_block_start" && event.content_block.type === "tool_use" ? [event.content_block.id] : [])
    expect(ids).toHaveLength(2)
    for (const id of ids) expect(id).toMatch(/^[a-zA-Z0-9_-]+$/)
    expect(ids[1]).toMatch(/^toolu_/)
  })

  it("takes usage that arrives with the finish chunk, and drops anything after message_delta", () => {
    const machine = new ChatToAnthropicStream({ model: "fast", id: msgId })
    const events = [
      ...machine.push(chunk({ content: "ok" })),
      ...machine.push(chunk({}, "length", { usage }))
    ]
    expect(events.slice(-2)).toEqual(ending("max_tokens"))
    expect(machine.push(usageChunk({ prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 }))).toEqual([])
    expect(machine.push(chunk({ content: "late" }))).toEqual([])
    expect(machine.end()).toEqual([])
    expect(machine.usage().output_tokens).toBe(17)
  })

  it("copes with usage arriving before the finish chunk (xAI)", () => {
    const { events } = run([
      chunk({ role: "assistant", content: "Hi" }),
      chunk({}, null, { usage }),
      chunk({}, "stop")
    ])
    expect(body(events)).toEqual([...textBlock(0, "Hi"), ...ending("end_turn")])
  })

  it("does not hold the stop when usage was not requested", () => {
    const machine = new ChatToAnthropicStream({ model: "fast", id: msgId, awaitUsage: false })
    const events = [...machine.push(chunk({ content: "ok" })), ...machine.push(chunk({}, "stop"))]
    expect(events.slice(-2)).toEqual(ending("end_turn", 0, 0, 0))
  })

  it("finishes cleanly at end() when the upstream sent no finish_reason or usage", () => {
    const { events } = run([chunk({ role: "assistant", content: "partial" })])
    expect(body(events)).toEqual([...textBlock(0, "partial"), ...ending("end_turn", 0, 0, 0)])
    const empty = run([])
    expect(empty.events.map((event) => event.type)).toEqual(["message_start", "message_delta", "message_stop"])
  })

  it("splits a chunk carrying content and finish_reason together", async () => {
    const { events } = run([chunk({ role: "assistant", content: "All at once" }, "stop", { usage })])
    expect(body(events)).toEqual([...textBlock(0, "All at once"), ...ending("end_turn")])
    await expectSameAsNonStreaming(events, whole({ role: "assistant", content: "All at once" }, "stop"))
  })

  it("reports a matched stop sequence named by vLLM", () => {
    const stopChunk: ChatChunk = { ...chunk({}, "stop"), choices: [{ index: 0, delta: {}, finish_reason: "stop", stop_reason: "END" }] }
    const { events } = run([chunk({ content: "x" }), stopChunk], false)
    expect(events.at(-2)).toMatchObject({ type: "message_delta", delta: { stop_reason: "stop_sequence", stop_sequence: "END" } })
  })

  it("keeps text that follows an unfinished tool call in order", () => {
    const { events } = run([
      chunk({ tool_calls: [toolStart(0, "call_a", "f", "{\"a\":")] }),
      chunk({ content: "Note" }),
      chunk({ tool_calls: [toolArgs(0, "1}")] }),
      chunk({ content: " more" }),
      chunk({}, "tool_calls")
    ], false)
    expect(body(events)).toEqual([
      ...toolBlock(0, "toolu_a", "f", "{\"a\":", "1}"),
      ...textBlock(1, "Note", " more"),
      ...ending("tool_use", 0, 0, 0)
    ])
    expectAnthropicInvariants(events)
  })
})
