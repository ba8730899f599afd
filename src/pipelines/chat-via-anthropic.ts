/**
 * A Chat Completions client reaching an `anthropic`-kind provider: the request, the response
 * and the stream are translated (src/wire/translate); what cannot be translated is a 400
 * naming the field, never silently dropped.
 */
import { Effect, Result, Stream } from "effect"
import { ValidationFailed } from "../domain/errors.ts"
import { CurrentRequest, type RequestState } from "../http/request-context.ts"
import { json } from "../http/responses.ts"
import { dataFrame, DONE_FRAME, sseResponse } from "../http/sse.ts"
import { newChatCompletionId } from "../wire/ids.ts"
import type { ChatRequest } from "../wire/openai-chat.ts"
import { AnthropicToChatStream } from "../wire/translate/anthropic-to-chat-stream.ts"
import { chatRequestToAnthropic } from "../wire/translate/chat-request-to-anthropic.ts"
import { jsonModeOf } from "../wire/translate/json-mode.ts"
import { anthropicResponseToChat, nowSeconds } from "../wire/translate/responses.ts"
import type { Untranslatable } from "../wire/translate/untranslatable.ts"
import { type AuditUsage, auditUsageFromAnthropic } from "../wire/translate/usage.ts"
import type { ResolvedModel } from "../services/catalog/ModelCatalog.ts"
import type { AnthropicClient } from "../services/providers/clients.ts"
import { streamFailureFrames } from "./chat-completions.ts"
import { guardedStream } from "./streaming.ts"

export const untranslatable = (error: Untranslatable) =>
  new ValidationFailed({
    message: `cannot be translated for this model's provider: ${error.message}`,
    details: { field: error.path, reason: "untranslatable" }
  })

export const recordAuditUsage = (state: RequestState, usage: AuditUsage) => {
  state.audit.prompt_tokens = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
  state.audit.completion_tokens = usage.output_tokens
}

export const chatViaAnthropic = (client: AnthropicClient, chat: ChatRequest, resolved: ResolvedModel) =>
  Effect.gen(function*() {
    const state = yield* CurrentRequest
    const translated = chatRequestToAnthropic(chat, { model: resolved.model.id, maxTokensCap: resolved.model.max_tokens })
    if (Result.isFailure(translated)) return yield* untranslatable(translated.failure)
    const body = translated.success as unknown as Record<string, unknown>
    const jsonMode = jsonModeOf(chat)
    if (chat.stream !== true) {
      const response = yield* client.complete(body)
      recordAuditUsage(state, auditUsageFromAnthropic(response.usage))
      return json(anthropicResponseToChat(response, { model: chat.model, jsonMode }))
    }
    const upstream = yield* client.stream(body)
    const machine = new AnthropicToChatStream({
      id: newChatCompletionId(),
      model: chat.model,
      created: nowSeconds(),
      includeUsage: chat.stream_options?.include_usage === true,
      jsonMode
    })
    const toFrames = (chunks: ReadonlyArray<unknown>) => chunks.map((chunk) => dataFrame(JSON.stringify(chunk))).join("")
    const frames = upstream.pipe(
      Stream.map((event) => toFrames(machine.push(event))),
      Stream.concat(Stream.suspend(() => Stream.make(toFrames(machine.end()) + DONE_FRAME))),
      Stream.filter((frame) => frame !== ""),
      Stream.ensuring(Effect.sync(() => recordAuditUsage(state, machine.usage())))
    )
    return sseResponse(yield* guardedStream(frames, (error) => streamFailureFrames(state, error)))
  })
