/**
 * Tokens per minute (issue 33): the same scenarios against the in-memory layer (on the
 * TestClock: waits are instant and exact) and the Redis layer (real Redis, real time, with holds
 * large against the drain so that a slow machine cannot change the counts), then what only Redis
 * has: two replicas (two connections) on one bucket, and failing closed when Redis is unreachable.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Exit, Layer } from "effect"
import { TestClock } from "effect/testing"
import { RedisClient } from "../../../src/services/limits/RedisClient.ts"
import { TokenLimiter, TOKENS_KEY_PREFIX } from "../../../src/services/limits/TokenLimiter.ts"
import { estimateRequestTokens, tokenBuckets } from "../../../src/pipelines/token-admission.ts"
import type { KeyPrincipal } from "../../../src/domain/records.ts"
import { inspector, REDIS_URL, uniqueKey } from "./support.ts"

const usedKeys: Array<string> = []
const freshKey = () => {
  const key = uniqueKey("tpm")
  usedKeys.push(TOKENS_KEY_PREFIX + key)
  return key
}

afterAll(async () => {
  const redis = await inspector()
  if (usedKeys.length > 0) await redis.del(usedKeys)
  await redis.close()
})

const reserve = Effect.fnUntraced(function*(key: string, limit: number, tokens: number) {
  return yield* (yield* TokenLimiter).reserve([{ key, limit, tokens }])
})
const correct = Effect.fnUntraced(function*(key: string, limit: number, tokens: number) {
  return yield* (yield* TokenLimiter).correct([{ key, limit, tokens }])
})

const fire = (count: number, key: string, limit: number, tokens: number) =>
  Effect.forEach(Array.from({ length: count }), () => reserve(key, limit, tokens), { concurrency: "unbounded" })

/**
 * `exact`: the remaining counts are exact (TestClock); otherwise tokens drained meanwhile (a loaded
 * machine may take seconds), less than each assertion's alternative (no correction, a charge) would differ by.
 */
