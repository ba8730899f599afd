export { type DecodeResult, type ExcessFields } from "./decode.ts"
export { clampOutputBudget, MIN_THINKING_BUDGET, type OutputBudget } from "./output-budget.ts"
export {
  type ChatChoice,
  type ChatChunk,
  type ChatChunkChoice,
  type ChatDelta,
  type ChatFinishReason,
  type ChatMessage,
  type ChatPassthroughRequest,
  ChatPassthroughSchema,
  chatPassthroughBody,
  type ChatRequest,
  ChatRequestSchema,
  type ChatResponse,
  type ChatResponseMessage,
  type ChatToolCall,
  type ChatToolCallDelta,
  type ChatUsage,
  decodeChatPassthrough,
  decodeChatRequest,
  type PassthroughOptions
} from "./openai-chat.ts"
export {
  type AnthropicContentBlock,
  type AnthropicResponse,
  type AnthropicStopReason,
  type AnthropicStreamEvent,
  type AnthropicUsage,
  decodeMessagesPassthrough,
  decodeMessagesRequest,
  type MessagesMessage,
  type MessagesPassthroughRequest,
  MessagesPassthroughSchema,
  messagesPassthroughBody,
  type MessagesRequest,
  MessagesRequestSchema,
  SERVER_BLOCK_TYPES,
  SERVER_TOOL_TYPES
} from "./anthropic-messages.ts"
export { newChatCompletionId, newMessageId, newToolUseId, sanitizeToolId } from "./ids.ts"
export { Untranslatable, type Translation } from "./translate/untranslatable.ts"
export { chatRequestToAnthropic, type ChatToAnthropicOptions } from "./translate/chat-request-to-anthropic.ts"
export {
  type ChatUpstreamRequest,
  messagesRequestToChat,
  type MessagesToChatOptions
} from "./translate/messages-request-to-chat.ts"
export {
  anthropicResponseToChat,
  type AnthropicToChatResponseOptions,
  chatResponseToAnthropic,
  type ChatToAnthropicResponseOptions,
  nowSeconds
} from "./translate/responses.ts"
export { AnthropicToChatStream, type AnthropicToChatStreamOptions } from "./translate/anthropic-to-chat-stream.ts"
export { ChatToAnthropicStream, type ChatToAnthropicStreamOptions } from "./translate/chat-to-anthropic-stream.ts"
export { JSON_RESPONSE_TOOL, type JsonMode, jsonModeOf } from "./translate/json-mode.ts"
export { type AuditUsage, auditUsageFromAnthropic, auditUsageFromChat } from "./translate/usage.ts"
