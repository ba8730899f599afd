/**
 * Throttles guessing of the admin token: failed attempts are counted per client address, and
 * once an address has failed `maxFailures` times within a window every further attempt from it
 * (right token or wrong) is refused with `429 rate_limited` until the window ends. Refusing the
 * right token too is the point: otherwise a guesser learns it was right from the answer.
 *
 * A fixed window is enough here (unlike the per-key request limit, nothing legitimate needs a
 * smooth rate): at most `2 * maxFailures` guesses fit around a window boundary.
 *
 * - `layerMemory`: per process (the embedded default).
 * - `layerRedis`: one count per address shared by every replica, so spreading guesses over
 *   replicas gains nothing. Unlike the request limits it does not fail closed when Redis is
 *   unreachable: that would lock the operator out of the admin API during the outage they may be
 *   investigating. Every failure is also counted in this process, and while Redis does not answer
 *   the local count decides, so guessing stays throttled per replica.
 */
import { Clock, Context, Duration, Effect, Layer, Predicate, Schedule } from "effect"
import { type DependencyUnavailable, RateLimited } from "../../domain/errors.ts"
import { RedisClient, redisScript } from "./RedisClient.ts"

export const ADMIN_FAILURE_PREFIX = "modelgate:adminfail:"

export interface AdminThrottleOptions {
  /** Failed attempts an address may make per window before it is refused. */
  readonly maxFailures: number
  readonly windowSeconds: number
}

export const defaultAdminThrottle: AdminThrottleOptions = { maxFailures: 10, windowSeconds: 60 }

export interface AdminThrottleShape {
  /** Fails with `RateLimited` while `address` is over its failures in the current window. */
  readonly check: (address: string) => Effect.Effect<void, RateLimited | DependencyUnavailable>
  /** Records one failed attempt from `address`. */
  readonly fail: (address: string) => Effect.Effect<void, DependencyUnavailable>
}

const refusal = (options: AdminThrottleOptions, retryAfterMs: number, nowMs: number) => {
  const retryAfterSeconds = Math.max(1, Math.ceil(retryAfterMs / 1000))
  return new RateLimited({
    message: `too many failed admin sign-in attempts from this address; retry after ${retryAfterSeconds} s`,
    details: { limit: "admin_failed_attempts", max_failures: options.maxFailures, window_seconds: options.windowSeconds },
    retryAfterSeconds,
    limit: options.maxFailures,
    remaining: 0,
    resetAt: Math.ceil((nowMs + retryAfterMs) / 1000)
  })
}

/** Returns `{count, pttl}` of the address's window without changing it. */
const PEEK_LUA = `
local count = tonumber(redis.call('GET', KEYS[1]) or '0')
local ttl = redis.call('PTTL', KEYS[1])
return {count, ttl}
`

/** One more failure; the window starts with the first one. */
const FAIL_LUA = `
local count = redis.call('INCR', KEYS[1])
if count == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return count
`

/** Client addresses are free text from a socket or a proxy header: bound what becomes a key. */
const keyOf = (address: string) => ADMIN_FAILURE_PREFIX + address.slice(0, 100)

/** The per-process count: the whole throttle without Redis, the fallback with it. */
const makeMemory = (options: AdminThrottleOptions) =>
  Effect.gen(function*() {
    const clock = yield* Clock.Clock
    // Windows run on monotonic time (issue 35): a wall clock set back must not lock an address
    // out for the length of the jump. The refusal's reset time is wall time.
    const monotonic = () => Number(clock.monotonicTimeNanosUnsafe() / 1_000_000n)
    const windows = new Map<string, { count: number; endsAt: number }>()
    const windowMs = options.windowSeconds * 1000
    // Ended windows carry nothing; sweeping them bounds the map by recent failing addresses.
    const sweep = Effect.sync(() => {
      const now = monotonic()
      for (const [key, w] of windows) if (w.endsAt <= now) windows.delete(key)
    })
    yield* Effect.forkScoped(Effect.repeat(sweep, Schedule.spaced(Duration.minutes(1))))
    return AdminThrottle.of({
      check: (address) =>
        Effect.suspend(() => {
          const now = monotonic()
          const w = windows.get(keyOf(address))
          return w !== undefined && w.endsAt > now && w.count >= options.maxFailures
            ? Effect.fail(refusal(options, w.endsAt - now, clock.currentTimeMillisUnsafe()))
            : Effect.void
        }),
      fail: (address) =>
        Effect.sync(() => {
          const now = monotonic()
          const key = keyOf(address)
          const w = windows.get(key)
          if (w === undefined || w.endsAt <= now) windows.set(key, { count: 1, endsAt: now + windowMs })
          else w.count += 1
        })
    })
  })

export class AdminThrottle extends Context.Service<AdminThrottle, AdminThrottleShape>()("modelgate/limits/AdminThrottle") {
  static readonly layerMemory = (options: AdminThrottleOptions = defaultAdminThrottle): Layer.Layer<AdminThrottle> =>
    Layer.effect(AdminThrottle, makeMemory(options))

  static readonly layerRedis = (options: AdminThrottleOptions = defaultAdminThrottle): Layer.Layer<AdminThrottle, never, RedisClient> =>
    Layer.effect(
      AdminThrottle,
      Effect.gen(function*() {
        const redis = yield* RedisClient
        const clock = yield* Clock.Clock
        const local = yield* makeMemory(options)
        const peek = redisScript(PEEK_LUA)
        const fail = redisScript(FAIL_LUA)
        const shared = (address: string) =>
          Effect.flatMap(redis.evalScript(peek, [keyOf(address)], []), (reply) => {
            if (!Array.isArray(reply) || reply.length !== 2 || !reply.every(Predicate.isNumber)) {
              return Effect.die(new Error(`unexpected admin throttle reply from redis at ${redis.target}: ${JSON.stringify(reply)}`))
            }
            const [count, ttl] = reply as [number, number]
            return count >= options.maxFailures && ttl > 0
              ? Effect.fail(refusal(options, ttl, clock.currentTimeMillisUnsafe()))
              : Effect.void
          })
        return AdminThrottle.of({
          check: (address) =>
            shared(address).pipe(Effect.catchTag("DependencyUnavailable", () => local.check(address))),
          fail: (address) =>
            Effect.andThen(
              local.fail(address),
              redis.evalScript(fail, [keyOf(address)], [String(options.windowSeconds * 1000)]).pipe(
                Effect.catchTag("DependencyUnavailable", () => Effect.void),
                Effect.asVoid
              )
            )
        })
      })
    )
}
