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
import { decodeEmbeddingsRequest } from "../../wire/openai-embeddings.ts"
import { admitModelRequest } from "../admission.ts"
import { authenticated } from "../authenticate.ts"
import { CurrentRequest } from "../request.ts"
import { json, relayedJsonResponse } from "../respond.ts"
import { bedrockEmbeddings } from "./bedrock-embeddings.ts"
import { tokenCount } from "./usage.ts"
import { geminiEmbeddings } from "./gemini-embeddings.ts"

export const embeddingsPipeline = authenticated(Effect.gen(function*() {
  const state = yield* CurrentRequest
  const { raw, request, resolved } = yield* admitModelRequest(decodeEmbeddingsRequest, { endpoint: "embeddings" })
  const client = (yield* Providers).client(resolved.provider.name)
  if (client.kind === "bedrock") {
    const response = yield* bedrockEmbeddings(client, request, resolved)
    state.audit.prompt_tokens = tokenCount(response.usage.prompt_tokens)
    state.audit.completion_tokens = 0
    return json(response)
  }
  if (client.kind === "gemini" && client.batchEmbed !== undefined) {
    const response = yield* geminiEmbeddings(client, client.batchEmbed, request, resolved)
    state.audit.prompt_tokens = response.usage.prompt_tokens
    state.audit.completion_tokens = 0
    return json(response)
  }
  if (client.kind !== "openai") {
    return yield* new ValidationFailed({
      message: `model "${resolved.requested}" is served by an ${client.kind}-kind provider, which has no embeddings API`,
      details: { field: "model", model: resolved.requested }
    })
  }
  // Relayed as it arrives, never held whole (issue 22, findings 4 and 5); the usage the answer
  // reports is read from its tail into the audit record once it has passed.
  const relay = yield* client.relayEmbeddings({ ...raw, model: resolved.model.id })
  state.audit.completion_tokens = 0
  return yield* relayedJsonResponse(relay.bytes, () => {
    state.audit.prompt_tokens = relay.promptTokens() ?? null
  })
}))
