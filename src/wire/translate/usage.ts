import type { AnthropicUsage, MessageDeltaUsage } from "../anthropic-messages.ts"
import type { ChatUsage } from "../openai-chat.ts"

/**
 * Token counts for the audit trail, as disjoint buckets: `input_tokens` excludes cache reads and
 * writes, so the whole prompt is `input_tokens + cache_read_tokens + cache_write_tokens`.
 */
export interface AuditUsage {
  readonly input_tokens: number
  readonly output_tokens: number
  readonly cache_read_tokens: number
  readonly cache_write_tokens: number
}

export const emptyAuditUsage: AuditUsage = {
  input_tokens: 0,
  output_tokens: 0,
  cache_read_tokens: 0,
  cache_write_tokens: 0
}

const count = (n: number | null | undefined): number => (typeof n === "number" && Number.isFinite(n) ? n : 0)

export const auditUsageFromAnthropic = (usage: AnthropicUsage | MessageDeltaUsage): AuditUsage => ({
  input_tokens: count(usage.input_tokens),
  output_tokens: count(usage.output_tokens),
  cache_read_tokens: count(usage.cache_read_input_tokens),
  cache_write_tokens: count(usage.cache_creation_input_tokens)
})

/** OpenAI's `prompt_tokens` includes cached tokens; the uncached remainder is what is left. */
export const auditUsageFromChat = (usage: ChatUsage): AuditUsage => {
  const cacheRead = count(usage.prompt_tokens_details?.cached_tokens)
  const cacheWrite = count(usage.prompt_tokens_details?.cache_write_tokens)
  return {
    input_tokens: Math.max(count(usage.prompt_tokens) - cacheRead - cacheWrite, 0),
    output_tokens: count(usage.completion_tokens),
    cache_read_tokens: cacheRead,
    cache_write_tokens: cacheWrite
  }
}

/** Reference 3.6, Anthropic -> OpenAI: the prompt count includes both cache buckets. */
export const chatUsageFromAudit = (usage: AuditUsage, reasoningTokens?: number | null): ChatUsage => {
  const prompt = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
  return {
    prompt_tokens: prompt,
    completion_tokens: usage.output_tokens,
    total_tokens: prompt + usage.output_tokens,
    prompt_tokens_details: { cached_tokens: usage.cache_read_tokens, cache_write_tokens: usage.cache_write_tokens },
    ...(typeof reasoningTokens === "number" ? { completion_tokens_details: { reasoning_tokens: reasoningTokens } } : {})
  }
}

/** Reference 3.6, OpenAI -> Anthropic. */
export const anthropicUsageFromAudit = (usage: AuditUsage): AnthropicUsage => ({
  input_tokens: usage.input_tokens,
  output_tokens: usage.output_tokens,
  cache_creation_input_tokens: usage.cache_write_tokens,
  cache_read_input_tokens: usage.cache_read_tokens
})
