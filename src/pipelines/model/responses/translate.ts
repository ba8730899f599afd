/**
 * A Responses request on its way to a provider that does not speak Responses: decoded strictly
 * (every field the gateway must translate is known), then translated to Chat Completions, the
 * format every provider kind has a translator for (see ../adapter.ts).
 *
 * Tools the Responses API hosts itself or that have no Chat equivalent (`web_search`,
 * `tool_search`...) are left out rather than refused (`custom` and `namespace` tools were already
 * turned into functions, see ./tools.ts): Codex offers them
 * on every request, and a model behind another provider could not call them anyway. Which were
 * left out is recorded in the audit record (`details.dropped_tools` by name, and as `tools.<type>` in
 * `details.dropped` and `x-modelgate-dropped`). Forcing one with `tool_choice` is still refused.
 */
import { Effect, Result } from "effect"
import { decodedOrFail } from "../../../domain/validation.ts"
import { decodeResponsesRequestInSlices, type ResponsesRequest } from "../../../wire/openai-responses.ts"
import { type ChatRequestFromResponses, responsesRequestToChat } from "../../../wire/translate/responses-request-to-chat.ts"
import { modelReasons } from "../../../services/catalog/reasoning.ts"
import type { AdapterContext } from "../adapter.ts"
import { untranslatable } from "../usage.ts"
import { recordDropped } from "../dropped.ts"
import { presentFields, RESPONSES_TO_CHAT_DROPS } from "../../../wire/translate/dropped-fields.ts"

export const responsesAsChat = Effect.fnUntraced(function*(context: AdapterContext) {
  const request: ResponsesRequest = yield* decodedOrFail(yield* decodeResponsesRequestInSlices(context.raw))
  recordDropped(context.state, presentFields(context.raw, RESPONSES_TO_CHAT_DROPS))
  const translated = responsesRequestToChat(request, { model: context.resolved.model.id, nonFunctionTools: "drop" })
  if (Result.isFailure(translated)) return yield* untranslatable(translated.failure)
  const cap = context.resolved.model.max_tokens
  // Always a limit (issue 22, finding 2): none named, or one above the cap, is the cap.
  const capped: ChatRequestFromResponses = typeof translated.success.max_tokens === "number" && translated.success.max_tokens <= cap
    ? translated.success
    : { ...translated.success, max_tokens: cap }
  // A model that does not reason gets no reasoning fields (services/catalog/reasoning.ts).
  const { reasoning_effort: _, ...withoutEffort } = capped
  const chat: ChatRequestFromResponses = modelReasons(context.resolved.model) ? capped : withoutEffort
  const dropped = (request.tools ?? []).filter((tool) => tool.type !== "function").map((tool) => ("name" in tool && typeof tool.name === "string" ? tool.name : tool.type))
  if (dropped.length > 0) context.state.audit.details = { ...context.state.audit.details, dropped_tools: dropped }
  // Named by type: the indices are those of the body with Codex's namespaces flattened (./tools.ts), not the client's.
  recordDropped(context.state, (request.tools ?? []).flatMap((tool) => tool.type === "function" ? [] : [`tools.${tool.type}`]))
  return { request, chat }
})
