import { Result } from "effect"
import { describe, expect, it } from "vitest"
import {
  type ChatUpstreamRequest,
  decodeChatRequest,
  decodeMessagesRequest,
  messagesRequestToChat,
  type MessagesToChatOptions,
  type Untranslatable
} from "../../src/wire/index.ts"

const options: MessagesToChatOptions = { model: "gpt-4o-mini-2024-07-18", maxTokensCap: 16384 }
const user = { role: "user", content: "Hi" }

const translate = (body: Record<string, unknown>, extra: Partial<MessagesToChatOptions> = {}) => {
  const decoded = decodeMessagesRequest({ model: "fast", max_tokens: 1024, messages: [user], ...body })
  if (!decoded.ok) throw new Error(decoded.message)
  return messagesRequestToChat(decoded.value, { ...options, ...extra })
}

/** Translates and checks the result is itself a valid chat request. */
const ok = (body: Record<string, unknown>, extra: Partial<MessagesToChatOptions> = {}): ChatUpstreamRequest => {
  const result = translate(body, extra)
  if (Result.isFailure(result)) throw new Error(result.failure.message)
  const { top_k: _topK, ...standard } = result.success
  const valid = decodeChatRequest(standard)
  if (!valid.ok) throw new Error(`translation is not a valid chat request: ${valid.message}`)
  return result.success
}

const refused = (body: Record<string, unknown>, extra: Partial<MessagesToChatOptions> = {}): Untranslatable => {
  const result = translate(body, extra)
  if (Result.isSuccess(result)) throw new Error(`expected a refusal, got ${JSON.stringify(result.success)}`)
  return result.failure
}

const toolUse = (id: string, input: Record<string, unknown>) => ({ type: "tool_use", id, name: "weather", input })
const tools = [{ name: "weather", description: "Weather", input_schema: { type: "object", properties: { city: { type: "string" } } } }]

