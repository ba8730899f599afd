/**
 * What today's clients send (Claude Code, the AI SDK, LangChain, the official SDKs), decoded
 * strictly and in passthrough, forwarded with caps applied, and translated field by field:
 * translated, dropped (delivery only) or refused by name.
 */
import { Result } from "effect"
import { describe, expect, it } from "vitest"
import {
  chatPassthroughBody,
  chatRequestToAnthropic,
  clampOutputBudget,
  decodeChatPassthrough,
  decodeChatRequest,
  decodeMessagesPassthrough,
  decodeMessagesRequest,
  messagesPassthroughBody,
  messagesRequestToChat
} from "../../src/wire/index.ts"
import { claudeCodeBody } from "./client-bodies.ts"
import { expectDecodesUnchanged } from "../support/decoded.ts"

const expectOk = <A>(result: { ok: true; value: A } | { ok: false; message: string }): A => {
  if (!result.ok) throw new Error(result.message)
  return result.value
}

const translatedChat = (body: Record<string, unknown>, options: Record<string, unknown> = {}) => {
  const request = expectOk(decodeMessagesRequest(body))
  const result = messagesRequestToChat(request, { model: "gpt-5", maxTokensCap: 16384, ...options })
  if (Result.isFailure(result)) throw new Error(result.failure.message)
  // What the translator produces is a valid chat request itself.
  expectOk(decodeChatRequest(result.success))
  return result.success
}

const refusedChat = (body: Record<string, unknown>) => {
  const result = messagesRequestToChat(expectOk(decodeMessagesRequest(body)), { model: "gpt-5", maxTokensCap: 16384 })
  if (Result.isSuccess(result)) throw new Error(`expected a refusal, got ${JSON.stringify(result.success)}`)
  return result.failure
}

const chatBase = { model: "gpt-5", messages: [{ role: "user", content: "Hi" }] }

const translatedAnthropic = (body: Record<string, unknown>) => {
  const request = expectOk(decodeChatRequest({ ...chatBase, ...body }))
  const result = chatRequestToAnthropic(request, { model: "claude-sonnet-4-5", maxTokensCap: 8192 })
  if (Result.isFailure(result)) throw new Error(result.failure.message)
  expectOk(decodeMessagesRequest(result.success))
  return result.success
}

const refusedAnthropic = (body: Record<string, unknown>) => {
  const request = expectOk(decodeChatRequest({ ...chatBase, ...body }))
  const result = chatRequestToAnthropic(request, { model: "claude-sonnet-4-5", maxTokensCap: 8192 })
  if (Result.isSuccess(result)) throw new Error(`expected a refusal, got ${JSON.stringify(result.success)}`)
  return result.failure
}

describe("today's client bodies decode strictly", () => {
  it("Claude Code's request on /v1/messages", () => {
    expectDecodesUnchanged(decodeMessagesRequest, claudeCodeBody)
  })

  it("the Anthropic SDK's newer fields: service_tier, documents, search results, server tools with max_uses", () => {
    const body = {
      model: "claude-sonnet-4-5",
      max_tokens: 1024,
      service_tier: "auto",
      messages: [{
        role: "user",
        content: [
          { type: "document", source: { type: "base64", media_type: "application/pdf", data: "JVBERi0=" }, title: "Q3", citations: { enabled: true } },
          { type: "search_result", source: "https://example.com", title: "Example", content: [{ type: "text", text: "found" }] },
          { type: "text", text: "Summarise" }
        ]
      }],
      tools: [{ type: "web_search_20250305", name: "web_search", max_uses: 3 }],
      output_config: { format: { type: "json_schema", schema: { type: "object", properties: {} } } }
    }
    expectDecodesUnchanged(decodeMessagesRequest, body)
  })

  it("the openai SDK's and LangChain's fields on /v1/chat/completions", () => {
    const body = {
      ...chatBase,
      messages: [
        { role: "user", content: "weather?" },
        { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "weather", arguments: "{}" } }] },
        { role: "tool", tool_call_id: "call_1", content: "sunny", name: "weather" }
      ],
      reasoning_effort: "high",
      store: false,
      service_tier: "auto",
      prompt_cache_key: "k",
      logprobs: true,
      top_logprobs: 2,
      functions: [{ name: "legacy", parameters: { type: "object" } }],
      function_call: "auto",
      verbosity: "low",
      safety_identifier: "u1"
    }
    expectDecodesUnchanged(decodeChatRequest, body)
  })

  it("still refuses a field that is not part of the format, naming it", () => {
    expect(decodeChatRequest({ ...chatBase, reasoning: { effort: "high" } })).toMatchObject({ ok: false, path: "reasoning" })
    expect(decodeMessagesRequest({ ...claudeCodeBody, betas: ["x"] })).toMatchObject({ ok: false, path: "betas" })
    expect(decodeMessagesRequest({ ...claudeCodeBody, tools: [{ ...claudeCodeBody.tools[0], eager: true }] }))
      .toMatchObject({ ok: false, path: "tools.0.eager" })
  })

  it("refuses a thinking budget at or above max_tokens, as the API does", () => {
    expect(decodeMessagesRequest({ ...claudeCodeBody, max_tokens: 2048, thinking: { type: "enabled", budget_tokens: 2048 } }))
      .toMatchObject({ ok: false, path: "thinking.budget_tokens", message: "thinking.budget_tokens: must be less than max_tokens" })
  })
})

