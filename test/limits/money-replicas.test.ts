/**
 * Reservations and settlements across two replicas (issue 33): two Credits services, each a
 * replica of its own (its own id, block writer, lease and sweep), on one Postgres store. A hundred
 * concurrent priced requests of keys in one team, spread over both, against small key budgets, a
 * team budget and the pool: never past any of them; each admitted request then settles to a cost
 * below its reservation, the rest going back to the pool and to every budget, exactly, so a second
 * wave is admitted for exactly what came back. The ledger sums to the balance throughout.
 */
import { Effect, Layer, ManagedRuntime } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { periodKey } from "../../src/domain/budget-periods.ts"
import type { KeyPrincipal, TeamScope } from "../../src/domain/records.ts"
import { type Charge, Credits } from "../../src/services/credits/Credits.ts"
import { CreditsRepo } from "../../src/services/store/CreditsRepo.ts"
import { StoreLayer } from "../../src/services/store/StoreLayer.ts"
import { createPostgresDatabase, type TempDatabase } from "../support/databases.ts"

const M = 1_000_000
const PRICE = 250_000 // 0.25 credits reserved per request
const COST = 100_000 // 0.1 credits: what each request turns out to cost

let db: TempDatabase
type Replica = ManagedRuntime.ManagedRuntime<Credits | CreditsRepo, unknown>
let replicas: Array<Replica> = []

/**
 * A commit is abandoned only past a minute (issue 39): these tests count what concurrent requests
 * are charged, and on a loaded machine a round of a hundred can take longer than the default 2 s,
 * which answered some of them 503 (a miscount, not what is tested). How a frozen store's commit is
 * abandoned is test/faults/partition.test.ts's and credits-outage.test.ts's, with the default.
 */
const replica = (url: string): Replica =>
  ManagedRuntime.make(
    Credits.layer({ leaseSeconds: 30, blockSize: 2 * M, commitTimeoutMs: 60_000 }).pipe(Layer.provideMerge(StoreLayer.fromUrl(url)))
  )

const team: TeamScope = {
  id: "team_devs",
  name: "devs",
  allowed_models: null,
  budget: { max_credits_micros: 6 * M, period: "month" },
  limits: null
}

const principal = (id: string): KeyPrincipal => ({
  kind: "key",
  id,
  allowed_models: null,
  tools_enabled: false,
  mcp_servers: [],
  budget: { max_credits_micros: 2 * M, max_requests: 1000, period: "month" },
  limits: null,
  team
})

const keys = ["key_a", "key_b", "key_c", "key_d"]

const reserveOn = (r: Replica, i: number, wave: string) =>
  r.runPromise(Effect.flatMap(Credits, (credits) =>
    Effect.result(credits.reserve({ amount: PRICE, key_id: keys[i % 4]!, request_id: `req_${wave}_${i}`, model: "quarter" }, principal(keys[i % 4]!)))))

const books = async () =>
  replicas[0]!.runPromise(Effect.gen(function*() {
    const repo = yield* CreditsRepo
    const workspace = yield* repo.getWorkspace
    const ledger = yield* repo.ledger({ limit: 100_000 })
    const month = periodKey("month", Date.now())
    const usage = yield* repo.budgetUsage([...keys, team.id].map((holder) => [holder, month] as const))
    return {
      balance: workspace.credits,
      ledgerSum: ledger.reduce((sum, row) => sum + row.amount, 0),
      team: usage.get(`${team.id} ${month}`),
      keys: keys.map((k) => usage.get(`${k} ${month}`))
    }
  }))

