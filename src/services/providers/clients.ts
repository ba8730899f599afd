/**
 * The provider kinds, as clients the pipelines call. `openai` speaks Chat Completions to any
 * compatible base URL; `anthropic` speaks Messages; `bedrock` speaks AWS Bedrock's Converse
 * (bedrock.ts); `echo` is built in and speaks Chat Completions without any network.
 */
import { Effect, Stream } from "effect"
import type { Agent } from "undici"
import { ProviderError } from "../../domain/errors.ts"
import type { AnthropicResponse, AnthropicStreamEvent } from "../../wire/anthropic-messages.ts"
import type {
  ConverseRequest,
  ConverseResponse,
  ConverseStreamEvent,
  CountTokensRequest,
  CountTokensResponse
} from "../../wire/bedrock-converse.ts"
import type {
  GeminiBatchEmbedRequest,
  GeminiBatchEmbedResponse,
  GeminiCountTokensResponse,
  GenerateContentRequest,
  GenerateContentResponse
} from "../../wire/gemini.ts"
import type { ChatChunk, ChatResponse } from "../../wire/openai-chat.ts"
import { type EmbeddingsResponse, promptTokensFromTail } from "../../wire/openai-embeddings.ts"
import { parseJsonWithin } from "../../wire/json-depth.ts"
import type { ResponsesResponse } from "../../wire/openai-responses.ts"
import { isTerminalResponsesEvent } from "../../wire/responses-stream.ts"
import type { ProviderConfig } from "../config/schema.ts"
import { makeRedactor, type Redact } from "./redact.ts"
import { type EventOutcome, mapEventsOrFail, postForJson, postJson, relayBody, sseEvents, type UpstreamFailure } from "./upstream-http.ts"
import { type GenAiOperation, tracedCall, tracedStream } from "./upstream-span.ts"

/** A chunk as parsed, plus its exact text so a passthrough can forward it without re-serialising. */
export interface ChatStreamItem {
  readonly chunk: ChatChunk
  readonly raw: string
}

/** A Responses API event as parsed, plus its exact text and event name, for forwarding. */
export interface ResponsesStreamItem {
  readonly event: Record<string, unknown> & { readonly type: string }
  readonly raw: string
}

export interface OpenAIClient {
  readonly kind: "openai"
  readonly name: string
  readonly complete: (body: Record<string, unknown>) => Effect.Effect<ChatResponse, UpstreamFailure>
  /** Resolves once the upstream accepted the request (status known), then streams its chunks. */
  readonly stream: (body: Record<string, unknown>) => Effect.Effect<Stream.Stream<ChatStreamItem, UpstreamFailure>, UpstreamFailure>
  /**
   * The provider's own Responses API (`POST /responses`), when it serves one (config
   * `responses_api`); `undefined` otherwise, and Responses clients are translated to Chat.
   */
  readonly responses:
    | {
      readonly complete: (body: Record<string, unknown>) => Effect.Effect<ResponsesResponse, UpstreamFailure>
      readonly stream: (body: Record<string, unknown>) => Effect.Effect<Stream.Stream<ResponsesStreamItem, UpstreamFailure>, UpstreamFailure>
    }
    | undefined
  /** `POST /embeddings`. */
  readonly embeddings: (body: Record<string, unknown>) => Effect.Effect<EmbeddingsResponse, UpstreamFailure>
  /**
   * `POST /embeddings`, the answer passed on as it arrives instead of held whole (issue 22,
   * finding 5: 2,048 inputs x 3,072 dimensions are ~75 MiB a request).
   */
  readonly relayEmbeddings: (body: Record<string, unknown>) => Effect.Effect<EmbeddingsRelay, UpstreamFailure>
  /**
   * OpenAI's other endpoints, forwarded as sent (issue 24 item 3): legacy `POST /completions`
   * (its stream is Chat's SSE shape: choices with a `finish_reason`, then `[DONE]`) and
   * `POST /moderations`. Absent on clients without an upstream (echo, scripted).
   */
  readonly legacy?: {
    readonly completions: (body: Record<string, unknown>) => Effect.Effect<LegacyAnswer, UpstreamFailure>
    readonly completionsStream: (body: Record<string, unknown>) => Effect.Effect<Stream.Stream<ChatStreamItem, UpstreamFailure>, UpstreamFailure>
    readonly moderations: (body: Record<string, unknown>) => Effect.Effect<LegacyAnswer, UpstreamFailure>
  }
}

