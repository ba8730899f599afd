/**
 * The rate limiter: the same scenarios against the in-memory layer (on the TestClock, so waits
 * are instant and exact) and the Redis layer (real Redis, real time), then what only Redis has:
 * several replicas on one key, key expiry, and failing closed when Redis is unreachable.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Exit, Layer } from "effect"
import { TestClock } from "effect/testing"
import { RateLimiter, RATE_KEY_PREFIX, type RateDecision } from "../../../src/services/limits/RateLimiter.ts"
import { RedisClient } from "../../../src/services/limits/RedisClient.ts"
import { rateLimitedError, rateLimitHeaders } from "../../../src/services/limits/refusals.ts"
import { inspector, REDIS_URL, replica, uniqueKey } from "./support.ts"

const usedKeys: Array<string> = []
const freshKey = () => {
  const key = uniqueKey("rl")
  usedKeys.push(RATE_KEY_PREFIX + key)
  return key
}

afterAll(async () => {
  const redis = await inspector()
  if (usedKeys.length > 0) await redis.del(usedKeys)
  await redis.close()
})

const fire = Effect.fnUntraced(function*(count: number, key: string, perMinute: number) {
  const limiter = yield* RateLimiter
  return yield* Effect.forEach(Array.from({ length: count }), () => limiter.consume(key, perMinute), {
    concurrency: "unbounded"
  })
})

const consume = Effect.fnUntraced(function*(key: string, perMinute: number) {
  const limiter = yield* RateLimiter
  return yield* limiter.consume(key, perMinute)
})

const allowedCount = (decisions: ReadonlyArray<RateDecision>) => decisions.filter((d) => d.allowed).length

const nowSeconds = () => Date.now() / 1000

/** Scenarios written once; `advance` moves time forward (TestClock for memory, a real sleep for Redis). */
const scenarios = (advance: (seconds: number) => Effect.Effect<void>, realTime: boolean) => ({
  "60 simultaneous requests on a fresh key at 50/min: exactly 50 admitted, 10 refused with Retry-After": () =>
    Effect.gen(function*() {
      const decisions = yield* fire(60, freshKey(), 50)
      assert.strictEqual(allowedCount(decisions), 50)
      const refused = decisions.filter((d) => !d.allowed)
      assert.strictEqual(refused.length, 10)
      for (const d of refused) {
        assert.strictEqual(d.remaining, 0)
        assert.strictEqual(d.limit, 50)
        assert.isTrue(Number.isInteger(d.retryAfterSeconds) && d.retryAfterSeconds >= 1 && d.retryAfterSeconds <= 2)
      }
    }),

  "a request sent after Retry-After seconds is admitted": () =>
    Effect.gen(function*() {
      const key = freshKey()
      const decisions = yield* fire(60, key, 50)
      const wait = Math.max(...decisions.filter((d) => !d.allowed).map((d) => d.retryAfterSeconds))
      yield* advance(wait)
      const retry = yield* consume(key, 50)
      assert.isTrue(retry.allowed)
      // One token came back in 1.2 s, and it was just spent.
      const again = yield* consume(key, 50)
      assert.isFalse(again.allowed)
    }),

  "headers: limit, remaining counting down, reset an integer second in the future": () =>
    Effect.gen(function*() {
      const key = freshKey()
      const first = yield* consume(key, 50)
      const second = yield* consume(key, 50)
      const third = yield* consume(key, 50)
      assert.deepStrictEqual([first.remaining, second.remaining, third.remaining], [49, 48, 47])
      for (const d of [first, second, third]) {
        assert.isTrue(d.allowed)
        assert.strictEqual(d.limit, 50)
        assert.strictEqual(d.retryAfterSeconds, 0)
        assert.isTrue(Number.isInteger(d.resetAt))
      }
      if (realTime) {
        // Three spent at 1.2 s each: full again about 3.6 s from now.
        assert.isTrue(third.resetAt > nowSeconds() + 3 && third.resetAt <= Math.ceil(nowSeconds() + 3.6) + 1)
      } else {
        assert.strictEqual(third.resetAt, 4)
      }
      assert.deepStrictEqual(rateLimitHeaders(third), {
        "x-ratelimit-limit": "50",
        "x-ratelimit-remaining": "47",
        "x-ratelimit-reset": String(third.resetAt)
      })
    }),

  "a changed per-key limit keeps the requests already spent": () =>
    Effect.gen(function*() {
      const key = freshKey()
      yield* fire(5, key, 50)
      // Lowered to 10/min: 5 of 10 are spent, so 5 more.
      const lowered = yield* fire(6, key, 10)
      assert.strictEqual(allowedCount(lowered), 5)
      assert.strictEqual(lowered.find((d) => !d.allowed)?.limit, 10)
      // Raised to 50/min: 10 of 50 spent, so 40 more.
      const raised = yield* fire(41, key, 50)
      assert.strictEqual(allowedCount(raised), 40)
      // Lowered below what was spent: nothing left, refilling at the new rate (6 s per request).
      const floor = yield* consume(key, 10)
      assert.isFalse(floor.allowed)
      assert.isTrue(floor.retryAfterSeconds >= 5 && floor.retryAfterSeconds <= 6)
    }),

  "consumeAll (a key and its team): admitted only when every bucket has room, and then each is spent": () =>
    Effect.gen(function*() {
      const limiter = yield* RateLimiter
      const [team, first, second] = [freshKey(), freshKey(), freshKey()]
      // Concurrently, two keys of 4 each against a team of 5: exactly 5 in total.
      const decisions = yield* Effect.forEach(
        Array.from({ length: 8 }, (_, i) => (i % 2 === 0 ? first : second)),
        (key) => limiter.consumeAll([{ key, perMinute: 4 }, { key: team, perMinute: 5 }]),
        { concurrency: "unbounded" }
      )
      const admitted = decisions.filter((pair) => pair.every((d) => d.allowed))
      assert.strictEqual(admitted.length, 5)
      for (const pair of decisions.filter((pair) => !pair.every((d) => d.allowed))) {
        // The team refused; the key would have admitted it.
        assert.isFalse(pair[1]!.allowed)
        assert.strictEqual(pair[1]!.limit, 5)
        assert.isTrue(pair[1]!.retryAfterSeconds >= 1)
      }
      // What the team refused spent nothing of the keys': 5 admitted between them, so the two
      // keys hold 8 - 5 = 3 more of their own.
      const own = [...(yield* fire(4, first, 4)), ...(yield* fire(4, second, 4))]
      assert.strictEqual(allowedCount(own), 3)
    }),

  "consumeAll: a bucket that refuses leaves the others untouched": () =>
    Effect.gen(function*() {
      const limiter = yield* RateLimiter
      const [key, team] = [freshKey(), freshKey()]
      yield* fire(2, key, 2)
      const refused = yield* limiter.consumeAll([{ key, perMinute: 2 }, { key: team, perMinute: 3 }])
      assert.isFalse(refused[0]!.allowed)
      assert.isTrue(refused[1]!.allowed)
      // The team's three are all still there.
      assert.strictEqual(allowedCount(yield* fire(4, team, 3)), 3)
    }),

  "keys are independent": () =>
    Effect.gen(function*() {
      const [a, b] = [freshKey(), freshKey()]
      yield* fire(3, a, 3)
      assert.isFalse((yield* consume(a, 3)).allowed)
      assert.isTrue((yield* consume(b, 3)).allowed)
    })
})

