/**
 * Google's Gemini `generateContent` over HTTP: the Gemini API (`{base}/v1beta/models/{model}:
 * generateContent`, `:streamGenerateContent?alt=sse`, `:countTokens`, `:batchEmbedContents`,
 * the key in `x-goog-api-key`), or Vertex AI's Google models through the same code with another
 * endpoint (vertex.ts: project and location in the path, a bearer token). Google's errors are
 * `{error: {code, message, status, details}}`; a bad or missing API key comes as a 400 there,
 * which is the operator's problem, not the client's: a 502.
 */
import { Effect, Stream } from "effect"
import type { Agent } from "undici"
import { NotFound, ProviderError, ValidationFailed } from "../../domain/errors.ts"
import type {
  GeminiBatchEmbedResponse,
  GeminiCountTokensRequest,
  GeminiCountTokensResponse,
  GenerateContentRequest,
  GenerateContentResponse
} from "../../wire/gemini.ts"
import { geminiBaseUrl } from "../config/cloud-kinds.ts"
import type { ProviderConfig } from "../config/schema.ts"
import { endedEarly, type FirstByteRecorder, type GeminiClient, malformed, midStreamError, timedToFirstByte } from "./clients.ts"
import { makeRedactor, type Redact } from "./redact.ts"
import { type EventOutcome, mapEventsOrFail, postJson, readJson, sseEvents, type UpstreamFailure } from "./upstream-http.ts"
import { type GenAiOperation, tracedCall, tracedStream } from "./upstream-span.ts"
import { parseJsonWithin } from "../../wire/json-depth.ts"

export type GeminiMethod = "generateContent" | "streamGenerateContent" | "countTokens" | "batchEmbedContents"

/** Where a Gemini client sends a model's calls and how it authenticates them. */
export interface GeminiEndpoint {
  /** The method's URL for the model, without query. */
  readonly url: (model: string, method: GeminiMethod) => string
  /** Auth headers, fetched per call (a bearer token may need refreshing). */
  readonly headers: Effect.Effect<Record<string, string>, UpstreamFailure>
  readonly redact: Redact
  readonly server: string
  /** Whether `:batchEmbedContents` exists there (the Gemini API's; Vertex has none). */
  readonly batchEmbed: boolean
  /** The body of `:countTokens` for a request: the Gemini API wraps it with the model, Vertex takes its fields flat. */
  readonly countBody: (model: string, request: GenerateContentRequest) => GeminiCountTokensRequest | GenerateContentRequest
}

export const geminiApiEndpoint = (provider: ProviderConfig, env: Readonly<Record<string, string | undefined>>): GeminiEndpoint => {
  const key = provider.api_key ?? (provider.api_key_env === undefined ? undefined : env[provider.api_key_env])
  const base = geminiBaseUrl(provider)
  return {
    url: (model, method) => `${base}/v1beta/models/${encodeURIComponent(model)}:${method}`,
    headers: Effect.succeed<Record<string, string>>(key ? { "x-goog-api-key": key } : {}),
    redact: makeRedactor([key]),
    server: new URL(base).host,
    batchEmbed: true,
    countBody: (model, request) => ({ generateContentRequest: { model: `models/${model}`, ...request } })
  }
}

/** Google's reasons for a credential the operator must fix. */
const CREDENTIAL_REASONS = new Set(["API_KEY_INVALID", "API_KEY_EXPIRED", "API_KEY_SERVICE_BLOCKED", "ACCESS_TOKEN_EXPIRED", "ACCESS_TOKEN_TYPE_UNSUPPORTED"])

