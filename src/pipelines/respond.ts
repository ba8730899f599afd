/**
 * Answers as the client formats want them: JSON bodies, and Server-Sent Events whose stream
 * owns the end of its request. OpenAI-format frames are data-only (no `id:` lines: they make the
 * Python SDK treat a later keep-alive as an empty event); Anthropic and Responses frames always
 * carry their `event:` line, which their SDKs dispatch on.
 */
import { Effect, Option, Stream } from "effect"
import { HttpServerResponse } from "effect/http"
import { type ApiError, slugOf, statusOf } from "../domain/errors.ts"
import { Drain, shutdownCut, STREAM_CUT_BY_SHUTDOWN } from "./drain.ts"
import { CLIENT_LEFT, CurrentRequest, endRequest, type Outcome } from "./request.ts"

/** A streamed answer interrupted after its 200: the drain cut it, or else its client left. */
const stopped = (drain: Drain["Service"] | undefined): Outcome =>
  drain?.cutting() === true ? STREAM_CUT_BY_SHUTDOWN : { ...CLIENT_LEFT, status: 200 }

export const json = (body: unknown, status = 200): HttpServerResponse.HttpServerResponse =>
  HttpServerResponse.text(JSON.stringify(body), { status, contentType: "application/json" })

export const dataFrame = (data: string): string => `data: ${data}\n\n`
export const DONE_FRAME = "data: [DONE]\n\n"
export const namedFrame = (event: string, data: string): string => `event: ${event}\ndata: ${data}\n\n`

/**
 * A 200 event stream that ends its request when it ends: completed (outcome 200), failed after
 * the headers (the failure goes in-band as `failureFrames`, and a 5xx is refunded), or the client
 * left (499). The HTTP app leaves a streamed answer's request open for this. A stream still open
 * when a graceful stop's grace runs out is failed with the shutdown error (src/pipelines/drain.ts).
 */
export const eventStreamResponse = Effect.fnUntraced(function*(
  frames: Stream.Stream<string, ApiError>,
  failureFrames: (error: ApiError) => string
) {
  const state = yield* CurrentRequest
  state.audit.stream = true
  let failure: ApiError | undefined
  const drain = Option.getOrUndefined(yield* Effect.serviceOption(Drain))
  // A drain whose grace runs out while the stream is open ends it from the HTTP layer, which
  // writes these frames and then interrupts the request (src/http/app.ts). The error is made
  // only then: a tagged error checks its fields and captures a stack, 2% of a streamed
  // request's CPU when made for every stream (issue 38).
  state.cutFrames = () => failureFrames(shutdownCut())
  // Cut before it started (its headers not yet written): it ends at once, with the same error.
  const started: Stream.Stream<string, ApiError> = drain === undefined
    ? frames
    : Stream.suspend((): Stream.Stream<string, ApiError> => drain.cutting() ? Stream.fail(shutdownCut()) : frames)
  const body = started.pipe(
    Stream.catch((error: ApiError) => {
      failure = error
      // Its own error frames end it: a cut meanwhile only stops it.
      state.cutFrames = undefined
      return Stream.make(failureFrames(error))
    }),
    Stream.onExit((exit) =>
      Effect.suspend(() => {
        state.cutFrames = undefined
        const outcome: Outcome = failure !== undefined
          ? { status: 200, slug: slugOf(failure), failure: statusOf(failure) }
          : exit._tag === "Failure"
          ? stopped(drain)
          : { status: 200, slug: null, failure: undefined }
        return endRequest(state, outcome)
      })
    ),
    // The frames of one upstream read leave as one write (the platform writes a chunk at a time).
    Stream.mapArray((frames) => [frames.length === 1 ? frames[0] : frames.join("")] as const),
    Stream.encodeText
  )
  return HttpServerResponse.stream(body, {
    contentType: "text/event-stream; charset=utf-8",
    headers: { "cache-control": "no-cache", "x-accel-buffering": "no" }
  })
})

/**
 * A 200 JSON answer relayed as its bytes arrive (an upstream's, or one made piece by piece), so
 * it is never held whole (issue 22, findings 4 and 5). Like an event stream it ends its request
 * when it ends; `onEnd` runs first, to read what the answer reported (usage) into the audit
 * record. A failure after the headers cannot become an envelope: the connection is cut (the
 * client sees a truncated answer, not a complete-looking one) and the record has the error.
 */
export const relayedJsonResponse = Effect.fnUntraced(function*(bytes: Stream.Stream<Uint8Array, ApiError>, onEnd: () => void) {
  const state = yield* CurrentRequest
  const drain = Option.getOrUndefined(yield* Effect.serviceOption(Drain))
  let failure: ApiError | undefined
  const body = bytes.pipe(
    Stream.catch((error: ApiError) => {
      failure = error
      return Stream.fail(error)
    }),
    Stream.onExit((exit) =>
      Effect.suspend(() => {
        onEnd()
        const outcome: Outcome = failure !== undefined
          ? { status: 200, slug: slugOf(failure), failure: statusOf(failure) }
          : exit._tag === "Failure"
          ? stopped(drain)
          : { status: 200, slug: null, failure: undefined }
        return endRequest(state, outcome)
      })
    )
  )
  return HttpServerResponse.stream(body, { contentType: "application/json" })
})
