/**
 * The span of one call to a provider (kind client): provider, upstream model, streamed or not,
 * and the upstream's HTTP status (set by postJson when the answer's status arrives). The call
 * sends this span's `traceparent` (postJson), so the provider's own trace, if it keeps one, hangs
 * under it. A streamed call's span lasts until its stream ends, however it ends. With tracing
 * off no span is made (see services/tracing/stage-span.ts).
 */
import { Clock, Effect, Exit, References, Stream, type Tracer } from "effect"
import { NO_STACK } from "../tracing/stage-span.ts"

export interface UpstreamCall {
  readonly provider: string
  /** Host (and port) of the provider's base URL. */
  readonly server: string
  readonly body: Record<string, unknown>
  readonly stream: boolean
  /** OpenTelemetry's `gen_ai.operation.name`; absent, read from the body's shape (see operationOf). */
  readonly operation?: GenAiOperation
  /** The provider's configured kind, for `gen_ai.provider.name`. */
  readonly kind?: string
  /** The upstream model when the body does not name it (Gemini and Bedrock put it in the URL). */
  readonly model?: string
}

/**
 * `gen_ai.operation.name`: OpenTelemetry's well-known values, and the upstream's own operation
 * name where none fits (moderations, token counts).
 */
export type GenAiOperation = "chat" | "text_completion" | "embeddings" | "generate_content" | "moderations" | "count_tokens"

/** `gen_ai.provider.name` (formerly `gen_ai.system`): OpenTelemetry's well-known values by kind. */
const GEN_AI_PROVIDERS: Record<string, string> = {
  openai: "openai",
  anthropic: "anthropic",
  azure: "azure.ai.openai",
  gemini: "gcp.gemini",
  vertex: "gcp.vertex_ai",
  bedrock: "aws.bedrock"
}

const SPAN = "Provider.request"

/**
 * OpenTelemetry's `server.address` is the host alone, the port goes in `server.port`: `host:port`
 * (or `[v6]:port`) split in two.
 */
export const serverAttributes = (server: string): Record<string, string | number> => {
  const match = /^(\[[^\]]+\]|[^:]+):(\d+)$/.exec(server)
  if (match === null) return { "server.address": server }
  return { "server.address": match[1]!.replace(/^\[|\]$/g, ""), "server.port": Number(match[2]) }
}

const finite = (value: unknown): value is number => typeof value === "number" && Number.isFinite(value)
const record = (value: unknown): Record<string, unknown> | undefined =>
  typeof value === "object" && value !== null && !Array.isArray(value) ? value as Record<string, unknown> : undefined

/** A call that names no operation: chat unless the body is an embeddings one. */
const operationOf = (call: UpstreamCall): GenAiOperation =>
  call.operation ?? ("messages" in call.body || "contents" in call.body ? "chat" : "input" in call.body && !("instructions" in call.body) ? "embeddings" : "chat")

/**
 * The request parameters OpenTelemetry names (`gen_ai.request.*`), from whichever wire the body
 * speaks: OpenAI and Anthropic at the top, Gemini under `generationConfig`, Bedrock under
 * `inferenceConfig`. Numbers only: nothing of a prompt.
 */
const requestParameters = (body: Record<string, unknown>): Record<string, number> => {
  const nested = record(body.generationConfig) ?? record(body.inferenceConfig) ?? {}
  const maxTokens = [body.max_tokens, body.max_completion_tokens, body.max_output_tokens, nested.maxOutputTokens, nested.maxTokens].find(finite)
  const temperature = [body.temperature, nested.temperature].find(finite)
  const topP = [body.top_p, nested.topP].find(finite)
  return {
    ...(maxTokens === undefined ? {} : { "gen_ai.request.max_tokens": maxTokens }),
    ...(temperature === undefined ? {} : { "gen_ai.request.temperature": temperature }),
    ...(topP === undefined ? {} : { "gen_ai.request.top_p": topP })
  }
}

const spanOptions = (call: UpstreamCall) => ({
  kind: "client" as const,
  attributes: {
    "modelgate.provider": call.provider,
    "gen_ai.operation.name": operationOf(call),
    ...(call.kind === undefined ? {} : { "gen_ai.provider.name": GEN_AI_PROVIDERS[call.kind] ?? call.kind }),
    ...(typeof (call.model ?? call.body.model) === "string" ? { "gen_ai.request.model": String(call.model ?? call.body.model).slice(0, 200) } : {}),
    ...requestParameters(call.body),
    "modelgate.stream": call.stream,
    "http.request.method": "POST",
    ...serverAttributes(call.server)
  }
})

const strings = (values: ReadonlyArray<unknown>): Array<string> =>
  values.filter((value): value is string => typeof value === "string").map((value) => value.slice(0, 64)).slice(0, 16)

