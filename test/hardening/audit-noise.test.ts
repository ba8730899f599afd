/**
 * Issue 22, "also": unauthenticated noise (probes, refusals before any credential) writes a
 * bounded number of audit rows per minute; what is left out is counted on the next row written.
 */
import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import type { AuditRecord } from "../../src/domain/records.ts"
import { makeNoiseSampler, NOISE_PER_WINDOW } from "../../src/http/audit-noise.ts"
import { startGateway, testConfig } from "../support/gateway.ts"

const record = (overrides: Partial<AuditRecord>): AuditRecord => ({
  request_id: "req_x", ts: new Date(0).toISOString(), method: "GET", endpoint: "/healthz", status: 200, error: null,
  duration_ms: 1, client_addr: "127.0.0.1", key_id: null, model: null, provider: null, tool: null, connection_id: null,
  credits: 0, prompt_tokens: null, completion_tokens: null, stream: false, details: null, ...overrides
}) as AuditRecord

describe("unauthenticated audit noise is bounded", () => {
  it("keeps NOISE_PER_WINDOW noise records a minute, never drops an authenticated one, and counts what it left out", () => {
    const sample = makeNoiseSampler()
    let kept = 0
    for (let i = 0; i < NOISE_PER_WINDOW + 50; i++) if (sample(record({ endpoint: "/v1/models", status: 401 }), 1_000) !== undefined) kept++
    expect(kept).toBe(NOISE_PER_WINDOW)
    expect(sample(record({ endpoint: "/v1/chat/completions", status: 200, key_id: "key_1" }), 1_000)).toBeDefined()
    expect(sample(record({ endpoint: "/v1/chat/completions", status: 429, key_id: "key_1" }), 1_000)).toBeDefined()
    expect(sample(record({ endpoint: "/healthz" }), 2_000)).toBeUndefined()
    const next = sample(record({ endpoint: "/readyz" }), 61_001)
    expect(next?.details).toEqual({ unrecorded_before: 51 })
    expect(sample(record({ endpoint: "/readyz" }), 61_002)?.details).toBeNull()
  })

  it("through the server: a flood of /healthz writes a bounded number of rows", async () => {
    const gw = await startGateway(testConfig())
    try {
      const total = NOISE_PER_WINDOW + 100
      for (let i = 0; i < total; i += 50) {
        await Promise.all(Array.from({ length: 50 }, () => fetch(`${gw.url}/healthz`).then((r) => r.text())))
      }
      await Effect.runPromise(gw.audit.flush)
      const page = await Effect.runPromise(gw.store.audit.queryAudit({ limit: 1000 }))
      const rows = page.items.filter((r) => r.endpoint === "/healthz")
      expect(rows.length).toBeLessThanOrEqual(NOISE_PER_WINDOW)
      expect(rows.length).toBeGreaterThan(0)
    } finally {
      await gw.close()
    }
  })
})
