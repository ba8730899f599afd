/**
 * Issue 24 item 5 at the wire level: Anthropic thinking translated to the OpenAI formats'
 * reasoning (Chat's `reasoning_content`, then a Responses reasoning item), the tool-id prefix
 * swap, and the default of `models[].reasoning`.
 */
import { describe, expect, it } from "vitest"
import { modelReasons } from "../../src/services/catalog/reasoning.ts"
import { anthropicToolId, openAIToolId } from "../../src/wire/ids.ts"
import {
  type AnthropicResponse,
  anthropicResponseToChat,
  type AnthropicStreamEvent,
  AnthropicToChatStream,
  type ChatChunk
} from "../../src/wire/index.ts"
import { ChatToResponsesStream } from "../../src/wire/translate/chat-to-responses-stream.ts"

const events: Array<AnthropicStreamEvent> = [
  {
    type: "message_start",
    message: { id: "msg_1", type: "message", role: "assistant", model: "claude-x", content: [], stop_reason: null, stop_sequence: null, usage: { input_tokens: 5, output_tokens: 1 } }
  },
  { type: "content_block_start", index: 0, content_block: { type: "thinking", thinking: "", signature: "" } },
  { type: "content_block_delta", index: 0, delta: { type: "thinking_delta", thinking: "Let me " } },
  { type: "content_block_delta", index: 0, delta: { type: "thinking_delta", thinking: "think." } },
  { type: "content_block_delta", index: 0, delta: { type: "signature_delta", signature: "sig" } },
  { type: "content_block_stop", index: 0 },
  { type: "ping" },
  { type: "content_block_start", index: 1, content_block: { type: "text", text: "" } },
  { type: "content_block_delta", index: 1, delta: { type: "text_delta", text: "Answer." } },
  { type: "content_block_stop", index: 1 },
  { type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: 9 } },
  { type: "message_stop" }
]

describe("Anthropic thinking in the OpenAI formats", () => {
  it("streams as reasoning_content deltas before the answer; the signature stays behind", () => {
    const machine = new AnthropicToChatStream({ id: "chatcmpl-1", model: "claude-x", created: 1, includeUsage: true })
    const chunks = events.flatMap((event) => machine.push(event))
    const deltas = chunks.flatMap((chunk) => chunk.choices.map((choice) => choice.delta))
    expect(deltas.map((d) => d.reasoning_content).filter((r) => r !== undefined).join("")).toBe("Let me think.")
    expect(deltas.map((d) => d.content).filter((c) => c).join("")).toBe("Answer.")
    expect(JSON.stringify(chunks)).not.toContain("sig")
  })

  it("becomes a Responses reasoning item ahead of the message (Responses client on an Anthropic model)", () => {
    const toChat = new AnthropicToChatStream({ id: "chatcmpl-1", model: "claude-x", created: 1, includeUsage: true })
    const toResponses = new ChatToResponsesStream({ model: "claude-x" })
    const out = events.flatMap((event) => toChat.push(event)).flatMap((chunk) => toResponses.push(chunk as ChatChunk))
    out.push(...toResponses.end())
    const completed = out.find((event) => event.type === "response.completed") as unknown as { response: { output: Array<{ type: string; content?: Array<{ text: string }> }> } }
    expect(completed.response.output.map((item) => item.type)).toEqual(["reasoning", "message"])
    expect(completed.response.output[0]!.content![0]!.text).toBe("Let me think.")
  })

  it("answers as message.reasoning_content when not streaming", () => {
    const response: AnthropicResponse = {
      id: "msg_1",
      type: "message",
      role: "assistant",
      model: "claude-x",
      content: [{ type: "thinking", thinking: "Hmm.", signature: "sig" }, { type: "text", text: "Yes." }],
      stop_reason: "end_turn",
      stop_sequence: null,
      usage: { input_tokens: 3, output_tokens: 2 }
    }
    const message = anthropicResponseToChat(response, { model: "claude-x" }).choices[0]!.message as { content: string; reasoning_content?: string }
    expect(message.content).toBe("Yes.")
    expect(message.reasoning_content).toBe("Hmm.")
  })
})

describe("tool ids", () => {
  it("swap prefixes both ways, and come back as they went", () => {
    expect(anthropicToolId("call_Ab1")).toBe("toolu_Ab1")
    expect(openAIToolId("toolu_01Xy")).toBe("call_01Xy")
    for (const id of ["call_Ab1", "call_x-y_z"]) expect(openAIToolId(anthropicToolId(id))).toBe(id)
    for (const id of ["toolu_01Xy", "toolu_a"]) expect(anthropicToolId(openAIToolId(id))).toBe(id)
    expect(anthropicToolId("abc")).toBe("toolu_abc")
    expect(openAIToolId("abc")).toBe("call_abc")
    // Anthropic's id grammar holds for anything an upstream sends.
    expect(anthropicToolId("functions.Bash:0")).toMatch(/^toolu_[a-zA-Z0-9_-]+$/)
    // Bedrock's own ids pass through the Converse translators unchanged.
    expect(anthropicToolId("tooluse_Q1")).toBe("tooluse_Q1")
  })
})

describe("models[].reasoning by default", () => {
  it.each([
    ["o3", true],
    ["o4-mini", true],
    ["gpt-5", true],
    ["gpt-5.1-codex", true],
    ["openai/gpt-5-mini", true],
    ["gpt-4.1-mini", false],
    ["gpt-4o", false],
    ["claude-sonnet-4-5-20250929", true],
    ["claude-3-7-sonnet-latest", true],
    ["claude-3-5-haiku-latest", false],
    ["eu.anthropic.claude-opus-4-1-v1:0", true],
    ["llama-3.3-70b", false],
    ["ollama-model", false]
  ] as const)("%s -> %s", (id, reasons) => {
    expect(modelReasons({ id })).toBe(reasons)
  })

  it("yields to the configured value", () => {
    expect(modelReasons({ id: "gpt-4o", reasoning: true })).toBe(true)
    expect(modelReasons({ id: "gpt-5", reasoning: false })).toBe(false)
  })
})
