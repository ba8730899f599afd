/**
 * `POST /v1/completions` and `POST /v1/moderations` (issue 24 item 3): OpenAI's endpoints that
 * have no counterpart elsewhere, forwarded to OpenAI-kind providers and admitted, charged,
 * limited and audited like any model call.
 *
 * Legacy completions go only to an OpenAI-kind provider; a model behind another kind is refused
 * with a 400 naming the model. Translating to chat was the alternative, and was decided against:
 * what uses this endpoint today is editor autocompletion (a raw `prompt`, often with a `suffix`
 * for fill-in-the-middle, and `echo`/`logprobs`/`best_of`), which a chat model answers with a
 * reply rather than a continuation, so a translation would look like it works and complete
 * badly. The refusal says to use a completion model or /v1/chat/completions.
 *
 * Moderations name no gateway model: OpenAI's moderation models are free and chosen by the
 * vendor, so the request (its `model`, if any, included) goes to the provider named in
 * `moderations.provider`, priced `moderations.credits`; without that setting the endpoint is a
 * 404 naming it.
 */
import { Effect, Stream } from "effect"
import { NotFound, ValidationFailed } from "../../domain/errors.ts"
import { decodedOrFail } from "../../domain/validation.ts"
import { AppConfig } from "../../services/config/AppConfig.ts"
import { Providers } from "../../services/providers/Providers.ts"
import { decodeLegacyCompletionRequest, decodeModerationRequest } from "../../wire/openai-completions.ts"
import { admitCosts, admitModelRequest } from "../admission.ts"
import { meterOf, relayOutput } from "../metering.ts"
import { chatOutputText } from "./output-text.ts"
import { authenticated } from "../authenticate.ts"
import { CurrentRequest, RequestBody } from "../request.ts"
import { eventStreamResponse, json } from "../respond.ts"
import { chatCompletionsFormat } from "./chat/format.ts"
import { recordChatUsage } from "./usage.ts"

export const legacyCompletionsPipeline = authenticated(Effect.gen(function*() {
  const state = yield* CurrentRequest
  const { raw, request, resolved } = yield* admitModelRequest(decodeLegacyCompletionRequest)
  const client = (yield* Providers).client(resolved.provider.name)
  if (client.kind !== "openai" || client.legacy === undefined) {
    return yield* new ValidationFailed({
      message: `model "${resolved.requested}" is served by ${
        client.kind === "openai" ? "a provider without an upstream" : `an ${client.kind}-kind provider`
      }; legacy completions (POST /v1/completions) are forwarded only to OpenAI-kind providers: use a completion model there, or /v1/chat/completions`,
      details: { field: "model", model: resolved.requested }
    })
  }
  const cap = resolved.model.max_tokens
  const body: Record<string, unknown> = {
    ...raw,
    model: resolved.model.id,
    // The cap applies here as everywhere; OpenAI's default for this endpoint is 16.
    ...(typeof request.max_tokens === "number" && request.max_tokens > cap ? { max_tokens: cap } : {})
  }
  if (request.stream !== true) {
    const answer = yield* client.legacy.completions(body)
    if (answer.usage) recordChatUsage(state, { prompt_tokens: answer.usage.prompt_tokens ?? 0, completion_tokens: answer.usage.completion_tokens ?? 0, total_tokens: 0 })
    return json(answer)
  }
  // The upstream is always asked for its usage, as a chat stream's is (openai-chat.ts): without
  // it a stream carries no token counts, and a token-priced request would be charged an estimate.
  // The usage-only chunk reaches the client only when it asked for it.
  const clientWantsUsage = request.stream_options?.include_usage === true
  const streamOptions = raw["stream_options"]
  body["stream_options"] = { ...(streamOptions !== null && typeof streamOptions === "object" ? streamOptions : {}), include_usage: true }
  const upstream = yield* client.legacy.completionsStream(body)
  // A token-priced request counts the text it relays, in case the stream ends before its usage (metering.ts).
  const meter = meterOf(state.scope)
  const frames = upstream.pipe(
    Stream.filter((item) => {
      const usage = item.chunk.usage
      if (usage) recordChatUsage(state, usage)
      return clientWantsUsage || !(usage && Array.isArray(item.chunk.choices) && item.chunk.choices.length === 0)
    }),
    Stream.map((item) => {
      if (meter !== undefined) relayOutput(meter, chatOutputText({ data: item.raw, value: item.chunk }))
      return `data: ${item.raw}\n\n`
    })
  )
  // Framed like chat's stream (the same SSE, `[DONE]` last, a failure as one envelope frame).
  const framer = chatCompletionsFormat.framer(state, undefined as never)
  const end = Stream.sync(() => {
    if (meter !== undefined) meter.completed = true
    return framer.end()
  })
  return yield* eventStreamResponse(Stream.concat(frames, end), framer.failure)
}))

export const moderationsPipeline = authenticated(Effect.gen(function*() {
  const state = yield* CurrentRequest
  // Read once: a config reload meanwhile does not change this request's provider or price.
  const moderations = (yield* AppConfig).moderations
  const raw = yield* (yield* RequestBody).jsonObject
  const request = yield* decodedOrFail(decodeModerationRequest(raw))
  const providerName = moderations.provider
  if (providerName === undefined) {
    return yield* new NotFound({
      message: "moderations are not configured on this gateway (moderations.provider names the OpenAI-kind provider that answers them)",
      details: { setting: "moderations.provider" }
    })
  }
  const client = (yield* Providers).client(providerName)
  const model = request.model ?? "moderation"
  state.audit.model = model
  state.audit.provider = providerName
  yield* admitCosts({ scope: state.scope, stream: false, model, credits: moderations.credits })
  if (client.kind !== "openai" || client.legacy === undefined) {
    // load.ts allows only an OpenAI-kind provider here; a client without an upstream is echo.
    return yield* new NotFound({
      message: `provider "${providerName}" cannot answer moderations`,
      details: { setting: "moderations.provider" }
    })
  }
  const answer = yield* client.legacy.moderations({ ...raw })
  return json(answer)
}))
