/**
 * Money in exact decimals and budgets per period (issue 33, the accounting part), as a client and
 * an operator see them: decimal prices, balances, ledger rows and audit credits; top-ups refused
 * past six fractional digits; a key's budget in requests and credits per UTC period, its view,
 * its 429 with the limit and when it resets; the period boundary crossed with a movable clock.
 */
import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { periodKey, resetsAt } from "../../src/domain/budget-periods.ts"
import { fromMicros, toMicros } from "../../src/domain/money.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { movableClock } from "../support/movable-clock.ts"

const DAY = 86_400_000

const post = (gw: TestGateway, key: string, model: string) =>
  fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
    body: JSON.stringify({ model, messages: [{ role: "user", content: "hello" }] })
  }).then(async (reply) => ({ status: reply.status, requestId: reply.headers.get("x-request-id") ?? "", body: await reply.json() as Record<string, any> }))

const adminJson = async (gw: TestGateway, method: string, path: string, body?: unknown) => {
  const reply = await gw.admin(method, path, body)
  return { status: reply.status, body: await reply.json() as Record<string, any> }
}

describe("budget periods", () => {
  it("are UTC calendar days, weeks from Monday and months, each keyed by its first day", () => {
    const at = Date.parse("2026-11-28T23:59:59.999Z") // a Saturday
    expect(periodKey("day", at)).toBe("day:2026-11-28")
    expect(periodKey("week", at)).toBe("week:2026-11-23")
    expect(periodKey("month", at)).toBe("month:2026-11-01")
    expect(periodKey(undefined, at)).toBe("")
    expect(resetsAt("day", at)).toBe("2026-11-29T00:00:00.000Z")
    expect(resetsAt("week", at)).toBe("2026-11-30T00:00:00.000Z")
    expect(resetsAt("month", at)).toBe("2026-12-01T00:00:00.000Z")
    expect(resetsAt(undefined, at)).toBeNull()
    // A Monday is its own week's first day; a Sunday belongs to the week before.
    expect(periodKey("week", Date.parse("2026-11-30T00:00:00.000Z"))).toBe("week:2026-11-30")
    expect(periodKey("week", Date.parse("2026-11-29T12:00:00.000Z"))).toBe("week:2026-11-23")
    // Months of every length, and the year's end.
    expect(resetsAt("month", Date.parse("2028-02-29T10:00:00.000Z"))).toBe("2028-03-01T00:00:00.000Z")
    expect(periodKey("month", Date.parse("2026-12-31T23:00:00.000Z"))).toBe("month:2026-12-01")
    expect(resetsAt("month", Date.parse("2026-12-31T23:00:00.000Z"))).toBe("2027-01-01T00:00:00.000Z")
    expect(periodKey("week", Date.parse("2027-01-01T00:00:00.000Z"))).toBe("week:2026-12-28")
  })
})

