/**
 * HTTP to model providers: one pooled keep-alive undici Agent per provider, whose three
 * timeouts are exactly the three the config names (connect, time to first byte, idle gap
 * between body chunks). Failures become ProviderError (502) or UpstreamTimeout (504) carrying
 * the provider name and upstream status, never the provider's key.
 */
import { type Array as Arr, type Cause, Effect, References, Stream } from "effect"
import { constVoid } from "effect/Function"
import type * as Undici from "undici"
import { Agent, dispatch, errors as undiciErrors, request } from "./undici.ts"
import type { Readable } from "node:stream"
import { NotFound, ProviderError, UpstreamTimeout, ValidationFailed } from "../../domain/errors.ts"
import { MAX_ANSWER_DEPTH, nestsDeeperThan } from "../../wire/json-depth.ts"
import type { ProviderConfig } from "../config/schema.ts"
import { outgoingTraceHeaders } from "../tracing/propagation.ts"
import type { Redact } from "./redact.ts"
import { makeSseParser, type SseEvent } from "../../wire/sse.ts"
import { LARGE_BODY_BYTES, turnIfLarge } from "../../wire/turns.ts"

/**
 * What a provider call can fail with: the provider's own trouble (502), a timeout (504), or the
 * provider refusing the request itself (400, or 404 for a model it does not know), which is the
 * client's to fix and is answered as such.
 */
export type UpstreamFailure = ProviderError | UpstreamTimeout | ValidationFailed | NotFound

export const makeAgent = (provider: ProviderConfig) =>
  new Agent({
    connections: provider.max_connections,
    keepAliveTimeout: 30_000,
    keepAliveMaxTimeout: 600_000,
    connect: { timeout: provider.timeouts.connect_ms },
    headersTimeout: provider.timeouts.first_byte_ms,
    bodyTimeout: provider.timeouts.idle_ms
  })

const codeOf = (error: unknown): string | undefined => {
  let current: unknown = error
  for (let depth = 0; depth < 5 && current; depth++) {
    const code = (current as { code?: unknown }).code
    if (typeof code === "string") return code
    current = (current as { cause?: unknown }).cause
  }
  return undefined
}

/** Maps a transport failure (no HTTP answer, or a body that stopped) to the gateway's errors. */
export const transportFailure = (provider: string, error: unknown): UpstreamFailure => {
  const code = codeOf(error)
  const timeout = (kind: string, ms?: number) =>
    new UpstreamTimeout({
      message: `provider "${provider}" timed out (${kind})`,
      details: { provider, timeout: kind, ...(ms === undefined ? {} : { timeout_ms: ms }) }
    })
  if (error instanceof undiciErrors.ConnectTimeoutError || code === "UND_ERR_CONNECT_TIMEOUT") return timeout("connect")
  if (error instanceof undiciErrors.HeadersTimeoutError || code === "UND_ERR_HEADERS_TIMEOUT") return timeout("first_byte")
  if (error instanceof undiciErrors.BodyTimeoutError || code === "UND_ERR_BODY_TIMEOUT") return timeout("idle")
  const reason = code === "ECONNREFUSED"
    ? "connection refused"
    : code === "ENOTFOUND" || code === "EAI_AGAIN"
    ? "host not found"
    : code === "ECONNRESET" || code === "UND_ERR_SOCKET"
    ? "connection reset"
    : "connection failed"
  return new ProviderError({
    message: `provider "${provider}" is unreachable: ${reason}`,
    details: { provider, upstream_status: null, upstream_error: { code: code ?? null, message: reason } }
  })
}

/** Statuses by which a provider says the request itself is wrong (decisions section 6). */
const REQUEST_FAULTS = new Set([400, 404, 413, 422])

/** A 404 about the model (not a wrong base URL, which is the operator's problem and stays a 502). */
const isUnknownModel = (error: Record<string, unknown>) =>
  error.code === "model_not_found" || (typeof error.message === "string" && /\bmodel\b/i.test(error.message))

