/**
 * `count_tokens` for a Bedrock-kind model: Bedrock's `CountTokens` counts the request as the
 * model will see it, translated to Converse exactly as a Messages request would be. Bedrock
 * offers CountTokens for some models only (Claude); where it does not, and where the request
 * has something the translation refuses, the answer is `undefined` and the caller estimates.
 */
import { Effect, Result } from "effect"
import type { ResolvedModel } from "../../../services/catalog/ModelCatalog.ts"
import type { BedrockClient } from "../../../services/providers/clients.ts"
import { decodeMessagesRequest } from "../../../wire/anthropic-messages.ts"
import { messagesRequestToConverse } from "../../../wire/translate/messages-request-to-converse.ts"

/** Bedrock's words for "this model has no CountTokens". */
const NOT_OFFERED = /doesn'?t support|does not support|not supported|unsupported/i

export const bedrockCountTokens = (
  client: BedrockClient,
  raw: Record<string, unknown>,
  resolved: ResolvedModel,
  betas: string | undefined
): Effect.Effect<number | undefined, Effect.Error<ReturnType<BedrockClient["countTokens"]>>> => {
  // A count has no output limit; the translation wants one, and it is not sent.
  const decoded = decodeMessagesRequest({ ...raw, max_tokens: 2 ** 31 - 1 })
  if (!decoded.ok) return Effect.succeed(undefined)
  const converse = messagesRequestToConverse(decoded.value, { maxTokensCap: resolved.model.max_tokens, betas })
  if (Result.isFailure(converse)) return Effect.succeed(undefined)
  const { messages, system, toolConfig, additionalModelRequestFields } = converse.success
  const input = {
    messages,
    ...(system === undefined ? {} : { system }),
    ...(toolConfig === undefined ? {} : { toolConfig }),
    ...(additionalModelRequestFields === undefined ? {} : { additionalModelRequestFields })
  }
  return client.countTokens(resolved.model.id, { input: { converse: input } }).pipe(
    Effect.map((counted) => (typeof counted.inputTokens === "number" ? counted.inputTokens : undefined)),
    Effect.catchIf(
      (error) => error._tag === "ValidationFailed" && NOT_OFFERED.test(error.message),
      () => Effect.succeed(undefined)
    )
  )
}
