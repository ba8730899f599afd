/**
 * The credit outbox (decisions section 10): a settlement or refund that could not reach the store
 * when its request ended waits here and is retried, with exponential backoff and jitter, until it
 * lands. Every movement is idempotent by request id (the store ends a reservation at most once),
 * so a retry after an ambiguous failure, or a movement applied by both this outbox and a sweeping
 * replica, never moves credits twice.
 *
 * Kept in memory while the process runs; on a graceful stop what is still pending is spooled to
 * the data directory and taken back by the next start. A SIGKILL loses the memory part, and then
 * the reservations it held are refunded by the sweep of a live replica once this one's lease
 * lapses: the customer is never charged for an unfinished request, at worst not charged for a
 * finished one.
 */
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import type * as Scope from "effect/Scope"
import type { StoreError } from "../store/StoreError.ts"
import { abandonAfter, backoffDelayMs, type BackoffPolicy, DEFAULT_BACKOFF, outageTracker } from "../durability/backoff.ts"
import { takeSpool, writeSpool } from "../durability/spool.ts"

export interface PendingMovement {
  readonly op: "settle" | "refund"
  readonly request_id: string
  readonly actor: string
  readonly note: string
}

export interface Outbox {
  /** Queues a movement for retry (one per request id: a request ends once). */
  readonly enqueue: (movement: PendingMovement) => void
  readonly pending: () => number
  /** True while the store refuses movements: new ones then skip their first attempt and queue at once. */
  readonly down: () => boolean
  /** Tries everything pending now; resolves when nothing is left or an attempt failed. */
  readonly drain: Effect.Effect<void>
}

export const SPOOL_FILE = "credit-outbox.jsonl"
const ATTEMPT_TIMEOUT = Duration.seconds(5)

export const makeOutbox = (options: {
  readonly apply: (movement: PendingMovement) => Effect.Effect<void, StoreError>
  /** Where pending movements are spooled on stop and taken back at start; none: memory only. */
  readonly spoolPath?: string | undefined
  readonly backoff?: BackoffPolicy | undefined
}): Effect.Effect<Outbox, never, Scope.Scope> =>
  Effect.gen(function*() {
    const pending = new Map<string, PendingMovement>()
    const outage = outageTracker()
    let wake = yield* Deferred.make<void>()

    if (options.spoolPath !== undefined) {
      const spooled = takeSpool<PendingMovement>(options.spoolPath)
      for (const movement of spooled.items) pending.set(movement.request_id, movement)
      if (spooled.items.length > 0 || spooled.skipped > 0) {
        yield* Effect.logInfo(
          `credit outbox: took back ${spooled.items.length} spooled movements from ${options.spoolPath}` +
            (spooled.skipped > 0 ? ` (${spooled.skipped} unreadable lines skipped)` : "")
        )
      }
    }

    /** One pass over what is pending; false when the store refused a movement. */
    const pass = Effect.gen(function*() {
      for (const movement of [...pending.values()]) {
        // A connection to a frozen store can hang for minutes: give up the attempt, not the movement.
        const landed = yield* abandonAfter(options.apply(movement), ATTEMPT_TIMEOUT).pipe(
          Effect.as(true),
          Effect.catch((error) =>
            Effect.as(
              outage.failed()
                ? Effect.logError(`credit movements cannot reach the store (${error.message}); ${pending.size} pending, retrying with backoff`)
                : Effect.void,
              false
            )
          )
        )
        if (!landed) return false
        pending.delete(movement.request_id)
      }
      const lasted = outage.succeeded()
      if (lasted !== undefined) yield* Effect.logInfo(`credit movements reach the store again after ${Math.round(lasted)} ms; outbox empty`)
      return true
    })

    const drain = Effect.asVoid(pass)

    const worker = Effect.gen(function*() {
      let attempt = 0
      while (true) {
        if (pending.size === 0) {
          attempt = 0
          yield* Deferred.await(wake)
          wake = yield* Deferred.make<void>()
        }
        const ok = yield* pass
        if (!ok) yield* Effect.sleep(Duration.millis(backoffDelayMs(attempt++, options.backoff ?? DEFAULT_BACKOFF)))
        else attempt = 0
      }
    })
    const fiber = yield* Effect.forkScoped(worker)
    // Taken back from a spool: try at once, before anything else of this start looks at reservations.
    if (pending.size > 0) yield* pass

    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        yield* Fiber.interrupt(fiber)
        if (pending.size === 0) return
        // One last try, bounded: a stop must not hang on a store that does not answer.
        yield* Effect.ignore(abandonAfter(pass, Duration.seconds(2)))
        if (pending.size === 0) return
        if (options.spoolPath === undefined) {
          return yield* Effect.logError(`credit outbox: ${pending.size} movements could not be written and there is no data directory to spool them to`)
        }
        const path = options.spoolPath
        const count = pending.size
        yield* Effect.try(() => writeSpool(path, [...pending.values()])).pipe(
          Effect.andThen(Effect.logWarning(`credit outbox: ${count} movements spooled to ${path}; the next start writes them`)),
          Effect.catch((error) => Effect.logError(`credit outbox: could not spool ${count} movements to ${path}`, error))
        )
      })
    )

    return {
      enqueue: (movement) => {
        if (!pending.has(movement.request_id)) pending.set(movement.request_id, movement)
        Deferred.doneUnsafe(wake, Effect.void)
      },
      pending: () => pending.size,
      down: () => outage.down,
      drain
    }
  })
