/**
 * Concurrent-stream slots: the same contract against the in-memory and Redis layers, then what
 * only Redis has: several replicas on one key, leases that outlive a vanished holder by at most
 * one lease, heartbeats that keep a long stream's slot, and nothing left behind.
 */
import { afterAll, assert, describe, it } from "@effect/vitest"
import { Deferred, Duration, Effect, Exit, Fiber, Layer, Scope } from "effect"
import { RedisClient } from "../../../src/services/limits/RedisClient.ts"
import { type Slot, STREAM_KEY_PREFIX, StreamSlots } from "../../../src/services/limits/StreamSlots.ts"
import { streamLimitError } from "../../../src/services/limits/refusals.ts"
import { inspector, REDIS_URL, redisProxy, replica, uniqueKey } from "./support.ts"

const usedKeys: Array<string> = []
const freshKey = () => {
  const key = uniqueKey("slots")
  usedKeys.push(STREAM_KEY_PREFIX + key)
  return key
}

afterAll(async () => {
  const redis = await inspector()
  if (usedKeys.length > 0) await redis.del(usedKeys)
  await redis.close()
})

const acquireMany = Effect.fnUntraced(function*(count: number, key: string, max: number) {
  const slots = yield* StreamSlots
  return yield* Effect.forEach(Array.from({ length: count }), () => slots.acquire(key, max), { concurrency: "unbounded" })
})

const acquire = Effect.fnUntraced(function*(key: string, max: number) {
  const slots = yield* StreamSlots
  return yield* slots.acquire(key, max)
})

const held = (slots: ReadonlyArray<Slot | undefined>) => slots.filter((s): s is Slot => s !== undefined)

const contract = {
  "at most 5 open: the sixth is refused; after one ends a new one is admitted": () =>
    Effect.gen(function*() {
      const key = freshKey()
      const first = yield* acquireMany(6, key, 5)
      const open = held(first)
      assert.strictEqual(open.length, 5)
      assert.isUndefined(yield* acquire(key, 5))
      yield* open[0]!.release()
      const next = yield* acquire(key, 5)
      assert.isDefined(next)
      assert.isUndefined(yield* acquire(key, 5))
    }),

  "release is idempotent: releasing twice frees one slot": () =>
    Effect.gen(function*() {
      const key = freshKey()
      const open = held(yield* acquireMany(5, key, 5))
      yield* open[0]!.release()
      yield* open[0]!.release()
      assert.isDefined(yield* acquire(key, 5))
      assert.isUndefined(yield* acquire(key, 5))
    }),

  "a scoped slot is freed when its scope closes, however it closes": () =>
    Effect.gen(function*() {
      const key = freshKey()
      const slots = yield* StreamSlots
      // Completion.
      yield* Effect.scoped(Effect.forEach(Array.from({ length: 5 }), () => slots.acquireScoped(key, 5)))
      // Failure.
      yield* Effect.exit(
        Effect.scoped(Effect.andThen(slots.acquireScoped(key, 5), Effect.fail("upstream failed")))
      )
      // Interruption (a client disconnect interrupts the response fiber).
      const started = yield* Deferred.make<void>()
      const fiber = yield* Effect.forkChild(
        Effect.scoped(
          Effect.andThen(
            Effect.forEach(Array.from({ length: 5 }), () => slots.acquireScoped(key, 5)),
            Effect.andThen(Deferred.succeed(started, undefined), Effect.never)
          )
        )
      )
      yield* Deferred.await(started)
      assert.isUndefined(yield* acquire(key, 5))
      yield* Fiber.interrupt(fiber)
      assert.strictEqual(held(yield* acquireMany(6, key, 5)).length, 5)
    }),

  "keys and limits are independent": () =>
    Effect.gen(function*() {
      const [a, b] = [freshKey(), freshKey()]
      assert.strictEqual(held(yield* acquireMany(3, a, 2)).length, 2)
      assert.strictEqual(held(yield* acquireMany(3, b, 3)).length, 3)
    })
}