describe("passthrough decoding checks what the gateway relies on and keeps the rest", () => {
  it("accepts fields the gateway does not model", () => {
    const body = { ...claudeCodeBody, brand_new_field: { anything: true } }
    expect(decodeMessagesRequest(body).ok).toBe(false)
    expect(expectOk(decodeMessagesPassthrough(body))).toMatchObject({ model: claudeCodeBody.model, max_tokens: 32000, stream: true })
    // The typed value holds what the gateway reads; the raw body is what is forwarded.
    expect(expectOk(decodeChatPassthrough({ ...chatBase, future_option: 1 }))).toEqual({ model: "gpt-5", messages: [{ role: "user" }] })
  })

  it("still validates model, max_tokens, stream, message roles and tool names", () => {
    expect(decodeMessagesPassthrough({ ...claudeCodeBody, max_tokens: "lots" })).toMatchObject({ ok: false, path: "max_tokens" })
    expect(decodeMessagesPassthrough({ ...claudeCodeBody, stream: "yes" })).toMatchObject({ ok: false, path: "stream" })
    expect(decodeMessagesPassthrough({ ...claudeCodeBody, messages: [{ role: "bot", content: "x" }] }))
      .toMatchObject({ ok: false, path: "messages.0.role" })
    expect(decodeMessagesPassthrough({ ...claudeCodeBody, tools: [{ name: "a b" }] })).toMatchObject({ ok: false, path: "tools.0.name" })
    expect(decodeChatPassthrough({ ...chatBase, model: "" })).toMatchObject({ ok: false, path: "model" })
    expect(decodeChatPassthrough({ ...chatBase, messages: [] })).toMatchObject({ ok: false, path: "messages" })
    expect(decodeChatPassthrough({ ...chatBase, tools: [{ type: "function", function: { name: "a b" } }] }))
      .toMatchObject({ ok: false, path: "tools.0.function.name" })
  })
})

describe("passthrough bodies", () => {
  it("messages: the raw body with the model replaced, max_tokens clamped and the thinking budget kept below it", () => {
    const body = { ...claudeCodeBody, brand_new_field: 1 }
    const forwarded = expectOk(messagesPassthroughBody(body, { model: "claude-sonnet-4-5-20250929", maxTokensCap: 8192 }))
    expect(forwarded).toEqual({
      ...body,
      model: "claude-sonnet-4-5-20250929",
      max_tokens: 8192,
      thinking: { type: "enabled", budget_tokens: 8191, display: "summarized" }
    })
    // Under the cap nothing changes but the model.
    expect(expectOk(messagesPassthroughBody(body, { model: "m", maxTokensCap: 64000 }))).toEqual({ ...body, model: "m" })
  })

  it("messages: refuses naming both fields when no budget of at least 1024 fits", () => {
    expect(messagesPassthroughBody(claudeCodeBody, { model: "m", maxTokensCap: 1024 })).toMatchObject({
      ok: false,
      path: "thinking.budget_tokens",
      message: expect.stringMatching(/thinking\.budget_tokens.*max_tokens/)
    })
  })

  it("chat: the raw body with the model replaced, limits clamped and stream usage asked for", () => {
    const body = { ...chatBase, max_completion_tokens: 100_000, stream: true, stream_options: { include_obfuscation: false }, store: true }
    expect(chatPassthroughBody(body, { model: "gpt-5-2025", maxTokensCap: 32768 })).toEqual({
      ...body,
      model: "gpt-5-2025",
      max_completion_tokens: 32768,
      stream_options: { include_obfuscation: false, include_usage: true }
    })
    expect(chatPassthroughBody({ ...chatBase, max_tokens: 10 }, { model: "m", maxTokensCap: 32768 }))
      .toEqual({ ...chatBase, model: "m", max_tokens: 10 })
  })
})

