/**
 * Messages client -> Bedrock-kind provider: the body is decoded strictly and translated to a
 * Converse request (src/wire/translate/messages-request-to-converse.ts), keeping what Converse
 * carries of a Claude conversation (system, images, documents, tool use and results, thinking,
 * cache points, structured output); the answer and the stream come back as Messages.
 */
import { Effect, Result, Stream } from "effect"
import { decodedOrFail } from "../../../domain/validation.ts"
import type { BedrockClient } from "../../../services/providers/clients.ts"
import { decodeMessagesRequest, type MessagesPassthroughRequest } from "../../../wire/anthropic-messages.ts"
import {
  auditUsageFromConverse,
  ConverseToAnthropicStream,
  converseResponseToAnthropic
} from "../../../wire/translate/converse-to-anthropic.ts"
import { messagesRequestToConverse } from "../../../wire/translate/messages-request-to-converse.ts"
import { auditUsageFromAnthropic } from "../../../wire/translate/usage.ts"
import type { Adapter, AdapterContext } from "../adapter.ts"
import { flattenEach } from "../stream-chunks.ts"
import { recordAuditUsage, untranslatable } from "../usage.ts"
import { recordDropped } from "../dropped.ts"
import { MESSAGES_TO_CONVERSE_DROPS, presentFields } from "../../../wire/translate/dropped-fields.ts"
import { eventOf } from "./anthropic.ts"

/** Translation needs every field known: the client's body is decoded strictly, then translated. */
export const messagesAsConverse = ({ raw, resolved, headers, state }: AdapterContext) =>
  Effect.flatMap(decodedOrFail(decodeMessagesRequest(raw)), (request) => {
    recordDropped(state, presentFields(raw, MESSAGES_TO_CONVERSE_DROPS))
    const result = messagesRequestToConverse(request, { maxTokensCap: resolved.model.max_tokens, betas: headers["anthropic-beta"] })
    return Result.isFailure(result) ? Effect.fail(untranslatable(result.failure)) : Effect.succeed({ request, body: result.success })
  })

export const messagesToBedrock: Adapter<MessagesPassthroughRequest, BedrockClient> = {
  complete: (client, _, context) =>
    Effect.flatMap(messagesAsConverse(context), ({ request, body }) =>
      Effect.map(client.converse(context.resolved.model.id, body), (response) => {
        recordAuditUsage(context.state, auditUsageFromConverse(response.usage))
        return converseResponseToAnthropic(response, { model: context.resolved.model.id })
      })),
  stream: (client, _, context) =>
    Effect.flatMap(messagesAsConverse(context), ({ body }) =>
      Effect.map(Effect.zip(client.converseStream(context.resolved.model.id, body), context.tokens.messagesInput(context.raw)), ([upstream, estimatedInputTokens]) => {
        const machine = new ConverseToAnthropicStream({ model: context.resolved.model.id, estimatedInputTokens })
        return upstream.pipe(
          Stream.map((event) => machine.push(event).map(eventOf)),
          Stream.concat(Stream.suspend(() => Stream.make(machine.end().map(eventOf)))),
          flattenEach,
          Stream.ensuring(Effect.sync(() => recordAuditUsage(context.state, auditUsageFromAnthropic(machine.usage()))))
        )
      }))
}