/** A relayed embeddings answer: its JSON bytes, and once they have ended the input tokens it reported. */
export interface EmbeddingsRelay {
  readonly bytes: Stream.Stream<Uint8Array, UpstreamFailure>
  readonly promptTokens: () => number | undefined
}

/** A legacy completion or a moderation as the provider answered it; `usage` read for the audit. */
export type LegacyAnswer = Record<string, unknown> & {
  readonly usage?: { readonly prompt_tokens?: number; readonly completion_tokens?: number } | null
}

/**
 * Request headers a Messages client sends that change what the request means
 * (`anthropic-beta`, and `anthropic-version`); a passthrough forwards them so the vendor judges
 * its own format. Without them the provider's configured `anthropic_version` is sent.
 */
export interface AnthropicHeaders {
  readonly "anthropic-version"?: string | undefined
  readonly "anthropic-beta"?: string | undefined
}

export interface AnthropicClient {
  readonly kind: "anthropic"
  readonly name: string
  readonly complete: (body: Record<string, unknown>, headers?: AnthropicHeaders) => Effect.Effect<AnthropicResponse, UpstreamFailure>
  readonly stream: (
    body: Record<string, unknown>,
    headers?: AnthropicHeaders
  ) => Effect.Effect<Stream.Stream<AnthropicStreamEvent, UpstreamFailure>, UpstreamFailure>
  /** `POST /v1/messages/count_tokens`: the provider's own count of a request's input tokens. */
  readonly countTokens: (body: Record<string, unknown>, headers?: AnthropicHeaders) => Effect.Effect<{ readonly input_tokens: number }, UpstreamFailure>
}

/** AWS Bedrock (bedrock.ts): signed with SigV4, chat through the Converse API. */
export interface BedrockClient {
  readonly kind: "bedrock"
  readonly name: string
  readonly converse: (modelId: string, body: ConverseRequest) => Effect.Effect<ConverseResponse, UpstreamFailure>
  /** Resolves once Bedrock accepted the request (status known), then streams its events, `metadata` last. */
  readonly converseStream: (
    modelId: string,
    body: ConverseRequest
  ) => Effect.Effect<Stream.Stream<ConverseStreamEvent, UpstreamFailure>, UpstreamFailure>
  /** `CountTokens`: the model's own count of a Converse input. */
  readonly countTokens: (modelId: string, body: CountTokensRequest) => Effect.Effect<CountTokensResponse, UpstreamFailure>
  /** `InvokeModel` with the model's native JSON body (the embedding models), and the input tokens Bedrock counted. */
  readonly invokeModel: (modelId: string, body: Record<string, unknown>) => Effect.Effect<InvokeModelAnswer, UpstreamFailure>
}

export interface InvokeModelAnswer {
  readonly body: unknown
  /** The `x-amzn-bedrock-input-token-count` header. */
  readonly inputTokens: number | undefined
}

/** Google's Gemini (gemini.ts): the Gemini API with an API key, or Vertex AI's Google models with a bearer token. */
export interface GeminiClient {
  readonly kind: "gemini"
  readonly name: string
  readonly generate: (model: string, body: GenerateContentRequest) => Effect.Effect<GenerateContentResponse, UpstreamFailure>
  /** Resolves once Gemini accepted the request (status known), then streams its events. */
  readonly streamGenerate: (
    model: string,
    body: GenerateContentRequest
  ) => Effect.Effect<Stream.Stream<GenerateContentResponse, UpstreamFailure>, UpstreamFailure>
  /** `:countTokens` of a whole request (its contents, system instruction and tools). */
  readonly countTokens: (model: string, body: GenerateContentRequest) => Effect.Effect<GeminiCountTokensResponse, UpstreamFailure>
  /** `:batchEmbedContents`; `undefined` where the endpoint has none (Vertex). */
  readonly batchEmbed: ((model: string, body: GeminiBatchEmbedRequest) => Effect.Effect<GeminiBatchEmbedResponse, UpstreamFailure>) | undefined
}

/**
 * Google Vertex AI (vertex.ts): one provider serving two publishers' models with one service
 * account. Claude models (`claude-*`) speak Messages through `:rawPredict`, as an Anthropic
 * client made for the model; every other model is Google's, through the Gemini client.
 */
export interface VertexClient {
  readonly kind: "vertex"
  readonly name: string
  readonly anthropicFor: (model: string) => AnthropicClient
  readonly gemini: GeminiClient
}

export type ProviderClient = OpenAIClient | AnthropicClient | BedrockClient | GeminiClient | VertexClient

/** Called with the seconds from sending a request to its response headers (the metrics' time to first byte). */
export type FirstByteRecorder = (seconds: number) => void

