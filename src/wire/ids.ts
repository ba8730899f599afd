import { createHash, randomBytes } from "node:crypto"

/**
 * `bytes` random bytes as hex, from the CSPRNG drawn in blocks: one system call per request showed
 * in profiles (request ids), and a `randomUUID()` with its dashes removed per id was 1.3% of a
 * translated Responses request's CPU (issue 38).
 */
const POOL_BYTES = 4096
let pool = randomBytes(POOL_BYTES)
let offset = 0
export const randomHex = (bytes: number): string => {
  if (offset + bytes > pool.length) {
    pool = randomBytes(Math.max(POOL_BYTES, bytes))
    offset = 0
  }
  const hex = pool.toString("hex", offset, offset + bytes)
  offset += bytes
  return hex
}

/** 128 random bits as 32 hex characters: a UUID's length without its dashes. */
const compactUuid = (): string => randomHex(16)

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

/**
 * Tool-call ids in the client vendor's own spelling (`toolu_` for Anthropic clients, `call_` for
 * OpenAI ones), so a client that checks or displays the prefix sees its vendor's. The mapping is
 * a prefix swap, deterministic and reversible without state: an OpenAI upstream's `call_X` is
 * `toolu_X` to a Messages client, which sends `toolu_X` back on its next turn and the upstream
 * sees `call_X` again (and the same the other way round). An id with neither prefix gets the
 * client's (`abc` -> `toolu_abc` -> `call_abc`); an upstream takes any id a client sends back.
 * Bedrock's `tooluse_` ids are left as they are: the Converse translators pass them through
 * unchanged, and a swap here would not come back to Bedrock in its own spelling.
 */
const BEDROCK_TOOL_ID = "tooluse_"

export const anthropicToolId = (id: string): string =>
  sanitizeToolId(
    id.startsWith("toolu_") || id.startsWith(BEDROCK_TOOL_ID) ? id : id.startsWith("call_") ? `toolu_${id.slice("call_".length)}` : `toolu_${id}`
  )

export const openAIToolId = (id: string): string =>
  id.startsWith("call_") || id.startsWith(BEDROCK_TOOL_ID) ? id : id.startsWith("toolu_") ? `call_${id.slice("toolu_".length)}` : `call_${id}`
