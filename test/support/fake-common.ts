// Shared machinery of the fake OpenAI and Anthropic upstreams: scenario types, the HTTP server
// with its bookkeeping (recorded requests, open responses, client aborts) and small helpers.
// Each vendor module supplies only its validation and wire encoding.
import { randomBytes } from "node:crypto"
import * as http from "node:http"
import type { AddressInfo } from "node:net"

// Request bodies are arbitrary JSON chosen by the code under test; tests dig into them freely,
// so a loose type keeps assertions readable without casts at every step.
export type JsonBody = Record<string, any>

export interface RecordedRequest {
  readonly method: string
  /** Path including the query string, e.g. `/v1/messages?beta=true`. */
  readonly path: string
  readonly headers: http.IncomingHttpHeaders
  /** Parsed JSON body; the raw text when it is not JSON; `undefined` when empty. */
  readonly body: JsonBody | undefined
  readonly rawBody: string
}

/**
 * Token counts written verbatim into the vendor's usage fields. OpenAI: `input` is
 * `prompt_tokens` (which includes cached tokens), `cacheRead` is
 * `prompt_tokens_details.cached_tokens`, `cacheWrite` is `prompt_tokens_details.cache_write_tokens`.
 * Anthropic: `input` is `input_tokens` (the uncached tail only), `cacheRead` is
 * `cache_read_input_tokens`, `cacheWrite` is `cache_creation_input_tokens`.
 * Anything left out is computed from the request and answer (see `countWords`).
 */
export interface UsageSpec {
  readonly input?: number
  readonly output?: number
  readonly cacheRead?: number
  readonly cacheWrite?: number
  /** Gemini only: `thoughtsTokenCount`, the thinking tokens reported beside `candidatesTokenCount`. */
  readonly thoughts?: number
}

export interface StreamOptions {
  /** Send `: keep-alive` SSE comment lines between chunks, as OpenRouter does. */
  readonly keepAlive?: boolean
  /** Send the usage frame twice (OpenAI: the `choices: []` chunk, even when not requested; Anthropic: `message_delta`). */
  readonly extraUsageChunk?: boolean
  /** Pause between frames. */
  readonly chunkDelayMs?: number
  /**
   * Holds the last frame back until this settles (or the client leaves): a stream that ends when
   * the test says, not after a delay that a loaded machine may outlast or fall short of.
   */
  readonly until?: Promise<unknown>
}

/**
 * Why the answer stopped. The neutral names map to each vendor's own value
 * (`stop` -> `end_turn`, `length` -> `max_tokens`, `content_filter` -> `refusal`,
 * `tool_calls` -> `tool_use`); any other string is sent verbatim.
 */
export type Finish = "stop" | "length" | "content_filter" | "tool_calls" | (string & {})

export interface TextScenario extends StreamOptions {
  readonly kind: "text"
  readonly text: string
  readonly usage?: UsageSpec
  readonly finish?: Finish
}

export interface ToolCallSpec {
  readonly id?: string
  readonly name: string
  readonly arguments: Record<string, unknown>
}

export interface ToolCallsScenario extends StreamOptions {
  readonly kind: "tool_calls"
  readonly calls: ReadonlyArray<ToolCallSpec>
  /** Text the model says before calling the tools. */
  readonly text?: string
  readonly usage?: UsageSpec
}

export interface ErrorScenario {
  readonly kind: "error"
  readonly status: number
  /** Replaces the vendor error body: objects are sent as JSON, strings verbatim as text/plain. */
  readonly body?: unknown
  /** Replaces only the message inside the vendor's default error body. */
  readonly message?: string
  /** Seconds for `retry-after` on 429/529 (default 1). */
  readonly retryAfter?: number
  readonly headers?: Readonly<Record<string, string>>
}

export interface HangScenario {
  readonly kind: "hang"
}

export interface DelayScenario {
  readonly kind: "delay"
  readonly ms: number
  readonly then: Scenario
}

