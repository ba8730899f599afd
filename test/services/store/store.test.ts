/** The Store contract, run against both layers: embedded SQLite and the machine's Postgres. */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect, Layer, ManagedRuntime } from "effect"
import type { ApiKeyRecord, AuditRecord } from "../../../src/domain/records.ts"
import { DEFAULT_WORKSPACE, Store } from "../../../src/services/store/Store.ts"
import { createPostgresDatabase } from "../../support/databases.ts"

const now = () => new Date().toISOString()

const key = (id: string, hash: string): ApiKeyRecord => ({
  id,
  workspace_id: DEFAULT_WORKSPACE,
  name: `key ${id}`,
  key_hash: hash,
  key_hint: "sk-mg-abcd...wxyz",
  is_active: true,
  allowed_models: ["echo", "gpt-4o"],
  tools_enabled: false,
  budget: { max_requests: 10 },
  budget_used: 0,
  limits: null,
  expires_at: null,
  created_at: now(),
  updated_at: now(),
  last_used_at: null,
  previous_key_hash: null,
  previous_key_expires_at: null
})

const audit = (i: number, keyId: string | null, status: number): AuditRecord => ({
  request_id: `req_${i}`,
  ts: new Date(Date.UTC(2026, 0, 1, 0, 0, i)).toISOString(),
  key_id: keyId,
  method: "POST",
  endpoint: "/v1/chat/completions",
  status,
  error: status >= 400 ? "unauthorized" : null,
  model: "echo-1",
  provider: "echo",
  tool: null,
  connection_id: null,
  credits: 1,
  prompt_tokens: 3,
  completion_tokens: 4,
  duration_ms: 1.5,
  stream: i % 2 === 0,
  client_addr: "127.0.0.1",
  details: { note: "x" }
})

type StoreFixture = () => Promise<{ layer: Layer.Layer<Store, unknown>; cleanup: () => Promise<void> }>

const fixtures: ReadonlyArray<readonly [string, (prefix: string) => StoreFixture]> = [
  ["sqlite", () => async () => ({ layer: Store.layerMemory, cleanup: async () => {} })],
  ["postgres", (prefix) => async () => {
    const db = await createPostgresDatabase(prefix)
    return { layer: Store.layerPostgres(db.url), cleanup: () => db.drop() }
  }]
]

/** A fresh store for the enclosing describe block, its workspace opened with `initialCredits`. */
const useStore = (makeLayer: StoreFixture, initialCredits: number) => {
  let runtime: ManagedRuntime.ManagedRuntime<Store, unknown>
  let cleanup: () => Promise<void>
  const run = <A, E>(effect: Effect.Effect<A, E, Store>) => runtime.runPromise(effect)
  beforeAll(async () => {
    const made = await makeLayer()
    cleanup = made.cleanup
    runtime = ManagedRuntime.make(made.layer)
    await run(Effect.flatMap(Store, (s) => s.ensureWorkspace(initialCredits)))
  })
  afterAll(async () => {
    await runtime?.dispose()
    await cleanup?.()
  })
  return run
}

