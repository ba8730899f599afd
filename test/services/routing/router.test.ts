/**
 * The Router (issue 20) on its own: each strategy's choice, cooldowns skipped, the probe when
 * everything cools down and its success bringing a deployment back; and the config rules of
 * `deployments`, `fallbacks` and `routing`.
 */
import { Effect, Result } from "effect"
import { describe, expect, it } from "vitest"
import type { Deployment } from "../../../src/services/catalog/ModelCatalog.ts"
import { resolveConfig } from "../../../src/services/config/load.ts"
import type { ProviderConfig } from "../../../src/services/config/schema.ts"
import { RecentAttempts } from "../../../src/services/routing/RecentAttempts.ts"
import { makeRouter } from "../../../src/services/routing/Router.ts"

const deployment = (name: string, weight = 1): Deployment => ({
  key: `${name}/m`,
  provider: { name } as ProviderConfig,
  id: "m",
  weight
})
const a = deployment("a")
const b = deployment("b")
const none = new Set<string>()
const pick = (router: ReturnType<typeof makeRouter>, tried: ReadonlySet<string> = none, probe = true) =>
  Effect.runSync(router.pick([a, b], tried, probe))

describe("Router", () => {
  it("weighted: shares follow the weights", () => {
    const router = makeRouter({ strategy: "weighted" })
    let toA = 0
    for (let i = 0; i < 2000; i++) if (Effect.runSync(router.pick([deployment("a", 9), b], none, true))!.key === "a/m") toA++
    expect(toA).toBeGreaterThan(1600)
    expect(toA).toBeLessThan(2000)
  })

  it("least_busy: the deployment with fewer requests in flight", () => {
    const router = makeRouter({ strategy: "least_busy" })
    const endA = router.begin(a)
    expect(pick(router)!.key).toBe("b/m")
    Effect.runSync(endA({ _tag: "Neutral" }))
    const endB = router.begin(b)
    expect(pick(router)!.key).toBe("a/m")
    Effect.runSync(endB({ _tag: "Neutral" }))
  })

  it("latency: the lower decayed time to an answer", () => {
    const router = makeRouter({ strategy: "latency" })
    Effect.runSync(router.begin(a)({ _tag: "Answered", seconds: 2 }))
    Effect.runSync(router.begin(b)({ _tag: "Answered", seconds: 0.5 }))
    expect(pick(router)!.key).toBe("b/m")
    // b slows down: its average moves towards the new times, and a wins.
    for (let i = 0; i < 10; i++) Effect.runSync(router.begin(b)({ _tag: "Answered", seconds: 5 }))
    expect(pick(router)!.key).toBe("a/m")
  })

  it("cooling deployments are skipped; when all cool, the first back is probed, and its answer ends the cooldown", () => {
    let now = 1_000_000
    const router = makeRouter({ strategy: "weighted", now: () => now })
    Effect.runSync(router.begin(a)({ _tag: "Failed", cooldownMs: 30_000, cause: "upstream 503" }))
    for (let i = 0; i < 50; i++) expect(pick(router)!.key).toBe("b/m")
    Effect.runSync(router.begin(b)({ _tag: "Failed", cooldownMs: 60_000, cause: "upstream 429" }))
    expect(pick(router, none, false)).toBeUndefined()
    expect(pick(router)!.key).toBe("a/m")
    expect(router.cooling().map((c) => c.deployment).sort()).toEqual(["a/m", "b/m"])
    Effect.runSync(router.begin(a)({ _tag: "Answered", seconds: 0.1 }))
    expect(router.cooling().map((c) => c.deployment)).toEqual(["b/m"])
    now += 61_000
    expect(router.cooling()).toEqual([])
    expect(pick(router, new Set(["a/m", "b/m"]))).toBeUndefined()
  })

  it("inspect: the cooldown's cause and end, and recent errors counted by reason in 5- and 60-minute windows", () => {
    let now = Date.parse("2026-01-01T10:00:30Z")
    const router = makeRouter({ strategy: "weighted", now: () => now })
    const inspect = () => Effect.runSync(router.inspect([a, b], 100))
    Effect.runSync(router.begin(a)({ _tag: "Answered", seconds: 0.25 }))
    Effect.runSync(router.begin(a)({ _tag: "Neutral", error: "upstream 400" }))
    Effect.runSync(router.begin(a)({ _tag: "Neutral" }))
    now += 10 * 60_000
    Effect.runSync(router.begin(a)({ _tag: "Failed", cooldownMs: 30_000, cause: "upstream 429" }))
    const held = router.begin(b)
    const first = inspect()
    expect(first.cooldowns).toBe("replica")
    expect(first.deployments[0]).toEqual({
      key: "a/m",
      in_flight: 0,
      ttfb_seconds: 0.25,
      cooling_until: now + 30_000,
      cause: "upstream 429",
      recent: {
        last_5m: { attempts: 1, errors: 1, by_error: { "upstream 429": 1 } },
        last_60m: { attempts: 4, errors: 2, by_error: { "upstream 429": 1, "upstream 400": 1 } }
      }
    })
    expect(first.deployments[1]).toMatchObject({ key: "b/m", in_flight: 1, ttfb_seconds: null, cooling_until: undefined, cause: null })
    Effect.runSync(held({ _tag: "Answered", seconds: 1 }))
    now += 31_000
    expect(inspect().deployments[0]).toMatchObject({ cooling_until: undefined, cause: null })
    // An hour later the counts are gone, and the buckets were reused, not added to.
    now += 60 * 60_000
    expect(inspect().deployments[0]!.recent).toEqual({ last_5m: { attempts: 0, errors: 0, by_error: {} }, last_60m: { attempts: 0, errors: 0, by_error: {} } })
  })
})