describe("StreamSlots.layerMemory", () => {
  for (const [name, run] of Object.entries(contract)) {
    it.effect(name, () => run().pipe(Effect.provide(StreamSlots.layerMemory)))
  }

  it("a refused stream becomes rate_limited with details.limit = concurrent_streams", () => {
    const error = streamLimitError(5, { allowed: true, limit: 50, remaining: 40, resetAt: 1_800_000_010, retryAfterSeconds: 0 })
    assert.strictEqual(error._tag, "RateLimited")
    assert.strictEqual(error.details?.limit, "concurrent_streams")
    assert.include(error.message, "5")
    assert.strictEqual(error.retryAfterSeconds, 1)
    assert.strictEqual(error.remaining, 40)
  })
})

/** Deadlines generous for a machine at load 10: none of these tests is about them (redis-client.test.ts is). */
const redisSlots = (options?: Parameters<typeof StreamSlots.layerRedis>[0], url = REDIS_URL) =>
  StreamSlots.layerRedis(options).pipe(Layer.provide(RedisClient.layer(url, { commandTimeoutMs: 3_000, connectTimeoutMs: 3_000 })))

/**
 * How long the key's slots outlive now at most, by Redis's clock (the one their leases are
 * scored by): the latest lease expiry minus Redis's TIME, read in one round trip.
 */
const longestLeaseLeft = (key: string) =>
  Effect.promise(async () => {
    const redis = await inspector()
    const [scores, time] = await Promise.all([
      redis.zRangeWithScores(STREAM_KEY_PREFIX + key, 0, -1),
      redis.time()
    ])
    await redis.close()
    const now = Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000)
    return { count: scores.length, left: Math.max(...scores.map((s) => s.score)) - now }
  })

/** Polls until a slot of `key` is free again (a generous bound: how soon is asserted by the leases). */
const acquireWhenFreed = (key: string) =>
  Effect.gen(function*() {
    const deadline = Date.now() + 10_000
    let slot: Slot | undefined
    while (slot === undefined && Date.now() < deadline) {
      yield* Effect.sleep(Duration.millis(50))
      slot = yield* acquire(key, 5)
    }
    return slot
  })

/** Every slot's lease expiry of the key and Redis's TIME, in ms by Redis's clock. */
const leaseEnds = (key: string) =>
  Effect.promise(async () => {
    const redis = await inspector()
    const [scores, time] = await Promise.all([redis.zRangeWithScores(STREAM_KEY_PREFIX + key, 0, -1), redis.time()])
    await redis.close()
    return { ends: scores.map((s) => s.score), now: Number(time[0]) * 1000 + Math.floor(Number(time[1]) / 1000) }
  })

const zcard = (key: string) =>
  Effect.promise(async () => {
    const redis = await inspector()
    const count = await redis.zCard(STREAM_KEY_PREFIX + key)
    const ttl = await redis.pTTL(STREAM_KEY_PREFIX + key)
    await redis.close()
    return { count, ttl }
  })

