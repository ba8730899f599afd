/**
 * Tokens per minute (`limits.tokens_per_minute`, issue 33), as described in `token-bucket.ts`:
 * a request's estimate is held at admission in every bucket that applies (the key's or
 * subject's, and its team's), and corrected to the real count when it ends.
 *
 * - `layerMemory`: exact within one process (a reserve is one synchronous step). Time is the
 *   Effect `Clock`'s monotonic time, anchored to the wall clock at start, as the request limiter's.
 * - `layerRedis`: exact across every replica sharing the Redis: one atomic script per reserve and
 *   per correction, timed by the Redis server's clock. An unreachable Redis fails the reserve
 *   with `DependencyUnavailable` (fail closed, as the request limiter); a correction that cannot
 *   reach it is dropped (logged): the hold it would have adjusted drains within a minute.
 */
import { Clock, Context, Duration, Effect, Layer, Predicate, Schedule } from "effect"
import type { DependencyUnavailable } from "../../domain/errors.ts"
import { RedisClient, redisScript } from "./RedisClient.ts"
import {
  correctBucket,
  MAX_TOKENS_PER_MINUTE,
  normalizeTokenLimit,
  reserveBuckets,
  type TokenBucketCall,
  type TokenBucketState,
  type TokenDecision,
  TOKENS_CORRECT_LUA,
  TOKENS_RESERVE_LUA
} from "./token-bucket.ts"

export type { TokenBucketCall, TokenDecision } from "./token-bucket.ts"

export const TOKENS_KEY_PREFIX = "modelgate:tpm:"

export interface TokenLimiterShape {
  /** Holds each call's `tokens` (at most its limit) in its bucket, in all of them or none. */
  readonly reserve: (calls: ReadonlyArray<TokenBucketCall>) => Effect.Effect<TokenDecision, DependencyUnavailable>
  /** Adds each call's `tokens` (signed: real count minus what was held) to its bucket. Never fails. */
  readonly correct: (calls: ReadonlyArray<TokenBucketCall>) => Effect.Effect<void>
}

const boundedDelta = (tokens: number) =>
  Math.max(-2 * MAX_TOKENS_PER_MINUTE, Math.min(2 * MAX_TOKENS_PER_MINUTE, Number.isFinite(tokens) ? Math.trunc(tokens) : 0))

export class TokenLimiter extends Context.Service<TokenLimiter, TokenLimiterShape>()("modelgate/limits/TokenLimiter") {
  static readonly layerMemory: Layer.Layer<TokenLimiter> = Layer.effect(
    TokenLimiter,
    Effect.gen(function*() {
      const clock = yield* Clock.Clock
      const monotonicMs = () => Number(clock.monotonicTimeNanosUnsafe() / 1_000_000n)
      const origin = Number(clock.currentTimeNanosUnsafe() / 1_000_000n) - monotonicMs()
      const steadyMs = () => origin + monotonicMs()
      const states = new Map<string, { state: TokenBucketState; limit: number }>()
      // A drained bucket carries no information; dropping it bounds the map by the keys of the last minutes.
      const sweep = Effect.sync(() => {
        const now = steadyMs()
        for (const [key, entry] of states) {
          if (entry.state.used - (now - entry.state.at) * entry.limit <= 0) states.delete(key)
        }
      })
      yield* Effect.forkScoped(Effect.repeat(sweep, Schedule.spaced(Duration.minutes(1))))
      return TokenLimiter.of({
        reserve: (calls) =>
          Effect.sync(() => {
            const now = steadyMs()
            const step = reserveBuckets(calls, calls.map((call) => states.get(call.key)?.state), now)
            if (step.next !== undefined) {
              step.next.forEach((state, i) => states.set(calls[i]!.key, { state, limit: normalizeTokenLimit(calls[i]!.limit) }))
            }
            return step.decision
          }),
        correct: (calls) =>
          Effect.sync(() => {
            const now = steadyMs()
            for (const call of calls) {
              const state = correctBucket(states.get(call.key)?.state, call, now)
              if (state.used === 0) states.delete(call.key)
              else states.set(call.key, { state, limit: normalizeTokenLimit(call.limit) })
            }
          })
      })
    })
  )

  static readonly layerRedis: Layer.Layer<TokenLimiter, never, RedisClient> = Layer.effect(
    TokenLimiter,
    Effect.gen(function*() {
      const redis = yield* RedisClient
      const reserveScript = redisScript(TOKENS_RESERVE_LUA)
      const correctScript = redisScript(TOKENS_CORRECT_LUA)
      return TokenLimiter.of({
        reserve: (calls) => {
          const limits = calls.map((call) => normalizeTokenLimit(call.limit))
          const holds = calls.map((call, i) => Math.min(Math.max(0, Math.floor(call.tokens) || 0), limits[i]!))
          return redis.evalScript(
            reserveScript,
            calls.map((call) => TOKENS_KEY_PREFIX + call.key),
            calls.flatMap((_, i) => [String(limits[i]), String(holds[i])])
          ).pipe(Effect.flatMap((reply) => decodeDecision(reply, redis.target, holds)))
        },
        correct: (calls) =>
          calls.length === 0 ? Effect.void : redis.evalScript(
            correctScript,
            calls.map((call) => TOKENS_KEY_PREFIX + call.key),
            calls.flatMap((call) => [String(normalizeTokenLimit(call.limit)), String(boundedDelta(call.tokens))])
          ).pipe(
            Effect.asVoid,
            Effect.catch((error) => Effect.logWarning(`tokens-per-minute correction dropped (the hold drains within a minute): ${error.message}`))
          )
      })
    })
  )
}

const decodeDecision = (reply: unknown, target: string, holds: ReadonlyArray<number>): Effect.Effect<TokenDecision> => {
  if (Array.isArray(reply) && reply.length === 5 && reply.every(Predicate.isNumber)) {
    const [allowed, limit, remaining, retryAfterSeconds, bucket] = reply as [number, number, number, number, number]
    return Effect.succeed({
      allowed: allowed === 1,
      limit,
      remaining,
      retryAfterSeconds,
      holds: allowed === 1 ? holds : holds.map(() => 0),
      bucket
    })
  }
  // Only a changed script or a foreign value under our key prefix gets here: a bug, not an outage.
  return Effect.die(new Error(`unexpected tokens-per-minute script reply from redis at ${target}: ${JSON.stringify(reply)}`))
}
