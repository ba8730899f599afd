/**
 * The shared Redis connection: scripts by SHA with reload, and outages played by a TCP proxy:
 * Redis stopped (connections refused) and Redis silent (connections open, nothing answers).
 * In both cases calls fail fast with DependencyUnavailable and the client recovers by itself.
 */
import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Exit, Layer } from "effect"
import type { DependencyUnavailable } from "../../../src/domain/errors.ts"
import { RedisClient, redisScript, redisTarget } from "../../../src/services/limits/RedisClient.ts"
import { inspector, REDIS_URL, redisProxy, uniqueKey } from "./support.ts"

const ping = Effect.gen(function*() {
  const redis = yield* RedisClient
  return yield* redis.command(["PING"])
})

const failureOf = <A>(exit: Exit.Exit<A, DependencyUnavailable>) =>
  Exit.isFailure(exit) ? exit.cause.reasons.find((r) => r._tag === "Fail")?.error : undefined

/** Polls until `effect` succeeds; returns how long that took. */
const recovers = <A, E>(effect: Effect.Effect<A, E>, within: Duration.Input) =>
  Effect.gen(function*() {
    const started = Date.now()
    const deadline = started + Duration.toMillis(within)
    while (Date.now() < deadline) {
      if (Exit.isSuccess(yield* Effect.exit(effect))) return Date.now() - started
      yield* Effect.sleep(Duration.millis(50))
    }
    return assert.fail(`no recovery within ${Duration.toMillis(within)} ms`)
  })

/** Polls `effect` until it fails with a message `accepted` takes; returns that message. */
const waitForFailure = <A>(effect: Effect.Effect<A, DependencyUnavailable>, accepted: (message: string) => boolean, within: Duration.Input) =>
  Effect.gen(function*() {
    const deadline = Date.now() + Duration.toMillis(within)
    let last = ""
    while (Date.now() < deadline) {
      last = failureOf(yield* Effect.exit(effect))?.message ?? "(it succeeded)"
      if (accepted(last)) return last
      yield* Effect.sleep(Duration.millis(50))
    }
    return assert.fail(`no such failure within ${Duration.toMillis(within)} ms; the last: ${last}`)
  })

/** How long a recovery may take: the reconnect's backoff, stretched by a machine at load 10 (not a bound under test). */
const RECOVERY = Duration.seconds(15)

const proxied = Effect.acquireRelease(Effect.promise(redisProxy), (p) => Effect.promise(() => p.close()))

describe("RedisClient", () => {
  it("the target names host and port only", () => {
    assert.strictEqual(redisTarget("redis://user:s3cret@cache.internal:6380/2"), "cache.internal:6380")
    assert.strictEqual(redisTarget("rediss://:pw@10.0.0.5"), "10.0.0.5:6379")
  })

  it.live("a script runs by SHA, loaded with EVAL the first time it is missing", () =>
    Effect.gen(function*() {
      const redis = yield* RedisClient
      // A script no one has loaded before: the first call meets NOSCRIPT.
      const script = redisScript(`-- ${uniqueKey("script")}\nreturn tonumber(ARGV[1]) + 1`)
      const check = yield* Effect.promise(inspector)
      const before = yield* Effect.promise(() => check.scriptExists(script.sha1))
      assert.deepStrictEqual(before, [0])
      assert.strictEqual(yield* redis.evalScript(script, [], ["41"]), 42)
      assert.deepStrictEqual(yield* Effect.promise(() => check.scriptExists(script.sha1)), [1])
      assert.strictEqual(yield* redis.evalScript(script, [], ["1"]), 2)
      yield* Effect.promise(() => check.close())
    }).pipe(Effect.provide(RedisClient.layer(REDIS_URL))))

  it.live("Redis stopped: calls fail at once; when it is back the client reconnects by itself", () =>
    Effect.gen(function*() {
      const proxy = yield* proxied
      const redis = yield* Layer.build(RedisClient.layer(proxy.url, { commandTimeoutMs: 300 }))
      const call = ping.pipe(Effect.provideContext(redis))
      assert.strictEqual(yield* call, "PONG")
      yield* Effect.promise(() => proxy.down())
      const started = Date.now()
      const error = failureOf(yield* Effect.exit(call))
      // Failed by the client, not after the kernel gave the connection up (minutes): generous for a machine at load 10.
      assert.isTrue(Date.now() - started < 3_000, `took ${Date.now() - started} ms`)
      assert.strictEqual(error?._tag, "DependencyUnavailable")
      assert.match(error?.message ?? "", /^redis unavailable at 127\.0\.0\.1:\d+: /)
      assert.deepStrictEqual(error?.details, { dependency: "redis" })
      yield* Effect.promise(() => proxy.up())
      yield* recovers(call, RECOVERY)
    }))

  it.live("Redis silent: calls fail after the deadline, the dead connection is replaced, and it recovers", () =>
    Effect.gen(function*() {
      const proxy = yield* proxied
      const redis = yield* Layer.build(RedisClient.layer(proxy.url, { commandTimeoutMs: 200 }))
      const call = ping.pipe(Effect.provideContext(redis))
      assert.strictEqual(yield* call, "PONG")
      proxy.freeze()
      const started = Date.now()
      const error = failureOf(yield* Effect.exit(call))
      // The deadline ended it (its message says so), not the kernel: generous for a machine at load 10.
      assert.isTrue(Date.now() - started < 3_000, `took ${Date.now() - started} ms`)
      assert.match(error?.message ?? "", /no reply within 200 ms/)
      // The probe gives up on the silent connection; calls then fail at once instead of waiting for
      // the deadline: told by the error (not "no reply within"), which no machine's load changes.
      const fastFailure = yield* waitForFailure(call, (message) => !/no reply within/.test(message), Duration.seconds(5))
      assert.notMatch(fastFailure, /no reply within/)
      proxy.thaw()
      yield* recovers(call, RECOVERY)
    }))

  it.live("unreachable at start: the layer still builds, and calls fail closed at once", () =>
    Effect.gen(function*() {
      const started = Date.now()
      const redis = yield* Layer.build(RedisClient.layer("redis://127.0.0.1:1", { connectTimeoutMs: 100 }))
      const error = failureOf(yield* Effect.exit(ping.pipe(Effect.provideContext(redis))))
      // Refused by the closed port, not waited out: generous for a machine at load 10.
      assert.isTrue(Date.now() - started < 3_000, `took ${Date.now() - started} ms`)
      assert.strictEqual(error?._tag, "DependencyUnavailable")
    }))
})
