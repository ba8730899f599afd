/**
 * Per-key request rate limit (`requests_per_minute`), GCRA as described in `gcra.ts`.
 *
 * - `layerMemory`: exact within one process (a consume is one synchronous step, so concurrent
 *   requests cannot interleave inside it). Time comes from the Effect `Clock`: its monotonic
 *   time, anchored to the wall clock at start (issue 35: a wall clock set back 31 days refused
 *   every key until it caught up); `resetAt` follows the wall clock.
 * - `layerRedis`: exact across every replica sharing the Redis: one atomic script per consume
 *   (one round trip), timed by the Redis server's clock. Unreachable Redis fails the consume
 *   with `DependencyUnavailable`; it never admits.
 */
import { Clock, Context, Duration, Effect, Layer, Predicate, Schedule } from "effect"
import type { DependencyUnavailable } from "../../domain/errors.ts"
import { GCRA_ALL_LUA, GCRA_LUA, gcra, type GcraState, normalizeLimit, type RateDecision } from "./gcra.ts"
import { RedisClient, redisScript } from "./RedisClient.ts"

export type { RateDecision } from "./gcra.ts"

export const RATE_KEY_PREFIX = "modelgate:rl:"

export interface RateLimiterShape {
  /** Spends one request of `key`'s budget of `perMinute` requests per minute, if one is available. */
  readonly consume: (key: string, perMinute: number) => Effect.Effect<RateDecision, DependencyUnavailable>
  /**
   * One request against several buckets at once (a key and its team, issue 33), atomically: it
   * is admitted only when every bucket has room, and then spends one of each; otherwise none is
   * spent. The decisions are in the order of `buckets`; the request was admitted when all are.
   */
  readonly consumeAll: (
    buckets: ReadonlyArray<{ readonly key: string; readonly perMinute: number }>
  ) => Effect.Effect<ReadonlyArray<RateDecision>, DependencyUnavailable>
}

export class RateLimiter extends Context.Service<RateLimiter, RateLimiterShape>()("modelgate/limits/RateLimiter") {
  static readonly layerMemory: Layer.Layer<RateLimiter> = Layer.effect(
    RateLimiter,
    Effect.gen(function*() {
      const clock = yield* Clock.Clock
      const monotonicMicros = () => Number(clock.monotonicTimeNanosUnsafe() / 1000n)
      const origin = nowMicros(clock) - monotonicMicros()
      const steadyMicros = () => origin + monotonicMicros()
      const states = new Map<string, GcraState>()
      // A key whose bucket is full again carries no information; dropping it bounds the map by
      // the keys active in the last minute.
      const sweep = Effect.sync(() => {
        const now = steadyMicros()
        for (const [key, state] of states) if (state.tat <= now) states.delete(key)
      })
      yield* Effect.forkScoped(Effect.repeat(sweep, Schedule.spaced(Duration.minutes(1))))
      // What the wall clock did since the start moves the reset time the headers give.
      const skewed = (decision: RateDecision, now: number): RateDecision => {
        const skew = Math.round((nowMicros(clock) - now) / 1_000_000)
        return skew === 0 ? decision : { ...decision, resetAt: decision.resetAt + skew }
      }
      return RateLimiter.of({
        consume: (key, perMinute) =>
          Effect.sync(() => {
            const now = steadyMicros()
            const step = gcra(states.get(key), now, perMinute)
            if (step.next !== undefined) states.set(key, step.next)
            return skewed(step.decision, now)
          }),
        // One synchronous step, like `consume`: no other request interleaves between the buckets.
        consumeAll: (buckets) =>
          Effect.sync(() => {
            const now = steadyMicros()
            const steps = buckets.map((bucket) => gcra(states.get(bucket.key), now, bucket.perMinute))
            const admitted = steps.every((step) => step.decision.allowed)
            steps.forEach((step, n) => {
              // Refused: only the refusing buckets' rescaled states are kept, as `consume` keeps them.
              if (step.next !== undefined && (admitted || !step.decision.allowed)) states.set(buckets[n]!.key, step.next)
            })
            return steps.map((step) => skewed(step.decision, now))
          })
      })
    })
  )

  static readonly layerRedis: Layer.Layer<RateLimiter, never, RedisClient> = Layer.effect(
    RateLimiter,
    Effect.gen(function*() {
      const redis = yield* RedisClient
      const script = redisScript(GCRA_LUA)
      const allScript = redisScript(GCRA_ALL_LUA)
      return RateLimiter.of({
        consume: (key, perMinute) =>
          redis.evalScript(script, [RATE_KEY_PREFIX + key], [String(normalizeLimit(perMinute))]).pipe(
            Effect.flatMap((reply) => decodeDecision(reply, redis.target))
          ),
        consumeAll: (buckets) =>
          redis.evalScript(
            allScript,
            buckets.map((bucket) => RATE_KEY_PREFIX + bucket.key),
            buckets.map((bucket) => String(normalizeLimit(bucket.perMinute)))
          ).pipe(
            Effect.flatMap((reply) =>
              Array.isArray(reply) && reply.length === buckets.length * 5
                ? Effect.forEach(buckets, (_, n) => decodeDecision(reply.slice(n * 5, n * 5 + 5), redis.target))
                : Effect.die(new Error(`unexpected rate-limit script reply from redis at ${redis.target}: ${JSON.stringify(reply)}`))
            )
          )
      })
    })
  )
}

const nowMicros = (clock: Clock.Clock): number => Number(clock.currentTimeNanosUnsafe() / 1000n)

const decodeDecision = (reply: unknown, target: string): Effect.Effect<RateDecision> => {
  if (Array.isArray(reply) && reply.length === 5 && reply.every(Predicate.isNumber)) {
    const [allowed, limit, remaining, resetAt, retryAfterSeconds] = reply as [number, number, number, number, number]
    return Effect.succeed({ allowed: allowed === 1, limit, remaining, resetAt, retryAfterSeconds })
  }
  // Only a changed script or a foreign value under our key prefix gets here: a bug, not an outage.
  return Effect.die(new Error(`unexpected rate-limit script reply from redis at ${target}: ${JSON.stringify(reply)}`))
}