/**
 * An upstream's own error answer, with its code and message kept for the client (redacted of
 * any credential it quotes). A refusal of the request (400, 413, 422, 404 for the model) is
 * answered as the client's validation_failed / not_found; anything else (401, 403, 429, 5xx) is
 * the provider's problem: 502 provider_error.
 */
export const statusFailure = (
  provider: string,
  status: number,
  body: string,
  retryAfter: string | undefined,
  redact: Redact,
  retryAfterMs?: string | undefined
): UpstreamFailure => {
  let upstreamError: Record<string, unknown> = { message: redact(body.slice(0, 500)) }
  try {
    const parsed = JSON.parse(body) as { error?: unknown }
    const error = parsed.error
    if (typeof error === "object" && error !== null) {
      const e = error as Record<string, unknown>
      upstreamError = {
        type: typeof e.type === "string" ? e.type : null,
        code: typeof e.code === "string" || typeof e.code === "number" ? e.code : null,
        message: typeof e.message === "string" ? redact(e.message.slice(0, 1000)) : null
      }
    } else if (typeof error === "string") {
      upstreamError = { message: redact(error.slice(0, 1000)) }
    }
  } catch {
    // Not JSON (a proxy's HTML page, say): the truncated text is the best evidence there is.
  }
  const said = typeof upstreamError.message === "string" ? `: ${upstreamError.message}` : ""
  const details = { provider, upstream_status: status, upstream_error: upstreamError }
  if (REQUEST_FAULTS.has(status) && (status !== 404 || isUnknownModel(upstreamError))) {
    return status === 404
      ? new NotFound({ message: `provider "${provider}" does not know the model${said}`, details })
      : new ValidationFailed({ message: `provider "${provider}" refused the request (${status})${said}`, details })
  }
  return new ProviderError({
    message: `provider "${provider}" answered ${status}${said}`,
    details,
    ...(retryAfter === undefined ? {} : { retryAfter }),
    ...(retryAfterMs !== undefined && /^\d{1,9}(\.\d+)?$/.test(retryAfterMs) ? { retryAfterMs: Number(retryAfterMs) } : {})
  })
}

export interface UpstreamResponse {
  readonly status: number
  readonly headers: Record<string, string | string[] | undefined>
  readonly body: Readable
}

/** A JSON POST to a provider. */
export interface PostJsonOptions {
  readonly provider: string
  readonly agent: Agent
  readonly url: string
  readonly headers: Record<string, string>
  readonly body: unknown
  readonly redact: Redact
  /** The body already serialised, sent as it is (a signed request must send exactly the bytes it signed). */
  readonly serialized?: string
  /** How an error answer becomes a failure, for a vendor whose errors have their own shape; default `statusFailure`. */
  readonly failure?: (status: number, body: string, headers: UpstreamResponse["headers"]) => UpstreamFailure
}

const requestOptions = (options: PostJsonOptions, trace: Record<string, string>, serialized: string) => ({
  method: "POST" as const,
  dispatcher: options.agent,
  headers: { "content-type": "application/json", accept: "application/json, text/event-stream", ...trace, ...options.headers },
  body: serialized
})

const firstOf = (value: string | Array<string> | undefined) => (Array.isArray(value) ? value[0] : value)

/** The failure an error answer (its status, headers and quoted body) maps to. */
const failureOf = (options: PostJsonOptions, status: number, headers: UpstreamResponse["headers"], text: string): UpstreamFailure =>
  options.failure === undefined
    ? statusFailure(options.provider, status, text, firstOf(headers["retry-after"]), options.redact, firstOf(headers["retry-after-ms"]))
    : options.failure(status, text, headers)

/**
 * POSTs JSON; succeeds with the open response once a 2xx status arrived, fails with the mapped
 * error otherwise. Interrupting the effect (client went away) aborts the upstream request.
 *
 * The waits are made interruptible on purpose: the HTTP server runs request handlers
 * uninterruptibly, so without it a client that leaves before the answer would hold the upstream
 * until it answered or timed out. The hand-over of an open 2xx body stays uninterruptible, so
 * the body always reaches the caller that will consume or destroy it.
 */
