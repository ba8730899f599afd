/** Label cardinality stays bounded whatever clients send: model names beyond the cap become `other`. */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import type { AuditRecord } from "../../../src/domain/records.ts"
import { Gauge, Registry } from "prom-client"
import { exposition, makeMetrics } from "../../../src/services/metrics/Metrics.ts"
import { AUDIT_CREDIT_MICROS } from "../../../src/services/store/AuditRepo.ts"

const record = (model: string): AuditRecord => ({
  request_id: "req_x",
  ts: new Date().toISOString(),
  key_id: "key_x",
  method: "POST",
  endpoint: "/v1/chat/completions",
  status: 200,
  error: null,
  model,
  provider: "up",
  tool: null,
  connection_id: null,
  // One credit, in the audit trail's micro-credits.
  credits: 1_000_000,
  prompt_tokens: 3,
  completion_tokens: 2,
  duration_ms: 12,
  stream: false,
  client_addr: null,
  details: null
})

describe("Metrics", () => {
  it("writes a NaN sample as NaN, not prom-client's Nan, which Prometheus refuses with the whole scrape", async () => {
    const registry = new Registry()
    new Gauge({ name: "lag_seconds", help: "a gauge with no sample yet", registers: [registry] }).set(Number.NaN)
    const raw = await registry.metrics()
    expect(raw).toContain("lag_seconds Nan\n")
    const fixed = exposition(raw)
    expect(fixed).toContain("lag_seconds NaN\n")
    expect(fixed).not.toMatch(/ Nan$/m)
    // Only the value is touched: a label or a help text that says Nan stays as it is.
    expect(exposition('# HELP x Nan\nx{a="Nan"} 1\n')).toBe('# HELP x Nan\nx{a="Nan"} 1\n')
  })

  it.effect("caps distinct model labels at 200 and counts the rest as `other`, losing no tokens", () =>
    Effect.gen(function*() {
      const metrics = makeMetrics()
      for (let i = 0; i < 250; i++) metrics.observe(record(`claude-made-up-${i}`), "/v1/chat/completions")
      const text = yield* metrics.render({ auditBuffered: 0, auditDropped: 0 })
      const credits = text.split("\n").filter((line) => line.startsWith("modelgate_credits_total{"))
      expect(credits).toHaveLength(201)
      expect(credits).toContain(`modelgate_credits_total{model="other",provider="up"} 50`)
      const total = credits.reduce((sum, line) => sum + Number(line.split(" ").at(-1)), 0)
      expect(total).toBe(250)
    }))

  it.effect("counts spend and requests per team by team id only, never by key or end user (issue 33)", () =>
    Effect.gen(function*() {
      const metrics = makeMetrics()
      // Credits in the audit trail's unit (AUDIT_CREDIT_MICROS micros each); the counter counts credits.
      const spent = (team: string | null, credits: number, end_user: string) =>
        ({ ...record("m"), team_id: team, credits: credits * 1_000_000 / AUDIT_CREDIT_MICROS, end_user })
      metrics.observe(spent("team_a", 2, "alice"), "/v1/chat/completions")
      metrics.observe(spent("team_a", 3, "bob"), "/v1/chat/completions")
      metrics.observe(spent("team_b", 0, "alice"), "/v1/chat/completions")
      metrics.observe(spent(null, 5, "carol"), "/v1/chat/completions")
      const text = yield* metrics.render({ auditBuffered: 0, auditDropped: 0 })
      expect(text).toContain(`\nmodelgate_team_credits_total{team="team_a"} 5\n`)
      expect(text).toContain(`\nmodelgate_team_credits_total{team="team_b"} 0\n`)
      expect(text).toContain(`\nmodelgate_team_requests_total{team="team_a"} 2\n`)
      expect(text).toContain(`\nmodelgate_team_requests_total{team="team_b"} 1\n`)
      const teamLines = text.split("\n").filter((line) => line.startsWith("modelgate_team_"))
      expect(teamLines).toHaveLength(4)
      // No series anywhere carries a key's or an end user's name.
      expect(text).not.toMatch(/alice|bob|carol|key_x/)
    }))

  it.effect("follows the audit trail's drop count as a counter", () =>
    Effect.gen(function*() {
      const metrics = makeMetrics()
      yield* metrics.render({ auditBuffered: 5, auditDropped: 3 })
      const text = yield* metrics.render({ auditBuffered: 7, auditDropped: 10 })
      expect(text).toContain("\nmodelgate_audit_dropped_records_total 10\n")
      expect(text).toContain("\nmodelgate_audit_buffered_records 7\n")
    }))
})