/** Times `post` up to the response headers; only answers the upstream gave are timed. */
export const timedToFirstByte = <A, E>(post: Effect.Effect<A, E>, record: FirstByteRecorder | undefined): Effect.Effect<A, E> =>
  record === undefined ? post : Effect.suspend(() => {
    const sent = performance.now()
    return Effect.tap(post, () => Effect.sync(() => record((performance.now() - sent) / 1000)))
  })

const apiKeyOf = (provider: ProviderConfig, env: Readonly<Record<string, string | undefined>>) =>
  provider.api_key ?? (provider.api_key_env === undefined ? undefined : env[provider.api_key_env])

export const midStreamError = (provider: string, error: unknown, redact: Redact) => {
  const e = (typeof error === "object" && error !== null ? error : { message: String(error) }) as Record<string, unknown>
  const message = typeof e.message === "string" ? redact(e.message.slice(0, 1000)) : null
  return new ProviderError({
    message: `provider "${provider}" failed mid-stream${message === null ? "" : `: ${message}`}`,
    details: {
      provider,
      upstream_status: null,
      upstream_error: { type: e.type ?? null, code: e.code ?? null, message }
    }
  })
}

/**
 * The response ended cleanly but without the vendor's end marker: a proxy that gave up, or a
 * server that died politely. The answer is truncated, and saying so beats a complete-looking one.
 */
export const endedEarly = (provider: string, missing: string) =>
  new ProviderError({
    message: `provider "${provider}" ended the stream before the answer was complete`,
    details: { provider, upstream_status: null, upstream_error: { message: `the stream ended without ${missing}` } }
  })

export const malformed = (provider: string, data: string, redact: Redact) =>
  new ProviderError({
    message: `provider "${provider}" sent an event that is not JSON`,
    details: { provider, upstream_status: null, upstream_error: { message: redact(data.slice(0, 200)) } }
  })

/**
 * The text an Anthropic stream event was parsed from, while the parsed object is the one the
 * stream yielded: a passthrough forwards it as the provider sent it instead of serialising the
 * object again (a second copy per event; numbers written back as JavaScript prints them).
 */
const anthropicEventText = new WeakMap<object, string>()
export const sourceTextOf = (event: object): string | undefined => anthropicEventText.get(event)

const passed = <B>(value: B): EventOutcome<B, never> => ({ ok: true, value })
const failed = <E>(error: E): EventOutcome<never, E> => ({ ok: false, error })

/** The OpenAI API's operations, by their path under the base URL. */
export type OpenAIOperation = "/chat/completions" | "/embeddings" | "/responses" | "/completions" | "/moderations"

/**
 * Where and how an OpenAI-format client sends its calls: OpenAI's own layout (`{base}{path}`,
 * a bearer key) by default; Azure OpenAI (azure.ts) routes them by deployment with an
 * `api-version` and an `api-key` header, and speaks the same format otherwise.
 */
export interface OpenAIEndpoint {
  readonly url: (operation: OpenAIOperation, body: Record<string, unknown>) => string
  readonly headers: Record<string, string>
  readonly redact: Redact
  /** Whether Responses clients are forwarded to the provider's own Responses API. */
  readonly responses: boolean
}

const openAIEndpoint = (provider: ProviderConfig, env: Readonly<Record<string, string | undefined>>): OpenAIEndpoint => {
  const key = apiKeyOf(provider, env)
  const base = provider.base_url!.replace(/\/+$/, "")
  return {
    url: (operation) => base + operation,
    headers: key ? { authorization: `Bearer ${key}` } : {},
    redact: makeRedactor([key]),
    responses: provider.responses_api
  }
}