describe("RateLimiter.layerMemory", () => {
  const cases = scenarios((seconds) => TestClock.adjust(Duration.seconds(seconds)), false)
  for (const [name, run] of Object.entries(cases)) {
    it.effect(name, () => run().pipe(Effect.provide(RateLimiter.layerMemory)))
  }

  it.effect("Retry-After is the ceiling of the real wait, for odd rates too", () =>
    Effect.gen(function*() {
      for (const perMinute of [1, 7, 13, 49, 61, 997]) {
        const key = freshKey()
        yield* fire(perMinute, key, perMinute)
        for (const step of [0.25, 0.5, 0.7]) {
          let refused = yield* consume(key, perMinute)
          while (refused.allowed) refused = yield* consume(key, perMinute)
          if (refused.retryAfterSeconds > 1) {
            yield* TestClock.adjust(Duration.seconds(refused.retryAfterSeconds - 1))
            assert.isFalse((yield* consume(key, perMinute)).allowed, `${perMinute}/min: one second early`)
            yield* TestClock.adjust(Duration.seconds(1))
          } else {
            yield* TestClock.adjust(Duration.seconds(1))
          }
          assert.isTrue((yield* consume(key, perMinute)).allowed, `${perMinute}/min: after Retry-After`)
          // Land somewhere inside an interval so the next wait is fractional.
          yield* TestClock.adjust(Duration.millis(Math.floor((60_000 / perMinute) * step) % 1000))
        }
      }
    }).pipe(Effect.provide(RateLimiter.layerMemory)))

  it.effect("the bucket refills: a full minute later the whole limit is back", () =>
    Effect.gen(function*() {
      const key = freshKey()
      assert.strictEqual(allowedCount(yield* fire(60, key, 50)), 50)
      yield* TestClock.adjust(Duration.seconds(60))
      assert.strictEqual(allowedCount(yield* fire(60, key, 50)), 50)
    }).pipe(Effect.provide(RateLimiter.layerMemory)))

  it("a refusal becomes the rate_limited error naming the limit", () => {
    const error = rateLimitedError({ allowed: false, limit: 50, remaining: 0, resetAt: 1_800_000_060, retryAfterSeconds: 2 })
    assert.strictEqual(error._tag, "RateLimited")
    assert.include(error.message, "50 requests per minute")
    assert.strictEqual(error.retryAfterSeconds, 2)
    assert.deepStrictEqual(error.details, { limit: "requests_per_minute", requests_per_minute: 50 })
  })
})