describe("clampOutputBudget", () => {
  it("clamps max_tokens and lowers only the budget the clamp broke", () => {
    expect(clampOutputBudget({ max_tokens: 32000, budget_tokens: 31999 }, 8192)).toEqual({ ok: true, value: { max_tokens: 8192, budget_tokens: 8191 } })
    expect(clampOutputBudget({ max_tokens: 32000, budget_tokens: 4000 }, 8192)).toEqual({ ok: true, value: { max_tokens: 8192, budget_tokens: 4000 } })
    expect(clampOutputBudget({ max_tokens: 32000 }, 8192)).toEqual({ ok: true, value: { max_tokens: 8192 } })
    expect(clampOutputBudget({ max_tokens: 2000, budget_tokens: 1500 }, 8192)).toEqual({ ok: true, value: { max_tokens: 2000, budget_tokens: 1500 } })
  })

  it("keeps Anthropic's minimum budget of 1024, or refuses naming both fields", () => {
    expect(clampOutputBudget({ max_tokens: 32000, budget_tokens: 31999 }, 1025)).toEqual({ ok: true, value: { max_tokens: 1025, budget_tokens: 1024 } })
    const refused = clampOutputBudget({ max_tokens: 32000, budget_tokens: 31999 }, 1024)
    expect(refused).toMatchObject({ ok: false, path: "thinking.budget_tokens" })
    if (!refused.ok) expect(refused.message).toContain("max_tokens")
  })
})

