/** Messages -> Converse, rule by rule (the end-to-end cells are in test/pipelines/matrix-bedrock.test.ts). */
import { Result } from "effect"
import { describe, expect, it } from "vitest"
import { decodeMessagesRequest } from "../../src/wire/anthropic-messages.ts"
import { messagesRequestToConverse } from "../../src/wire/translate/messages-request-to-converse.ts"
import { ConverseToAnthropicStream, converseResponseToAnthropic } from "../../src/wire/translate/converse-to-anthropic.ts"

const translate = (body: Record<string, unknown>, betas?: string) => {
  const decoded = decodeMessagesRequest({ model: "m", max_tokens: 100, ...body })
  if (!decoded.ok) throw new Error(decoded.message)
  return messagesRequestToConverse(decoded.value, { maxTokensCap: 64_000, betas })
}
const ok = (body: Record<string, unknown>, betas?: string) => Result.getOrThrow(translate(body, betas))
const refusal = (body: Record<string, unknown>) => {
  const result = translate(body)
  return Result.isFailure(result) ? result.failure.path : "translated"
}

describe("messagesRequestToConverse", () => {
  it("lifts system messages out and merges the turns that then touch; drops a cleared one", () => {
    const converse = ok({
      system: "base",
      messages: [
        { role: "user", content: "one" },
        { role: "system", content: "mid-conversation rule" },
        { role: "system", content: "gone once the user speaks", clear_at: "next_user_message" },
        { role: "user", content: "two" }
      ]
    })
    expect(converse.system).toEqual([{ text: "base" }, { text: "mid-conversation rule" }])
    expect(converse.messages).toEqual([{ role: "user", content: [{ text: "one" }, { text: "two" }] }])
  })

  it("carries documents, redacted thinking, error results and forwards only the betas Bedrock's Claude takes", () => {
    const converse = ok({
      messages: [
        { role: "user", content: [{ type: "document", title: "Q3 report: final!", source: { type: "base64", media_type: "application/pdf", data: "JVBERi0=" } }] },
        { role: "assistant", content: [{ type: "redacted_thinking", data: "b3BhcXVl" }, { type: "tool_use", id: "toolu_LONG_ID_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", name: "Bash", input: { cmd: "ls" } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_LONG_ID_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", is_error: true }] }
      ],
      tools: [{ name: "Bash", input_schema: { type: "object" }, input_examples: [{ cmd: "pwd" }] }],
      tool_choice: { type: "any", disable_parallel_tool_use: true }
    }, "claude-code-20250219,interleaved-thinking-2025-05-14,context-1m-2025-08-07")
    expect(converse.messages[0]!.content).toEqual([{ document: { format: "pdf", name: "Q3 report final (0-0)", source: { bytes: "JVBERi0=" } } }])
    const [redacted, toolUse] = converse.messages[1]!.content as ReadonlyArray<Record<string, any>>
    expect(redacted).toEqual({ reasoningContent: { redactedContent: "b3BhcXVl" } })
    expect(toolUse!.toolUse.toolUseId).toMatch(/^[a-zA-Z0-9_-]{1,64}$/)
    expect(converse.messages[2]!.content).toEqual([{ toolResult: { toolUseId: toolUse!.toolUse.toolUseId, content: [{ text: "Error" }], status: "error" } }])
    expect(converse.toolConfig).toEqual({
      tools: [{ toolSpec: { name: "Bash", description: 'Example inputs:\n{"cmd":"pwd"}', inputSchema: { json: { type: "object" } } } }],
      toolChoice: { any: {} }
    })
    expect(converse.additionalModelRequestFields).toEqual({ anthropic_beta: ["interleaved-thinking-2025-05-14", "context-1m-2025-08-07"] })
  })

  it("structured output and effort go to outputConfig; a thinking budget stays below the clamped limit", () => {
    const decoded = decodeMessagesRequest({
      model: "m",
      max_tokens: 32_000,
      thinking: { type: "enabled", budget_tokens: 31_999 },
      output_config: { effort: "high", format: { type: "json_schema", schema: { type: "object" } } },
      messages: [{ role: "user", content: "hi" }]
    })
    if (!decoded.ok) throw new Error(decoded.message)
    const converse = Result.getOrThrow(messagesRequestToConverse(decoded.value, { maxTokensCap: 8192 }))
    expect(converse.inferenceConfig).toEqual({ maxTokens: 8192 })
    expect(converse.additionalModelRequestFields).toEqual({ thinking: { type: "enabled", budget_tokens: 8191 } })
    expect(converse.outputConfig).toEqual({
      textFormat: { type: "json_schema", structure: { jsonSchema: { schema: '{"type":"object"}', name: "structured_output" } } },
      effort: "high"
    })
  })

  it("refuses, naming the field, what Converse cannot carry", () => {
    expect(refusal({ messages: [{ role: "user", content: [{ type: "image", source: { type: "url", url: "https://x/y.png" } }] }] })).toBe("messages.0.content.0.source")
    expect(refusal({ messages: [{ role: "user", content: "hi" }], tools: [{ type: "web_search_20250305", name: "web_search" }] })).toBe("tools.0.type")
    expect(refusal({
      messages: [
        { role: "user", content: "hi" },
        { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "f", input: {} }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "t1", content: "r" }] }
      ],
      tools: [{ name: "f", input_schema: { type: "object" } }],
      tool_choice: { type: "none" }
    })).toBe("tool_choice")
    // Without tool calls in the history, "none" is the tools left out.
    expect(ok({ messages: [{ role: "user", content: "hi" }], tools: [{ name: "f", input_schema: { type: "object" } }], tool_choice: { type: "none" } }).toolConfig).toBeUndefined()
  })
})

