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
    Effect.runSync(router.begin(a)({ _tag: "Failed", cooldownMs: 30_000 }))
    for (let i = 0; i < 50; i++) expect(pick(router)!.key).toBe("b/m")
    Effect.runSync(router.begin(b)({ _tag: "Failed", cooldownMs: 60_000 }))
    expect(pick(router, none, false)).toBeUndefined()
    expect(pick(router)!.key).toBe("a/m")
    expect(router.cooling().map((c) => c.deployment).sort()).toEqual(["a/m", "b/m"])
    Effect.runSync(router.begin(a)({ _tag: "Answered", seconds: 0.1 }))
    expect(router.cooling().map((c) => c.deployment)).toEqual(["b/m"])
    now += 61_000
    expect(router.cooling()).toEqual([])
    expect(pick(router, new Set(["a/m", "b/m"]))).toBeUndefined()
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