export interface StallAfterScenario extends StreamOptions {
  readonly kind: "stall_after"
  /**
   * Number of SSE data frames sent before stalling (Anthropic `ping` frames count). Never the
   * whole stream: at most all frames but the last. For a non-streaming request the status,
   * headers and half of the JSON body are sent instead.
   */
  readonly chunks: number
  /** `hang` (default) keeps the connection open and silent; `destroy` resets the socket. */
  readonly then?: "hang" | "destroy"
  /** The answer being streamed; by default a long text. */
  readonly of?: TextScenario | ToolCallsScenario
}

export interface MidStreamErrorScenario extends StreamOptions {
  readonly kind: "mid_stream_error"
  /** Data frames sent before the error frame (default: up to and including the first word). */
  readonly afterChunks?: number
  /** OpenAI `error.type` / Anthropic `error.type` (defaults: `server_error` / `overloaded_error`). */
  readonly errorType?: string
  readonly message?: string
  /** Text streamed before the error; by default a long text. */
  readonly text?: string
}

export type Scenario =
  | TextScenario
  | ToolCallsScenario
  | ErrorScenario
  | HangScenario
  | DelayScenario
  | StallAfterScenario
  | MidStreamErrorScenario

export interface FakeOptions {
  /** The only accepted API key. */
  readonly apiKey: string
  /** When given, any other model gets the vendor's 404 model-not-found error. */
  readonly models?: ReadonlyArray<string>
  /** Keep every request in `requests` (default true); benchmarks turn it off to hold memory flat. */
  readonly recordRequests?: boolean
}

export interface FakeUpstream {
  readonly url: string
  readonly requests: ReadonlyArray<RecordedRequest>
  /** Queue scenarios for the next valid requests, first in first out. */
  enqueue(...scenarios: ReadonlyArray<Scenario>): void
  /** Scenario for valid requests when the queue is empty. */
  setDefault(fn: (body: JsonBody) => Scenario): void
  /** Responses currently in flight (streaming, hanging or delayed) whose client is still connected. */
  openStreams(): number
  /** Requests whose client went away before the response finished. */
  readonly aborted: number
  /** Forget recorded requests, queued scenarios, the custom default and the abort count. */
  reset(): void
  close(): Promise<void>
}

/** A validation failure, sent instead of any scenario. */
export type Refusal = { readonly status: number; readonly body: unknown; readonly headers?: Record<string, string> }

export interface VendorHooks {
  /** Base path appended to the origin for `FakeUpstream.url`. */
  readonly basePath: string
  /** Auth, routing and body validation. `undefined` means the request is valid. */
  readonly refuse: (req: RecordedRequest, headers: Record<string, string>) => Refusal | undefined
  readonly defaultScenario: (body: JsonBody) => Scenario
  readonly respond: (ctx: ResponseContext, scenario: Scenario) => Promise<void>
  /** Headers every response carries (request ids and the like). */
  readonly commonHeaders: () => Record<string, string>
}

/**
 * What a vendor encoder may do with the open response. Every write is a no-op once the client
 * is gone or the fake is closing, so encoders need no guards of their own.
 */
export interface ResponseContext {
  readonly body: JsonBody
  readonly headers: Record<string, string>
  readonly signal: AbortSignal
  sendJson(status: number, payload: unknown, extraHeaders?: Record<string, string>): void
  sendText(status: number, text: string, extraHeaders?: Record<string, string>): void
  /** Sends the 200 of a stream: SSE unless another content type is named (AWS's binary event stream). */
  startStream(contentType?: string): void
  /** Writes raw bytes to an already started response. */
  write(chunk: string | Uint8Array): void
  end(): void
  /** Resets the socket without finishing the response (a broken upstream, not a client abort). */
  destroy(): void
  /** Sends the status and headers of a JSON response, then half of its body, and stops. */
  sendPartialJson(status: number, payload: unknown): void
  sleep(ms: number): Promise<void>
  /** Resolves when the client goes away or the fake closes; used to hang. */
  untilGone(): Promise<void>
}