export const makeOpenAIClient = (
  provider: ProviderConfig,
  agent: Agent,
  env: Readonly<Record<string, string | undefined>>,
  firstByte?: FirstByteRecorder,
  endpoint: OpenAIEndpoint = openAIEndpoint(provider, env)
): OpenAIClient => {
  const { headers, redact } = endpoint
  const server = new URL(provider.base_url!).host
  const post = (body: Record<string, unknown>, path: OpenAIOperation = "/chat/completions") =>
    timedToFirstByte(postJson({ provider: provider.name, agent, url: endpoint.url(path, body), headers, body, redact }), firstByte)
  // An answer read whole: one call that posts and reads (upstream-http.ts `postForJson`).
  const read = <A>(body: Record<string, unknown>, path: OpenAIOperation) =>
    postForJson<A>({ provider: provider.name, agent, url: endpoint.url(path, body), headers, body, redact, maxBytes: provider.max_response_bytes, firstByte })
  const call = (body: Record<string, unknown>, stream: boolean, operation?: GenAiOperation) => ({ provider: provider.name, kind: provider.kind, server, body, stream, operation })
  return {
    kind: "openai",
    name: provider.name,
    embeddings: (body) =>
      tracedCall(call(body, false, "embeddings"), read<EmbeddingsResponse>(body, "/embeddings")),
    relayEmbeddings: (body) =>
      tracedCall(call(body, false, "embeddings"), Effect.map(post(body, "/embeddings"), (response): EmbeddingsRelay => {
        const relayed = relayBody(provider.name, response, provider.max_relayed_bytes)
        return { bytes: relayed.bytes, promptTokens: () => promptTokensFromTail(relayed.tail()) }
      })),
    responses: endpoint.responses
      ? {
        complete: (body) =>
          tracedCall(call(body, false, "chat"), read<ResponsesResponse>(body, "/responses")),
        stream: (body) =>
          tracedStream(call(body, true, "chat"), Effect.map(post(body, "/responses"), (response) => {
            // A terminal event (completed, incomplete, failed) is how the upstream says it is done.
            let finished = false
            return sseEvents(provider.name, response).pipe(
              Stream.filter((event) => event.data !== "" && event.data !== "[DONE]"),
              mapEventsOrFail((event): EventOutcome<ResponsesStreamItem, ProviderError> => {
                let parsed: unknown
                try {
                  parsed = parseJsonWithin(event.data)
                } catch {
                  return failed(malformed(provider.name, event.data, redact))
                }
                const item = parsed as ResponsesStreamItem["event"]
                if (typeof item !== "object" || item === null || typeof item.type !== "string") {
                  return failed(malformed(provider.name, event.data, redact))
                }
                if (item.type === "error") return failed(midStreamError(provider.name, item, redact))
                if (isTerminalResponsesEvent(item.type)) finished = true
                return passed({ event: item, raw: event.data })
              }),
              Stream.takeUntil((item) => isTerminalResponsesEvent(item.event.type)),
              Stream.concat(Stream.suspend(() => (finished ? Stream.empty : Stream.fail(endedEarly(provider.name, "a terminal response event")))))
            )
          }))
      }
      : undefined,
    complete: (body) => tracedCall(call(body, false, "chat"), read<ChatResponse>(body, "/chat/completions")),
    stream: (body) => chatStream(body, "/chat/completions"),
    legacy: {
      completions: (body) =>
        tracedCall(call(body, false, "text_completion"), read<LegacyAnswer>(body, "/completions")),
      completionsStream: (body) => chatStream(body, "/completions"),
      moderations: (body) =>
        tracedCall(call(body, false, "moderations"), read<LegacyAnswer>(body, "/moderations"))
    }
  }
  /** Chat Completions' SSE (legacy completions stream the same way). */
  function chatStream(body: Record<string, unknown>, path: OpenAIOperation): Effect.Effect<Stream.Stream<ChatStreamItem, UpstreamFailure>, UpstreamFailure> {
    return tracedStream(call(body, true, path === "/completions" ? "text_completion" : "chat"), Effect.map(post(body, path), (response) => {
        // [DONE], or failing that a finish_reason, is how the upstream says the answer is whole.
        let finished = false
        return sseEvents(provider.name, response).pipe(
          // Some proxies wrap keep-alives as data (`data: : keepalive`): never content.
          Stream.filter((event) => event.data !== "" && !event.data.startsWith(":")),
          Stream.takeWhile((event) => {
            if (event.data !== "[DONE]") return true
            finished = true
            return false
          }),
          mapEventsOrFail((event): EventOutcome<ChatStreamItem, ProviderError> => {
            let parsed: unknown
            try {
              parsed = parseJsonWithin(event.data)
            } catch {
              return failed(malformed(provider.name, event.data, redact))
            }
            const error = (parsed as { error?: unknown }).error
            if (error) return failed(midStreamError(provider.name, error, redact))
            const chunk = parsed as ChatChunk
            if (Array.isArray(chunk.choices) && chunk.choices.some((choice) => choice?.finish_reason != null)) finished = true
            return passed({ chunk, raw: event.data })
          }),
          Stream.concat(Stream.suspend(() => (finished ? Stream.empty : Stream.fail(endedEarly(provider.name, "[DONE] or a finish_reason")))))
        )
      }))
  }
}

/** What one Messages call becomes on the wire. */
export interface AnthropicCall {
  readonly url: string
  readonly headers: Record<string, string>
  readonly body: Record<string, unknown>
}