describe("Router.inspect with Redis", () => {
  it("reads the causes other replicas shared, and answers with its own view by the deadline when Redis does not", async () => {
    const replies: Array<unknown> = []
    let hang = false
    const redis = {
      evalScript: () => (hang ? Effect.never : Effect.succeed(replies.shift())),
      command: () => Effect.succeed(1)
    } as unknown as NonNullable<Parameters<typeof makeRouter>[0]["redis"]>
    let now = 1_000_000
    const router = makeRouter({ strategy: "weighted", redis, now: () => now })
    replies.push([[45_000, "upstream 429"], [0, ""]])
    const shared = Effect.runSync(router.inspect([a, b], 100))
    expect(shared.cooldowns).toBe("shared")
    expect(shared.deployments.map((d) => [d.cooling_until, d.cause])).toEqual([[now + 45_000, "upstream 429"], [undefined, null]])
    // A value of "1" is what replicas before the cause was shared wrote: cooling, cause unknown.
    replies.push([[0, ""], [10_000, "1"]])
    expect(Effect.runSync(router.inspect([a, b], 100)).deployments.map((d) => d.cause)).toEqual([null, null])
    Effect.runSync(router.begin(a)({ _tag: "Failed", cooldownMs: 5_000, cause: "upstream_timeout" }))
    hang = true
    const started = performance.now()
    const alone = await Effect.runPromise(router.inspect([a, b], 100))
    // Redis hangs for good: the 100 ms read deadline ended it; 10 s is generous for a machine at load 10.
    expect(performance.now() - started).toBeLessThan(10_000)
    expect(alone.cooldowns).toBe("replica_redis_unavailable")
    expect(alone.deployments.map((d) => [d.cooling_until, d.cause])).toEqual([[now + 5_000, "upstream_timeout"], [undefined, null]])
  })
})

describe("RecentAttempts", () => {
  it("keeps at most 8 reasons a minute (the rest as other) and 60 buckets however many attempts", () => {
    const recent = new RecentAttempts()
    const start = Date.parse("2026-01-01T00:00:00Z")
    for (let i = 0; i < 20; i++) recent.record(start, `upstream ${500 + i}`)
    const minute = recent.summary(start, 5)
    expect(minute.errors).toBe(20)
    expect(Object.keys(minute.by_error)).toHaveLength(9)
    expect(minute.by_error.other).toBe(12)
    for (let m = 0; m < 500; m++) recent.record(start + m * 60_000, m % 2 === 0 ? undefined : "upstream_timeout")
    expect((recent as unknown as { buckets: Array<unknown> }).buckets).toHaveLength(60)
    const hour = recent.summary(start + 499 * 60_000, 60)
    expect(hour).toEqual({ attempts: 60, errors: 30, by_error: { upstream_timeout: 30 } })
  })
})

describe("routing config", () => {
  const base = `providers:
  - { name: p1, kind: openai, base_url: "http://x.invalid/v1" }
  - { name: p2, kind: anthropic, base_url: "http://y.invalid" }
`
  const errorOf = (text: string) => {
    const result = resolveConfig({ fileText: base + text, fileName: "modelgate.yaml", env: {} })
    return Result.isFailure(result) ? result.failure.message : undefined
  }
  it("accepts deployments, fallbacks and routing", () => {
    const result = resolveConfig({
      fileText: base + `models:
  - { alias: one, id: m1, deployments: [{ provider: p1 }, { provider: p2, id: other, weight: 2 }], fallbacks: [two] }
  - { alias: two, id: m2, provider: p2, allow_via_fallback: true }
routing: { retries: 1, cooldown_seconds: 5, strategy: least_busy, stream_continuation: true }
`,
      fileName: "modelgate.yaml",
      env: {}
    })
    expect(Result.isSuccess(result)).toBe(true)
    if (Result.isFailure(result)) return
    expect(result.success.routing).toMatchObject({ retries: 1, cooldown_seconds: 5, strategy: "least_busy", stream_continuation: true })
    expect(result.success.models[0]!.deployments).toEqual([{ provider: "p1", weight: 1 }, { provider: "p2", id: "other", weight: 2 }])
  })
  it("names each mistake", () => {
    expect(errorOf("models: [{ id: m, provider: p1, deployments: [{ provider: p2 }] }]")).toContain("models.0.deployments: give provider or deployments, not both")
    expect(errorOf("models: [{ id: m, deployments: [] }]")).toContain("models.0.deployments: list at least one")
    expect(errorOf("models: [{ id: m, deployments: [{ provider: nope }] }]")).toContain("models.0.deployments.0.provider: no provider named \"nope\"")
    expect(errorOf("models: [{ id: m, deployments: [{ provider: p1 }, { provider: p1 }] }]")).toContain("models.0.deployments.1: the same provider and id are listed twice")
    expect(errorOf("models: [{ id: m, provider: p1, fallbacks: [ghost] }]")).toContain("models.0.fallbacks.0: no model named \"ghost\"")
    expect(errorOf("models: [{ id: m, provider: p1, fallbacks: [m] }]")).toContain("models.0.fallbacks.0: a model cannot be its own fallback")
    expect(errorOf("models: [{ id: m, provider: p1 }]\nrouting: { strategy: fastest }")).toContain("routing.strategy")
    expect(errorOf("models: [{ id: m, provider: p1 }]\nrouting: { default_fallbacks: [ghost] }")).toContain("routing.default_fallbacks.0: no model named \"ghost\"")
  })
})
