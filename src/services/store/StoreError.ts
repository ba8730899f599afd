/**
 * The one error every store repository fails with: a failed statement or a row that does not
 * decode. Services turn it into 503 dependency_unavailable (`storeUnavailable`); the HTTP app
 * tells an outage (the store cannot be reached or does not answer in time) from a bug in a query
 * or a corrupt row by `outage`, so only the first becomes a 503 when it arrives as a defect.
 */
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import { isSqlError } from "effect/sql/SqlError"

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

/** Every repository method's failures (SqlError, SchemaError) as one StoreError naming the method. */
export const storeOp = (operation: string) => <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, StoreError, R> =>
  Effect.mapError(self, (cause) => StoreError.from(operation, cause))
