/**
 * Non-streaming responses, both ways (docs/wire-translation.md 3.4-3.7). These read what an upstream returned,
 * so they tolerate the gaps OpenAI-compatible servers leave (no usage, no ids, no finish reason).
 */
import { Predicate } from "effect"
import type { AnthropicContentBlock, AnthropicResponse, AnthropicStopReason } from "../anthropic-messages.ts"
import { anthropicToolId, newChatCompletionId, newMessageId, newToolUseId, openAIToolId } from "../ids.ts"
import type { ChatResponse, ChatToolCall } from "../openai-chat.ts"
import { type JsonMode, jsonTextFromInput } from "./json-mode.ts"
import { finishReasonFromStopReason, finishReasonWithTools, stopReasonFromFinishReason, stopReasonWithTools } from "./reasons.ts"
import { anthropicUsageFromAudit, auditUsageFromAnthropic, auditUsageFromChat, chatUsageFromAudit, emptyAuditUsage } from "./usage.ts"
import { parseJsonWithin } from "../json-depth.ts"

export const nowSeconds = (): number => Math.floor(Date.now() / 1000)

export interface AnthropicToChatResponseOptions {
  /** Model name reported to the client (usually what it asked for). */
  readonly model: string
  /** Set when the request used response_format (see `jsonModeOf`). */
  readonly jsonMode?: JsonMode | undefined
  readonly id?: string
  readonly created?: number
}

export const anthropicResponseToChat = (
  response: AnthropicResponse,
  options: AnthropicToChatResponseOptions
): ChatResponse => {
  const texts: Array<string> = []
  const toolCalls: Array<ChatToolCall> = []
  const thinking: Array<string> = []
  let json: string | undefined
  for (const block of response.content) {
    if (block.type === "text") texts.push(block.text)
    // Thinking as OpenAI-compatible servers return reasoning (see anthropic-to-chat-stream.ts).
    if (block.type === "thinking" && block.thinking !== "") thinking.push(block.thinking)
    if (block.type !== "tool_use") continue
    if (options.jsonMode !== undefined && block.name === options.jsonMode.tool) {
      json = jsonTextFromInput(block.input, options.jsonMode)
    } else {
      toolCalls.push(chatToolCall(block))
    }
  }
  const text = texts.join("")
  // In JSON mode the client parses the content, so the JSON alone is the answer.
  const content = json ?? (text === "" && toolCalls.length > 0 ? null : text)
  const finish = finishReasonWithTools(finishReasonFromStopReason(response.stop_reason), toolCalls.length > 0)
  return {
    id: options.id ?? newChatCompletionId(),
    object: "chat.completion",
    created: options.created ?? nowSeconds(),
    model: options.model,
    choices: [{
      index: 0,
      message: {
        role: "assistant",
        content,
        refusal: null,
        ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
        ...(thinking.length > 0 ? { reasoning_content: thinking.join("\n\n") } : {})
      },
      logprobs: null,
      finish_reason: finish
    }],
    usage: chatUsageFromAudit(auditUsageFromAnthropic(response.usage), response.usage.output_tokens_details?.reasoning_tokens)
  }
}

const chatToolCall = (block: Extract<AnthropicContentBlock, { type: "tool_use" }>): ChatToolCall => ({
  id: openAIToolId(block.id),
  type: "function",
  function: { name: block.name, arguments: JSON.stringify(block.input ?? {}) }
})

export interface ChatToAnthropicResponseOptions {
  /** Model name reported to the client (usually what it asked for). */
  readonly model: string
  readonly id?: string
}

export const chatResponseToAnthropic = (
  response: ChatResponse,
  options: ChatToAnthropicResponseOptions
): AnthropicResponse => {
  const choice = response.choices[0]
  const message = choice?.message
  const content: Array<AnthropicContentBlock> = []
  const text = typeof message?.content === "string" ? message.content : ""
  // Whitespace-only text blocks are rejected by Anthropic when the client replays them.
  if (text.trim() !== "") content.push({ type: "text", text })
  else if (typeof message?.refusal === "string" && message.refusal.trim() !== "") {
    content.push({ type: "text", text: message.refusal })
  }
  for (const call of message?.tool_calls ?? []) {
    content.push({
      type: "tool_use",
      id: call.id ? anthropicToolId(call.id) : newToolUseId(),
      name: call.function.name,
      input: toolInput(call.function.arguments)
    })
  }
  const sawToolUse = content.some((block) => block.type === "tool_use")
  const matched = matchedStopSequence(choice?.finish_reason, choice?.stop_reason)
  const stopReason: AnthropicStopReason = matched !== null && !sawToolUse
    ? "stop_sequence"
    : stopReasonWithTools(stopReasonFromFinishReason(choice?.finish_reason), sawToolUse)
  return {
    id: options.id ?? newMessageId(),
    type: "message",
    role: "assistant",
    model: options.model,
    content,
    stop_reason: stopReason,
    stop_sequence: stopReason === "stop_sequence" ? matched : null,
    usage: anthropicUsageFromAudit(response.usage == null ? emptyAuditUsage : auditUsageFromChat(response.usage))
  }
}

/** vLLM names the stop string that ended generation in a non-standard `stop_reason`. */
export const matchedStopSequence = (finish: string | null | undefined, stopReason: unknown): string | null =>
  finish === "stop" && Predicate.isString(stopReason) && stopReason !== "" ? stopReason : null

/**
 * Anthropic tool inputs are objects. Arguments that are not a JSON object (a truncated stream,
 * a provider bug) cannot be represented and become `{}`.
 */
export const toolInput = (text: string | null | undefined): Readonly<Record<string, unknown>> => {
  if (text == null || text.trim() === "") return {}
  try {
    const parsed: unknown = parseJsonWithin(text)
    return Predicate.isObject(parsed) ? parsed as Record<string, unknown> : {}
  } catch {
    return {}
  }
}