describe("messages -> chat, field by field", () => {
  it("translates Claude Code's request: system messages in place, effort, tool names on tool messages; drops delivery hints", () => {
    const chat = translatedChat(claudeCodeBody)
    expect(chat).toMatchObject({ model: "gpt-5", max_completion_tokens: 16384, reasoning_effort: "high", stream: true, user: claudeCodeBody.metadata.user_id })
    expect(chat.messages).toEqual([
      { role: "system", content: "You are Claude Code." },
      { role: "user", content: "list the files" },
      { role: "system", content: "<system-reminder>Today is Monday.</system-reminder>" },
      { role: "assistant", content: null, tool_calls: [{ id: "call_01", type: "function", function: { name: "Bash", arguments: "{\"command\":\"ls\"}" } }] },
      { role: "tool", tool_call_id: "call_01", content: "README.md", name: "Bash" }
    ])
    expect(chat.tools).toEqual([{
      type: "function",
      function: { name: "Bash", description: "Run a shell command", parameters: claudeCodeBody.tools[0]!.input_schema }
    }])
    for (const dropped of ["context_management", "thinking", "output_config", "cache_control", "metadata"]) expect(chat).not.toHaveProperty(dropped)
  })

  it("leaves out a system message cleared by a later user message", () => {
    const chat = translatedChat({
      model: "m",
      max_tokens: 100,
      messages: [
        { role: "user", content: "a" },
        { role: "system", content: "only for a", clear_at: "next_user_message" },
        { role: "assistant", content: "b" },
        { role: "user", content: "c" },
        { role: "system", content: "for c", clear_at: "next_user_message" }
      ]
    })
    expect(chat.messages.map((m) => m.content)).toEqual(["a", "b", "c", "for c"])
  })

  it("translates output_config.format and output_format to response_format json_schema", () => {
    const schema = { type: "object", properties: { a: { type: "string" } }, required: ["a"], additionalProperties: false }
    const expected = { type: "json_schema", json_schema: { name: "structured_output", schema, strict: true } }
    const base = { model: "m", max_tokens: 100, messages: [{ role: "user", content: "x" }] }
    expect(translatedChat({ ...base, output_config: { format: { type: "json_schema", schema } } }).response_format).toEqual(expected)
    expect(translatedChat({ ...base, output_format: { type: "json_schema", schema } }).response_format).toEqual(expected)
  })

  it("translates documents and search results; keeps tool strictness and examples", () => {
    const chat = translatedChat({
      model: "m",
      max_tokens: 100,
      messages: [{
        role: "user",
        content: [
          { type: "document", source: { type: "base64", media_type: "application/pdf", data: "JVBERi0=" }, title: "q3.pdf" },
          { type: "document", source: { type: "text", media_type: "text/plain", data: "plain words" }, context: "notes" },
          { type: "search_result", source: "https://e.com", title: "E", content: [{ type: "text", text: "found" }] }
        ]
      }],
      tools: [{ name: "f", input_schema: { type: "object" }, strict: true, input_examples: [{ a: 1 }], defer_loading: true, eager_input_streaming: true }]
    })
    expect(chat.messages[0]).toEqual({
      role: "user",
      content: [
        { type: "text", text: "q3.pdf" },
        { type: "file", file: { file_data: "data:application/pdf;base64,JVBERi0=", filename: "q3.pdf" } },
        { type: "text", text: "notes" },
        { type: "text", text: "plain words" },
        { type: "text", text: "E\n\nhttps://e.com\n\nfound" }
      ]
    })
    expect(chat.tools).toEqual([{ type: "function", function: { name: "f", description: "Example inputs:\n{\"a\":1}", parameters: { type: "object" }, strict: true } }])
  })

  it("tells the model which tool a client-side tool search loaded; the deferred tool is listed from the start", () => {
    const chat = translatedChat({
      model: "m",
      max_tokens: 100,
      tools: [
        { name: "ToolSearch", input_schema: { type: "object" } },
        { name: "mcp__notes__lookup", input_schema: { type: "object" }, defer_loading: true }
      ],
      messages: [
        { role: "user", content: "look up my notes" },
        { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "ToolSearch", input: { query: "notes" }, caller: { type: "direct" } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: [{ type: "tool_reference", tool_name: "mcp__notes__lookup" }] }] }
      ]
    })
    expect(chat.tools?.map((tool) => (tool.type === "function" ? tool.function.name : ""))).toEqual(["ToolSearch", "mcp__notes__lookup"])
    expect(chat.messages.at(-1)).toEqual({ role: "tool", tool_call_id: "call_1", content: "Tool loaded: mcp__notes__lookup", name: "ToolSearch" })
  })

  it("refuses what only Anthropic's servers can do, naming the field", () => {
    const base = { model: "m", max_tokens: 100, messages: [{ role: "user", content: "x" }] }
    expect(refusedChat({ ...base, tools: [{ type: "web_search_20250305", name: "web_search", max_uses: 3 }] }).path).toBe("tools.0.type")
    expect(refusedChat({ ...base, mcp_servers: [{ type: "url", url: "https://mcp", name: "m" }] }).path).toBe("mcp_servers")
    expect(refusedChat({ ...base, container: "c1" }).path).toBe("container")
    expect(refusedChat({ ...base, output_config: { task_budget: { type: "tokens", total: 1000 } } }).path).toBe("output_config.task_budget")
    expect(refusedChat({
      ...base,
      messages: [{ role: "user", content: "x" }, { role: "assistant", content: [{ type: "server_tool_use", id: "srvtoolu_1", name: "web_search", input: {} }] }]
    }).path).toBe("messages.1.content.0.type")
    expect(refusedChat({
      ...base,
      messages: [{ role: "user", content: [{ type: "document", source: { type: "url", url: "https://e.com/a.pdf" } }] }]
    }).path).toBe("messages.0.content.0.source")
  })

  it("takes a system turn's own (per-turn) effort as the request's, the last one set winning (issue 34)", () => {
    const base = { model: "m", max_tokens: 100, messages: [{ role: "user", content: "x" }] }
    const turn = (effort: string) => ({ role: "system", content: "x", output_config: { effort } })
    expect(translatedChat({ ...base, messages: [...base.messages, turn("low")] }).reasoning_effort).toBe("low")
    expect(translatedChat({ ...base, output_config: { effort: "high" }, messages: [...base.messages, turn("low")] }).reasoning_effort).toBe("low")
    expect(translatedChat({ ...base, messages: [...base.messages, turn("low"), { role: "user", content: "y" }, turn("max")] }).reasoning_effort).toBe("max")
  })
})