const settled = async () => {
  for (let i = 0; i < 500; i++) {
    const pending = await Promise.all(replicas.map((r) => r.runPromise(Effect.map(Credits, (c) => c.pending()))))
    if (pending.every((n) => n === 0)) return
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  throw new Error("settlements still pending")
}

beforeAll(async () => {
  db = await createPostgresDatabase("mg_money")
  replicas = [replica(db.url), replica(db.url)]
  await replicas[0]!.runPromise(Effect.flatMap(CreditsRepo, (repo) => repo.ensureWorkspace(50 * M)))
  await Promise.all(replicas.map((r) => r.runPromise(Effect.void)))
}, 60_000)

afterAll(async () => {
  await Promise.all(replicas.map((r) => r.dispose()))
  await db?.drop()
})

describe("reservations and settlements across two replicas (Postgres)", () => {
  it("100 concurrent priced requests never pass a key's budget, the team's or the pool, and settle to their cost exactly", async () => {
    const first = await Promise.all(Array.from({ length: 100 }, (_, i) => reserveOn(replicas[i % 2]!, i, "w1")))
    const admitted = first.flatMap((r) => r._tag === "Success" && r.success !== undefined ? [r.success] : [])
    const refused = first.flatMap((r) => r._tag === "Failure" ? [r.failure] : [])
    // The team's 6 credits hold 24 reservations of 0.25 (the keys' 2 credits would hold 32).
    expect(admitted).toHaveLength(24)
    expect(refused).toHaveLength(76)
    for (const error of refused) {
      expect(error._tag).toBe("BudgetExhausted")
      // Whichever budget ran out first for its request: its key's 2 credits, or the team's 6.
      const details = error.details as Record<string, unknown>
      expect(details).toMatchObject(details.scope === "team" ? { limit: "max_credits", team_id: team.id, max_credits: 6 } : { limit: "max_credits", scope: "key", max_credits: 2 })
    }
    let book = await books()
    expect(book.team).toEqual({ requests: 24, credits: 24 * PRICE })
    expect(book.keys.reduce((sum, u) => sum + (u?.credits ?? 0), 0)).toBe(24 * PRICE)
    for (const used of book.keys) expect(used?.credits ?? 0).toBeLessThanOrEqual(2 * M)
    expect(book.balance).toBe(50 * M - 24 * PRICE)
    expect(book.ledgerSum).toBe(book.balance)

    // Each settles to 0.1 on the replica that took it: 0.15 of each goes back to the pool and both budgets.
    await Promise.all(admitted.map((charge: Charge, i) =>
      replicas[Number(charge.request_id.split("_")[2]) % 2]!.runPromise(Effect.flatMap(Credits, (c) => c.settle(charge, COST + (i === 0 ? 10 * M : 0))))))
    await settled()
    book = await books()
    // The first asked to keep more than it reserved: it keeps what it reserved, no more.
    const spent = 23 * COST + PRICE
    expect(book.team).toEqual({ requests: 24, credits: spent })
    expect(book.keys.reduce((sum, u) => sum + (u?.credits ?? 0), 0)).toBe(spent)
    expect(book.balance).toBe(50 * M - spent)
    expect(book.ledgerSum).toBe(book.balance)

    // What came back is admitted again, exactly: (6 - 2.45) / 0.25 = 14 more.
    const second = await Promise.all(Array.from({ length: 40 }, (_, i) => reserveOn(replicas[i % 2]!, i, "w2")))
    const again = second.flatMap((r) => r._tag === "Success" && r.success !== undefined ? [r.success] : [])
    expect(again).toHaveLength(Math.floor((6 * M - spent) / PRICE))
    // These fail on the provider's side: refunded whole, to the pool and the budgets.
    await Promise.all(again.map((charge) =>
      replicas[Number(charge.request_id.split("_")[2]) % 2]!.runPromise(Effect.flatMap(Credits, (c) => c.refund(charge, "provider failed")))))
    await settled()
    book = await books()
    expect(book.team).toEqual({ requests: 24 + again.length, credits: spent })
    expect(book.balance).toBe(50 * M - spent)
    expect(book.ledgerSum).toBe(book.balance)
  }, 120_000)

  it("a pool smaller than the budgets: 100 concurrent requests over both replicas spend it exactly, never below zero", async () => {
    // Empty the pool down to 3 credits: 12 more reservations of 0.25, whatever the budgets allow.
    const { balance } = await books()
    const poor = (id: string): KeyPrincipal => ({ ...principal(id), budget: null, team: null })
    const drain = balance - 3 * M
    await replicas[0]!.runPromise(Effect.flatMap(Credits, (credits) =>
      Effect.flatMap(credits.reserve({ amount: drain, key_id: "key_drain", request_id: "req_drain", model: "drain" }, poor("key_drain")), (charge) =>
        credits.settle(charge!))))
    await settled()
    const results = await Promise.all(Array.from({ length: 100 }, (_, i) =>
      replicas[i % 2]!.runPromise(Effect.flatMap(Credits, (credits) =>
        Effect.result(credits.reserve({ amount: PRICE, key_id: "key_poor", request_id: `req_poor_${i}`, model: "quarter" }, poor("key_poor")))))))
    const ok = results.filter((r) => r._tag === "Success")
    expect(ok).toHaveLength(12)
    for (const r of results) {
      if (r._tag === "Failure") expect(r.failure).toMatchObject({ _tag: "InsufficientCredits", details: { required_credits: 0.25 } })
    }
    await Promise.all(ok.map((r, i) =>
      replicas[Number((r as { success: Charge }).success.request_id.split("_")[2]) % 2]!.runPromise(Effect.flatMap(Credits, (c) => c.settle((r as { success: Charge }).success, i % 2 === 0 ? COST : undefined)))))
    await settled()
    const book = await books()
    expect(book.balance).toBe(6 * (PRICE - COST))
    expect(book.ledgerSum).toBe(book.balance)
  }, 120_000)

  it("a replica gone with a request in flight: a live one returns its reservation to the pool and the budgets, once", async () => {
    const short = (url: string): Replica =>
      ManagedRuntime.make(Credits.layer({ leaseSeconds: 2, blockSize: 2 * M }).pipe(Layer.provideMerge(StoreLayer.fromUrl(url))))
    const [doomed, live] = [short(db.url), short(db.url)]
    try {
      // A ManagedRuntime builds its layer on first use: the live replica must be running (renewing
      // its lease, sweeping) while the doomed one goes, or only the 30 s replicas of beforeAll would
      // sweep, 30 s later (the wait below then measured their lease, not this one's).
      await live.runPromise(Effect.asVoid(Credits))
      const before = await books()
      const who = principal("key_a")
      const charge = await doomed.runPromise(Effect.flatMap(Credits, (credits) =>
        credits.reserve({ amount: PRICE, key_id: "key_a", request_id: "req_inflight", model: "quarter" }, who)))
      expect(charge?.amount).toBe(PRICE)
      const held = await books()
      expect(held.team?.credits).toBe((before.team?.credits ?? 0) + PRICE)
      expect(held.balance).toBe(before.balance - PRICE)
      // Gone without ending it: its lease is given up (nothing of its own was pending), the reservation stays open.
      await doomed.dispose()
      // The live replica's own sweep (every third of its lease) finds it: wait for that state.
      await expect.poll(async () => (await books()).balance, { timeout: 30_000, interval: 20 }).toBe(before.balance)
      // Refunded once, whoever sweeps again.
      await live.runPromise(Effect.flatMap(Credits, (c) => c.sweep))
      const rows = await live.runPromise(Effect.flatMap(CreditsRepo, (repo) => repo.ledger({ limit: 10, request_id: "req_inflight" })))
      expect(rows.map((r) => [r.kind, r.amount])).toEqual([["refund", PRICE], ["charge", -PRICE]])
      const after = await books()
      // The request stays counted; its credits are back in the pool and in both budgets.
      expect(after.team).toEqual({ requests: (before.team?.requests ?? 0) + 1, credits: before.team?.credits ?? 0 })
      expect(after.balance).toBe(before.balance)
      expect(after.ledgerSum).toBe(after.balance)
    } finally {
      await live.dispose()
    }
  }, 120_000)
})