describe("Converse answers as Messages", () => {
  it("a whole answer: reasoning, text, tool use, stop reason, usage", () => {
    expect(converseResponseToAnthropic({
      output: { message: { role: "assistant", content: [{ reasoningContent: { reasoningText: { text: "hm", signature: "s" } } }, { text: "ok" }, { toolUse: { toolUseId: "t", name: "f", input: { a: 1 } } }] } },
      stopReason: "tool_use",
      usage: { inputTokens: 3, outputTokens: 4, cacheReadInputTokens: 5, cacheWriteInputTokens: 6 }
    }, { model: "claude", id: "msg_1" })).toEqual({
      id: "msg_1",
      type: "message",
      role: "assistant",
      model: "claude",
      content: [{ type: "thinking", thinking: "hm", signature: "s" }, { type: "text", text: "ok" }, { type: "tool_use", id: "t", name: "f", input: { a: 1 } }],
      stop_reason: "tool_use",
      stop_sequence: null,
      usage: { input_tokens: 3, output_tokens: 4, cache_read_input_tokens: 5, cache_creation_input_tokens: 6 }
    })
  })

  it("a stream: blocks started on first sight, renumbered, never overlapping; the end waits for metadata", () => {
    const machine = new ConverseToAnthropicStream({ model: "claude", id: "msg_1" })
    const events = [
      ...machine.push({ type: "messageStart", payload: { role: "assistant" } }),
      ...machine.push({ type: "contentBlockDelta", payload: { contentBlockIndex: 0, delta: { reasoningContent: { text: "think" } } } }),
      ...machine.push({ type: "contentBlockDelta", payload: { contentBlockIndex: 0, delta: { reasoningContent: { signature: "sig" } } } }),
      // No stop for block 0: the next block closes it.
      ...machine.push({ type: "contentBlockDelta", payload: { contentBlockIndex: 2, delta: { text: "hi" } } }),
      ...machine.push({ type: "contentBlockStop", payload: { contentBlockIndex: 2 } }),
      ...machine.push({ type: "messageStop", payload: { stopReason: "max_tokens" } })
    ]
    expect(events.map((event) => event.type === "content_block_start" || event.type === "content_block_stop" || event.type === "content_block_delta" ? `${event.type}:${event.index}` : event.type)).toEqual([
      "message_start",
      "content_block_start:0",
      "content_block_delta:0",
      "content_block_delta:0",
      "content_block_stop:0",
      "content_block_start:1",
      "content_block_delta:1",
      "content_block_stop:1"
    ])
    expect(machine.push({ type: "metadata", payload: { usage: { inputTokens: 7, outputTokens: 2 } } })).toEqual([
      { type: "message_delta", delta: { stop_reason: "max_tokens", stop_sequence: null }, usage: { input_tokens: 7, output_tokens: 2, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 } },
      { type: "message_stop" }
    ])
    expect(machine.end()).toEqual([])
  })
})
