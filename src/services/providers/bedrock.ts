/**
 * The `bedrock` provider kind: AWS Bedrock's runtime API, signed with SigV4 (service `bedrock`).
 * Chat models through the Converse API (`/model/{modelId}/converse` and `/converse-stream`, the
 * latter an AWS binary event stream), token counts through `CountTokens`, embeddings through
 * `InvokeModel` with the model's own body. The model id goes in the path, percent-encoded:
 * inference profile ids and ARNs hold `:` and `/`.
 */
import { Effect, Stream } from "effect"
import { ProviderError } from "../../domain/errors.ts"
import {
  CONVERSE_EVENT_TYPES,
  type ConverseResponse,
  type ConverseStreamEvent,
  type CountTokensResponse
} from "../../wire/bedrock-converse.ts"
import { bedrockBaseUrl } from "../config/bedrock.ts"
import type { ProviderConfig } from "../config/schema.ts"
import type { Agent } from "undici"
import { makeSigV4Signer, type SigV4Signer } from "./aws-sigv4.ts"
import { type EventStreamMessage, eventStreamMessages } from "./aws-event-stream.ts"
import { bedrockStatusFailure, bedrockStreamFailure } from "./bedrock-errors.ts"
import { type BedrockClient, endedEarly, type FirstByteRecorder, type InvokeModelAnswer, malformed, timedToFirstByte } from "./clients.ts"
import { makeRedactor, type Redact } from "./redact.ts"
import { type EventOutcome, mapEventsOrFail, postJson, readJson, type UpstreamFailure } from "./upstream-http.ts"
import { type GenAiOperation, tracedCall, tracedStream } from "./upstream-span.ts"
import { parseJsonWithin } from "../../wire/json-depth.ts"
import { turnIfLarge } from "../../wire/turns.ts"

type Env = Readonly<Record<string, string | undefined>>

const credential = (provider: ProviderConfig, field: "access_key_id" | "secret_access_key" | "session_token", env: Env) => {
  const variable = provider[`${field}_env`]
  return provider[field] ?? (variable === undefined ? undefined : env[variable])
}

/** Percent-encoding as the AWS SDKs do it for a path label (RFC 3986 unreserved characters kept). */
const encodeLabel = (label: string) =>
  encodeURIComponent(label).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)

const passed = <B>(value: B): EventOutcome<B, never> => ({ ok: true, value })
const failed = <E>(error: E): EventOutcome<never, E> => ({ ok: false, error })

const utf8 = new TextDecoder()

/** One event stream message as a Converse event, an exception that ends the stream, or nothing (an event type this gateway does not know). */
const converseEventOf = (
  provider: string,
  message: EventStreamMessage,
  redact: Redact
): EventOutcome<ConverseStreamEvent | undefined, ProviderError> => {
  const kind = message.headers[":message-type"]
  const text = utf8.decode(message.body)
  if (kind === "exception") {
    let said = text
    try {
      const parsed = JSON.parse(text) as { message?: unknown; Message?: unknown }
      const inner = parsed.message ?? parsed.Message
      if (typeof inner === "string") said = inner
    } catch {
      // The payload's text is the message.
    }
    return failed(bedrockStreamFailure(provider, message.headers[":exception-type"] ?? "exception", said, redact))
  }
  if (kind === "error") {
    return failed(bedrockStreamFailure(provider, message.headers[":error-code"] ?? "error", message.headers[":error-message"] ?? "", redact))
  }
  const type = message.headers[":event-type"]
  if (kind !== "event" || type === undefined) return failed(malformed(provider, `${kind ?? "?"} ${type ?? "?"}: ${text}`, redact))
  // Event types newer than this gateway carry nothing it can place; the SDKs skip them too.
  if (!CONVERSE_EVENT_TYPES.has(type)) return passed(undefined)
  let payload: unknown
  try {
    payload = parseJsonWithin(text)
  } catch {
    return failed(malformed(provider, text, redact))
  }
  if (typeof payload !== "object" || payload === null) return failed(malformed(provider, text, redact))
  return passed({ type, payload } as ConverseStreamEvent)
}