const redisLimiter = (url = REDIS_URL, options?: Parameters<typeof RedisClient.layer>[1]) =>
  RateLimiter.layerRedis.pipe(Layer.provide(RedisClient.layer(url, options)))

describe("RateLimiter.layerRedis", () => {
  const cases = scenarios((seconds) => Effect.sleep(Duration.seconds(seconds)), true)
  for (const [name, run] of Object.entries(cases)) {
    it.live(name, () => run().pipe(Effect.provide(redisLimiter())))
  }

  it.live("two replicas (two connections) sharing a key: exactly 50 in total", () =>
    Effect.gen(function*() {
      const key = freshKey()
      const replica = (n: number) => fire(n, key, 50).pipe(Effect.provide(redisLimiter()))
      const [a, b] = yield* Effect.all([replica(30), replica(30)], { concurrency: "unbounded" })
      assert.strictEqual(allowedCount(a) + allowedCount(b), 50)
    }))

  it.live("two processes sharing a key: still exactly 50", () =>
    Effect.gen(function*() {
      const key = freshKey()
      const other = yield* replica(["consume", REDIS_URL, key, "30", "50"])
      yield* other.send("go")
      const [mine, theirs] = yield* Effect.all([fire(30, key, 50), other.line((line) => line.startsWith("{"))], {
        concurrency: "unbounded"
      })
      assert.strictEqual(allowedCount(mine) + (JSON.parse(theirs) as { allowed: number }).allowed, 50)
    }).pipe(Effect.provide(redisLimiter())))

  it.live("the key expires when the bucket is full again", () =>
    Effect.gen(function*() {
      const key = freshKey()
      const redis = yield* Effect.promise(inspector)
      const started = Date.now()
      yield* fire(2, key, 50)
      const ttl = yield* Effect.promise(() => redis.pTTL(RATE_KEY_PREFIX + key))
      const elapsed = Date.now() - started
      yield* Effect.promise(() => redis.close())
      // Two requests at 1.2 s each, less what has passed since the first (a loaded machine may take
      // more than the 400 ms a fixed bound allowed between the first request and the read).
      assert.isTrue(ttl > 2400 - elapsed - 2 && ttl <= 2401, `ttl ${ttl} after ${elapsed} ms`)
    }).pipe(Effect.provide(redisLimiter())))

  it.live("unreachable Redis fails closed, fast, naming the dependency but not the password", () =>
    Effect.gen(function*() {
      const started = Date.now()
      const exit = yield* Effect.exit(
        fire(3, freshKey(), 50).pipe(Effect.provide(redisLimiter("redis://user:s3cret@127.0.0.1:1", { connectTimeoutMs: 200 })))
      )
      // Failed at the client's 200 ms connect deadline (three calls, one connection), not after the
      // 30 s test timeout: 10 s is generous for a machine at load 10 and still tells them apart.
      assert.isTrue(Date.now() - started < 10_000, `took ${Date.now() - started} ms`)
      assert.isTrue(Exit.isFailure(exit))
      if (Exit.isFailure(exit)) {
        const error = exit.cause.reasons.find((r) => r._tag === "Fail")?.error
        assert.strictEqual(error?._tag, "DependencyUnavailable")
        assert.match(error?.message ?? "", /^redis unavailable at 127\.0\.0\.1:1: /)
        assert.notInclude(error?.message ?? "", "s3cret")
        assert.deepStrictEqual(error?.details, { dependency: "redis" })
      }
    }))
})
