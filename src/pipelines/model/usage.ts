/** Token counts from any format's usage, recorded in the request's audit draft. */
import type { ChatUsage } from "../../wire/openai-chat.ts"
import type { AuditUsage } from "../../wire/translate/usage.ts"
import { ValidationFailed } from "../../domain/errors.ts"
import type { Untranslatable } from "../../wire/translate/untranslatable.ts"
import type { RequestState } from "../request.ts"

export const recordChatUsage = (state: RequestState, usage: ChatUsage | null | undefined) => {
  if (!usage) return
  state.audit.prompt_tokens = usage.prompt_tokens
  state.audit.completion_tokens = usage.completion_tokens
}

export const recordAuditUsage = (state: RequestState, usage: AuditUsage) => {
  state.audit.prompt_tokens = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
  state.audit.completion_tokens = usage.output_tokens
}

/** A field the provider's format has no equivalent for: a 400 naming it, never silently dropped. */
export const untranslatable = (error: Untranslatable) =>
  new ValidationFailed({
    message: `cannot be translated for this model's provider: ${error.message}`,
    details: { field: error.path, reason: "untranslatable" }
  })