describe("exact decimal credits and budgets per period (one gateway, SQLite)", () => {
  let gw: TestGateway
  const clock = movableClock()

  beforeAll(async () => {
    gw = await startGateway(testConfig({
      workspace: { credits: 10.5 },
      providers: [{ name: "echo", kind: "echo" }],
      models: [
        { alias: "quarter", id: "echo-quarter", provider: "echo", credits: 0.25 },
        { alias: "tenth", id: "echo-tenth", provider: "echo", credits: 0.1 },
        { alias: "dear", id: "echo-dear", provider: "echo", credits: 100.000001 }
      ]
    }), { clock: clock.clock })
  })

  afterAll(async () => {
    await gw?.close()
  })

  it("charges decimal prices exactly: the balance, the ledger and the audit trail say the same decimals", async () => {
    const { key, id } = await gw.createKey()
    const before = (await adminJson(gw, "GET", "/workspace")).body.credits
    expect(before).toBe(10.5)
    // Ten charges of 0.1 are exactly 1 (floating point would make 0.9999999999999999).
    for (let i = 0; i < 10; i++) expect((await post(gw, key, "tenth")).status).toBe(200)
    const reply = await post(gw, key, "quarter")
    expect(reply.status).toBe(200)
    expect((await adminJson(gw, "GET", "/workspace")).body.credits).toBe(9.25)
    const ledger = (await adminJson(gw, "GET", `/workspace/ledger?request_id=${reply.requestId}`)).body.data
    expect(ledger).toMatchObject([{ kind: "charge", amount: -0.25, balance_after: 9.25, key_id: id }])
    await Effect.runPromise(gw.audit.flush)
    const audit = (await adminJson(gw, "GET", `/audit?key_id=${id}`)).body.data as Array<{ request_id: string; credits: number }>
    expect(audit.find((r) => r.request_id === reply.requestId)?.credits).toBe(0.25)
    const usage = (await adminJson(gw, "GET", `/usage?key_id=${id}&group_by=key`)).body.data
    expect(usage).toMatchObject([{ key_id: id, requests: 11, credits: 1.25 }])
    // The whole ledger sums to the balance, in micros as in credits.
    const rows = (await adminJson(gw, "GET", "/workspace/ledger?limit=1000")).body.data as Array<{ amount: number }>
    const sum = rows.reduce((total, row) => total + toMicros(Math.abs(row.amount))! * Math.sign(row.amount), 0)
    expect(fromMicros(sum)).toBe(9.25)
  })

  it("402 names the decimal price and the balance; top-ups take decimals of at most six fractional digits", async () => {
    const { key } = await gw.createKey()
    const balance = (await adminJson(gw, "GET", "/workspace")).body.credits as number
    const refused = await post(gw, key, "dear")
    expect(refused.status).toBe(402)
    expect(refused.body).toMatchObject({ error: "insufficient_credits", details: { model: "dear", required_credits: 100.000001, available_credits: balance } })
    for (const credits of [0.0000001, 1.1234567, -1, 0, "1"]) {
      const reply = await adminJson(gw, "POST", "/workspace/credits", { credits })
      expect([credits, reply.status, reply.body.error]).toEqual([credits, 400, "validation_failed"])
    }
    const topped = await adminJson(gw, "POST", "/workspace/credits", { credits: 141.000001, note: "decimals" })
    expect(topped.status).toBe(200)
    expect(topped.body.credits).toBe(fromMicros(toMicros(balance)! + 141_000_001))
    expect((await post(gw, key, "dear")).status).toBe(200)
    expect((await adminJson(gw, "GET", "/workspace")).body.credits).toBe(fromMicros(toMicros(balance)! + 141_000_001 - 100_000_001))
  })

  it("a key's budget in credits per day: shown, refused 429 with the limit and when it resets, reset at the next UTC day", async () => {
    const created = await adminJson(gw, "POST", "/api-keys", { name: "daily", budget: { max_credits: 0.5, max_requests: 100, period: "day" } })
    expect(created.status).toBe(201)
    const { id, key } = created.body as { id: string; key: string }
    const now = Date.now()
    expect(created.body.budget).toMatchObject({ max_credits: 0.5, max_requests: 100, period: "day", used_requests: 0, used_credits: 0, remaining_credits: 0.5 })
    expect((await post(gw, key, "quarter")).status).toBe(200)
    expect((await post(gw, key, "tenth")).status).toBe(200)
    const view = (await adminJson(gw, "GET", `/api-keys/${id}`)).body.budget
    expect(view).toMatchObject({ max_credits: 0.5, period: "day", used_requests: 2, used_credits: 0.35, remaining_credits: 0.15, remaining_requests: 98 })
    expect(view.resets_at).toBe(resetsAt("day", now))
    const refused = await post(gw, key, "quarter")
    expect(refused.status).toBe(429)
    expect(refused.body).toMatchObject({
      error: "budget_exhausted",
      details: { limit: "max_credits", resets_at: resetsAt("day", now), max_credits: 0.5, used_credits: 0.35, required_credits: 0.25 }
    })
    // A cheaper request still fits; the pool was never charged for the refused one.
    expect((await post(gw, key, "tenth")).status).toBe(200)
    // The list shows it too.
    const listed = (await adminJson(gw, "GET", "/api-keys?limit=100")).body.data as Array<{ id: string; budget: Record<string, unknown> | null }>
    expect(listed.find((k) => k.id === id)?.budget).toMatchObject({ used_credits: 0.45, used_requests: 3 })

    // Across the boundary (the gateway's clock moved to the next UTC day): a fresh period.
    clock.advance(Date.parse(resetsAt("day", Date.now())!) - Date.now() + 1000)
    const next = (await adminJson(gw, "GET", `/api-keys/${id}`)).body.budget
    expect(next).toMatchObject({ used_requests: 0, used_credits: 0, remaining_credits: 0.5 })
    expect((await post(gw, key, "quarter")).status).toBe(200)
    expect((await adminJson(gw, "GET", `/api-keys/${id}`)).body.budget).toMatchObject({ used_requests: 1, used_credits: 0.25 })
    clock.reset()
  })

  it("a request budget without a period never resets; an admin's reset starts it over; PATCH changes it", async () => {
    const { body } = await adminJson(gw, "POST", "/api-keys", { name: "fixed", budget: { max_requests: 2 } })
    const { id, key } = body as { id: string; key: string }
    expect((await post(gw, key, "tenth")).status).toBe(200)
    expect((await post(gw, key, "tenth")).status).toBe(200)
    const refused = await post(gw, key, "tenth")
    expect(refused.status).toBe(429)
    expect(refused.body.details).toMatchObject({ limit: "max_requests", resets_at: null, max_requests: 2, used_requests: 2 })
    clock.advance(40 * DAY)
    expect((await post(gw, key, "tenth")).status).toBe(429)
    clock.reset()
    const reset = await adminJson(gw, "POST", `/api-keys/${id}/budget/reset`)
    expect(reset.body.budget).toMatchObject({ used_requests: 0, used_credits: 0, max_requests: 2, period: null, resets_at: null })
    expect((await post(gw, key, "tenth")).status).toBe(200)
    const patched = await adminJson(gw, "PATCH", `/api-keys/${id}`, { budget: { max_credits: 1, period: "month" } })
    expect(patched.status).toBe(200)
    expect(patched.body.budget).toMatchObject({ max_requests: null, max_credits: 1, period: "month", used_requests: 0 })
    for (const budget of [{}, { max_credits: 0.0000001 }, { max_credits: 1, period: "year" }, { max_requests: 0 }]) {
      const invalid = await adminJson(gw, "PATCH", `/api-keys/${id}`, { budget })
      expect([budget, invalid.status, invalid.body.error]).toEqual([budget, 400, "validation_failed"])
    }
  })
})
