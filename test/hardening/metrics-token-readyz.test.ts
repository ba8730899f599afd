/**
 * Issue 22, finding 11: wrong metrics tokens are throttled like the admin token (per address,
 * 10 failures a window, then 429 even with the right token), on a count of their own. And from
 * the "also" list: /readyz answers from a cached probe, so unauthenticated calls are not a store
 * query each.
 */
import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ADMIN_TOKEN, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

const METRICS_TOKEN = "metrics-token-0123456789"

describe("the metrics token is throttled", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway(testConfig({ telemetry: { metrics_token: METRICS_TOKEN } }))
  })
  afterAll(() => gw?.close())

  it("after 10 wrong tokens the address gets 429 rate_limited, even with the right token; the admin API is not locked", async () => {
    for (let i = 0; i < 10; i++) {
      const wrong = await fetch(`${gw.url}/metrics`, { headers: { authorization: `Bearer wrong-${i}` } })
      expect(wrong.status).toBe(401)
    }
    const right = await fetch(`${gw.url}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })
    expect(right.status).toBe(429)
    expect(await right.json()).toMatchObject({ error: "rate_limited", details: { limit: "admin_failed_attempts" } })
    expect(right.headers.get("retry-after")).not.toBeNull()
    const admin = await fetch(`${gw.url}/workspace`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })
    expect(admin.status).toBe(200)
  })
})

describe("/readyz answers from a cached probe", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway(testConfig())
  })
  afterAll(() => gw?.close())

  it("100 calls in a burst make one store query per second, not one each", async () => {
    let queries = 0
    const repo = gw.store.credits as { getWorkspace: Effect.Effect<unknown, unknown> }
    const original = repo.getWorkspace
    // Counted where the probe reads it: the same repository instance the route uses.
    Object.defineProperty(repo, "getWorkspace", {
      configurable: true,
      get: () => Effect.suspend(() => (queries++, original))
    })
    const started = Date.now()
    let elapsed = 0
    try {
      const answers = await Promise.all(Array.from({ length: 100 }, () => fetch(`${gw.url}/readyz`).then((r) => r.status)))
      expect(answers.every((status) => status === 200)).toBe(true)
      elapsed = Date.now() - started
    } finally {
      Object.defineProperty(repo, "getWorkspace", { configurable: true, writable: true, value: original })
    }
    // One probe per second at most (before: one per call, 100).
    expect(queries).toBeLessThanOrEqual(Math.ceil(elapsed / 1000) + 1)
    expect(queries).toBeLessThan(20)
  })
})