describe("messagesRequestToChat", () => {
  it("maps model and max_tokens (clamped) into max_completion_tokens or max_tokens", () => {
    expect(ok({})).toMatchObject({ model: options.model, max_completion_tokens: 1024 })
    expect(ok({ max_tokens: 50_000 }).max_completion_tokens).toBe(16384)
    const legacy = ok({}, { maxTokensField: "max_tokens" })
    expect(legacy.max_tokens).toBe(1024)
    expect(legacy).not.toHaveProperty("max_completion_tokens")
  })

  it("puts system first as one system message", () => {
    expect(ok({ system: "Be terse." }).messages[0]).toEqual({ role: "system", content: "Be terse." })
    const blocks = ok({ system: [{ type: "text", text: "One.", cache_control: { type: "ephemeral" } }, { type: "text", text: "Two." }] })
    expect(blocks.messages).toEqual([{ role: "system", content: "One.\n\nTwo." }, { role: "user", content: "Hi" }])
  })

  it("turns tool_use into tool_calls with JSON.stringify(input), and text into content", () => {
    const request = ok({
      messages: [
        user,
        { role: "assistant", content: [{ type: "thinking", thinking: "hmm", signature: "s" }, { type: "text", text: "Let me check." }, toolUse("toolu_1", { city: "Paris" })] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "21C" }] },
        { role: "assistant", content: [toolUse("toolu_2", {})] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_2" }] }
      ],
      tools
    })
    expect(request.messages.slice(1)).toEqual([
      {
        role: "assistant",
        content: "Let me check.",
        tool_calls: [{ id: "call_1", type: "function", function: { name: "weather", arguments: "{\"city\":\"Paris\"}" } }]
      },
      { role: "tool", tool_call_id: "call_1", content: "21C", name: "weather" },
      { role: "assistant", content: null, tool_calls: [{ id: "call_2", type: "function", function: { name: "weather", arguments: "{}" } }] },
      { role: "tool", tool_call_id: "call_2", content: "", name: "weather" }
    ])
  })

  it("puts tool results before the rest of their user turn", () => {
    const request = ok({
      messages: [
        user,
        { role: "assistant", content: [toolUse("toolu_1", { city: "Paris" }), toolUse("toolu_2", { city: "Rome" })] },
        {
          role: "user",
          content: [
            { type: "text", text: "Here you go:" },
            { type: "tool_result", tool_use_id: "toolu_1", content: [{ type: "text", text: "21C" }, { type: "text", text: "sunny" }] },
            { type: "tool_result", tool_use_id: "toolu_2", content: "25C", is_error: false }
          ]
        }
      ],
      tools
    })
    expect(request.messages.slice(2)).toEqual([
      { role: "tool", tool_call_id: "call_1", content: "21C\nsunny", name: "weather" },
      { role: "tool", tool_call_id: "call_2", content: "25C", name: "weather" },
      { role: "user", content: "Here you go:" }
    ])
  })

  it("prefixes failed tool results with Error:", () => {
    const request = ok({
      messages: [
        user,
        { role: "assistant", content: [toolUse("toolu_1", {}), toolUse("toolu_2", {})] },
        {
          role: "user",
          content: [
            { type: "tool_result", tool_use_id: "toolu_1", content: "city not found", is_error: true },
            { type: "tool_result", tool_use_id: "toolu_2", is_error: true }
          ]
        }
      ],
      tools
    })
    expect(request.messages.slice(2)).toEqual([
      { role: "tool", tool_call_id: "call_1", content: "Error: city not found", name: "weather" },
      { role: "tool", tool_call_id: "call_2", content: "Error", name: "weather" }
    ])
  })

  it("converts images to image_url parts; images a tool returned follow in a user message", () => {
    const png = { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" }
    const request = ok({
      messages: [
        {
          role: "user",
          content: [
            { type: "text", text: "Compare" },
            { type: "image", source: png },
            { type: "image", source: { type: "url", url: "https://example.com/b.jpg" } }
          ]
        },
        { role: "assistant", content: [toolUse("toolu_1", {})] },
        {
          role: "user",
          content: [
            { type: "tool_result", tool_use_id: "toolu_1", content: [{ type: "text", text: "Screenshot:" }, { type: "image", source: png }] },
            { type: "text", text: "What does it show?" }
          ]
        }
      ],
      tools
    })
    expect(request.messages[0]).toEqual({
      role: "user",
      content: [
        { type: "text", text: "Compare" },
        { type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0KGgo=" } },
        { type: "image_url", image_url: { url: "https://example.com/b.jpg" } }
      ]
    })
    expect(request.messages.slice(2)).toEqual([
      { role: "tool", tool_call_id: "call_1", content: "Screenshot:", name: "weather" },
      {
        role: "user",
        content: [
          { type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0KGgo=" } },
          { type: "text", text: "What does it show?" }
        ]
      }
    ])
  })

  it("maps tools and tool_choice, disable_parallel_tool_use included", () => {
    const request = ok({ tools })
    expect(request.tools).toEqual([{
      type: "function",
      function: { name: "weather", description: "Weather", parameters: { type: "object", properties: { city: { type: "string" } } } }
    }])
    expect(ok({ tools, tool_choice: { type: "auto" } }).tool_choice).toBe("auto")
    expect(ok({ tools, tool_choice: { type: "any" } }).tool_choice).toBe("required")
    expect(ok({ tools, tool_choice: { type: "none" } }).tool_choice).toBe("none")
    expect(ok({ tools, tool_choice: { type: "tool", name: "weather" } }).tool_choice).toEqual({ type: "function", function: { name: "weather" } })
    expect(ok({ tools, tool_choice: { type: "any", disable_parallel_tool_use: true } })).toMatchObject({ tool_choice: "required", parallel_tool_calls: false })
    expect(ok({ tools, tool_choice: { type: "auto", disable_parallel_tool_use: false } })).not.toHaveProperty("parallel_tool_calls")
    expect(refused({ tools: [{ name: "x".repeat(65), input_schema: { type: "object" } }] }).path).toBe("tools.0.name")
  })

  it("maps stop_sequences to stop, refusing more than four", () => {
    expect(ok({ stop_sequences: ["END", "STOP"] }).stop).toEqual(["END", "STOP"])
    expect(ok({ stop_sequences: [] })).not.toHaveProperty("stop")
    expect(refused({ stop_sequences: ["a", "b", "c", "d", "e"] }).path).toBe("stop_sequences")
  })

  it("passes sampling parameters and metadata.user_id", () => {
    expect(ok({ temperature: 0.4, top_p: 0.9, metadata: { user_id: "u-1" } })).toMatchObject({ temperature: 0.4, top_p: 0.9, user: "u-1" })
    expect(ok({ metadata: { user_id: null } })).not.toHaveProperty("user")
  })

  it("refuses top_k unless the upstream accepts it", () => {
    expect(refused({ top_k: 40 })).toMatchObject({ path: "top_k" })
    expect(ok({ top_k: 40 }, { allowTopK: true }).top_k).toBe(40)
  })

  it("turns thinking into a reasoning effort sized by its budget; adaptive and disabled keep the default", () => {
    expect(ok({ max_tokens: 32000, thinking: { type: "enabled", budget_tokens: 2048 } }).reasoning_effort).toBe("low")
    expect(ok({ max_tokens: 32000, thinking: { type: "enabled", budget_tokens: 16384 } }).reasoning_effort).toBe("medium")
    expect(ok({ max_tokens: 32000, thinking: { type: "enabled", budget_tokens: 31999, display: "summarized" } }).reasoning_effort)
      .toBe("high")
    expect(ok({ thinking: { type: "adaptive" } })).not.toHaveProperty("reasoning_effort")
    expect(ok({ thinking: { type: "disabled" } })).not.toHaveProperty("thinking")
    // output_config.effort says it directly, and wins.
    expect(ok({ max_tokens: 32000, thinking: { type: "enabled", budget_tokens: 31999 }, output_config: { effort: "low" } }))
      .toMatchObject({ reasoning_effort: "low" })
    // A model that does not reason gets neither.
    expect(ok({ max_tokens: 32000, thinking: { type: "enabled", budget_tokens: 31999 } }, { reasoning: false }))
      .not.toHaveProperty("reasoning_effort")
  })

  it("asks for usage when streaming", () => {
    expect(ok({ stream: true })).toMatchObject({ stream: true, stream_options: { include_usage: true } })
    expect(ok({ stream: false })).not.toHaveProperty("stream")
  })

  it("keeps string contents as strings", () => {
    expect(ok({ messages: [user, { role: "assistant", content: "Hello" }, { role: "user", content: "Bye" }] }).messages).toEqual([
      { role: "user", content: "Hi" },
      { role: "assistant", content: "Hello" },
      { role: "user", content: "Bye" }
    ])
  })
})