/**
 * Where and how a Messages client sends its calls: Anthropic's own API (`{base}/v1/messages`,
 * `x-api-key`) by default; Vertex AI (vertex.ts) puts the model in the URL (`:rawPredict`,
 * `:streamRawPredict`), the version in the body and a bearer token in the header.
 */
export interface AnthropicEndpoint {
  readonly server: string
  readonly redact: Redact
  readonly prepare: (operation: "messages" | "count_tokens", body: Record<string, unknown>, forwarded: AnthropicHeaders) => Effect.Effect<AnthropicCall, UpstreamFailure>
}

const anthropicEndpoint = (provider: ProviderConfig, env: Readonly<Record<string, string | undefined>>): AnthropicEndpoint => {
  const key = apiKeyOf(provider, env)
  const base = `${provider.base_url!.replace(/\/+$/, "")}/v1/messages`
  return {
    server: new URL(base).host,
    redact: makeRedactor([key]),
    prepare: (operation, body, forwarded) =>
      Effect.succeed({
        url: operation === "count_tokens" ? `${base}/count_tokens` : base,
        headers: {
          "anthropic-version": forwarded["anthropic-version"] ?? provider.anthropic_version,
          ...(forwarded["anthropic-beta"] ? { "anthropic-beta": forwarded["anthropic-beta"] } : {}),
          ...(key ? { "x-api-key": key } : {})
        },
        body
      })
  }
}

export const makeAnthropicClient = (
  provider: ProviderConfig,
  agent: Agent,
  env: Readonly<Record<string, string | undefined>>,
  firstByte?: FirstByteRecorder,
  endpoint: AnthropicEndpoint = anthropicEndpoint(provider, env)
): AnthropicClient => {
  const { redact, server } = endpoint
  const call = (body: Record<string, unknown>, stream: boolean, operation?: GenAiOperation) => ({ provider: provider.name, kind: provider.kind, server, body, stream, operation })
  const post = (body: Record<string, unknown>, forwarded: AnthropicHeaders = {}, operation: "messages" | "count_tokens" = "messages") =>
    timedToFirstByte(
      Effect.flatMap(endpoint.prepare(operation, body, forwarded), (prepared) =>
        postJson({ provider: provider.name, agent, url: prepared.url, headers: prepared.headers, body: prepared.body, redact })),
      firstByte
    )
  const read = <A>(body: Record<string, unknown>, forwarded: AnthropicHeaders = {}, operation: "messages" | "count_tokens" = "messages") =>
    Effect.flatMap(endpoint.prepare(operation, body, forwarded), (prepared) =>
      postForJson<A>({
        provider: provider.name,
        agent,
        url: prepared.url,
        headers: prepared.headers,
        body: prepared.body,
        redact,
        maxBytes: provider.max_response_bytes,
        firstByte
      }))
  return {
    kind: "anthropic",
    name: provider.name,
    complete: (body, forwarded) =>
      tracedCall(call(body, false, "chat"), read<AnthropicResponse>(body, forwarded)),
    countTokens: (body, forwarded) =>
      tracedCall(
        call(body, false, "count_tokens"),
        read<{ input_tokens: number }>(body, forwarded, "count_tokens")
      ),
    stream: (body, forwarded) =>
      tracedStream(call(body, true, "chat"), Effect.map(post(body, forwarded), (response) => {
        let stopped = false
        return sseEvents(provider.name, response).pipe(
          // Pings are kept: a passthrough forwards them (they keep idle proxies from cutting a long
          // stream, and clients expect them); translators ignore them.
          Stream.filter((event) => event.data !== ""),
          mapEventsOrFail((event): EventOutcome<AnthropicStreamEvent, ProviderError> => {
            let parsed: AnthropicStreamEvent
            try {
              parsed = parseJsonWithin(event.data) as AnthropicStreamEvent
            } catch {
              return failed(malformed(provider.name, event.data, redact))
            }
            if (parsed.type === "error" || event.event === "error") {
              return failed(midStreamError(provider.name, (parsed as { error?: unknown }).error, redact))
            }
            if (parsed.type === "message_stop") stopped = true
            if (typeof parsed === "object" && parsed !== null) anthropicEventText.set(parsed, event.data)
            return passed(parsed)
          }),
          Stream.takeUntil((event) => event.type === "message_stop"),
          Stream.concat(Stream.suspend(() => (stopped ? Stream.empty : Stream.fail(endedEarly(provider.name, "message_stop")))))
        )
      }))
  }
}