const contract = (name: string, makeLayer: StoreFixture) =>
  describe(`Store contract: ${name}`, () => {
    const run = useStore(makeLayer, 500)

    it("creates the workspace once with its initial credits", async () => {
      const ws = await run(Effect.flatMap(Store, (s) => s.ensureWorkspace(9999)))
      expect(ws).toMatchObject({ id: DEFAULT_WORKSPACE, credits: 500 })
    })

    it("stores, finds, updates and deletes keys, bumping the change version", async () => {
      await run(Effect.gen(function*() {
        const store = yield* Store
        const v0 = yield* store.keyChangeVersion
        yield* store.insertKey(key("key_a", "hash_a"))
        expect(yield* store.keyChangeVersion).toBe(v0 + 1)
        const found = yield* store.findKeyByHash("hash_a")
        expect(found).toMatchObject({ id: "key_a", allowed_models: ["echo", "gpt-4o"], budget: { max_requests: 10 }, is_active: true })
        expect(yield* store.findKeyByHash("nope")).toBeUndefined()
        const updated = yield* store.updateKey("key_a", { is_active: false, allowed_models: null, previous_key_hash: "old_a" })
        expect(updated).toMatchObject({ is_active: false, allowed_models: null })
        expect((yield* store.findKeyByHash("old_a"))?.id).toBe("key_a")
        expect(yield* store.updateKey("missing", { name: "x" })).toBeUndefined()
        expect((yield* store.listKeys).map((k) => k.id)).toContain("key_a")
        yield* store.touchKeys(new Map([["key_a", "2026-01-01T00:00:00.000Z"]]))
        expect((yield* store.findKeyById("key_a"))?.last_used_at).toBe("2026-01-01T00:00:00.000Z")
        expect(yield* store.deleteKey("key_a")).toBe(true)
        expect(yield* store.deleteKey("key_a")).toBe(false)
        expect(yield* store.findKeyById("key_a")).toBeUndefined()
        expect(yield* store.keyChangeVersion).toBe(v0 + 3)
      }))
    })

    it("refuses a second key with the same hash", async () => {
      await run(Effect.gen(function*() {
        const store = yield* Store
        yield* store.insertKey(key("key_b", "hash_b"))
        const result = yield* Effect.result(store.insertKey(key("key_c", "hash_b")))
        expect(result._tag).toBe("Failure")
        expect(yield* store.findKeyById("key_c")).toBeUndefined()
      }))
    })

    it("appends audit records and pages through them with filters", async () => {
      await run(Effect.gen(function*() {
        const store = yield* Store
        yield* store.appendAudit(Array.from({ length: 25 }, (_, i) => audit(i, i % 5 === 0 ? null : "key_x", i % 3 === 0 ? 401 : 200)))
        const first = yield* store.queryAudit({ limit: 10 })
        expect(first.items).toHaveLength(10)
        expect(first.items[0]!.request_id).toBe("req_24")
        expect(first.items[0]).toMatchObject({ stream: true, details: { note: "x" }, duration_ms: 1.5 })
        const second = yield* store.queryAudit({ limit: 10, before_seq: first.next_seq! })
        expect(second.items[0]!.request_id).toBe("req_14")
        const third = yield* store.queryAudit({ limit: 10, before_seq: second.next_seq! })
        expect(third.items).toHaveLength(5)
        expect(third.next_seq).toBeNull()
        const unauthorized = yield* store.queryAudit({ limit: 100, status: 401 })
        expect(unauthorized.items.every((r) => r.status === 401)).toBe(true)
        expect(unauthorized.items).toHaveLength(9)
        const forKey = yield* store.queryAudit({ limit: 100, key_id: "key_x" })
        expect(forKey.items).toHaveLength(20)
        const window = yield* store.queryAudit({ limit: 100, since: audit(10, null, 200).ts, until: audit(15, null, 200).ts })
        expect(window.items.map((r) => r.request_id)).toEqual(["req_14", "req_13", "req_12", "req_11", "req_10"])
      }))
    })
  })