/**
 * What OpenTelemetry's `gen_ai.response.*` and `gen_ai.usage.*` say about an answer read whole,
 * from whichever wire it speaks (OpenAI chat, completions, embeddings and Responses; Anthropic;
 * Gemini; Bedrock Converse). Ids, counts and finish reasons only, never content.
 */
export const responseAttributes = (answer: unknown): Record<string, unknown> => {
  const body = record(answer)
  if (body === undefined) return {}
  const out: Record<string, unknown> = {}
  const model = body.model ?? body.modelVersion
  if (typeof model === "string") out["gen_ai.response.model"] = model.slice(0, 200)
  const id = body.id ?? body.responseId
  if (typeof id === "string") out["gen_ai.response.id"] = id.slice(0, 200)
  const usage = record(body.usage) ?? record(body.usageMetadata)
  if (usage !== undefined) {
    const input = [usage.prompt_tokens, usage.input_tokens, usage.promptTokenCount, usage.inputTokens].find(finite)
    const output = [usage.completion_tokens, usage.output_tokens, usage.candidatesTokenCount, usage.outputTokens].find(finite)
    if (input !== undefined) out["gen_ai.usage.input_tokens"] = input
    if (output !== undefined) out["gen_ai.usage.output_tokens"] = output
  }
  const reasons = Array.isArray(body.choices)
    ? strings(body.choices.map((choice) => record(choice)?.finish_reason))
    : Array.isArray(body.candidates)
    ? strings(body.candidates.map((candidate) => record(candidate)?.finishReason))
    : strings([body.stop_reason ?? body.stopReason ?? (typeof body.status === "string" && "output" in body ? body.status : undefined)])
  if (reasons.length > 0) out["gen_ai.response.finish_reasons"] = reasons
  return out
}

const annotateAnswer = (answer: unknown) =>
  Effect.sync(() => responseAttributes(answer)).pipe(
    Effect.flatMap((attributes) => Object.keys(attributes).length === 0 ? Effect.void : Effect.annotateCurrentSpan(attributes))
  )

/** A call whose answer is read whole. */
export const tracedCall = <A, E>(call: UpstreamCall, effect: Effect.Effect<A, E>): Effect.Effect<A, E> =>
  Effect.withFiber((fiber) =>
    fiber.getRef(References.TracerEnabled)
      ? Effect.withSpan(Effect.tap(effect, annotateAnswer), SPAN, { ...spanOptions(call), ...NO_STACK })
      : effect
  )

const endSpan = (span: Tracer.Span, exit: Exit.Exit<unknown, unknown>) =>
  Effect.flatMap(Clock.currentTimeNanos, (now) => Effect.sync(() => span.end(now, exit)))

/**
 * Where a stream's items keep what they say about the answer: the client's wrappers (`chunk`,
 * `event`), Anthropic's `message` (message_start) and `delta` (message_delta), the Responses
 * API's `response` (response.completed).
 */
const STREAM_ENVELOPES = ["chunk", "event", "message", "delta", "response"] as const

/** A streamed call: the span covers opening it and the whole stream after. */
export const tracedStream = <A, E, E2>(
  call: UpstreamCall,
  open: Effect.Effect<Stream.Stream<A, E2>, E>
): Effect.Effect<Stream.Stream<A, E2>, E> =>
  Effect.withFiber((fiber) =>
    fiber.getRef(References.TracerEnabled)
      ? Effect.flatMap(Effect.makeSpan(SPAN, spanOptions(call)), (span) =>
        open.pipe(
          Effect.withParentSpan(span, NO_STACK),
          Effect.onExit((exit) => Exit.isFailure(exit) ? endSpan(span, exit) : Effect.void),
          Effect.map((stream) => {
            if (!span.sampled) return stream.pipe(Stream.onExit((exit) => endSpan(span, exit)))
            // Each event may say part of it (Anthropic's message_start the model, message_delta the
            // stop reason and output count); later ones win, and all land on the span as it ends.
            const seen: Record<string, unknown> = {}
            const note = (event: unknown, depth: number): void => {
              const fields = record(event)
              if (fields === undefined) return
              Object.assign(seen, responseAttributes(fields))
              if (depth < 2) for (const key of STREAM_ENVELOPES) if (key in fields) note(fields[key], depth + 1)
            }
            return stream.pipe(
              Stream.tap((event) => Effect.sync(() => note(event, 0))),
              Stream.onExit((exit) =>
                Effect.andThen(Effect.sync(() => {
                  for (const [key, value] of Object.entries(seen)) span.attribute(key, value)
                }), endSpan(span, exit)))
            )
          })
        ))
      : open
  )