export const postJson = (options: PostJsonOptions): Effect.Effect<UpstreamResponse, UpstreamFailure> =>
  Effect.flatMap(outgoingTraceHeaders, (trace) => {
    const serialized = options.serialized ?? JSON.stringify(options.body)
    // A large body is serialized on one turn of the event loop and sent on the next (../../wire/turns.ts).
    return Effect.andThen(
      options.serialized === undefined ? turnIfLarge(serialized.length) : Effect.void,
      Effect.tryPromise({
        try: (signal) => request(options.url, { ...requestOptions(options, trace, serialized), signal }),
        catch: (error) => transportFailure(options.provider, error)
      })
    )
  }).pipe(
    Effect.interruptible,
    Effect.tap((response) => Effect.annotateCurrentSpan("http.response.status_code", response.statusCode)),
    Effect.flatMap((response) => {
      if (response.statusCode >= 200 && response.statusCode < 300) {
        return Effect.succeed({ status: response.statusCode, headers: response.headers, body: response.body as unknown as Readable })
      }
      return readBody(options.provider, response.body as unknown as Readable, ERROR_BODY_BYTES, "cut").pipe(
        Effect.flatMap((text) => Effect.fail(failureOf(options, response.statusCode, response.headers, text)))
      )
    })
  )

/** An error answer is only quoted (500 to 1,000 characters): more of it is never held. */
const ERROR_BODY_BYTES = 65_536

/** The default bound of an answer read whole (provider `max_response_bytes`). */
export const DEFAULT_MAX_RESPONSE_BYTES = 16_777_216

export const tooLargeAnswer = (provider: string, maxBytes: number) =>
  new ProviderError({
    message: `provider "${provider}" sent an answer larger than ${maxBytes} bytes`,
    details: { provider, upstream_status: null, upstream_error: { message: `answer over the configured bound (${maxBytes} bytes)` } }
  })

/**
 * The body as text, at most `maxBytes` of it (issue 22, finding 5: an answer was read whole
 * whatever its size). Over the bound, `fail` refuses the answer and `cut` keeps what fits
 * (an error answer that is only quoted); either way the rest is never read: the body is
 * destroyed, which frees the upstream connection. Read by its events rather than as an async
 * iterator: a whole answer is usually one or two chunks, and the iterator's promise per chunk
 * showed in the profile (issue 25). An aborted request (the caller interrupted) destroys the
 * body through undici's own abort listener, which fails the read.
 */
const readBounded = (provider: string, body: Readable, maxBytes: number, over: "fail" | "cut"): Promise<string> =>
  new Promise<string>((resolve, reject) => {
    const chunks: Array<Buffer> = []
    let size = 0
    const text = () => (chunks.length === 1 ? chunks[0]!.toString("utf8") : Buffer.concat(chunks, size).toString("utf8"))
    const stop = () => {
      body.off("data", onData)
      body.off("end", onEnd)
      body.off("error", onError)
      body.on("error", ignore)
      body.destroy()
    }
    const onData = (chunk: Buffer) => {
      if (size + chunk.length > maxBytes) {
        stop()
        if (over === "fail") return reject(tooLargeAnswer(provider, maxBytes))
        const kept = chunk.subarray(0, maxBytes - size)
        chunks.push(kept)
        size += kept.length
        return resolve(text())
      }
      size += chunk.length
      chunks.push(chunk)
    }
    const onEnd = () => resolve(text())
    const onError = (error: unknown) => reject(error)
    body.on("data", onData)
    body.once("end", onEnd)
    body.once("error", onError)
  })

const ignore = () => {}

const readBody = (provider: string, body: Readable, maxBytes: number, over: "fail" | "cut"): Effect.Effect<string, UpstreamFailure> =>
  Effect.tryPromise({
    try: () => readBounded(provider, body, maxBytes, over),
    catch: (error) => (error instanceof ProviderError ? error : transportFailure(provider, error))
  }).pipe(Effect.interruptible)