describe("StreamSlots.layerRedis", () => {
  for (const [name, run] of Object.entries(contract)) {
    it.live(name, () => run().pipe(Effect.provide(redisSlots())))
  }

  it.live("concurrent acquires from two replicas never exceed the cap", () =>
    Effect.gen(function*() {
      const key = freshKey()
      // Both layers stay open to the end: a layer that closes gives its slots back.
      const [one, two] = yield* Effect.all([Layer.build(redisSlots()), Layer.build(redisSlots())])
      const [a, b] = yield* Effect.all(
        [acquireMany(10, key, 5).pipe(Effect.provideContext(one)), acquireMany(10, key, 5).pipe(Effect.provideContext(two))],
        { concurrency: "unbounded" }
      )
      assert.strictEqual(held(a).length + held(b).length, 5)
    }))

  it.live("the set tracks open slots, expires with its last lease, and is gone when all are released", () =>
    Effect.gen(function*() {
      const key = freshKey()
      const open = held(yield* acquireMany(3, key, 5))
      const during = yield* zcard(key)
      assert.strictEqual(during.count, 3)
      assert.isTrue(during.ttl > 0 && during.ttl <= 30_000, `ttl ${during.ttl}`)
      yield* Effect.forEach(open, (slot) => slot.release(), { discard: true })
      assert.deepStrictEqual(yield* zcard(key), { count: 0, ttl: -2 })
    }).pipe(Effect.provide(redisSlots())))

  it.live("shutting down gives back every slot still held", () =>
    Effect.gen(function*() {
      const key = freshKey()
      const scope = yield* Scope.make()
      const context = yield* Layer.buildWithScope(redisSlots(), scope)
      const open = held(yield* acquireMany(4, key, 5).pipe(Effect.provideContext(context)))
      assert.strictEqual(open.length, 4)
      yield* Scope.close(scope, Exit.void)
      assert.strictEqual((yield* zcard(key)).count, 0)
    }))

  it.live("heartbeats keep a long stream's slot past its lease", () =>
    Effect.gen(function*() {
      const key = freshKey()
      const slot = yield* acquire(key, 1)
      assert.isDefined(slot)
      // Its lease as first written, by Redis's clock; then wait for the state, not a sleep: Redis's
      // clock past that lease's end (a loaded machine only makes the wait longer).
      const first = yield* leaseEnds(key)
      const originalEnd = Math.max(...first.ends)
      let now = first.now
      let ends = first.ends
      while (now <= originalEnd) {
        yield* Effect.sleep(Duration.millis(50))
        ;({ now, ends } = yield* leaseEnds(key))
      }
      // Still held past the lease it was given: a heartbeat moved its expiry on.
      assert.strictEqual(ends.length, 1)
      assert.isAbove(ends[0]!, originalEnd)
      assert.isUndefined(yield* acquire(key, 1))
    }).pipe(Effect.provide(redisSlots({ lease: Duration.millis(1500) }))))

  it.live("a holder that vanished (no heartbeat, no release) frees its slots within one lease", () =>
    Effect.gen(function*() {
      const key = freshKey()
      const proxy = yield* Effect.acquireRelease(Effect.promise(redisProxy), (p) => Effect.promise(() => p.close()))
      // 3 s: the refusal right after the cut must come before the lease lapses, which 600 ms did
      // not leave room for on a machine at load 25.
      const lease = Duration.millis(3_000)
      const vanishing = yield* Scope.make()
      const holder = yield* Layer.buildWithScope(redisSlots({ lease }, proxy.url), vanishing)
      assert.strictEqual(held(yield* acquireMany(5, key, 5).pipe(Effect.provideContext(holder))).length, 5)
      // Cut the holder off from Redis: its heartbeats and its shutdown release are lost.
      yield* Effect.promise(() => proxy.down())
      yield* Scope.close(vanishing, Exit.void)
      // Within one lease, by Redis's clock: no slot of the holder's outlives the cut by more than
      // its lease (a loaded machine may take longer to poll, but not to lapse).
      const { count, left } = yield* longestLeaseLeft(key)
      assert.isTrue(count === 0 || left <= Duration.toMillis(lease), `one of ${count} slots outlives the holder by ${left} ms`)
      const other = yield* Layer.build(redisSlots({ lease }))
      assert.isUndefined(yield* acquire(key, 5).pipe(Effect.provideContext(other)))
      assert.isDefined(yield* acquireWhenFreed(key).pipe(Effect.provideContext(other)))
    }))

  it.live("a crashed replica's slots are freed within one lease", () =>
    Effect.gen(function*() {
      const key = freshKey()
      const other = yield* replica(["hold", REDIS_URL, key, "5", "600"])
      yield* other.send("go")
      assert.strictEqual(yield* other.line((line) => line.startsWith("{")), JSON.stringify({ held: 5 }))
      assert.isUndefined(yield* acquire(key, 5))
      yield* other.crash
      const { count, left } = yield* longestLeaseLeft(key)
      assert.isTrue(count === 0 || left <= 600, `one of ${count} slots outlives the crash by ${left} ms`)
      assert.isDefined(yield* acquireWhenFreed(key))
    }).pipe(Effect.provide(redisSlots())))

  it.live("unreachable Redis fails closed, fast", () =>
    Effect.gen(function*() {
      const started = Date.now()
      const exit = yield* Effect.exit(
        acquire(freshKey(), 5).pipe(
          Effect.provide(StreamSlots.layerRedis().pipe(Layer.provide(RedisClient.layer("redis://127.0.0.1:1", { connectTimeoutMs: 300 }))))
        )
      )
      // Failed at the client's 300 ms connect deadline, not after the 30 s test timeout: 10 s is
      // generous for a machine at load 10 and still tells the two apart.
      assert.isBelow(Date.now() - started, 10_000)
      assert.isTrue(Exit.isFailure(exit))
      if (Exit.isFailure(exit)) {
        const error = exit.cause.reasons.find((r) => r._tag === "Fail")?.error
        assert.strictEqual(error?._tag, "DependencyUnavailable")
      }
    }))
})