const creditContract = (name: string, makeLayer: StoreFixture) =>
  describe(`Store credits and budgets: ${name}`, () => {
    const run = useStore(makeLayer, 10)

    it("charges atomically, never below zero, and the ledger adds up", async () => {
      await run(Effect.gen(function*() {
        const store = yield* Store
        const results = yield* Effect.all(
          Array.from({ length: 8 }, (_, i) =>
            store.admitPaid({
              keyId: "key_k",
              budget: false,
              charge: { amount: 3, actor: "key_k", key_id: "key_k", request_id: `req_${i}`, model: "m" }
            })),
          { concurrency: "unbounded" }
        )
        const charged = results.filter((r) => r._tag === "Admitted")
        expect(charged).toHaveLength(3)
        expect((yield* store.getWorkspace).credits).toBe(1)
        const refused = results.find((r) => r._tag === "Insufficient")
        expect(refused).toEqual({ _tag: "Insufficient", available: 1 })
        expect(yield* store.addCredits("refund", { amount: 3, actor: "key_k", request_id: "req_0" })).toBe(4)
        expect(yield* store.addCredits("topup", { amount: 100, actor: "admin" })).toBe(104)
        const ledger = yield* store.ledger({ limit: 100 })
        expect(ledger.reduce((sum, e) => sum + e.amount, 0)).toBe(104)
        expect(ledger[0]).toMatchObject({ kind: "topup", amount: 100, balance_after: 104, actor: "admin" })
        expect(ledger.at(-1)).toMatchObject({ kind: "initial", amount: 10 })
        expect(yield* store.ledger({ limit: 10, request_id: "req_0" })).toHaveLength(2)
      }))
    })

    it("counts a budget exactly under concurrency, and charges nothing once it is used up", async () => {
      await run(Effect.gen(function*() {
        const store = yield* Store
        yield* store.addCredits("topup", { amount: 100, actor: "test" })
        const before = (yield* store.getWorkspace).credits
        yield* store.insertKey({ ...key("key_budget", "hash_budget"), budget: { max_requests: 5 } })
        const results = yield* Effect.all(
          Array.from({ length: 12 }, (_, i) =>
            store.admitPaid({ keyId: "key_budget", budget: true, charge: { amount: 2, actor: "key_budget", key_id: "key_budget", request_id: `req_b${i}` } })),
          { concurrency: "unbounded" }
        )
        expect(results.filter((r) => r._tag === "Admitted")).toHaveLength(5)
        expect(results.filter((r) => r._tag === "BudgetExhausted")).toHaveLength(7)
        expect((yield* store.findKeyById("key_budget"))?.budget_used).toBe(5)
        expect((yield* store.getWorkspace).credits).toBe(before - 10)
        // A free model on a budgeted key counts the budget and charges nothing.
        yield* store.insertKey({ ...key("key_free", "hash_free"), budget: { max_requests: 1 } })
        expect(yield* store.admitPaid({ keyId: "key_free", budget: true, charge: undefined })).toEqual({ _tag: "Admitted", balance: undefined })
        expect(yield* store.admitPaid({ keyId: "key_free", budget: true, charge: undefined })).toEqual({ _tag: "BudgetExhausted" })
      }))
    })

    it("holds a charge as a reservation owned by its replica until it is settled or refunded, once", async () => {
      await run(Effect.gen(function*() {
        const store = yield* Store
        yield* store.addCredits("topup", { amount: 50, actor: "test" })
        const owner = { owner: "rep_a", method: "POST", endpoint: "/v1/chat/completions" }
        const admit = (request_id: string) =>
          store.admitPaid({ keyId: "key_r", budget: false, charge: { amount: 4, actor: "key_r", key_id: "key_r", request_id, model: "m" }, reservation: owner })
        const before = (yield* store.getWorkspace).credits
        yield* admit("req_r1")
        yield* admit("req_r2")
        yield* admit("req_r3")
        expect((yield* store.getWorkspace).credits).toBe(before - 12)
        // Settled: kept, and a later refund (a retry, a sweeper) does nothing.
        expect(yield* store.settleReservation("req_r1")).toBe(true)
        expect(yield* store.settleReservation("req_r1")).toBe(false)
        expect(yield* store.refundReservation("req_r1", "key_r", "late")).toBeUndefined()
        // Refunded once, however many ask at the same time.
        const refunds = yield* Effect.all(
          Array.from({ length: 5 }, () => store.refundReservation("req_r2", "key_r", "provider failed")),
          { concurrency: "unbounded" }
        )
        expect(refunds.filter((r) => r !== undefined)).toHaveLength(1)
        expect(refunds.find((r) => r !== undefined)).toMatchObject({ request_id: "req_r2", owner: "rep_a", amount: 4, key_id: "key_r", endpoint: "/v1/chat/completions" })
        expect(yield* store.settleReservation("req_r2")).toBe(false)
        expect((yield* store.getWorkspace).credits).toBe(before - 8)
        expect((yield* store.ledger({ limit: 10, request_id: "req_r2" })).map((e) => [e.kind, e.amount])).toEqual([["refund", 4], ["charge", -4]])

        // Orphans: open reservations of replicas whose lease lapsed (or never was), never one's own.
        const now = Date.now()
        yield* store.renewReplica("rep_a", now + 10_000)
        expect(yield* store.orphanedReservations("rep_b", now, 10)).toEqual([])
        yield* store.renewReplica("rep_a", now - 1)
        expect((yield* store.orphanedReservations("rep_b", now, 10)).map((r) => r.request_id)).toEqual(["req_r3"])
        expect(yield* store.orphanedReservations("rep_a", now, 10)).toEqual([])
        yield* store.removeReplica("rep_a")
        expect((yield* store.orphanedReservations("rep_b", now, 10)).map((r) => r.request_id)).toEqual(["req_r3"])
        yield* store.refundReservation("req_r3", "replica:rep_b", "replica_lost")
        expect(yield* store.orphanedReservations("rep_b", now, 10)).toEqual([])

        const ledger = yield* store.ledger({ limit: 1000 })
        expect(ledger.reduce((sum, e) => sum + e.amount, 0)).toBe((yield* store.getWorkspace).credits)
      }))
    })

    it("leaves the budget counted when the pool cannot pay", async () => {
      await run(Effect.gen(function*() {
        const store = yield* Store
        yield* store.insertKey({ ...key("key_poor", "hash_poor"), budget: { max_requests: 10 } })
        const available = (yield* store.getWorkspace).credits
        const result = yield* store.admitPaid({ keyId: "key_poor", budget: true, charge: { amount: available + 1, actor: "key_poor" } })
        expect(result).toEqual({ _tag: "Insufficient", available })
        expect((yield* store.findKeyById("key_poor"))?.budget_used).toBe(1)
        expect((yield* store.getWorkspace).credits).toBe(available)
      }))
    })
  })

for (const [name, fixture] of fixtures) {
  contract(name, fixture("mg_store"))
  creditContract(name, fixture("mg_credits"))
}
