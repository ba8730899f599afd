/**
 * Reading JSON request bodies under the size limit. Node's own body helpers either read the
 * whole body before checking or destroy the socket on overflow (so the client never sees the
 * 413); this reader stops reading at the limit and leaves the socket able to carry the answer.
 */
import { NodeHttpServerRequest } from "@effect/platform-node"
import { Effect } from "effect"
import type { HttpServerRequest } from "effect/http/HttpServerRequest"
import { RequestTooLarge, UnsupportedMediaType, ValidationFailed } from "../domain/errors.ts"

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

export const readRawBody = (request: HttpServerRequest, limit: number): Effect.Effect<Buffer, RequestTooLarge> =>
  Effect.callback<Buffer, RequestTooLarge>((resume) => {
    const incoming = NodeHttpServerRequest.toIncomingMessage(request)
    const chunks: Array<Buffer> = []
    let size = 0
    const cleanup = () => {
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

/** A JSON object body: media type, size, syntax and shape each answered with their own error. */
export const readJsonObject = (
  request: HttpServerRequest,
  limit: number
): Effect.Effect<Record<string, unknown>, RequestTooLarge | UnsupportedMediaType | ValidationFailed> =>
  Effect.gen(function*() {
    if (!isJsonMediaType(request.headers["content-type"])) {
      return yield* new UnsupportedMediaType({
        message: `expected Content-Type: application/json, got ${request.headers["content-type"] ?? "none"}`
      })
    }
    const raw = yield* readRawBody(request, limit)
    if (raw.length === 0) return yield* new ValidationFailed({ message: "request body is empty; expected a JSON object" })
    const parsed: unknown = yield* Effect.try({
      try: () => JSON.parse(raw.toString("utf8")),
      catch: (error) => new ValidationFailed({ message: `malformed JSON: ${(error as Error).message}` })
    })
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
      return yield* new ValidationFailed({ message: "request body must be a JSON object" })
    }
    return parsed as Record<string, unknown>
  })
