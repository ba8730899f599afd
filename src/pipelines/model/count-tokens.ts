/**
 * `POST /v1/messages/count_tokens`: Anthropic-kind providers count (the body is forwarded as
 * sent, with the model id replaced, and the client's version and beta headers), Bedrock-kind ones
 * through Bedrock's CountTokens where the model offers it, Gemini and Vertex models through
 * Gemini's `:countTokens` or Vertex's Claude count-tokens endpoint; for other providers the gateway estimates with a tokenizer (services/tokens) in the same response shape.
 * Authenticated, rate limited, scoped and audited like any model request; it costs
 * `count_tokens.credits` (0 unless configured) and counts against a key's request budget.
 * The count is not consumption: it goes in the record's details (`input_tokens`), never in its
 * `prompt_tokens`, so `/usage` and `modelgate_tokens_total` do not book it (issue 22, finding 10).
 */
import { Effect } from "effect"
import type { Headers } from "effect/http/Headers"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import { AppConfig } from "../../services/config/AppConfig.ts"
import { Providers } from "../../services/providers/Providers.ts"
import { TokenEstimator } from "../../services/tokens/TokenEstimator.ts"
import { decodeCountTokensRequest } from "../../wire/anthropic-count-tokens.ts"
import { admitModelRequest } from "../admission.ts"
import { authenticated } from "../authenticate.ts"
import { CurrentRequest, type RequestState } from "../request.ts"
import { json } from "../respond.ts"
import { forVendor, forwardedAnthropicHeaders } from "./messages/anthropic.ts"
import { bedrockCountTokens } from "./messages/bedrock-count-tokens.ts"
import { clientOfTarget, makePlan, type Target } from "./route.ts"
import { tokenCount } from "./usage.ts"
import { geminiCountTokens } from "./messages/gemini-count-tokens.ts"
import { isVertexClaude } from "./vertex.ts"
import { turnIfLargeBody } from "../../wire/turns.ts"

/**
 * One attempt: the target's provider counts, else the gateway estimates. Defined once, not a
 * generator made per request (README, Generators made per request).
 */
const countOn = Effect.fnUntraced(function*(target: Target, input: {
  readonly providers: Providers["Service"]
  readonly estimator: TokenEstimator["Service"]
  readonly headers: Headers
  readonly raw: Record<string, unknown>
  readonly state: RequestState
}) {
  const { providers, estimator, headers, raw, state } = input
  const client = yield* clientOfTarget(providers, target)
  // A Claude model on Vertex counts through Vertex's count-tokens endpoint, as an Anthropic-kind model does.
  const anthropic = client.kind === "anthropic"
    ? client
    : client.kind === "vertex" && isVertexClaude(target.resolved.model.id)
    ? client.anthropicFor(target.resolved.model.id)
    : undefined
  if (anthropic !== undefined) {
    const body = forVendor(raw, target.resolved.provider.kind, state)
    const counted = yield* anthropic.countTokens({ ...body, model: target.resolved.model.id }, forwardedAnthropicHeaders(headers))
    return { body: counted as unknown, input_tokens: counted.input_tokens, estimated: false }
  }
  if (client.kind === "bedrock") {
    const counted = yield* bedrockCountTokens(client, raw, target.resolved, headers["anthropic-beta"])
    if (counted !== undefined) return { body: { input_tokens: counted } as unknown, input_tokens: counted, estimated: false }
  }
  const gemini = client.kind === "gemini" ? client : client.kind === "vertex" ? client.gemini : undefined
  if (gemini !== undefined) {
    const counted = yield* geminiCountTokens(gemini, raw, target.resolved)
    if (counted !== undefined) return { body: { input_tokens: counted } as unknown, input_tokens: counted, estimated: false }
  }
  const estimate = yield* estimator.messagesInput(raw)
  return { body: { input_tokens: estimate } as unknown, input_tokens: estimate, estimated: true }
})

export const countTokensPipeline = authenticated(Effect.gen(function*() {
  const state = yield* CurrentRequest
  const credits = (yield* AppConfig).count_tokens.credits
  const { raw, resolved } = yield* admitModelRequest(decodeCountTokensRequest, { credits, countsTokens: false })
  state.audit.details = { operation: "count_tokens" }
  const providers = yield* Providers
  const estimator = yield* TokenEstimator
  const headers = (yield* HttpServerRequest).headers
  // Routed over the model's deployments with their retries and cooldowns (issue 20), but not to
  // its fallbacks: a count is priced `count_tokens.credits`, not a model's credits, and another
  // model's count would not be this model's.
  const plan = yield* makePlan({ ...resolved, model: { ...resolved.model, fallbacks: [] } }, "chat")
  // A large body was decoded and admitted on this turn: it is translated on the next.
  yield* turnIfLargeBody(raw)
  const answered = yield* plan.run((target) => countOn(target, { providers, estimator, headers, raw, state }))
  yield* answered.running.end({ answeredSeconds: answered.answeredSeconds })
  const { body, input_tokens, estimated } = answered.value
  state.audit.details = estimated
    ? { ...state.audit.details, operation: "count_tokens", input_tokens, estimated: true }
    : { ...state.audit.details, operation: "count_tokens", input_tokens: tokenCount(input_tokens) }
  return json(body)
}))
