import { describe, expect, it } from "vitest"
import {
  type AnthropicResponse,
  anthropicResponseToChat,
  type ChatResponse,
  chatResponseToAnthropic,
  decodeChatRequest,
  jsonModeOf
} from "../../src/wire/index.ts"

const anthropic = (content: AnthropicResponse["content"], stop: AnthropicResponse["stop_reason"] = "end_turn"): AnthropicResponse => ({
  id: "msg_01",
  type: "message",
  role: "assistant",
  model: "claude-sonnet-4-5-20250929",
  content,
  stop_reason: stop,
  stop_sequence: null,
  usage: { input_tokens: 10, output_tokens: 20, cache_creation_input_tokens: 100, cache_read_input_tokens: 1000 }
})

const chat = (message: Partial<ChatResponse["choices"][number]["message"]>, finish: string | null = "stop", extra: object = {}): ChatResponse => ({
  id: "chatcmpl-1",
  object: "chat.completion",
  created: 1,
  model: "gpt-4o",
  choices: [{ index: 0, message: { role: "assistant", content: null, ...message }, finish_reason: finish as never, logprobs: null, ...extra }],
  usage: { prompt_tokens: 2006, completion_tokens: 17, total_tokens: 2023, prompt_tokens_details: { cached_tokens: 1920 } }
})

const modeFor = (response_format: unknown) => {
  const decoded = decodeChatRequest({ model: "m", messages: [{ role: "user", content: "x" }], response_format })
  if (!decoded.ok) throw new Error(decoded.message)
  return jsonModeOf(decoded.value)
}

describe("anthropicResponseToChat", () => {
  it("maps text and tool_use, keeps tool ids, counts cache tokens in the prompt", () => {
    const response = anthropicResponseToChat(
      anthropic([
        { type: "thinking", thinking: "private", signature: "sig" },
        { type: "text", text: "Checking " },
        { type: "text", text: "now." },
        { type: "tool_use", id: "toolu_01", name: "weather", input: { city: "Paris" } }
      ], "tool_use"),
      { model: "smart", created: 1700000000 }
    )
    expect(response.id).toMatch(/^chatcmpl-[0-9a-f]{32}$/)
    expect(response).toMatchObject({ object: "chat.completion", created: 1700000000, model: "smart" })
    expect(response.choices).toEqual([{
      index: 0,
      message: {
        role: "assistant",
        content: "Checking now.",
        refusal: null,
        tool_calls: [{ id: "call_01", type: "function", function: { name: "weather", arguments: "{\"city\":\"Paris\"}" } }],
        // Thinking as OpenAI-compatible servers return reasoning; its signature stays behind.
        reasoning_content: "private"
      },
      logprobs: null,
      finish_reason: "tool_calls"
    }])
    expect(response.usage).toEqual({
      prompt_tokens: 1110,
      completion_tokens: 20,
      total_tokens: 1130,
      prompt_tokens_details: { cached_tokens: 1000, cache_write_tokens: 100 }
    })
  })

  it("gives null content when only tools were called", () => {
    const response = anthropicResponseToChat(anthropic([{ type: "tool_use", id: "toolu_1", name: "now", input: {} }], "tool_use"), { model: "m" })
    expect(response.choices[0]?.message).toMatchObject({ content: null, tool_calls: [{ function: { arguments: "{}" } }] })
  })

  it.each([
    ["end_turn", "stop"],
    ["stop_sequence", "stop"],
    ["pause_turn", "stop"],
    ["max_tokens", "length"],
    ["model_context_window_exceeded", "length"],
    ["refusal", "content_filter"],
    [null, "stop"]
  ] as const)("maps stop_reason %s to %s", (stop, finish) => {
    expect(anthropicResponseToChat(anthropic([{ type: "text", text: "x" }], stop), { model: "m" }).choices[0]?.finish_reason).toBe(finish)
  })

  it("unwraps the JSON-mode tool into content with finish stop", () => {
    const mode = modeFor({ type: "json_object" })
    const response = anthropicResponseToChat(
      anthropic([{ type: "tool_use", id: "toolu_1", name: "json_response", input: { answer: 42 } }], "tool_use"),
      { model: "m", jsonMode: mode }
    )
    expect(response.choices[0]).toMatchObject({ message: { content: "{\"answer\":42}" }, finish_reason: "stop" })
    expect(response.choices[0]?.message).not.toHaveProperty("tool_calls")
  })

  it("unwraps a wrapped schema's values", () => {
    const mode = modeFor({ type: "json_schema", json_schema: { name: "list", schema: { type: "array", items: { type: "string" } } } })
    expect(mode).toEqual({ tool: "json_response", wrapped: true })
    const response = anthropicResponseToChat(
      anthropic([{ type: "tool_use", id: "toolu_1", name: "json_response", input: { values: ["a", "b"] } }], "tool_use"),
      { model: "m", jsonMode: mode }
    )
    expect(response.choices[0]?.message.content).toBe("[\"a\",\"b\"]")
  })

  it("only unwraps the JSON tool: other tool calls stay tool calls", () => {
    const response = anthropicResponseToChat(
      anthropic([
        { type: "tool_use", id: "toolu_1", name: "search", input: { q: "x" } },
        { type: "tool_use", id: "toolu_2", name: "json_response", input: { a: 1 } }
      ], "tool_use"),
      { model: "m", jsonMode: modeFor({ type: "json_object" }) }
    )
    expect(response.choices[0]).toMatchObject({
      message: { content: "{\"a\":1}", tool_calls: [{ id: "call_1", function: { name: "search" } }] },
      finish_reason: "tool_calls"
    })
  })

  it("does not treat a tool named json_response as JSON mode when JSON mode is off", () => {
    const response = anthropicResponseToChat(
      anthropic([{ type: "tool_use", id: "toolu_1", name: "json_response", input: {} }], "tool_use"),
      { model: "m" }
    )
    expect(response.choices[0]?.finish_reason).toBe("tool_calls")
  })
})