const notJson = (provider: string, status: number, text: string, redact: Redact) =>
  new ProviderError({
    message: `provider "${provider}" sent a response that is not JSON`,
    details: { provider, upstream_status: status, upstream_error: { message: redact(text.slice(0, 200)) } }
  })

const tooDeep = (provider: string, status: number) =>
  new ProviderError({
    message: `provider "${provider}" sent an answer nested deeper than ${MAX_ANSWER_DEPTH} levels`,
    details: { provider, upstream_status: status, upstream_error: { message: `JSON nested deeper than ${MAX_ANSWER_DEPTH} levels` } }
  })

/**
 * An answer read whole, parsed: refused when it is not JSON, or nests deeper than any answer
 * does (parsed, it would overflow the stack of whatever serialises it again: a 500 for what the
 * upstream sent).
 */
const parseAnswer = <A>(provider: string, status: number, text: string, redact: Redact): A => {
  if (nestsDeeperThan(text, MAX_ANSWER_DEPTH)) throw tooDeep(provider, status)
  try {
    return JSON.parse(text) as A
  } catch {
    throw notJson(provider, status, text, redact)
  }
}

export const readJson = <A>(
  provider: string,
  response: UpstreamResponse,
  redact: Redact,
  maxBytes: number = DEFAULT_MAX_RESPONSE_BYTES
): Effect.Effect<A, UpstreamFailure> =>
  readBody(provider, response.body, maxBytes, "fail").pipe(
    Effect.flatMap((text) =>
      Effect.try({
        try: () => parseAnswer<A>(provider, response.status, text, redact),
        catch: (error) => error as ProviderError
      }).pipe(
        // A large answer is parsed on one turn of the event loop and translated and written on the next.
        Effect.tap(() => turnIfLarge(text.length))
      )
    )
  )

/** An answer read whole by `requestWhole`: its status and headers, and its body as text (cut to the bound of an error answer). */
interface WholeAnswer {
  readonly status: number
  readonly headers: UpstreamResponse["headers"]
  readonly text: string
}

/**
 * One request whose answer is read whole, through undici's dispatch handler (issue 38): the
 * answer's chunks are collected as they arrive, with no response stream, abort listener per
 * stream or async resource in between (undici's `request` wraps every answer in a Readable, whose
 * events and ticks were most of undici's share of a free request's CPU). The bounds are those of
 * `readBounded`: a 2xx answer over `maxBytes` fails (tooLargeAnswer), an error answer is cut to
 * ERROR_BODY_BYTES; either way the request is aborted there, which frees the connection rather
 * than reading the rest. The abort signal (the caller interrupted) aborts the request.
 */
const requestWhole = (
  options: PostJsonOptions,
  trace: Record<string, string>,
  serialized: string,
  signal: AbortSignal,
  maxBytes: number,
  onHeaders: (status: number) => void
): Promise<WholeAnswer> =>
  new Promise<WholeAnswer>((resolve, reject) => {
    let controller: Undici.Dispatcher.DispatchController | undefined
    let settled = false
    let status = 0
    let headers: UpstreamResponse["headers"] = {}
    let limit = maxBytes
    const chunks: Array<Buffer> = []
    let size = 0
    const text = () => (chunks.length === 1 ? chunks[0]!.toString("utf8") : Buffer.concat(chunks, size).toString("utf8"))
    const settle = () => {
      settled = true
      signal.removeEventListener("abort", onAbort)
    }
    const onAbort = () => controller?.abort(signal.reason instanceof Error ? signal.reason : new Error("aborted"))
    signal.addEventListener("abort", onAbort, { once: true })
    try {
      dispatch(options.url, requestOptions(options, trace, serialized), {
        onRequestStart: (started) => {
          controller = started
          if (signal.aborted) onAbort()
        },
        onResponseStart: (_, statusCode, responseHeaders) => {
          // 1xx (informational) answers are not the answer.
          if (statusCode < 200) return
          status = statusCode
          headers = responseHeaders
          if (status < 200 || status >= 300) limit = ERROR_BODY_BYTES
          else onHeaders(status)
        },
        onResponseData: (ongoing, chunk) => {
          if (settled) return
          if (size + chunk.length <= limit) {
            size += chunk.length
            chunks.push(chunk)
            return
          }
          settle()
          if (status >= 200 && status < 300) reject(tooLargeAnswer(options.provider, maxBytes))
          else {
            chunks.push(chunk.subarray(0, limit - size))
            size = limit
            resolve({ status, headers, text: text() })
          }
          ongoing.abort(new Error("the answer is over its bound"))
        },
        onResponseEnd: () => {
          if (settled) return
          settle()
          resolve({ status, headers, text: text() })
        },
        onResponseError: (_, error) => {
          if (settled) return
          settle()
          reject(error)
        }
      })
    } catch (error) {
      settle()
      reject(error)
    }
  })

