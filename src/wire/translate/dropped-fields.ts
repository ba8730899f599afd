/**
 * The top-level request fields each translation leaves out (issue 34): they only tune delivery,
 * caching or storage at the client's vendor, so the answer is the same without them, but the
 * client is told which never reached the provider (`x-modelgate-dropped`, `details.dropped`).
 * The lists follow the "Dropped" paragraphs heading each translator; fields nested deeper
 * (`cache_control` on a block, a tool's `defer_loading`) are not listed.
 */

/** A Messages request toward Chat Completions or Gemini (messages-request-to-chat.ts). */
export const MESSAGES_TO_CHAT_DROPS = [
  "context_management", "cache_control", "service_tier", "speed", "inference_geo", "diagnostics", "billing_policy",
  "fallback_credit_token", "fallbacks"
] as const

/** A Messages request toward Converse (messages-request-to-converse.ts): the same, and `metadata`. */
export const MESSAGES_TO_CONVERSE_DROPS = [...MESSAGES_TO_CHAT_DROPS, "metadata"] as const

/** A Responses request toward Chat Completions, and so every kind but a Responses API (responses-request-to-chat.ts). */
export const RESPONSES_TO_CHAT_DROPS = [
  "client_metadata", "include", "prompt_cache_key", "prompt_cache_retention", "prompt_cache_options", "service_tier", "max_tool_calls"
] as const

/** A Chat request toward Messages (chat-request-to-anthropic.ts). */
export const CHAT_TO_ANTHROPIC_DROPS = [
  "metadata", "store", "service_tier", "prompt_cache_key", "prompt_cache_retention", "prompt_cache_options", "prediction", "verbosity"
] as const

/** A Chat request toward Converse (through Messages, whose `metadata.user_id` Converse has no place for). */
export const CHAT_TO_CONVERSE_DROPS = [...CHAT_TO_ANTHROPIC_DROPS, "user", "safety_identifier"] as const

/** A Chat request toward Gemini (chat-to-gemini.ts). */
export const CHAT_TO_GEMINI_DROPS = [
  "user", "safety_identifier", "metadata", "store", "service_tier", "parallel_tool_calls", "verbosity", "prompt_cache_key",
  "prompt_cache_retention", "prompt_cache_options"
] as const

/** Which of `fields` the client sent (with a value: an explicit null asks for nothing). */
export const presentFields = (raw: Readonly<Record<string, unknown>>, fields: ReadonlyArray<string>): Array<string> =>
  fields.filter((field) => raw[field] !== undefined && raw[field] !== null)
