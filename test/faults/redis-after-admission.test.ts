/**
 * A Redis fault that spares the rate limiter (issue 35, a case the third fault round did not
 * cover): Redis freezes after a request was admitted (its rate-limit check passed), while its
 * first deployment is failing. Routing uses Redis only as an accelerator: the cooldown it cannot
 * share and the cooldowns it cannot read cost at most a call's deadline each, and the request is
 * answered by the fallback. Once Redis is back, this replica still keeps the failed deployment
 * out of its rotation (its own view), so the next request goes straight to the fallback.
 */
import { randomBytes } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { AuditRecord } from "../../src/domain/records.ts"
import { startFakeOpenAI, type FakeUpstream } from "../support/fake-openai.ts"
import { auditFor, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { canRunRedis, startRedis, type Throwaway } from "../support/throwaway.ts"
import { chat, waitFor } from "../limits/support.ts"

const UPSTREAM_KEY = `sk-upstream-${randomBytes(12).toString("hex")}`

let redis: Throwaway
let failing: FakeUpstream
let backup: FakeUpstream
let gateway: TestGateway

beforeAll(async () => {
  if (!canRunRedis) return
  ;[redis, failing, backup] = await Promise.all([startRedis(), startFakeOpenAI({ apiKey: UPSTREAM_KEY }), startFakeOpenAI({ apiKey: UPSTREAM_KEY })])
  gateway = await startGateway(testConfig({
    redis: redis.url,
    routing: { retries: 0, backoff_ms: 1, allowed_fails: 0, cooldown_seconds: 60 },
    providers: [
      { name: "failing", kind: "openai", base_url: failing.url, api_key: UPSTREAM_KEY },
      { name: "backup", kind: "openai", base_url: backup.url, api_key: UPSTREAM_KEY }
    ],
    models: [
      { alias: "main", id: "gpt-4o-2024-08-06", provider: "failing", fallbacks: ["spare"] },
      { alias: "spare", id: "gpt-4o-mini-2024-07-18", provider: "backup" }
    ]
  }))
}, 30_000)

afterAll(async () => {
  redis?.thaw()
  await gateway?.close()
  await failing?.close()
  await backup?.close()
  await redis?.destroy()
})

describe.skipIf(!canRunRedis)("Redis freezing after a request was admitted", () => {
  it("leaves the request answered by the fallback within the calls' deadlines, and the cooldown kept locally", async () => {
    const { key } = await gateway.createKey()
    // The first deployment answers 500 after a while: Redis freezes in between.
    failing.setDefault(() => ({ kind: "delay", ms: 600, then: { kind: "error", status: 500 } }))
    const started = performance.now()
    const pending = chat(gateway.url, key, { model: "main" })
    await waitFor("the request at the first deployment", () => failing.requests.length === 1)
    redis.freeze()
    const reply = await pending
    const took = performance.now() - started
    expect(reply.status, reply.text).toBe(200)
    expect(backup.requests).toHaveLength(1)
    // The delay, one Redis deadline to share the cooldown and one to read the fallback's, and slack
    // for a machine at load 10 (a frozen Redis without deadlines would hold it until the test timeout).
    expect(took).toBeLessThan(600 + 2 * 1000 + 10_000)
    const [record] = await auditFor(gateway, reply.requestId)
    const attempts = (record as AuditRecord).details!["attempts"] as Array<{ deployment: string; status: number }>
    expect(attempts.map((a) => [a.deployment, a.status])).toEqual([["failing", 502], ["backup", 200]])

    // Redis back: this replica keeps the failed deployment out by its own view.
    redis.thaw()
    await waitFor("Redis answering the rate limiter again", async () => (await chat(gateway.url, key, { model: "main" })).status === 200, 10_000)
    expect(failing.requests).toHaveLength(1)
  }, 30_000)
})
