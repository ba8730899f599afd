/**
 * A graceful stop, as the request path sees it (decisions section 10). The HTTP server starts
 * the drain (stop accepting, `Connection: close` on every answer) and waits for the requests in
 * flight; when `server.shutdown_grace_seconds` runs out it cuts what is still open. A stream cut
 * that way ends with an in-band `503 dependency_unavailable` error (the gateway is going away, a
 * retry elsewhere succeeds), is refunded, and is audited with that slug: the server cut it, not
 * the client. A plain request still waiting for its provider is recorded the same way.
 */
import { Context, Effect, Layer } from "effect"
import { constVoid } from "effect/Function"
import { DependencyUnavailable } from "../domain/errors.ts"
import type { Outcome } from "./request.ts"

export const SHUTDOWN_MESSAGE = "the gateway is shutting down and its drain period ran out; retry the request"

export const shutdownCut = () =>
  new DependencyUnavailable({ message: SHUTDOWN_MESSAGE, details: { dependency: "gateway", reason: "shutdown" } })

/** The outcome of a request that was still waiting (no answer sent) when the drain cut it. */
export const CUT_BY_SHUTDOWN: Outcome = { status: 503, slug: "dependency_unavailable", failure: 503 }

/** The outcome of a stream the drain cut: its 200 was sent, the error went in-band. */
export const STREAM_CUT_BY_SHUTDOWN: Outcome = { status: 200, slug: "dependency_unavailable", failure: 503 }

export class Drain extends Context.Service<Drain, {
  readonly draining: () => boolean
  /** True once the grace ran out and open requests were told to end. */
  readonly cutting: () => boolean
  /** Requests in flight (streams included until they end). */
  readonly inFlight: () => number
  readonly requestStarted: () => void
  readonly requestEnded: () => void
  readonly begin: () => void
  /**
   * Runs `end` (on a fiber of its own) when open streams must end, or at once if they already
   * must; the function it gives back unregisters it. Nothing waits per stream meanwhile: racing
   * every read of a stream against a waiting fiber cost 18% of a streamed answer's CPU (issue 38).
   */
  readonly onCut: (end: Effect.Effect<void>) => Effect.Effect<() => void>
  readonly cutNow: Effect.Effect<void>
}>()("modelgate/Drain") {
  static readonly layer = Layer.effect(
    Drain,
    Effect.sync(() => {
      let draining = false
      let cutting = false
      let inFlight = 0
      const onCutListeners = new Set<Effect.Effect<void>>()
      return Drain.of({
        draining: () => draining,
        cutting: () => cutting,
        inFlight: () => inFlight,
        requestStarted: () => void inFlight++,
        requestEnded: () => void inFlight--,
        begin: () => void (draining = true),
        onCut: (end) =>
          Effect.suspend(() => {
            if (cutting) return Effect.as(Effect.forkDetach(end), constVoid)
            onCutListeners.add(end)
            return Effect.succeed(() => void onCutListeners.delete(end))
          }),
        cutNow: Effect.suspend(() => {
          cutting = true
          const ending = [...onCutListeners]
          onCutListeners.clear()
          return Effect.forEach(ending, (end) => Effect.forkDetach(end), { discard: true })
        })
      })
    })
  )
}