export const startFake = async (options: FakeOptions, hooks: VendorHooks): Promise<FakeUpstream> => {
  const requests: Array<RecordedRequest> = []
  const queue: Array<Scenario> = []
  let customDefault: ((body: JsonBody) => Scenario) | undefined
  let open = 0
  let aborted = 0
  let closing = false
  const inFlight = new Set<AbortController>()

  const server = http.createServer({ keepAlive: true, keepAliveTimeout: 60_000 }, (req, res) => {
    open++
    const controller = new AbortController()
    inFlight.add(controller)
    let selfDestroyed = false
    res.on("error", () => {})
    res.on("close", () => {
      open--
      inFlight.delete(controller)
      if (!res.writableFinished && !selfDestroyed && !closing) aborted++
      controller.abort()
    })

    // A client that resets mid-upload must not crash the fake; the response's close handler counts it.
    req.on("error", () => {})
    const chunks: Array<Buffer> = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", () => {
      const rawBody = Buffer.concat(chunks).toString("utf8")
      const recorded: RecordedRequest = {
        method: req.method ?? "GET",
        path: req.url ?? "/",
        headers: req.headers,
        body: parseBody(rawBody),
        rawBody
      }
      if (options.recordRequests !== false) requests.push(recorded)
      const headers = hooks.commonHeaders()
      const ctx = makeContext(res, controller.signal, headers, recorded, () => {
        selfDestroyed = true
      })
      const refusal = hooks.refuse(recorded, headers)
      if (refusal !== undefined) {
        ctx.sendJson(refusal.status, refusal.body, refusal.headers)
        return
      }
      const body = recorded.body as JsonBody
      const scenario = queue.shift() ?? (customDefault ?? hooks.defaultScenario)(body)
      hooks.respond(ctx, scenario).catch((error: unknown) => {
        // A bug in the fake itself: make it loud in the test that triggered it.
        ctx.sendJson(500, { fake_internal_error: String(error) })
      })
    })
  })
  server.keepAliveTimeout = 60_000
  server.headersTimeout = 65_000
  server.requestTimeout = 0

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => resolve())
  })
  const port = (server.address() as AddressInfo).port

  return {
    url: `http://127.0.0.1:${port}${hooks.basePath}`,
    requests,
    enqueue: (...scenarios) => {
      queue.push(...scenarios)
    },
    setDefault: (fn) => {
      customDefault = fn
    },
    openStreams: () => open,
    get aborted() {
      return aborted
    },
    reset: () => {
      requests.length = 0
      queue.length = 0
      customDefault = undefined
      aborted = 0
    },
    close: () =>
      new Promise<void>((resolve) => {
        closing = true
        for (const controller of inFlight) controller.abort()
        server.close(() => resolve())
        server.closeAllConnections()
      })
  }
}

const parseBody = (raw: string): JsonBody | undefined => {
  if (raw.length === 0) return undefined
  try {
    return JSON.parse(raw) as JsonBody
  } catch {
    return raw as unknown as JsonBody
  }
}

const makeContext = (
  res: http.ServerResponse,
  signal: AbortSignal,
  headers: Record<string, string>,
  recorded: RecordedRequest,
  markSelfDestroyed: () => void
): ResponseContext => {
  const live = () => !signal.aborted && !res.destroyed
  const writeHead = (status: number, extra: Record<string, string>) => {
    res.writeHead(status, { ...headers, ...extra })
  }
  return {
    body: recorded.body as JsonBody,
    headers,
    signal,
    sendJson: (status, payload, extraHeaders = {}) => {
      if (!live() || res.headersSent) return
      const text = JSON.stringify(payload)
      writeHead(status, {
        "content-type": "application/json",
        "content-length": String(Buffer.byteLength(text)),
        ...extraHeaders
      })
      res.end(text)
    },
    sendText: (status, text, extraHeaders = {}) => {
      if (!live() || res.headersSent) return
      writeHead(status, {
        "content-type": "text/plain; charset=utf-8",
        "content-length": String(Buffer.byteLength(text)),
        ...extraHeaders
      })
      res.end(text)
    },
    startStream: (contentType = "text/event-stream; charset=utf-8") => {
      if (!live() || res.headersSent) return
      writeHead(200, {
        "content-type": contentType,
        "cache-control": "no-cache",
        connection: "keep-alive"
      })
      res.flushHeaders()
    },
    write: (chunk) => {
      if (live()) res.write(chunk)
    },
    end: () => {
      if (live()) res.end()
    },
    destroy: () => {
      if (res.destroyed) return
      markSelfDestroyed()
      res.socket?.destroy()
      res.destroy()
    },
    sendPartialJson: (status, payload) => {
      if (!live() || res.headersSent) return
      const text = JSON.stringify(payload)
      writeHead(status, {
        "content-type": "application/json",
        "content-length": String(Buffer.byteLength(text))
      })
      res.write(text.slice(0, Math.floor(text.length / 2)))
    },
    sleep: (ms) => sleep(ms, signal),
    untilGone: () =>
      new Promise<void>((resolve) => {
        if (signal.aborted) resolve()
        else signal.addEventListener("abort", () => resolve(), { once: true })
      })
  }
}

