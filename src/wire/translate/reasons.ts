import type { AnthropicStopReason } from "../anthropic-messages.ts"
import type { ChatFinishReason } from "../openai-chat.ts"

/** Anthropic `stop_reason` -> OpenAI `finish_reason` (reference table 3.5). */
export const finishReasonFromStopReason = (stop: string | null | undefined): ChatFinishReason => {
  switch (stop) {
    case "max_tokens":
    case "model_context_window_exceeded":
      return "length"
    case "tool_use":
      return "tool_calls"
    case "refusal":
      return "content_filter"
    default:
      // end_turn, stop_sequence, pause_turn and anything newer: the turn is over.
      return "stop"
  }
}

/** OpenAI `finish_reason` -> Anthropic `stop_reason`; unknown values end the turn normally. */
export const stopReasonFromFinishReason = (finish: string | null | undefined): AnthropicStopReason => {
  switch (finish) {
    case "length":
      return "max_tokens"
    case "tool_calls":
    case "function_call":
      return "tool_use"
    case "content_filter":
      return "refusal"
    default:
      return "end_turn"
  }
}

/**
 * Ollama, Gemini and other OpenAI-compatible upstreams report `stop` with tool calls; agent
 * clients then treat the turn as finished and never run the tool. A natural stop with tool calls
 * is therefore a tool stop. Truncation and refusals keep their own reason: the client must know
 * the arguments may be cut short.
 */
export const stopReasonWithTools = (stop: AnthropicStopReason, sawToolUse: boolean): AnthropicStopReason =>
  sawToolUse && (stop === "end_turn" || stop === "stop_sequence") ? "tool_use" : stop

export const finishReasonWithTools = (finish: ChatFinishReason, sawToolCall: boolean): ChatFinishReason => {
  if (sawToolCall && finish === "stop") return "tool_calls"
  // The JSON-mode tool is unwrapped into content, so a tool stop without visible tool calls is a stop.
  if (!sawToolCall && finish === "tool_calls") return "stop"
  return finish
}