describe("chat -> messages, field by field", () => {
  it("translates reasoning_effort to output_config.effort and safety_identifier to metadata.user_id", () => {
    expect(translatedAnthropic({ reasoning_effort: "high" }).output_config).toEqual({ effort: "high" })
    expect(translatedAnthropic({ reasoning_effort: "minimal" }).output_config).toEqual({ effort: "low" })
    expect(translatedAnthropic({ reasoning_effort: "none" })).not.toHaveProperty("output_config")
    expect(translatedAnthropic({ safety_identifier: "u-1" }).metadata).toEqual({ user_id: "u-1" })
    expect(refusedAnthropic({ reasoning_effort: "extreme" }).path).toBe("reasoning_effort")
  })

  it("drops delivery-only fields: store, service_tier, prompt caching, prediction, metadata, verbosity, logprobs false, tool message name", () => {
    const request = translatedAnthropic({
      store: true,
      service_tier: "flex",
      prompt_cache_key: "k",
      prompt_cache_retention: "24h",
      prediction: { type: "content", content: "draft" },
      metadata: { a: "b" },
      logprobs: false,
      modalities: ["text"],
      verbosity: "low",
      messages: [
        { role: "user", content: [{ type: "text", text: "weather?", prompt_cache_breakpoint: { mode: "explicit" } }] },
        { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "weather", arguments: "{}" } }] },
        { role: "tool", tool_call_id: "call_1", content: "sunny", name: "weather" }
      ],
      tools: [{ type: "function", function: { name: "weather", parameters: { type: "object" } } }]
    })
    expect(Object.keys(request).sort()).toEqual(["max_tokens", "messages", "model", "tools"])
    expect(request.messages.at(-1)).toEqual({ role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "sunny" }] })
  })

  it("translates file parts to document blocks and assistant refusal parts to text", () => {
    const request = translatedAnthropic({
      messages: [
        { role: "user", content: [{ type: "file", file: { file_data: "data:application/pdf;base64,JVBERi0=", filename: "a.pdf" } }, { type: "text", text: "sum up" }] },
        { role: "assistant", content: [{ type: "refusal", refusal: "I cannot." }] },
        { role: "user", content: "please" }
      ]
    })
    expect(request.messages[0]!.content).toEqual([
      { type: "document", source: { type: "base64", media_type: "application/pdf", data: "JVBERi0=" }, title: "a.pdf" },
      { type: "text", text: "sum up" }
    ])
    expect(request.messages[1]!.content).toEqual([{ type: "text", text: "I cannot." }])
  })

  it("narrows the tools to allowed_tools", () => {
    const tool = (name: string) => ({ type: "function", function: { name, parameters: { type: "object" } } })
    const request = translatedAnthropic({
      tools: [tool("a"), tool("b")],
      tool_choice: { type: "allowed_tools", allowed_tools: { mode: "required", tools: [{ type: "function", function: { name: "b" } }] } }
    })
    expect(request.tools?.map((t) => (t as { name: string }).name)).toEqual(["b"])
    expect(request.tool_choice).toEqual({ type: "any" })
  })

  it("refuses what Anthropic cannot do, naming the field", () => {
    expect(refusedAnthropic({ logprobs: true }).path).toBe("logprobs")
    expect(refusedAnthropic({ top_logprobs: 3, logprobs: true }).path).toBe("logprobs")
    expect(refusedAnthropic({ logit_bias: { "50256": -100 } }).path).toBe("logit_bias")
    expect(refusedAnthropic({ audio: { format: "wav", voice: "alloy" }, modalities: ["text", "audio"] }).path).toBe("audio")
    expect(refusedAnthropic({ web_search_options: {} }).path).toBe("web_search_options")
    expect(refusedAnthropic({ functions: [{ name: "f" }] }).path).toBe("functions")
    expect(refusedAnthropic({ tools: [{ type: "custom", custom: { name: "g" } }] }).path).toBe("tools.0")
    expect(refusedAnthropic({ messages: [{ role: "user", content: [{ type: "input_audio", input_audio: { data: "x", format: "wav" } }] }] }).path)
      .toBe("messages.0.content.0")
    expect(refusedAnthropic({ messages: [{ role: "user", content: [{ type: "file", file: { file_id: "file-1" } }] }] }).path)
      .toBe("messages.0.content.0.file.file_id")
    expect(refusedAnthropic({ messages: [{ role: "function", name: "f", content: "x" }] }).path).toBe("messages.0.role")
  })
})
