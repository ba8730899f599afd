/**
 * `POST /v1/embeddings` on a Bedrock-kind model: the request planned as InvokeModel calls
 * (src/wire/translate/bedrock-embeddings.ts), made a few at a time, and the answers joined into
 * the OpenAI shape in input order. One failed call fails the request.
 */
import { Effect } from "effect"
import { ProviderError } from "../../domain/errors.ts"
import type { ResolvedModel } from "../../services/catalog/ModelCatalog.ts"
import type { BedrockClient } from "../../services/providers/clients.ts"
import type { EmbeddingsRequest } from "../../wire/openai-embeddings.ts"
import { bedrockEmbeddingsPlan, bedrockEmbeddingsResponse } from "../../wire/translate/bedrock-embeddings.ts"
import { Result } from "effect"
import { untranslatable } from "./usage.ts"

/** Calls to Bedrock in flight for one request: a fan-out must not take a provider's whole pool. */
const CONCURRENT_CALLS = 4

export const bedrockEmbeddings = Effect.fnUntraced(function*(client: BedrockClient, request: EmbeddingsRequest, resolved: ResolvedModel) {
  const plan = bedrockEmbeddingsPlan(request, resolved.model.id)
  if (Result.isFailure(plan)) return yield* untranslatable(plan.failure)
  const answers = yield* Effect.forEach(plan.success.calls, (body) => client.invokeModel(resolved.model.id, body), {
    concurrency: CONCURRENT_CALLS
  })
  const response = bedrockEmbeddingsResponse(plan.success, answers, request, resolved.model.id)
  if (response === undefined) {
    return yield* new ProviderError({
      message: `provider "${client.name}" answered with no embeddings the gateway could read`,
      details: { provider: client.name, upstream_status: 200, upstream_error: { message: `not a ${plan.success.family} embeddings answer` } }
    })
  }
  return response
})
