/**
 * What every streamed response shares, whatever its wire format: once the 200 is sent, a
 * failure becomes in-band frames (the format decides which), and the request's one audit record
 * is written when the stream ends, however it ends: completed, failed, or the client left.
 */
import { Effect, Stream } from "effect"
import { type ApiError, slugOf, statusOf } from "../domain/errors.ts"
import { CurrentRequest, toAuditRecord } from "../http/request-context.ts"
import { Audit } from "../services/audit/Audit.ts"
import { refundAndZero } from "./admission.ts"

export const guardedStream = <E extends ApiError>(
  frames: Stream.Stream<string, E>,
  failureFrames: (error: ApiError) => string
) =>
  Effect.gen(function*() {
    const state = yield* CurrentRequest
    const audit = yield* Audit
    state.auditDeferred = true
    state.audit.stream = true
    let failure: ApiError | undefined
    return frames.pipe(
      Stream.catch((error: E) => {
        failure = error
        return Stream.make(failureFrames(error))
      }),
      Stream.onExit((exit) =>
        Effect.suspend(() => {
          const slug = failure ? slugOf(failure) : exit._tag === "Failure" ? "client_closed_request" : null
          // A provider failure mid-stream is refunded like one before it: the client will retry.
          const refund = failure !== undefined && statusOf(failure) >= 500 ? refundAndZero(state) : Effect.void
          return refund.pipe(
            Effect.andThen(state.settlement?.release ?? Effect.void),
            Effect.andThen(Effect.sync(() => audit.append(toAuditRecord(state, 200, slug))))
          )
        })
      )
    )
  })
