/**
 * Reading JSON request bodies under the size limit. Node's own body helpers either read the
 * whole body before checking or destroy the socket on overflow (so the client never sees the
 * 413); this reader stops reading at the limit and leaves the socket able to carry the answer.
 */
import * as NodeHttpServerRequest from "@effect/platform-node/NodeHttpServerRequest"
import { Context, Effect } from "effect"
import type { HttpServerRequest } from "effect/http/HttpServerRequest"
import { RequestTooLarge, UnsupportedMediaType, ValidationFailed } from "../domain/errors.ts"
import { LARGE_BODY_BYTES, markLarge, turnIfLarge } from "../wire/turns.ts"

/**
 * Limits on reading a body besides its size, set from `server.body_timeout_ms` and
 * `limits.max_json_depth` by the gateway's wiring; the defaults are the config's.
 */
export const BodyLimits = Context.Reference<{
  /** The whole body must arrive within this time once reading starts. */
  readonly timeoutMs: number
  /** Nesting depth of arrays and objects. */
  readonly maxJsonDepth: number
}>("modelgate/BodyLimits", { defaultValue: () => ({ timeoutMs: 30_000, maxJsonDepth: 64 }) })

/**
 * 408 with the validation slug: the spec's slug table has no timeout slug for the client's side
 * (`upstream_timeout` is a 504 about the provider), and a body that never arrives in full is a
 * malformed request, which is what `validation_failed` says. The status tells clients apart.
 */
export const bodyTimedOut = (timeoutMs: number) =>
  new ValidationFailed({
    status: 408,
    message: `the request body did not arrive within ${timeoutMs} ms`,
    details: { limit_ms: timeoutMs }
  })

const tooDeep = (maxDepth: number) =>
  new ValidationFailed({
    message: `JSON nesting exceeds the limit of ${maxDepth} levels`,
    details: { limit_depth: maxDepth }
  })

/**
 * Whether `text` nests arrays and objects deeper than `maxDepth`, by a linear scan that skips
 * strings: checked before JSON.parse, so a hostile body never becomes a deep tree that some
 * recursive walker (schema validation, re-serialisation) would overflow the stack on.
 */
export const exceedsDepth = (text: string, maxDepth: number): boolean => {
  let depth = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 0x5c) i++ // backslash: skip the escaped character
      else if (c === 0x22) inString = false
    } else if (c === 0x22) inString = true
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > maxDepth) return true
    } else if (c === 0x5d || c === 0x7d) depth--
  }
  return false
}

export const tooLarge = (limit: number) =>
  new RequestTooLarge({ message: `request body exceeds the limit of ${limit} bytes`, details: { limit_bytes: limit } })

/** The Content-Length check that lets an oversized request be refused before any of it is read. */
export const declaredLengthExceeds = (request: HttpServerRequest, limit: number): boolean => {
  const declared = request.headers["content-length"]
  return declared !== undefined && Number(declared) > limit
}

const isJsonMediaType = (contentType: string | undefined): boolean => {
  if (contentType === undefined) return false
  const media = contentType.split(";")[0]!.trim().toLowerCase()
  return media === "application/json" || (media.startsWith("application/") && media.endsWith("+json"))
}

export const readRawBody = (
  request: HttpServerRequest,
  limit: number,
  timeoutMs: number = BodyLimits.defaultValue().timeoutMs
): Effect.Effect<Buffer, RequestTooLarge | ValidationFailed> =>
  Effect.callback<Buffer, RequestTooLarge | ValidationFailed>((resume) => {
    const incoming = NodeHttpServerRequest.toIncomingMessage(request)
    const chunks: Array<Buffer> = []
    let size = 0
    // A Content-Length that promises more than is sent must not hold the request (and its socket) forever.
    const timer = setTimeout(() => {
      cleanup()
      incoming.pause()
      resume(Effect.fail(bodyTimedOut(timeoutMs)))
    }, timeoutMs)
    const cleanup = () => {
      clearTimeout(timer)
      incoming.off("data", onData)
      incoming.off("end", onEnd)
      incoming.off("error", onError)
    }
    const onData = (chunk: Buffer) => {
      size += chunk.length
      if (size > limit) {
        cleanup()
        incoming.pause()
        resume(Effect.fail(tooLarge(limit)))
        return
      }
      chunks.push(chunk)
    }
    const onEnd = () => {
      cleanup()
      resume(Effect.succeed(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size)))
    }
    const onError = () => {
      cleanup()
      resume(Effect.succeed(Buffer.alloc(0)))
    }
    incoming.on("data", onData)
    incoming.on("end", onEnd)
    incoming.on("error", onError)
    return Effect.sync(cleanup)
  })

/**
 * A JSON object body: media type, size, syntax and shape each answered with their own error.
 * `limits`: the request's (the HTTP app passes those in force when it started); else the context's.
 */
export const readJsonObject: (
  request: HttpServerRequest,
  limit: number,
  limits?: Context.Service.Shape<typeof BodyLimits>
) => Effect.Effect<Record<string, unknown>, RequestTooLarge | UnsupportedMediaType | ValidationFailed> = Effect.fnUntraced(
  // Defined once: a generator function made per call costs V8 a new map and prototype at its first call (README, Generators made per request).
  function*(request: HttpServerRequest, limit: number, limits?: Context.Service.Shape<typeof BodyLimits>) {
    if (!isJsonMediaType(request.headers["content-type"])) {
      return yield* new UnsupportedMediaType({
        message: `expected Content-Type: application/json, got ${request.headers["content-type"] ?? "none"}`
      })
    }
    const bodyLimits = limits ?? (yield* BodyLimits)
    const raw = yield* readRawBody(request, limit, bodyLimits.timeoutMs)
    if (raw.length === 0) return yield* new ValidationFailed({ message: "request body is empty; expected a JSON object" })
    const text = raw.toString("utf8")
    if (exceedsDepth(text, bodyLimits.maxJsonDepth)) return yield* tooDeep(bodyLimits.maxJsonDepth)
    // A large body is parsed on a turn of its own, and decoded on the next (../wire/turns.ts).
    yield* turnIfLarge(raw.length)
    let parsed: unknown
    try {
      parsed = JSON.parse(text)
    } catch (error) {
      return yield* new ValidationFailed({ message: `malformed JSON: ${(error as Error).message}` })
    }
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
      return yield* new ValidationFailed({ message: "request body must be a JSON object" })
    }
    if (raw.length >= LARGE_BODY_BYTES) {
      markLarge(parsed)
      yield* Effect.yieldNow
    }
    return parsed as Record<string, unknown>
  }
)
