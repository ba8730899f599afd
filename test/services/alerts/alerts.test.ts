/**
 * Budget and pool alerts (issue 33) against a local webhook receiver: each threshold crossed in a
 * period is one POST (and one audit record), a receiver that fails twice gets the alert a third
 * time and once only, two replicas on one store that see the same crossing send it once, and a
 * replica that stops mid-delivery leaves the alert to another, which delivers it. On SQLite, and
 * on Postgres for what takes two replicas.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { Context, Effect, Exit, Layer, Scope } from "effect"
import { Alerts, type AlertObservation, budgetObservation, poolObservation } from "../../../src/services/alerts/Alerts.ts"
import { Audit } from "../../../src/services/audit/Audit.ts"
import type { AuditRecord } from "../../../src/domain/records.ts"
import { AlertsRepo } from "../../../src/services/store/AlertsRepo.ts"
import { StoreLayer } from "../../../src/services/store/StoreLayer.ts"
import { createPostgresDatabase, type TempDatabase } from "../../support/databases.ts"
import { testConfig } from "../../support/gateway.ts"

type Answer = "ok" | "fail" | "hang"

/** A webhook receiver: answers each POST by the next entry of `script` (then "ok"), and keeps what it got. */
const receiver = async () => {
  const received: Array<{ body: any; headers: IncomingMessage["headers"]; answered: number | "hung" }> = []
  let script: Array<Answer> = []
  const hung: Array<ServerResponse> = []
  const server: Server = createServer((req, res) => {
    let text = ""
    req.on("data", (chunk) => (text += chunk))
    req.on("end", () => {
      const answer = script.shift() ?? "ok"
      const entry = { body: JSON.parse(text), headers: req.headers, answered: 0 as number | "hung" }
      received.push(entry)
      if (answer === "hang") {
        entry.answered = "hung"
        hung.push(res)
        return
      }
      entry.answered = answer === "ok" ? 204 : 503
      res.writeHead(entry.answered).end()
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const port = (server.address() as { port: number }).port
  return {
    url: `http://127.0.0.1:${port}/hooks/modelgate`,
    received,
    accepted: () => received.filter((r) => r.answered === 204),
    script: (next: Array<Answer>) => {
      script = [...next]
    },
    reset: () => {
      received.length = 0
      script = []
    },
    close: async () => {
      for (const res of hung) res.destroy()
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  }
}

let hook: Awaited<ReturnType<typeof receiver>>
beforeAll(async () => {
  hook = await receiver()
})
afterAll(async () => {
  await hook?.close()
})
beforeEach(() => hook.reset())

const settings = (overrides: Record<string, unknown> = {}) =>
  testConfig({
    alerts: {
      webhook_url: hook.url,
      thresholds: [0.5, 0.8, 1],
      headers: { authorization: "Bearer receiver-token" },
      // Generous: an answered attempt the client gave up on would be sent again (at least once).
      attempt_timeout_ms: 5_000,
      backoff_ms: 20,
      max_backoff_ms: 100,
      lease_seconds: 1,
      ...overrides
    }
  }).alerts

/** One replica's Alerts on `store`, with the audit records it appends collected. */
const replica = async (store: Layer.Layer<AlertsRepo, unknown>, overrides: Record<string, unknown> = {}) => {
  const collected = Audit.layerCollect()
  const scope = Effect.runSync(Scope.make())
  const context = await Effect.runPromise(
    Layer.buildWithScope(Alerts.layer(settings(overrides)).pipe(Layer.provide(Layer.merge(store, collected.layer)), Layer.merge(store)), scope)
  )
  return {
    alerts: Context.get(context, Alerts),
    repo: Context.get(context, AlertsRepo),
    records: collected.records as Array<AuditRecord>,
    idle: () => Effect.runPromise(Context.get(context, Alerts).idle),
    close: () => Effect.runPromise(Scope.close(scope, Exit.void))
  }
}

const MONTH = "2026-11-01T00:00:00.000Z"
const budget = (usedCredits: number, periodStart = MONTH): AlertObservation => ({
  kind: "key_budget",
  target: "key_alerts",
  used_micros: usedCredits * 1_000_000,
  limit_micros: 100 * 1_000_000,
  period: "month",
  period_start: periodStart
})

const waitFor = async (what: string, check: () => boolean | Promise<boolean>, ms = 20_000) => {
  const deadline = Date.now() + ms
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`not in time: ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

describe("alerts on one replica (SQLite)", () => {
  it("each threshold crossed in a period is one POST and one audit record; a new period starts over", async () => {
    const r = await replica(StoreLayer.memory)
    try {
      r.alerts.observe(budget(40))
      r.alerts.observe(budget(60))
      r.alerts.observe(budget(61))
      r.alerts.observe(budget(60))
      await r.idle()
      expect(hook.received.map((x) => x.body.threshold)).toEqual([0.5])
      // 0.8 and 1 crossed by one change: both are sent.
      r.alerts.observe(budget(125.5))
      r.alerts.observe(budget(130))
      await r.idle()
      expect(hook.received.map((x) => x.body.threshold).sort()).toEqual([0.5, 0.8, 1])
      const last = hook.received.find((x) => x.body.threshold === 1)!
      expect(last.body).toMatchObject({ kind: "key_budget", target: "key_alerts", used: 125.5, limit: 100, period: "month", period_start: MONTH, threshold: 1 })
      expect(Date.parse(last.body.at)).not.toBeNaN()
      expect(last.headers).toMatchObject({ authorization: "Bearer receiver-token", "content-type": "application/json" })
      expect(r.records.map((rec) => ({ endpoint: rec.endpoint, status: rec.status, key_id: rec.key_id }))).toEqual(
        Array.from({ length: 3 }, () => ({ endpoint: "alerts:webhook", status: 204, key_id: "key_alerts" }))
      )
      expect(r.records[0]!.details).toMatchObject({ alert: { kind: "key_budget", target: "key_alerts" }, attempts: 1, target: { kind: "key", id: "key_alerts" } })

      // The next month: the same thresholds fire again, once.
      r.alerts.observe(budget(90, "2026-12-01T00:00:00.000Z"))
      r.alerts.observe(budget(95, "2026-12-01T00:00:00.000Z"))
      await r.idle()
      expect(hook.received.length).toBe(5)
      const row = await Effect.runPromise(r.repo.find({ kind: "key_budget", target: "key_alerts", period_start: MONTH, threshold: "0.8" }))
      expect(row).toMatchObject({ state: "delivered", attempts: 1 })
    } finally {
      await r.close()
    }
  })

  it("observing costs no store call until a threshold is newly crossed, then one claim per threshold", async () => {
    let claims = 0
    const counting = Layer.effect(
      AlertsRepo,
      Effect.map(AlertsRepo, (real) =>
        AlertsRepo.of({
          ...real,
          claim: (...args) => {
            claims++
            return real.claim(...args)
          }
        }))
    ).pipe(Layer.provide(StoreLayer.memory))
    const r = await replica(counting)
    try {
      for (let used = 0; used < 50; used += 0.01) r.alerts.observe(budget(used))
      expect(claims).toBe(0)
      for (let i = 0; i < 10_000; i++) r.alerts.observe(budget(50 + (i % 30)))
      await r.idle()
      expect(claims).toBe(1)
      for (let i = 0; i < 10_000; i++) r.alerts.observe(budget(80 + (i % 50)))
      await r.idle()
      expect(claims).toBe(3)
      expect(hook.received).toHaveLength(3)
    } finally {
      await r.close()
    }
  })

  it("a budget's observation: credits only, its period (none when it never resets)", () => {
    expect(budgetObservation("team_budget", "team_1", { max_requests: 10 }, 5, MONTH)).toBeUndefined()
    expect(budgetObservation("team_budget", "team_1", null, 5, MONTH)).toBeUndefined()
    expect(budgetObservation("team_budget", "team_1", { max_credits_micros: 200_000_000, period: "month" }, 7, MONTH)).toEqual({
      kind: "team_budget", target: "team_1", used_micros: 7, limit_micros: 200_000_000, period: "month", period_start: MONTH
    })
    expect(budgetObservation("key_budget", "key_1", { max_credits_micros: 1 }, 1, "1970-01-01T00:00:00.000Z")?.period).toBe("none")
  })

  it("the pool: spent since the last top-up against the balance it left", async () => {
    const r = await replica(StoreLayer.memory)
    try {
      const topup = { ts: "2026-11-20T10:00:00.000Z", balance_after_micros: 1_000_000_000 }
      r.alerts.observe(poolObservation("ws_default", topup, 600_000_000))
      r.alerts.observe(poolObservation("ws_default", topup, 450_000_000))
      await r.idle()
      expect(hook.received.map((x) => x.body)).toEqual([
        expect.objectContaining({ kind: "pool", target: "ws_default", used: 550, limit: 1000, period: "topup", period_start: topup.ts, threshold: 0.5 })
      ])
      expect(r.records[0]!.details).toMatchObject({ target: { kind: "workspace", id: "ws_default" } })
    } finally {
      await r.close()
    }
  })

  it("a receiver that fails twice (an error, then silence past the deadline) gets the alert a third time, and once", async () => {
    hook.script(["fail", "hang", "ok"])
    const r = await replica(StoreLayer.memory, { attempt_timeout_ms: 1_000 })
    try {
      r.alerts.observe(budget(50))
      await r.idle()
      expect(hook.received.map((x) => x.answered)).toEqual([503, "hung", 204])
      expect(hook.received.every((x) => x.body.threshold === 0.5)).toBe(true)
      const row = await Effect.runPromise(r.repo.find({ kind: "key_budget", target: "key_alerts", period_start: MONTH, threshold: "0.5" }))
      expect(row).toMatchObject({ state: "delivered", attempts: 3 })
      expect(r.records).toHaveLength(1)
      expect(r.records[0]!.details).toMatchObject({ attempts: 3 })
    } finally {
      await r.close()
    }
  })

  it("no webhook: observations do nothing", async () => {
    const config = testConfig({})
    expect(config.alerts.webhook_url).toBeUndefined()
    expect(config.alerts.thresholds).toEqual([0.8, 1])
    const alerts = await Effect.runPromise(Effect.scoped(Effect.map(Layer.build(Alerts.layer(config.alerts).pipe(Layer.provide(StoreLayer.memory))), (c) => Context.get(c, Alerts))))
    alerts.observe(budget(100))
    expect(hook.received).toHaveLength(0)
  })

  it("the config refuses a plain-http receiver off loopback, thresholds outside (0, 1], and too many of them", () => {
    expect(() => testConfig({ alerts: { webhook_url: "http://hooks.example.com/x" } })).toThrow(/alerts\.webhook_url.*https/)
    expect(() => testConfig({ alerts: { webhook_url: "https://hooks.example.com/x", thresholds: [0] } })).toThrow(/thresholds/)
    expect(() => testConfig({ alerts: { webhook_url: "https://hooks.example.com/x", thresholds: [1.5] } })).toThrow(/thresholds/)
    expect(() => testConfig({ alerts: { thresholds: Array.from({ length: 11 }, (_, i) => (i + 1) / 11) } })).toThrow(/thresholds/)
    expect(testConfig({ alerts: { webhook_url: "https://hooks.example.com/x", thresholds: [0.25, 0.5] } }).alerts.thresholds).toEqual([0.25, 0.5])
  })
})

describe("alerts on two replicas sharing Postgres", () => {
  let db: TempDatabase
  beforeAll(async () => {
    db = await createPostgresDatabase("mg_alerts")
  })
  afterAll(async () => {
    await db?.drop()
  })

  it("both observe the same crossing: one POST, one audit record", async () => {
    const store = StoreLayer.postgres(db.url)
    const [a, b] = await Promise.all([replica(store), replica(store)])
    try {
      for (let i = 0; i < 5; i++) {
        a.alerts.observe(budget(80 + i, "2027-01-01T00:00:00.000Z"))
        b.alerts.observe(budget(80 + i, "2027-01-01T00:00:00.000Z"))
      }
      await Promise.all([a.idle(), b.idle()])
      expect(hook.received.map((x) => x.body.threshold).sort()).toEqual([0.5, 0.8])
      expect(a.records.length + b.records.length).toBe(2)
    } finally {
      await Promise.all([a.close(), b.close()])
    }
  })

  it("a replica that stops mid-delivery leaves the alert to another, which delivers it", async () => {
    const store = StoreLayer.postgres(db.url)
    hook.script(["hang"])
    const a = await replica(store, { attempt_timeout_ms: 60_000 })
    const b = await replica(store)
    try {
      a.alerts.observe(budget(55, "2027-02-01T00:00:00.000Z"))
      await waitFor("the first attempt reached the receiver", () => hook.received.length === 1)
      // The replica stops (its fibers end; its claim is not renewed any more).
      await a.close()
      await waitFor("another replica delivered it", () => hook.accepted().length === 1)
      await b.idle()
      expect(hook.accepted()).toHaveLength(1)
      expect(hook.accepted()[0]!.body).toMatchObject({ threshold: 0.5, period_start: "2027-02-01T00:00:00.000Z" })
      const row = await Effect.runPromise(b.repo.find({ kind: "key_budget", target: "key_alerts", period_start: "2027-02-01T00:00:00.000Z", threshold: "0.5" }))
      expect(row).toMatchObject({ state: "delivered" })
      expect(b.records).toHaveLength(1)
      expect(a.records).toHaveLength(0)
    } finally {
      await b.close()
    }
  })
})
