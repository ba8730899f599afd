/**
 * A clock that runs `offset` ms ahead of real time, for gateways built with test layers
 * (`GatewayOverrides.clock`): a test moves past a key's expiry or a session's TTL at once instead
 * of sleeping. Sleeps and monotonic time stay real, so timeouts and schedules behave as usual.
 */
import { Clock, Duration, Effect } from "effect"

export const movableClock = () => {
  let offset = 0
  const real = Effect.runSync(Clock.clockWith(Effect.succeed))
  const clock: Clock.Clock = {
    currentTimeMillisUnsafe: () => real.currentTimeMillisUnsafe() + offset,
    currentTimeMillis: Effect.sync(() => real.currentTimeMillisUnsafe() + offset),
    currentTimeNanosUnsafe: () => real.currentTimeNanosUnsafe() + BigInt(offset) * 1_000_000n,
    currentTimeNanos: Effect.sync(() => real.currentTimeNanosUnsafe() + BigInt(offset) * 1_000_000n),
    monotonicTimeNanosUnsafe: () => real.monotonicTimeNanosUnsafe(),
    monotonicTimeNanos: real.monotonicTimeNanos,
    sleep: (duration: Duration.Duration) => real.sleep(duration)
  }
  return {
    clock,
    /** Moves the clock `ms` further ahead. */
    advance: (ms: number) => {
      offset += ms
    },
    /** Back to real time. */
    reset: () => {
      offset = 0
    }
  }
}