const isUpstreamFailure = (error: unknown): error is UpstreamFailure =>
  error instanceof ProviderError || error instanceof UpstreamTimeout || error instanceof ValidationFailed || error instanceof NotFound

/**
 * `postJson` then `readJson`, as one promise: the call of every answer read whole (a
 * non-streamed chat, embeddings, a count). Same failures, bounds and interruption as the two
 * (a 2xx body over `maxBytes` is refused, an error answer is quoted), with one abort signal and
 * no effect between the response's headers and its body, which the profile showed as the
 * largest part of the gateway's own cost of a call (issue 25). `firstByte` is told the time to
 * a 2xx answer's headers, as `timedToFirstByte` times `postJson`.
 */
export const postForJson = <A>(options: PostJsonOptions & {
  readonly maxBytes: number
  readonly firstByte?: ((seconds: number) => void) | undefined
}): Effect.Effect<A, UpstreamFailure> =>
  Effect.flatMap(outgoingTraceHeaders, (trace) => {
    let status = 0
    let answered = 0
    const serialized = options.serialized ?? JSON.stringify(options.body)
    const call = Effect.tryPromise({
      try: async (signal): Promise<A> => {
        const sent = performance.now()
        const firstByte = options.firstByte
        const answer = await requestWhole(options, trace, serialized, signal, options.maxBytes, (_) => firstByte?.((performance.now() - sent) / 1000))
        status = answer.status
        if (status < 200 || status >= 300) throw failureOf(options, status, answer.headers, answer.text)
        answered = answer.text.length
        return parseAnswer<A>(options.provider, status, answer.text, options.redact)
      },
      catch: (error) => (isUpstreamFailure(error) ? error : transportFailure(options.provider, error))
    }).pipe(
      Effect.interruptible,
      // A large answer is parsed on one turn and translated and written on the next.
      Effect.tap(() => turnIfLarge(answered))
    )
    // A large body is serialized on one turn of the event loop and sent on the next (../../wire/turns.ts).
    const sent = options.serialized === undefined && serialized.length >= LARGE_BODY_BYTES ? Effect.andThen(Effect.yieldNow, call) : call
    return Effect.withFiber((fiber) =>
      fiber.getRef(References.TracerEnabled)
        ? Effect.tap(sent, () => Effect.annotateCurrentSpan("http.response.status_code", status))
        : sent
    )
  })

/**
 * The response body as SSE events. Comment lines (keep-alives such as OpenRouter's
 * `: OPENROUTER PROCESSING`) never become events. A `retry:` field is advice to a client that
 * reconnects; the gateway never reconnects to an upstream mid-answer, so it is ignored and the
 * events after it still flow (Effect's `Sse.decode` ends the stream on one; the parser is
 * ../../wire/sse.ts, which copies less). The body is destroyed when the stream ends early, which releases the
 * upstream connection at once.
 */