export const makeBedrockClient = (provider: ProviderConfig, agent: Agent, env: Env, firstByte?: FirstByteRecorder): BedrockClient => {
  const accessKeyId = credential(provider, "access_key_id", env) ?? ""
  const secretAccessKey = credential(provider, "secret_access_key", env) ?? ""
  const sessionToken = credential(provider, "session_token", env)
  const redact = makeRedactor([secretAccessKey, sessionToken, accessKeyId])
  const signer: SigV4Signer = makeSigV4Signer({ accessKeyId, secretAccessKey, sessionToken }, provider.region ?? "", "bedrock")
  const base = bedrockBaseUrl(provider)
  const server = new URL(base).host
  const failure = (status: number, body: string, headers: Parameters<typeof bedrockStatusFailure>[3]) =>
    bedrockStatusFailure(provider.name, status, body, headers, redact)

  const post = (modelId: string, operation: string, body: unknown, accept: string) =>
    Effect.suspend(() => {
      const url = new URL(`${base}/model/${encodeLabel(modelId)}/${operation}`)
      const serialized = JSON.stringify(body)
      // A large body is serialized on one turn of the event loop and signed on the next (../../wire/turns.ts).
      return Effect.flatMap(
        Effect.andThen(turnIfLarge(serialized.length), Effect.tryPromise({
          try: () => signer.sign(url, serialized, { "content-type": "application/json", accept }),
          // The signer only fails on a programming error (it signs locally); never quote credentials.
          catch: () =>
            new ProviderError({
              message: `provider "${provider.name}": the request could not be signed`,
              details: { provider: provider.name, upstream_status: null, upstream_error: { message: "SigV4 signing failed" } }
            })
        })),
        (headers) =>
          timedToFirstByte(postJson({ provider: provider.name, agent, url: url.href, headers, body, serialized, redact, failure }), firstByte)
      )
    })

  // The body's inference settings give the span its request parameters; the model is in the URL.
  const call = (modelId: string, stream: boolean, operation: GenAiOperation, body?: unknown) => ({
    provider: provider.name,
    kind: provider.kind,
    server,
    model: modelId,
    body: typeof body === "object" && body !== null ? body as Record<string, unknown> : {},
    stream,
    operation
  })

  return {
    kind: "bedrock",
    name: provider.name,
    converse: (modelId, body) =>
      tracedCall(
        call(modelId, false, "chat", body),
        Effect.flatMap(post(modelId, "converse", body, "application/json"), (response) => readJson<ConverseResponse>(provider.name, response, redact, provider.max_response_bytes))
      ),
    countTokens: (modelId, body) =>
      tracedCall(
        call(modelId, false, "count_tokens"),
        Effect.flatMap(post(modelId, "count-tokens", body, "application/json"), (response) => readJson<CountTokensResponse>(provider.name, response, redact, provider.max_response_bytes))
      ),
    invokeModel: (modelId, body) =>
      tracedCall(
        call(modelId, false, "chat", body),
        Effect.flatMap(post(modelId, "invoke", body, "application/json"), (response) => {
          const counted = Number(response.headers["x-amzn-bedrock-input-token-count"])
          return Effect.map(readJson<unknown>(provider.name, response, redact, provider.max_response_bytes), (answer): InvokeModelAnswer => ({
            body: answer,
            inputTokens: Number.isFinite(counted) ? counted : undefined
          }))
        })
      ),
    converseStream: (modelId, body) =>
      tracedStream(
        call(modelId, true, "chat", body),
        Effect.map(post(modelId, "converse-stream", body, "application/vnd.amazon.eventstream"), (response) => {
          // messageStop says the answer is whole; metadata (the token counts) follows it and ends the stream.
          let stopped = false
          return eventStreamMessages(provider.name, response).pipe(
            mapEventsOrFail((message) => {
              const outcome = converseEventOf(provider.name, message, redact)
              if (outcome.ok && outcome.value?.type === "messageStop") stopped = true
              return outcome
            }),
            Stream.filter((event): event is ConverseStreamEvent => event !== undefined),
            Stream.takeUntil((event) => event.type === "metadata"),
            Stream.concat(Stream.suspend(() => (stopped ? Stream.empty : Stream.fail(endedEarly(provider.name, "messageStop")))))
          )
        })
      )
  }
}
