/**
 * The life of one checked-out session, shared by both dialects. A session goes back to its pool
 * only after a clean reset: after a successful call, or after the database refused the statement
 * (a rollback, then the reset). A timeout, a lost connection, an interruption or a failed reset
 * discards it instead, so a late cancel or leftover state can never reach the next caller.
 */
import { Duration, Effect } from "effect"
import type * as Scope from "effect/Scope"
import { queryTimeout, type SqlDriverError } from "./errors.ts"
import { CLIENT_GRACE_MS } from "./types.ts"

export const withSession = <S, E, A>(options: {
  readonly timeoutMs: number
  readonly acquire: Effect.Effect<S, SqlDriverError, Scope.Scope>
  /** Ends whatever transaction is open (when `rollback`) and resets the session; false when it could not. */
  readonly restore: (session: S, rollback: boolean) => Effect.Effect<boolean>
  /** Stops anything still running for the session on the server and destroys it. */
  readonly discard: (session: S) => Effect.Effect<void>
  readonly toDriverError: (error: E) => SqlDriverError
  readonly body: (session: S) => Effect.Effect<A, E>
}): Effect.Effect<A, SqlDriverError> =>
  Effect.scoped(Effect.gen(function*() {
    const session = yield* options.acquire
    let reusable = false
    yield* Effect.addFinalizer(() => reusable ? Effect.void : options.discard(session))
    const result = yield* options.body(session).pipe(
      Effect.mapError(options.toDriverError),
      Effect.tapError((error) =>
        error._tag === "SqlQueryFailed"
          ? Effect.map(options.restore(session, true), (ok) => {
            reusable = ok
          })
          : Effect.void
      )
    )
    reusable = yield* options.restore(session, false)
    return result
  })).pipe(
    // The server-side limits fire first and leave a clean error; this covers a server that does
    // not answer at all. Interrupting the body runs the finalizer above, which discards the session.
    Effect.timeoutOrElse({
      duration: Duration.millis(options.timeoutMs + CLIENT_GRACE_MS),
      orElse: () => Effect.fail(queryTimeout(options.timeoutMs))
    })
  )
