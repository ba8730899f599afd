/**
 * A background loop that outlives its own failures. A lease renewal that stops silently is worse
 * than one that fails loudly: the replica goes on serving while the others, seeing its lease
 * lapse, refund its open charges and take its credit block back. A step that fails, dies (a
 * defect) or is interrupted from inside (a call of the step cut off under it) is logged, and the
 * loop goes on at its usual pace; only the loop's own interruption (its scope closing) ends it.
 */
import * as Cause from "effect/Cause"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"

export const keepRunning = <E, R>(name: string, step: Effect.Effect<unknown, E, R>, every: Duration.Input): Effect.Effect<never, never, R> => {
  const pause = Effect.sleep(every)
  return Effect.forever(
    Effect.andThen(
      Effect.catchCause(step, (cause) =>
        // Interrupts only, from inside: nothing to show but that it happened.
        Cause.hasInterruptsOnly(cause)
          ? Effect.logWarning(`${name}: a step was interrupted; the loop goes on`)
          : Effect.logError(`${name}: a step failed; the loop goes on`, cause)),
      pause
    )
  )
}
