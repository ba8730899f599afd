/**
 * Messages client -> OpenAI-kind provider (and echo): the request is translated to Chat
 * Completions, the answer and the stream back to Messages (src/wire/translate).
 */
import { Effect, Result, Stream } from "effect"
import { modelReasons } from "../../../services/catalog/reasoning.ts"
import type { OpenAIClient } from "../../../services/providers/clients.ts"
import { decodedOrFail } from "../../../domain/validation.ts"
import { decodeMessagesRequest, type MessagesPassthroughRequest } from "../../../wire/anthropic-messages.ts"
import { ChatToAnthropicStream } from "../../../wire/translate/chat-to-anthropic-stream.ts"
import { messagesRequestToChat } from "../../../wire/translate/messages-request-to-chat.ts"
import { chatResponseToAnthropic } from "../../../wire/translate/responses.ts"
import { auditUsageFromChat } from "../../../wire/translate/usage.ts"
import type { Adapter, AdapterContext } from "../adapter.ts"
import { recordAuditUsage, untranslatable } from "../usage.ts"
import { recordDropped } from "../dropped.ts"
import { MESSAGES_TO_CHAT_DROPS, presentFields } from "../../../wire/translate/dropped-fields.ts"
import { eventOf } from "./anthropic.ts"
import { flattenEach } from "../stream-chunks.ts"

/** Translation needs every field known: the client's body is decoded strictly, then translated. */
const translated = ({ raw, resolved, state }: AdapterContext) =>
  Effect.flatMap(decodedOrFail(decodeMessagesRequest(raw)), (request) => {
    recordDropped(state, presentFields(raw, MESSAGES_TO_CHAT_DROPS))
    const result = messagesRequestToChat(request, {
      model: resolved.model.id,
      maxTokensCap: resolved.model.max_tokens,
      reasoning: modelReasons(resolved.model)
    })
    return Result.isFailure(result)
      ? Effect.fail(untranslatable(result.failure))
      : Effect.succeed(result.success as unknown as Record<string, unknown>)
  })

export const messagesToOpenAI: Adapter<MessagesPassthroughRequest, OpenAIClient> = {
  complete: (client, request, context) =>
    translated(context).pipe(
      Effect.flatMap(client.complete),
      Effect.map((completion) => {
        if (completion.usage) recordAuditUsage(context.state, auditUsageFromChat(completion.usage))
        return chatResponseToAnthropic(completion, { model: context.resolved.model.id })
      })
    ),
  stream: (client, request, context) =>
    translated(context).pipe(
      Effect.flatMap(client.stream),
      Effect.zip(context.tokens.messagesInput(context.raw)),
      Effect.map(([upstream, estimatedInputTokens]) => {
        const machine = new ChatToAnthropicStream({ model: context.resolved.model.id, estimatedInputTokens })
        return upstream.pipe(
          Stream.map((item) => machine.push(item.chunk).map(eventOf)),
          Stream.concat(Stream.suspend(() => Stream.make(machine.end().map(eventOf)))),
          flattenEach,
          Stream.ensuring(Effect.sync(() => recordAuditUsage(context.state, machine.usage())))
        )
      })
    )
}