/** A Google error answer as the gateway's error: the client's (400, 404 for a model) or the provider's (502). */
export const googleFailure = (provider: string, redact: Redact) =>
(status: number, body: string, headers: Record<string, string | string[] | undefined>): UpstreamFailure => {
  let error: Record<string, unknown> = {}
  try {
    const parsed = JSON.parse(body) as unknown
    // Vertex's stream endpoints wrap the error in an array.
    const root = Array.isArray(parsed) ? parsed[0] : parsed
    if (typeof root === "object" && root !== null && typeof (root as { error?: unknown }).error === "object") {
      error = (root as { error: Record<string, unknown> }).error
    }
  } catch {
    // Not JSON: the text itself is the evidence.
  }
  const message = redact((typeof error.message === "string" ? error.message : body).slice(0, 1000))
  const reasons = Array.isArray(error.details)
    ? error.details.map((detail) => (typeof detail === "object" && detail !== null ? (detail as { reason?: unknown }).reason : undefined))
    : []
  const details = {
    provider,
    upstream_status: status,
    upstream_error: { type: typeof error.status === "string" ? error.status : null, code: typeof error.code === "number" ? error.code : null, message }
  }
  const credential = reasons.some((reason) => typeof reason === "string" && CREDENTIAL_REASONS.has(reason))
  if (!credential && (status === 400 || status === 413 || status === 422)) {
    return new ValidationFailed({ message: `provider "${provider}" refused the request (${status}): ${message}`, details })
  }
  if (status === 404 && /\bmodels?\b/i.test(message)) return new NotFound({ message: `provider "${provider}" does not know the model: ${message}`, details })
  const retryAfter = headers["retry-after"]
  return new ProviderError({
    message: `provider "${provider}" answered ${status}: ${message}`,
    details,
    ...(retryAfter === undefined ? {} : { retryAfter: Array.isArray(retryAfter) ? retryAfter[0]! : retryAfter })
  })
}

export const makeGeminiClient = (
  provider: ProviderConfig,
  agent: Agent,
  firstByte: FirstByteRecorder | undefined,
  endpoint: GeminiEndpoint
): GeminiClient => {
  const { redact } = endpoint
  const failure = googleFailure(provider.name, redact)
  const post = (url: string, body: unknown) =>
    timedToFirstByte(
      Effect.flatMap(endpoint.headers, (headers) => postJson({ provider: provider.name, agent, url, headers, body, redact, failure })),
      firstByte
    )
  const call = (model: string, body: unknown, stream: boolean, operation: GenAiOperation) =>
    ({ provider: provider.name, kind: provider.kind, model, server: endpoint.server, body: body as Record<string, unknown>, stream, operation })
  const operations: Record<GeminiMethod, GenAiOperation> = {
    generateContent: "generate_content",
    streamGenerateContent: "generate_content",
    countTokens: "count_tokens",
    batchEmbedContents: "embeddings"
  }
  const json = <A>(model: string, method: GeminiMethod, body: unknown) =>
    tracedCall(call(model, body, false, operations[method]), Effect.flatMap(post(endpoint.url(model, method), body), (response) => readJson<A>(provider.name, response, redact, provider.max_response_bytes)))
  return {
    kind: "gemini",
    name: provider.name,
    generate: (model, body) => json<GenerateContentResponse>(model, "generateContent", body),
    countTokens: (model, body) => json<GeminiCountTokensResponse>(model, "countTokens", endpoint.countBody(model, body)),
    batchEmbed: endpoint.batchEmbed ? (model, body) => json<GeminiBatchEmbedResponse>(model, "batchEmbedContents", body) : undefined,
    streamGenerate: (model, body: GenerateContentRequest) =>
      tracedStream(call(model, body, true, "generate_content"), Effect.map(post(`${endpoint.url(model, "streamGenerateContent")}?alt=sse`, body), (response) => {
        // A finish reason (or a blocked prompt) is how Gemini says the answer is whole.
        let finished = false
        return sseEvents(provider.name, response).pipe(
          Stream.filter((event) => event.data.trim() !== ""),
          mapEventsOrFail((event): EventOutcome<GenerateContentResponse, ProviderError> => {
            let parsed: unknown
            try {
              parsed = parseJsonWithin(event.data)
            } catch {
              return { ok: false, error: malformed(provider.name, event.data, redact) }
            }
            if (typeof parsed !== "object" || parsed === null) return { ok: false, error: malformed(provider.name, event.data, redact) }
            const error = (parsed as { error?: Record<string, unknown> }).error
            if (error !== undefined) return { ok: false, error: midStreamError(provider.name, { ...error, type: error.status ?? null }, redact) }
            const chunk = parsed as GenerateContentResponse
            if (chunk.candidates?.some((candidate) => candidate.finishReason !== undefined) || chunk.promptFeedback?.blockReason !== undefined) {
              finished = true
            }
            return { ok: true, value: chunk }
          }),
          Stream.concat(Stream.suspend(() => (finished ? Stream.empty : Stream.fail(endedEarly(provider.name, "a finish reason")))))
        )
      }))
  }
}