const scenarios = (advance: (seconds: number) => Effect.Effect<void>, exact: boolean) => {
  const near = (actual: number, expected: number) =>
    exact ? assert.strictEqual(actual, expected) : assert.isTrue(actual >= expected && actual <= expected + 40, `${actual} vs ${expected}`)
  /** A wait of `seconds` as computed just now: real time may have shortened it (by 10 s at most here). */
  const waitOf = (actual: number, seconds: number) =>
    assert.isTrue(actual <= seconds && actual >= (exact ? seconds - 1 : Math.max(1, seconds - 10)), `${actual} vs ${seconds}`)
  return {
    "20 simultaneous holds of 10 tokens at 60/min: exactly 6 admitted, the rest refused with Retry-After": () =>
      Effect.gen(function*() {
        const decisions = yield* fire(20, freshKey(), 60, 10)
        const admitted = decisions.filter((d) => d.allowed)
        assert.strictEqual(admitted.length, 6)
        for (const d of decisions.filter((d) => !d.allowed)) {
          assert.strictEqual(d.limit, 60)
          assert.strictEqual(d.remaining, 0)
          // 60 used, 10 more wanted: 10 tokens drain in 10 s at 1 token a second.
          waitOf(d.retryAfterSeconds, 10)
          assert.deepStrictEqual(d.holds, [0])
        }
        assert.deepStrictEqual(admitted[0]!.holds, [10])
      }),

    "remaining counts the hold, and a correction gives back what the request did not use": () =>
      Effect.gen(function*() {
        const key = freshKey()
        const first = yield* reserve(key, 600, 100)
        assert.isTrue(first.allowed)
        near(first.remaining, 500)
        // The request used 40 tokens, not 100.
        yield* correct(key, 600, 40 - 100)
        const second = yield* reserve(key, 600, 100)
        near(second.remaining, 460)
      }),

    "a correction upward is owed: the next hold waits for it": () =>
      Effect.gen(function*() {
        const key = freshKey()
        assert.isTrue((yield* reserve(key, 60, 10)).allowed)
        // It used 100 tokens where 10 were held: the bucket is over its 60 (at most twice its capacity).
        yield* correct(key, 60, 90)
        const refused = yield* reserve(key, 60, 10)
        assert.isFalse(refused.allowed)
        // 100 used, 10 more wanted: 50 must drain first, at a token a second.
        waitOf(refused.retryAfterSeconds, 50)
        // Another 1,000 owed: the debt is capped at one minute (120 used), so the wait is 70 s, not 1,050.
        yield* correct(key, 60, 1_000)
        const capped = yield* reserve(key, 60, 10)
        waitOf(capped.retryAfterSeconds, 70)
      }),

    "a request estimated above the limit is admitted once the bucket is empty, holding the limit": () =>
      Effect.gen(function*() {
        const key = freshKey()
        const big = yield* reserve(key, 60, 1_000_000)
        assert.isTrue(big.allowed)
        assert.deepStrictEqual(big.holds, [60])
        assert.strictEqual(big.remaining, 0)
        const next = yield* reserve(key, 60, 1)
        assert.isFalse(next.allowed)
        if (exact) {
          yield* advance(60)
          assert.isTrue((yield* reserve(key, 60, 60)).allowed)
        }
      }),

    "a request must fit every bucket; a refusal names the bucket and holds nothing in the others": () =>
      Effect.gen(function*() {
        const own = freshKey()
        const team = freshKey()
        const limiter = yield* TokenLimiter
        const first = yield* limiter.reserve([{ key: own, limit: 1000, tokens: 50 }, { key: team, limit: 60, tokens: 50 }])
        assert.isTrue(first.allowed)
        // The team's bucket has 10 left, the key's 950: the team's is the binding one.
        assert.strictEqual(first.bucket, 1)
        assert.strictEqual(first.limit, 60)
        near(first.remaining, 10)
        const refused = yield* limiter.reserve([{ key: own, limit: 1000, tokens: 50 }, { key: team, limit: 60, tokens: 50 }])
        assert.isFalse(refused.allowed)
        assert.strictEqual(refused.bucket, 1)
        // The key's own bucket was not charged by the refused request.
        const alone = yield* limiter.reserve([{ key: own, limit: 1000, tokens: 0 }])
        near(alone.remaining, 950)
      }),

    "after a minute every token is back": () =>
      Effect.gen(function*() {
        if (!exact) return
        const key = freshKey()
        yield* fire(6, key, 60, 10)
        assert.isFalse((yield* reserve(key, 60, 10)).allowed)
        yield* advance(30)
        const half = yield* reserve(key, 60, 10)
        assert.isTrue(half.allowed)
        assert.strictEqual(half.remaining, 20)
        yield* advance(60)
        assert.strictEqual((yield* reserve(key, 60, 0)).remaining, 60)
      })
  }
}

describe("TokenLimiter.layerMemory", () => {
  for (const [name, run] of Object.entries(scenarios((s) => TestClock.adjust(Duration.seconds(s)), true))) {
    it.effect(name, () => run().pipe(Effect.provide(TokenLimiter.layerMemory)))
  }
})

const redisLimiter = (url = REDIS_URL, options?: Parameters<typeof RedisClient.layer>[1]) =>
  TokenLimiter.layerRedis.pipe(Layer.provide(RedisClient.layer(url, options)))