const sleep = (ms: number, signal: AbortSignal): Promise<void> =>
  new Promise<void>((resolve) => {
    if (signal.aborted) return resolve()
    const timer = setTimeout(done, ms)
    function done() {
      clearTimeout(timer)
      signal.removeEventListener("abort", done)
      resolve()
    }
    signal.addEventListener("abort", done, { once: true })
  })

const untilOrAborted = (until: Promise<unknown>, signal: AbortSignal): Promise<void> =>
  new Promise<void>((resolve) => {
    if (signal.aborted) return resolve()
    const done = () => {
      signal.removeEventListener("abort", done)
      resolve()
    }
    signal.addEventListener("abort", done, { once: true })
    until.then(done, done)
  })

/** Runs the frames of a streamed answer, honouring the stream options. */
export const writeFrames = async (
  ctx: ResponseContext,
  frames: ReadonlyArray<string | Uint8Array>,
  options: StreamOptions
): Promise<void> => {
  for (let i = 0; i < frames.length; i++) {
    if (ctx.signal.aborted) return
    if (i > 0) {
      if (options.chunkDelayMs !== undefined && options.chunkDelayMs > 0) await ctx.sleep(options.chunkDelayMs)
      if (options.keepAlive === true) ctx.write(": keep-alive\n\n")
    }
    if (i === frames.length - 1 && options.until !== undefined) {
      await untilOrAborted(options.until, ctx.signal)
      if (ctx.signal.aborted) return
    }
    ctx.write(frames[i]!)
  }
}

/** Deterministic token count used for every default usage figure: whitespace-separated words. */
export const countWords = (text: string): number => {
  const trimmed = text.trim()
  return trimmed.length === 0 ? 0 : trimmed.split(/\s+/).length
}

/** Word-sized pieces whose concatenation is exactly `text` (leading whitespace stays with the word). */
export const splitWords = (text: string): Array<string> => text.split(/(?<=\S)(?=\s)/).filter((piece) => piece.length > 0)

/** First `n` words of `text`, keeping the original spacing. */
export const takeWords = (text: string, n: number): string => {
  let words = 0
  let out = ""
  for (const piece of splitWords(text)) {
    if (/\S/.test(piece)) {
      if (words === n) break
      words++
    }
    out += piece
  }
  return out
}

/** Splits a JSON string into a few fragments, the way vendors stream tool arguments. */
export const splitFragments = (json: string, pieces = 3): Array<string> => {
  if (json.length <= 1) return [json]
  const size = Math.max(1, Math.ceil(json.length / pieces))
  const out: Array<string> = []
  for (let i = 0; i < json.length; i += size) out.push(json.slice(i, i + size))
  return out
}

const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

export const randomId = (length: number): string => {
  const bytes = randomBytes(length)
  let out = ""
  for (const byte of bytes) out += ALPHABET[byte % ALPHABET.length]
  return out
}

export const randomHex = (bytes: number): string => randomBytes(bytes).toString("hex")

/** Default stand-in for stalled and broken streams: long enough to outlast any `chunks` count. */
export const longText = (words = 64): string => Array.from({ length: words }, (_, i) => `word${i}`).join(" ")

export const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

export const isNumber = (value: unknown): value is number => typeof value === "number" && Number.isFinite(value)