export const sseEvents = (provider: string, response: UpstreamResponse): Stream.Stream<SseEvent, UpstreamFailure> =>
  Stream.suspend(() => {
    const decoder = new TextDecoder()
    let parsed: Array<SseEvent> = []
    const parser = makeSseParser((event) => parsed.push(event))
    // Chunk by chunk, not event by event: the events of one upstream read travel on as one
    // array, so every later stage (and the write to the client) runs once per read, not once per
    // event (per-event stages cost about 30 us a chunk in the profile; bench/profile.ts).
    return Stream.fromAsyncIterable(response.body as AsyncIterable<Uint8Array>, (error) => transportFailure(provider, error)).pipe(
      Stream.mapAccumArrayEffect(constVoid, (_, reads) => {
        for (const bytes of reads) {
          const error = parser.feed(decoder.decode(bytes, { stream: true }))
          if (error !== undefined) {
            return Effect.fail(new ProviderError({
              message: `provider "${provider}" sent a malformed event stream`,
              details: { provider, upstream_status: response.status, upstream_error: { message: error } }
            }))
          }
        }
        const events = parsed
        parsed = []
        return Effect.succeed([undefined, events] as const)
      }),
      Stream.ensuring(Effect.sync(() => response.body.destroy()))
    )
  })

/** What `mapEventsOrFail` makes of one event: the item to pass on, or the failure that ends the stream. */
export type EventOutcome<B, E> = { readonly ok: true; readonly value: B } | { readonly ok: false; readonly error: E }

/**
 * Maps each upstream event, one step per chunk (see `sseEvents`). The first event `f` refuses
 * ends the stream with its failure, after the events before it in the same chunk have gone on,
 * exactly as a per-event `mapEffect` would have it; later events are never read.
 */
export const mapEventsOrFail = <A, B, E>(f: (event: A) => EventOutcome<B, E>) =>
<E0, R>(self: Stream.Stream<A, E0, R>): Stream.Stream<B, E0 | E, R> =>
  Stream.transformPull(self, (pull) =>
    Effect.sync(() => {
      let failed: { readonly error: E } | undefined
      const pump: Effect.Effect<Arr.NonEmptyReadonlyArray<B>, E0 | E | Cause.Done<void>, R> = Effect.suspend(() =>
        failed !== undefined
          ? Effect.fail(failed.error)
          : Effect.flatMap(pull, (chunk) => {
            const out: Array<B> = []
            for (const event of chunk) {
              const outcome = f(event)
              if (!outcome.ok) {
                if (out.length === 0) return Effect.fail(outcome.error)
                failed = { error: outcome.error }
                break
              }
              out.push(outcome.value)
            }
            return Effect.succeed(out as unknown as Arr.NonEmptyReadonlyArray<B>)
          })
      )
      return pump
    }))

/**
 * An answer passed on as it arrives, never held whole (issue 22, finding 5): `bytes` streams the
 * body (destroyed when the stream ends early, which frees the connection), failing once more
 * than `maxBytes` came; `tail()` is its last bytes, for reading a trailing field such as
 * `usage` after the end.
 */
export interface RelayedAnswer {
  readonly bytes: Stream.Stream<Uint8Array, UpstreamFailure>
  readonly tail: () => string
}

const TAIL_BYTES = 2_048

export const relayBody = (provider: string, response: UpstreamResponse, maxBytes: number): RelayedAnswer => {
  let size = 0
  let tail = Buffer.alloc(0)
  const bytes = Stream.fromAsyncIterable(response.body as AsyncIterable<Uint8Array>, (error) => transportFailure(provider, error)).pipe(
    Stream.mapEffect((chunk) => {
      size += chunk.length
      if (size > maxBytes) return Effect.fail(tooLargeAnswer(provider, maxBytes))
      const joined = Buffer.concat([tail, chunk])
      tail = joined.length > TAIL_BYTES ? joined.subarray(joined.length - TAIL_BYTES) : joined
      return Effect.succeed(chunk)
    }),
    Stream.ensuring(Effect.sync(() => response.body.destroy()))
  )
  return { bytes, tail: () => tail.toString("utf8") }
}
