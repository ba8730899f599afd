/**
 * Retry timing shared by everything that keeps writing to the store through an outage (the audit
 * writer, the credit outbox): exponential backoff with full jitter, so replicas that lost the
 * store together do not hammer it in lockstep when it comes back.
 */
import * as Cause from "effect/Cause"
import * as Data from "effect/Data"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
export interface BackoffPolicy {
  /** The ceiling of the first retry's delay. */
  readonly baseMs: number
  /** The ceiling never grows beyond this. */
  readonly maxMs: number
}

export const DEFAULT_BACKOFF: BackoffPolicy = { baseMs: 100, maxMs: 10_000 }

/** Delay before retry number `attempt` (0-based): uniform in [ceiling/2, ceiling], ceiling = base * 2^attempt capped at max. */
export const backoffDelayMs = (attempt: number, policy: BackoffPolicy = DEFAULT_BACKOFF, random: () => number = Math.random): number => {
  const ceiling = Math.min(policy.maxMs, policy.baseMs * 2 ** Math.min(attempt, 30))
  // Half fixed, half jittered: spread out, yet never a retry loop that spins at 0 ms.
  return Math.round(ceiling / 2 + random() * (ceiling / 2))
}

/**
 * One log line when an outage starts and one when it ends, whatever the number of attempts in
 * between (the issue was hundreds of identical ERROR lines per second).
 */
export const outageTracker = () => {
  let since: number | undefined
  let attempts = 0
  return {
    get down() {
      return since !== undefined
    },
    get attempts() {
      return attempts
    },
    /** Returns true when this failure starts an outage (the caller logs it). */
    failed: (): boolean => {
      attempts++
      if (since !== undefined) return false
      since = performance.now()
      return true
    },
    /** Returns the outage's duration in ms when this success ends one (the caller logs it). */
    succeeded: (): number | undefined => {
      if (since === undefined) return undefined
      const lasted = performance.now() - since
      since = undefined
      attempts = 0
      return lasted
    }
  }
}

/**
 * Runs `effect` on a fiber of its own and waits at most `timeout` for it. Unlike
 * `Effect.timeout`, giving up does not wait for the attempt to be interrupted: a query on a
 * connection to a frozen server cannot be, and would hold the caller for as long as the TCP
 * connection lives. The attempt may still land later, so it must be idempotent.
 */
export const abandonAfter = <A, E>(effect: Effect.Effect<A, E>, timeout: Duration.Input): Effect.Effect<A, E | AttemptTimedOut> =>
  Effect.gen(() => abandonSteps(effect, timeout))

/** abandonAfter's steps: a generator defined once, not made per store call (README, Generators made per request). */
function* abandonSteps<A, E>(effect: Effect.Effect<A, E>, timeout: Duration.Input) {
  const fiber = yield* Effect.forkDetach(effect)
  const exit = yield* Effect.timeoutOption(Fiber.await(fiber), timeout)
  if (exit._tag === "Some") {
    // Cut off by something else than this (a driver closing its connection under it): a failure
    // of the attempt, not an interruption of the caller, which would end the caller's loop.
    if (Exit.isFailure(exit.value) && Cause.hasInterruptsOnly(exit.value.cause)) {
      return yield* Effect.fail(new AttemptTimedOut({ message: "the attempt was interrupted before it answered" }))
    }
    return yield* exit.value
  }
  yield* Effect.forkDetach(Fiber.interrupt(fiber))
  return yield* Effect.fail(new AttemptTimedOut({ message: "no answer in time" }))
}

export class AttemptTimedOut extends Data.TaggedError("AttemptTimedOut")<{ readonly message: string }> {}
