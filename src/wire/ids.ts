import { createHash, randomUUID } from "node:crypto"

const compactUuid = (): string => randomUUID().replaceAll("-", "")

export const newChatCompletionId = (): string => `chatcmpl-${compactUuid()}`

export const newMessageId = (): string => `msg_${compactUuid()}`

export const newToolUseId = (): string => `toolu_${compactUuid()}`

/** Responses API ids: the response, its output items, and function call ids. */
export const newResponseId = (): string => `resp_${compactUuid()}`
export const newOutputMessageId = (): string => `msg_${compactUuid()}`
export const newFunctionCallItemId = (): string => `fc_${compactUuid()}`
export const newReasoningItemId = (): string => `rs_${compactUuid()}`
export const newFunctionCallId = (): string => `call_${compactUuid()}`

const validToolId = /^[a-zA-Z0-9_-]+$/

/**
 * Makes a tool-call id acceptable to Anthropic (`^[a-zA-Z0-9_-]+$`). Valid ids are kept verbatim;
 * others (Kimi's `functions.Bash:0`, Gemini's dotted ids, empty ids) get their invalid characters
 * replaced and a hash of the original appended, so two ids that differ only in replaced characters
 * stay distinct. It is deterministic: applied to both `tool_use.id` and `tool_result.tool_use_id`,
 * the pair still matches.
 */
export const sanitizeToolId = (id: string): string => {
  if (validToolId.test(id)) return id
  const digest = createHash("sha256").update(id).digest("hex").slice(0, 12)
  const readable = id.replace(/[^a-zA-Z0-9_-]/g, "_").slice(0, 48)
  return `${readable}_${digest}`
}
