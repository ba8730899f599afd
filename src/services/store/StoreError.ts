/**
 * The one error every store repository fails with: a failed statement or a row that does not
 * decode. Services turn it into 503 dependency_unavailable (`storeUnavailable`); the HTTP app
 * tells an outage (the store cannot be reached or does not answer in time) from a bug in a query
 * or a corrupt row by `outage`, so only the first becomes a 503 when it arrives as a defect.
 */
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { isSqlError } from "effect/sql/SqlError"
import { abandonAfter, AttemptTimedOut } from "../durability/backoff.ts"

/** SqlError reasons that mean the store cannot be reached or does not answer in time. */
const OUTAGE_REASONS = new Set(["ConnectionError", "AuthenticationError", "StatementTimeoutError", "LockTimeoutError"])

export class StoreError extends Data.TaggedError("StoreError")<{
  /** The repository method that failed, e.g. `KeysRepo.findKeyByHash`. */
  readonly operation: string
  readonly message: string
  /** True when the store is unreachable or timed out (not a bad query or a bad row). */
  readonly outage: boolean
  readonly cause: unknown
}> {
  static readonly from = (operation: string, cause: unknown): StoreError =>
    cause instanceof StoreError
      ? cause
      : new StoreError({
        operation,
        message: Schema.isSchemaError(cause)
          ? `a ${operation} row did not decode: ${cause.message}`
          : (cause as { message?: string })?.message ?? "unknown store failure",
        outage: isSqlError(cause) && OUTAGE_REASONS.has(cause.reason._tag),
        cause
      })
}

/** True for a store error that is an outage: the answer is 503 dependency_unavailable, not 500. */
export const isStoreOutage = (u: unknown): u is StoreError => u instanceof StoreError && u.outage

/**
 * How long any one store call (a repository method, transaction included) may take before the
 * caller gets an outage (503) instead of waiting (issue 21): a connection to a partitioned
 * server, or a pool whose every connection is stuck on one, would otherwise hold the request for
 * as long as the TCP connection lives. The gateway sets it from `store_timeouts.call_ms` for a
 * Postgres store, and to infinity for SQLite.
 */
export const StoreDeadline = Context.Reference<Duration.Duration>("modelgate/StoreDeadline", {
  defaultValue: () => Duration.seconds(6)
})

/**
 * Every repository method's failures (SqlError, SchemaError) as one StoreError naming the
 * method, and its deadline: the call runs on a fiber of its own that is abandoned (not waited
 * for) when the deadline passes, so the statement may still land later; every store write is
 * idempotent or runs in a transaction that the server rolls back when its session dies.
 */
export const storeOp = (operation: string) => <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, StoreError, R> =>
  // Combinators, not a generator: this wraps every store call, and as Effect.gen it cost about
  // 3.3 µs against 0.9 µs (issue 38).
  Effect.flatMap(StoreDeadline, (deadline) =>
    // SQLite answers synchronously in this process: nothing to abandon, and no fiber to pay for.
    !Duration.isFinite(deadline)
      ? storeErrors(operation, self)
      : Effect.flatMap(Effect.context<R>(), (context) =>
        abandonAfter(Effect.provideContext(self, context), deadline).pipe(
          Effect.mapError((cause) =>
            cause instanceof AttemptTimedOut
              ? new StoreError({
                operation,
                message: `the store did not answer ${operation} within ${Duration.toMillis(deadline)} ms`,
                outage: true,
                cause
              })
              : StoreError.from(operation, cause)
          )
        )))

const storeErrors = <A, E, R>(operation: string, self: Effect.Effect<A, E, R>): Effect.Effect<A, StoreError, R> =>
  Effect.mapError(self, (cause) => StoreError.from(operation, cause))