describe("chatResponseToAnthropic", () => {
  it("maps content and usage (prompt tokens include the cache)", () => {
    const response = chatResponseToAnthropic(chat({ content: "Hello!" }), { model: "fast" })
    expect(response.id).toMatch(/^msg_[0-9a-f]{32}$/)
    expect(response).toMatchObject({
      type: "message",
      role: "assistant",
      model: "fast",
      content: [{ type: "text", text: "Hello!" }],
      stop_reason: "end_turn",
      stop_sequence: null,
      usage: { input_tokens: 86, output_tokens: 17, cache_read_input_tokens: 1920, cache_creation_input_tokens: 0 }
    })
  })

  it("maps tool calls: ids in Anthropic's toolu_ spelling, sanitised, generated when missing; arguments parsed", () => {
    const response = chatResponseToAnthropic(chat({
      content: "",
      tool_calls: [
        { id: "call_a", type: "function", function: { name: "f", arguments: "{\"x\":1}" } },
        { id: "functions.f:1", type: "function", function: { name: "f", arguments: "" } },
        { id: "", type: "function", function: { name: "f", arguments: "{not json" } }
      ]
    }, "tool_calls"), { model: "m" })
    expect(response.stop_reason).toBe("tool_use")
    expect(response.content).toHaveLength(3)
    expect(response.content[0]).toEqual({ type: "tool_use", id: "toolu_a", name: "f", input: { x: 1 } })
    expect(response.content[1]).toMatchObject({ type: "tool_use", name: "f", input: {} })
    expect(response.content[2]).toMatchObject({ type: "tool_use", name: "f", input: {} })
    for (const block of response.content) expect((block as { id: string }).id).toMatch(/^[a-zA-Z0-9_-]+$/)
    expect((response.content[2] as { id: string }).id).toMatch(/^toolu_/)
  })

  it("reports tool_use when an upstream says stop with tool calls (Ollama, Gemini)", () => {
    const response = chatResponseToAnthropic(chat({
      content: "Sure.",
      tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: "{}" } }]
    }, "stop"), { model: "m" })
    expect(response.stop_reason).toBe("tool_use")
    expect(response.content.map((block) => block.type)).toEqual(["text", "tool_use"])
  })

  it.each([
    ["stop", "end_turn"],
    ["length", "max_tokens"],
    ["tool_calls", "tool_use"],
    ["function_call", "tool_use"],
    ["content_filter", "refusal"],
    [null, "end_turn"],
    ["eos", "end_turn"]
  ] as const)("maps finish_reason %s to %s", (finish, stop) => {
    expect(chatResponseToAnthropic(chat({ content: "x" }, finish), { model: "m" }).stop_reason).toBe(stop)
  })

  it("reports the matched stop sequence vLLM names", () => {
    const response = chatResponseToAnthropic(chat({ content: "x" }, "stop", { stop_reason: "END" }), { model: "m" })
    expect(response).toMatchObject({ stop_reason: "stop_sequence", stop_sequence: "END" })
  })

  it("keeps a refusal as text, and copes with no usage and no choices", () => {
    const refusal = chatResponseToAnthropic(chat({ content: null, refusal: "I can't." }, "stop"), { model: "m" })
    expect(refusal.content).toEqual([{ type: "text", text: "I can't." }])
    const blank = chatResponseToAnthropic(chat({ content: "\n\n", tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: "{}" } }] }), { model: "m" })
    expect(blank.content.map((block) => block.type)).toEqual(["tool_use"])
    const bare = chatResponseToAnthropic({ ...chat({ content: "x" }), usage: undefined, choices: [] }, { model: "m" })
    expect(bare).toMatchObject({ content: [], stop_reason: "end_turn", usage: { input_tokens: 0, output_tokens: 0 } })
  })
})
