/**
 * `POST /v1/embeddings` (OpenAI): forwarded to OpenAI-kind providers (the body as sent, the
 * model id replaced, the answer relayed as it arrives), translated for Bedrock's Titan and Cohere
 * embedding models and Gemini's `:batchEmbedContents` (the Gemini API's), and answered
 * by the echo provider with deterministic vectors offline.
 * Anthropic has no embeddings API, so an Anthropic-kind model is a 400 naming the model, as is
 * any model whose entry does not list `embeddings`. Admitted, charged and audited like any
 * model request.
 */
import { Effect } from "effect"
import { ValidationFailed } from "../../domain/errors.ts"
import { Providers } from "../../services/providers/Providers.ts"
import { decodeEmbeddingsRequest, type EmbeddingsRequest } from "../../wire/openai-embeddings.ts"
import { admitModelRequest } from "../admission.ts"
import { authenticated } from "../authenticate.ts"
import { CurrentRequest } from "../request.ts"
import { json, relayedJsonResponse } from "../respond.ts"
import { TokenEstimator } from "../../services/tokens/TokenEstimator.ts"
import { bedrockEmbeddings } from "./bedrock-embeddings.ts"
import { clientOfTarget, makePlan, type Target } from "./route.ts"
import { tokenCount } from "./usage.ts"
import { geminiEmbeddings } from "./gemini-embeddings.ts"

/**
 * One attempt: the target's provider embeds (Bedrock and Gemini translated and answered whole,
 * OpenAI-kind relayed). Defined once, not a generator made per request (README, Generators made per request).
 */
const embedOn = Effect.fnUntraced(function*(target: Target, input: {
  readonly providers: Providers["Service"]
  readonly tokens: TokenEstimator["Service"]
  readonly request: EmbeddingsRequest
  readonly raw: Record<string, unknown>
  readonly requested: string
}) {
  const { providers, tokens, request, raw } = input
  const client = yield* clientOfTarget(providers, target)
  const model = target.resolved.model.id
  if (client.kind === "bedrock") return { _tag: "whole" as const, response: yield* bedrockEmbeddings(client, request, target.resolved) }
  if (client.kind === "gemini" && client.batchEmbed !== undefined) {
    return { _tag: "whole" as const, response: yield* Effect.provideService(geminiEmbeddings(client, client.batchEmbed, request, target.resolved), TokenEstimator, tokens) }
  }
  if (client.kind !== "openai") {
    return yield* new ValidationFailed({
      message: `model "${input.requested}" is served by an ${client.kind}-kind provider, which has no embeddings API`,
      details: { field: "model", model: input.requested }
    })
  }
  return { _tag: "relayed" as const, relay: yield* client.relayEmbeddings({ ...raw, model }) }
})

export const embeddingsPipeline = authenticated(Effect.gen(function*() {
  const state = yield* CurrentRequest
  const { raw, request, resolved } = yield* admitModelRequest(decodeEmbeddingsRequest, { endpoint: "embeddings" })
  const providers = yield* Providers
  // Gemini's answer estimates its input tokens: the estimator goes with each attempt.
  const tokens = yield* TokenEstimator
  // Routed like the other model calls (issue 20): each attempt goes to one deployment, failures
  // of the provider are retried on another (cooling it down), then on the fallbacks that serve
  // embeddings. An attempt has answered once the upstream accepted the request.
  const plan = yield* makePlan(resolved, "embeddings")
  const answered = yield* plan.run((target) => embedOn(target, { providers, tokens, request, raw, requested: resolved.requested }))
  yield* answered.running.end({ answeredSeconds: answered.answeredSeconds })
  const value = answered.value
  if (value._tag === "whole") {
    state.audit.prompt_tokens = tokenCount(value.response.usage.prompt_tokens)
    state.audit.completion_tokens = 0
    return json(value.response)
  }
  // Relayed as it arrives, never held whole (issue 22, findings 4 and 5); the usage the answer
  // reports is read from its tail into the audit record once it has passed.
  const relay = value.relay
  state.audit.completion_tokens = 0
  return yield* relayedJsonResponse(relay.bytes, () => {
    state.audit.prompt_tokens = relay.promptTokens() ?? null
  })
}))