describe("TokenLimiter.layerRedis", () => {
  for (const [name, run] of Object.entries(scenarios(() => Effect.void, false))) {
    it.live(name, () => run().pipe(Effect.provide(redisLimiter())))
  }

  it.live("two replicas (two connections) on one bucket: exactly 6 holds of 10 at 60/min in total", () =>
    Effect.gen(function*() {
      const key = freshKey()
      const replica = () => fire(10, key, 60, 10).pipe(Effect.provide(redisLimiter()))
      const [a, b] = yield* Effect.all([replica(), replica()], { concurrency: 2 })
      assert.strictEqual([...a, ...b].filter((d) => d.allowed).length, 6)
      // A correction on one replica is seen by the other: give 30 tokens back on the first.
      yield* correct(key, 60, -30).pipe(Effect.provide(redisLimiter()))
      const after = yield* fire(5, key, 60, 10).pipe(Effect.provide(redisLimiter()))
      assert.strictEqual(after.filter((d) => d.allowed).length, 3)
    }))

  it.live("the bucket expires in Redis once it has drained", () =>
    Effect.gen(function*() {
      const key = freshKey()
      yield* reserve(key, 1_000_000, 10).pipe(Effect.provide(redisLimiter()))
      const redis = yield* Effect.promise(() => inspector())
      const ttl = yield* Effect.promise(() => redis.pTTL(TOKENS_KEY_PREFIX + key))
      yield* Effect.promise(() => redis.close())
      // 10 tokens at a million a minute drain in under a millisecond: the key lives about a second.
      assert.isTrue(ttl > 0 && ttl <= 1001, String(ttl))
    }))

  it.live("an unreachable Redis refuses (503 dependency_unavailable), and a correction is dropped without failing", () =>
    Effect.gen(function*() {
      const layer = redisLimiter("redis://127.0.0.1:1", { connectTimeoutMs: 50, commandTimeoutMs: 200 })
      const exit = yield* Effect.exit(reserve(freshKey(), 60, 10).pipe(Effect.provide(layer)))
      assert.isTrue(Exit.isFailure(exit))
      if (Exit.isFailure(exit)) assert.include(String(exit.cause), "DependencyUnavailable")
      yield* correct(freshKey(), 60, 5).pipe(Effect.provide(layer))
    }))
})

describe("the estimate and the buckets of a principal", () => {
  it("input by characters (media flat), output by the request's maximum, else the model's", () => {
    const body = { model: "m", messages: [{ role: "user", content: "x".repeat(396) }], max_tokens: 10 }
    // 1 + 4 + 396 characters and one number (4): 405 / 4 -> 102, plus 10 output.
    assert.strictEqual(estimateRequestTokens(body, { embeddings: false, modelMaxTokens: 4096 }), 102 + 10)
    assert.strictEqual(estimateRequestTokens({ model: "m", input: "abcd" }, { embeddings: true, modelMaxTokens: 4096 }), 2)
    const noMax = { model: "m", messages: [{ role: "user", content: "" }] }
    assert.strictEqual(estimateRequestTokens(noMax, { embeddings: false, modelMaxTokens: 4096 }), 2 + 4096)
    const n3 = { ...noMax, max_completion_tokens: 100, n: 3 }
    assert.strictEqual(estimateRequestTokens(n3, { embeddings: false, modelMaxTokens: 4096 }), 4 + 300)
    const image = { model: "m", messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "data:image/png;base64," + "A".repeat(1_000_000) } }] }], max_tokens: 1 }
    const estimate = estimateRequestTokens(image, { embeddings: false, modelMaxTokens: 4096 })
    assert.isTrue(estimate > 1600 && estimate < 1700, String(estimate))
  })

  it("the key's own limit, else the config's; the team's bucket when its team sets one", () => {
    const key: KeyPrincipal = {
      kind: "key",
      id: "key_a",
      allowed_models: null,
      tools_enabled: false,
      mcp_servers: [],
      budget: null,
      limits: null,
      team: { id: "team_1", name: "t", allowed_models: null, budget: null, limits: { tokens_per_minute: 500 } }
    }
    assert.deepStrictEqual(tokenBuckets(key, 100, 7), [
      { key: "key_a", limit: 100, tokens: 7 },
      { key: "team:team_1", limit: 500, tokens: 7 }
    ])
    assert.deepStrictEqual(tokenBuckets({ ...key, limits: { tokens_per_minute: 50 }, team: null }, 100, 7), [{ key: "key_a", limit: 50, tokens: 7 }])
    assert.deepStrictEqual(tokenBuckets({ ...key, team: null }, undefined, 7), [])
  })
})
