/**
 * Chat Completions client -> Anthropic-kind provider: the request, the answer and the stream
 * are translated (src/wire/translate); what cannot be translated is a 400 naming the field.
 */
import { Effect, Result, Stream } from "effect"
import { modelReasons } from "../../../services/catalog/reasoning.ts"
import type { AnthropicClient } from "../../../services/providers/clients.ts"
import { newChatCompletionId } from "../../../wire/ids.ts"
import type { ChatRequest } from "../../../wire/openai-chat.ts"
import { AnthropicToChatStream } from "../../../wire/translate/anthropic-to-chat-stream.ts"
import { chatRequestToAnthropic } from "../../../wire/translate/chat-request-to-anthropic.ts"
import { jsonModeOf } from "../../../wire/translate/json-mode.ts"
import { anthropicResponseToChat, nowSeconds } from "../../../wire/translate/responses.ts"
import { auditUsageFromAnthropic } from "../../../wire/translate/usage.ts"
import type { Adapter, AdapterContext, ClientEvent } from "../adapter.ts"
import { recordAuditUsage, untranslatable } from "../usage.ts"
import { recordDropped } from "../dropped.ts"
import { CHAT_TO_ANTHROPIC_DROPS, presentFields } from "../../../wire/translate/dropped-fields.ts"
import { flattenEach } from "../stream-chunks.ts"

const translated = (chat: ChatRequest, { resolved, raw, state }: AdapterContext) => {
  recordDropped(state, presentFields(raw, CHAT_TO_ANTHROPIC_DROPS))
  const result = chatRequestToAnthropic(chat, { model: resolved.model.id, maxTokensCap: resolved.model.max_tokens, reasoning: modelReasons(resolved.model) })
  return Result.isFailure(result)
    ? Effect.fail(untranslatable(result.failure))
    : Effect.succeed(result.success as unknown as Record<string, unknown>)
}

export const chatToAnthropic: Adapter<ChatRequest, AnthropicClient> = {
  complete: (client, chat, context) =>
    translated(chat, context).pipe(
      Effect.flatMap(client.complete),
      Effect.map((response) => {
        recordAuditUsage(context.state, auditUsageFromAnthropic(response.usage))
        return anthropicResponseToChat(response, { model: context.resolved.model.id, jsonMode: jsonModeOf(chat) })
      })
    ),
  stream: (client, chat, context) =>
    translated(chat, context).pipe(
      Effect.flatMap(client.stream),
      Effect.map((upstream) => {
        const machine = new AnthropicToChatStream({
          id: newChatCompletionId(),
          model: context.resolved.model.id,
          created: nowSeconds(),
          includeUsage: chat.stream_options?.include_usage === true,
          jsonMode: jsonModeOf(chat)
        })
        const events = (chunks: ReadonlyArray<unknown>) => chunks.map((chunk): ClientEvent => ({ data: JSON.stringify(chunk) }))
        return upstream.pipe(
          Stream.map((event) => events(machine.push(event))),
          Stream.concat(Stream.suspend(() => Stream.make(events(machine.end())))),
          flattenEach,
          Stream.ensuring(Effect.sync(() => recordAuditUsage(context.state, machine.usage())))
        )
      })
    )
}
