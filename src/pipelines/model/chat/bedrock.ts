/**
 * Chat Completions client -> Bedrock-kind provider: the request goes up as a Converse request,
 * the answer and the stream come back as chat (src/wire/translate/chat-to-converse.ts); what
 * cannot be translated is a 400 naming the field.
 */
import { Effect, Result, Stream } from "effect"
import type { ValidationFailed } from "../../../domain/errors.ts"
import type { BedrockClient } from "../../../services/providers/clients.ts"
import type { ConverseRequest } from "../../../wire/bedrock-converse.ts"
import { newChatCompletionId } from "../../../wire/ids.ts"
import type { ChatRequest } from "../../../wire/openai-chat.ts"
import { chatRequestToConverse, ConverseToChatStream, converseResponseToChat } from "../../../wire/translate/chat-to-converse.ts"
import { auditUsageFromConverse } from "../../../wire/translate/converse-to-anthropic.ts"
import { jsonModeOf } from "../../../wire/translate/json-mode.ts"
import { nowSeconds } from "../../../wire/translate/responses.ts"
import type { Adapter, AdapterContext, ClientEvent } from "../adapter.ts"
import { flattenEach } from "../stream-chunks.ts"
import { recordAuditUsage, untranslatable } from "../usage.ts"
import { recordDropped } from "../dropped.ts"
import { CHAT_TO_CONVERSE_DROPS, presentFields } from "../../../wire/translate/dropped-fields.ts"

const translated = (chat: ChatRequest, { resolved, raw, state }: AdapterContext): Effect.Effect<ConverseRequest, ValidationFailed> => {
  recordDropped(state, presentFields(raw, CHAT_TO_CONVERSE_DROPS))
  const result = chatRequestToConverse(chat, { maxTokensCap: resolved.model.max_tokens })
  return Result.isFailure(result) ? Effect.fail(untranslatable(result.failure)) : Effect.succeed(result.success)
}

export const chatToBedrock: Adapter<ChatRequest, BedrockClient> = {
  complete: (client, chat, context) =>
    translated(chat, context).pipe(
      Effect.flatMap((body) => client.converse(context.resolved.model.id, body)),
      Effect.map((response) => {
        recordAuditUsage(context.state, auditUsageFromConverse(response.usage))
        return converseResponseToChat(response, { model: context.resolved.model.id, jsonMode: jsonModeOf(chat) })
      })
    ),
  stream: (client, chat, context) =>
    translated(chat, context).pipe(
      Effect.flatMap((body) => client.converseStream(context.resolved.model.id, body)),
      Effect.map((upstream) => {
        const machine = new ConverseToChatStream({
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
