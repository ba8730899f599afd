/** The store repositories' contract, run against both layers: embedded SQLite and the machine's Postgres. */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Fiber, Layer, ManagedRuntime } from "effect"
import type { ApiKeyRecord, AuditRecord } from "../../../src/domain/records.ts"
import { AUDIT_CREDIT_MICROS, AuditRepo } from "../../../src/services/store/AuditRepo.ts"
import { type BatchCharge, type BudgetHold, type CreditBatch, rowsOfHolds } from "../../../src/services/store/credit-batches.ts"
import { CreditsRepo } from "../../../src/services/store/CreditsRepo.ts"
import { KeysRepo } from "../../../src/services/store/KeysRepo.ts"
import { ResponsesRepo } from "../../../src/services/store/ResponsesRepo.ts"
import { DEFAULT_WORKSPACE } from "../../../src/services/store/rows.ts"
import { ConnectionsRepo } from "../../../src/services/store/ConnectionsRepo.ts"
import { McpSessionsRepo } from "../../../src/services/store/McpSessionsRepo.ts"
import { SqlHistoryRepo } from "../../../src/services/store/SqlHistoryRepo.ts"
import { SubjectsRepo } from "../../../src/services/store/SubjectsRepo.ts"
import { StoreDeadline, StoreError } from "../../../src/services/store/StoreError.ts"
import { StoreLayer, type StoreRepos } from "../../../src/services/store/StoreLayer.ts"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { DatabaseSync } from "node:sqlite"
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
  mcp_servers: [],
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

const auditRecord = (i: number, keyId: string | null, status: number): AuditRecord => ({
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

type StoreFixture = () => Promise<{ layer: Layer.Layer<StoreRepos, unknown>; cleanup: () => Promise<void> }>

const fixtures: ReadonlyArray<readonly [string, (prefix: string) => StoreFixture]> = [
  ["sqlite", () => async () => ({ layer: StoreLayer.memory, cleanup: async () => {} })],
  ["postgres", (prefix) => async () => {
    const db = await createPostgresDatabase(prefix)
    return { layer: StoreLayer.postgres(db.url), cleanup: () => db.drop() }
  }]
]

/** A fresh store for the enclosing describe block, its workspace opened with `initialCredits`. */
const useStore = (makeLayer: StoreFixture, initialCredits: number) => {
  let runtime: ManagedRuntime.ManagedRuntime<StoreRepos, unknown>
  let cleanup: () => Promise<void>
  const run = <A, E>(effect: Effect.Effect<A, E, StoreRepos>) => runtime.runPromise(effect)
  beforeAll(async () => {
    const made = await makeLayer()
    cleanup = made.cleanup
    // The contract is what the store answers, not how fast: the per-call deadline (6 s by default,
    // issue 21's outage bound) counts a call's wait for a pool connection, and the races below
    // queue hundreds of calls on a pool of ten, which took longer than 6 s on a machine at load 10.
    runtime = ManagedRuntime.make(Layer.merge(made.layer, Layer.succeed(StoreDeadline, Duration.minutes(2))))
    await run(Effect.flatMap(CreditsRepo, (s) => s.ensureWorkspace(initialCredits)))
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
      const ws = await run(Effect.flatMap(CreditsRepo, (s) => s.ensureWorkspace(9999)))
      expect(ws).toMatchObject({ id: DEFAULT_WORKSPACE, credits: 500 })
    })

    it("stores, finds, updates and deletes keys, bumping the change version", async () => {
      await run(Effect.gen(function*() {
        const keys = yield* KeysRepo
        const v0 = yield* keys.keyChangeVersion
        yield* keys.insertKey(key("key_a", "hash_a"))
        expect(yield* keys.keyChangeVersion).toBe(v0 + 1)
        const found = yield* keys.findKeyByHash("hash_a")
        expect(found).toMatchObject({ id: "key_a", allowed_models: ["echo", "gpt-4o"], budget: { max_requests: 10 }, is_active: true })
        expect(yield* keys.findKeyByHash("nope")).toBeUndefined()
        const updated = yield* keys.updateKey("key_a", { is_active: false, allowed_models: null, previous_key_hash: "old_a" })
        expect(updated).toMatchObject({ is_active: false, allowed_models: null })
        expect((yield* keys.findKeyByHash("old_a"))?.id).toBe("key_a")
        expect(yield* keys.updateKey("missing", { name: "x" })).toBeUndefined()
        expect((yield* keys.listKeys).map((k) => k.id)).toContain("key_a")
        yield* keys.touchKeys(new Map([["key_a", "2026-01-01T00:00:00.000Z"]]))
        expect((yield* keys.findKeyById("key_a"))?.last_used_at).toBe("2026-01-01T00:00:00.000Z")
        expect(yield* keys.deleteKey("key_a")).toBe(true)
        expect(yield* keys.deleteKey("key_a")).toBe(false)
        expect(yield* keys.findKeyById("key_a")).toBeUndefined()
        expect(yield* keys.keyChangeVersion).toBe(v0 + 3)
      }))
    })

    it("refuses a second key with the same hash", async () => {
      await run(Effect.gen(function*() {
        const keys = yield* KeysRepo
        yield* keys.insertKey(key("key_b", "hash_b"))
        const result = yield* Effect.result(keys.insertKey(key("key_c", "hash_b")))
        expect(result._tag).toBe("Failure")
        expect(yield* keys.findKeyById("key_c")).toBeUndefined()
      }))
    })

    it("appends audit records and pages through them with filters", async () => {
      await run(Effect.gen(function*() {
        const audit = yield* AuditRepo
        yield* audit.appendAudit(Array.from({ length: 25 }, (_, i) => auditRecord(i, i % 5 === 0 ? null : "key_x", i % 3 === 0 ? 401 : 200)))
        const first = yield* audit.queryAudit({ limit: 10 })
        expect(first.items).toHaveLength(10)
        expect(first.items[0]!.request_id).toBe("req_24")
        expect(first.items[0]).toMatchObject({ stream: true, details: { note: "x" }, duration_ms: 1.5 })
        const second = yield* audit.queryAudit({ limit: 10, before_seq: first.next_seq! })
        expect(second.items[0]!.request_id).toBe("req_14")
        const third = yield* audit.queryAudit({ limit: 10, before_seq: second.next_seq! })
        expect(third.items).toHaveLength(5)
        expect(third.next_seq).toBeNull()
        const unauthorized = yield* audit.queryAudit({ limit: 100, status: 401 })
        expect(unauthorized.items.every((r) => r.status === 401)).toBe(true)
        expect(unauthorized.items).toHaveLength(9)
        const forKey = yield* audit.queryAudit({ limit: 100, key_id: "key_x" })
        expect(forKey.items).toHaveLength(20)
        const window = yield* audit.queryAudit({ limit: 100, since: auditRecord(10, null, 200).ts, until: auditRecord(15, null, 200).ts })
        expect(window.items.map((r) => r.request_id)).toEqual(["req_14", "req_13", "req_12", "req_11", "req_10"])
      }))
    })

    it("writes a response of thousands of items giving the event loop turns, and a reader meanwhile sees all of it or none (issue 32)", async () => {
      await run(Effect.gen(function*() {
        const repo = yield* ResponsesRepo
        const count = 5_000
        const items = Array.from({ length: count }, (_, i) => ({ item_id: `msg_big_${i}`, response_id: "resp_big", item: JSON.stringify({ type: "message", i }) }))
        const record = { id: "resp_big", owner: "key_big", provider: null, model: "m", previous_response_id: null, response: "{}", input_items: "[]", bytes: 4 }
        let written = false
        // Turns of the event loop while the write is under way: a macrotask runs only between them.
        let turns = 0
        const tick = () => {
          if (written) return
          turns++
          setImmediate(tick)
        }
        setImmediate(tick)
        const seen = new Set<number>()
        // Another request's fiber, reading the first and last item (on SQLite it waits for the
        // write's transaction, which holds the one connection; on Postgres it reads meanwhile).
        const reader = Effect.gen(function*() {
          while (!written) {
            const found = yield* repo.findItems("key_big", ["msg_big_0", `msg_big_${count - 1}`])
            seen.add(found.length)
            yield* Effect.yieldNow
          }
        })
        const fiber = yield* Effect.forkChild(reader)
        yield* Effect.yieldNow
        yield* repo.insert(record, items, 60_000)
        written = true
        yield* Fiber.join(fiber)
        const after = yield* repo.findItems("key_big", ["msg_big_0", `msg_big_${count - 1}`])
        expect(after.length).toBe(2)
        // Half a response is never visible: none of its items, or both ends.
        expect([...seen].filter((n) => n !== 0 && n !== 2)).toEqual([])
        // The write gave the event loop turns between its statements (it was ~150 ms of one turn).
        expect(turns).toBeGreaterThan(5)
      }))
    })

    it("replaces a response its owner stores again, items and all; keeps another owner's id; removes a response with its items (issue 38: found by their expiry)", async () => {
      await run(Effect.gen(function*() {
        const repo = yield* ResponsesRepo
        const record = (owner: string, response: string) => ({
          id: "resp_again",
          owner,
          provider: null,
          model: "m",
          previous_response_id: null,
          response,
          input_items: "[]",
          bytes: response.length + 2
        })
        const item = (id: string) => ({ item_id: id, response_id: "resp_again", item: JSON.stringify({ id }) })
        const ids = ["msg_a1", "msg_a2", "msg_a3", "msg_b1"]
        const itemsOf = (owner: string) => Effect.map(repo.findItems(owner, ids), (found) => found.map((row) => row.item_id).sort())
        // Another response stored in the same instant keeps its items throughout.
        const other = { ...record("key_a", "{}"), id: "resp_other" }
        yield* repo.insert(other, [{ item_id: "msg_other", response_id: "resp_other", item: "{}" }], 60_000)
        yield* repo.insert(record("key_a", `{"v":1}`), [item("msg_a1"), item("msg_a2")], 60_000)
        yield* repo.insert(record("key_a", `{"v":2}`), [item("msg_a2"), item("msg_a3")], 60_000)
        expect((yield* repo.find("resp_again", "key_a"))?.response).toBe(`{"v":2}`)
        expect(yield* itemsOf("key_a")).toEqual(["msg_a2", "msg_a3"])

        // Another owner's id is not taken over: the save fails and changes nothing.
        const refused = yield* Effect.flip(repo.insert(record("key_b", `{"v":3}`), [item("msg_b1")], 60_000))
        expect(refused).toBeInstanceOf(StoreError)
        expect((yield* repo.find("resp_again", "key_a"))?.response).toBe(`{"v":2}`)
        expect(yield* itemsOf("key_b")).toEqual([])

        // Removed by its owner only, with its items: stored again without items, none come back.
        expect(yield* repo.remove("resp_again", "key_b")).toBe(false)
        expect(yield* repo.remove("resp_again", "key_a")).toBe(true)
        expect(yield* repo.find("resp_again", "key_a")).toBeUndefined()
        yield* repo.insert(record("key_a", `{"v":4}`), [], 60_000)
        expect(yield* itemsOf("key_a")).toEqual([])
        expect((yield* repo.findItems("key_a", ["msg_other"])).map((row) => row.item_id)).toEqual(["msg_other"])
      }))
    })

    it("saves made at once are each stored or refused on their own (issue 38: one commit for the saves of a tick on SQLite)", async () => {
      await run(Effect.gen(function*() {
        const repo = yield* ResponsesRepo
        const record = (id: string, owner: string) => ({
          id,
          owner,
          provider: null,
          model: "m",
          previous_response_id: null,
          response: `{"id":"${id}"}`,
          input_items: "[]",
          bytes: 20
        })
        yield* repo.insert(record("resp_taken", "key_y"), [], 60_000)
        const ids = Array.from({ length: 20 }, (_, i) => `resp_tick_${i}`)
        // Together: the one whose id another owner holds fails, the others are stored with their items.
        const outcomes = yield* Effect.all(
          [...ids.map((id) => record(id, "key_x")), record("resp_taken", "key_x")].map((response) =>
            Effect.result(repo.insert(response, [{ item_id: `msg_${response.id}`, response_id: response.id, item: "{}" }], 60_000))
          ),
          { concurrency: "unbounded" }
        )
        expect(outcomes.map((outcome) => outcome._tag)).toEqual([...ids.map(() => "Success"), "Failure"])
        for (const id of ids) expect((yield* repo.find(id, "key_x"))?.response).toBe(`{"id":"${id}"}`)
        expect((yield* repo.findItems("key_x", ids.map((id) => `msg_${id}`))).length).toBe(ids.length)
        expect(yield* repo.find("resp_taken", "key_x")).toBeUndefined()
        expect(yield* repo.findItems("key_x", ["msg_resp_taken"])).toEqual([])
        expect((yield* repo.find("resp_taken", "key_y"))?.owner).toBe("key_y")
      }))
    })
  })

const creditContract = (name: string, makeLayer: StoreFixture) =>
  describe(`Store credits and budgets: ${name}`, () => {
    const run = useStore(makeLayer, 10)

    /**
     * One paid admission through group commits, as a replica makes it: a block of exactly the
     * amount, then the budget check and the charge (conditional on the check) with the block's return.
     */
    const admitPaid = (input: {
      readonly keyId: string
      readonly holds?: ReadonlyArray<BudgetHold> | undefined
      readonly amount: number
      readonly request_id: string
      readonly owner?: string | undefined
    }) =>
      Effect.gen(function*() {
        const credits = yield* CreditsRepo
        const owner = input.owner ?? "rep_admit"
        const base: CreditBatch = {
          owner, checks: [], releases: [], charges: [], settles: [], partialSettles: [], refunds: [], returns: [], strays: undefined,
          lease: undefined, reclaim: false, now: Date.now()
        }
        const blockId = `blk_${input.request_id}`
        if (input.amount > 0) {
          const leased = yield* credits.commitBatch({ ...base, lease: { min: input.amount, size: input.amount } }, () => blockId)
          if (leased.lease?._tag !== "Leased") return { _tag: "Insufficient" as const, available: leased.lease?._tag === "Short" ? leased.lease.free : 0 }
        }
        const checks = input.holds === undefined ? [] : [{ id: "c1", holds: input.holds, amount: input.amount }]
        const result = yield* credits.commitBatch({
          ...base,
          checks,
          charges: input.amount > 0
            ? [{
              block: blockId, request_id: input.request_id, amount: input.amount, key_id: input.keyId, model: "m",
              open: input.owner === undefined ? undefined : { method: "POST", endpoint: "/v1/chat/completions" },
              refundNote: undefined, retried: false,
              check: checks.length > 0 ? "c1" : undefined,
              budgets: input.holds === undefined ? undefined : rowsOfHolds(input.holds)
            }]
            : [],
          returns: input.amount > 0 ? [blockId] : []
        }, () => "blk_unused")
        const verdict = result.checks.get("c1")
        if (verdict?._tag === "Refused") return { _tag: "BudgetExhausted" as const, refusal: verdict.refusal }
        return { _tag: "Admitted" as const }
      })

    const usageOf = (holder: string, period = "") =>
      Effect.map(Effect.flatMap(CreditsRepo, (c) => c.budgetUsage([[holder, period]])), (m) => m.get(`${holder} ${period}`))

    it("charges atomically, never below zero, and the ledger adds up", async () => {
      await run(Effect.gen(function*() {
        const credits = yield* CreditsRepo
        const results = yield* Effect.all(
          Array.from({ length: 8 }, (_, i) => admitPaid({ keyId: "key_k", amount: 3, request_id: `req_${i}` })),
          { concurrency: "unbounded" }
        )
        const charged = results.filter((r) => r._tag === "Admitted")
        expect(charged).toHaveLength(3)
        expect((yield* credits.getWorkspace).credits).toBe(1)
        expect(results.find((r) => r._tag === "Insufficient")).toEqual({ _tag: "Insufficient", available: 1 })
        // Which three of the eight win is up to the store's scheduling: refund one that did.
        const winner = `req_${results.findIndex((r) => r._tag === "Admitted")}`
        expect(yield* credits.addCredits("refund", { amount: 3, actor: "key_k", request_id: winner })).toBe(4)
        expect(yield* credits.addCredits("topup", { amount: 100, actor: "admin" })).toBe(104)
        const ledger = yield* credits.ledger({ limit: 100 })
        expect(ledger.reduce((sum, e) => sum + e.amount, 0)).toBe(104)
        expect(ledger[0]).toMatchObject({ kind: "topup", amount: 100, balance_after: 104, actor: "admin" })
        expect(ledger.at(-1)).toMatchObject({ kind: "initial", amount: 10 })
        expect(yield* credits.ledger({ limit: 10, request_id: winner })).toHaveLength(2)
      }))
    })

    it("counts a budget's requests and credits exactly under concurrency, and charges nothing once it is used up", async () => {
      await run(Effect.gen(function*() {
        const credits = yield* CreditsRepo
        yield* credits.addCredits("topup", { amount: 100, actor: "test" })
        const before = (yield* credits.getWorkspace).credits
        const holds = [{ holder: "key_budget", period: "", max_requests: 5 }]
        const results = yield* Effect.all(
          Array.from({ length: 12 }, (_, i) => admitPaid({ keyId: "key_budget", holds, amount: 2, request_id: `req_b${i}` })),
          { concurrency: "unbounded" }
        )
        expect(results.filter((r) => r._tag === "Admitted")).toHaveLength(5)
        expect(results.filter((r) => r._tag === "BudgetExhausted")).toHaveLength(7)
        expect(results.find((r) => r._tag === "BudgetExhausted")).toMatchObject({ refusal: { holder: "key_budget", limit: "max_requests", max: 5, used: 5 } })
        expect(yield* usageOf("key_budget")).toEqual({ requests: 5, credits: 10 })
        expect((yield* credits.getWorkspace).credits).toBe(before - 10)

        // In credits: a team's budget of 7 across two keys, each request 3: two pass, whichever key.
        const team = (key: string) => [{ holder: key, period: "month:2026-11-01", max_requests: 100 }, { holder: "team_a", period: "month:2026-11-01", max_credits: 7 }]
        const spent = yield* Effect.all(
          Array.from({ length: 6 }, (_, i) => admitPaid({ keyId: i % 2 === 0 ? "key_t1" : "key_t2", holds: team(i % 2 === 0 ? "key_t1" : "key_t2"), amount: 3, request_id: `req_t${i}` })),
          { concurrency: "unbounded" }
        )
        expect(spent.filter((r) => r._tag === "Admitted")).toHaveLength(2)
        expect(spent.find((r) => r._tag === "BudgetExhausted")).toMatchObject({ refusal: { holder: "team_a", limit: "max_credits", max: 7, used: 6 } })
        expect(yield* usageOf("team_a", "month:2026-11-01")).toEqual({ requests: 2, credits: 6 })
        // A refused check counts nothing anywhere: the keys' rows hold only what was admitted.
        const keyRows = [(yield* usageOf("key_t1", "month:2026-11-01"))?.requests ?? 0, (yield* usageOf("key_t2", "month:2026-11-01"))?.requests ?? 0]
        expect(keyRows[0]! + keyRows[1]!).toBe(2)
        // Another period is another row, from nothing.
        expect((yield* admitPaid({ keyId: "key_t1", holds: [{ holder: "team_a", period: "month:2026-12-01", max_credits: 7 }], amount: 3, request_id: "req_t_next" }))._tag).toBe("Admitted")

        // A free request on a budgeted key counts the budget and charges nothing.
        const free = [{ holder: "key_free", period: "", max_requests: 1 }]
        expect(yield* admitPaid({ keyId: "key_free", holds: free, amount: 0, request_id: "req_f1" })).toEqual({ _tag: "Admitted" })
        expect((yield* admitPaid({ keyId: "key_free", holds: free, amount: 0, request_id: "req_f2" }))._tag).toBe("BudgetExhausted")
        // An admin's reset forgets every period.
        yield* credits.resetBudget("key_free")
        expect(yield* usageOf("key_free")).toBeUndefined()
      }))
    })

    it("counts an identity-provider subject's budget exactly under concurrency, and shows it on the subject", async () => {
      await run(Effect.gen(function*() {
        const credits = yield* CreditsRepo
        const subjects = yield* SubjectsRepo
        yield* credits.addCredits("topup", { amount: 100, actor: "test" })
        const before = (yield* credits.getWorkspace).credits
        yield* subjects.touchSubjects([{ id: "sub_alice", issuer: "https://idp.example", subject: "alice", seen_at: "2029-06-01T00:00:00.000Z" }])
        const holds = (max_requests: number) => [{ holder: "sub_alice", period: "", max_requests }]
        const results = yield* Effect.all(
          Array.from({ length: 10 }, (_, i) => admitPaid({ keyId: "sub_alice", holds: holds(4), amount: 3, request_id: `req_s${i}` })),
          { concurrency: "unbounded" }
        )
        expect(results.filter((r) => r._tag === "Admitted")).toHaveLength(4)
        expect(results.filter((r) => r._tag === "BudgetExhausted")).toHaveLength(6)
        expect(yield* subjects.getSubject("sub_alice")).toMatchObject({ issuer: "https://idp.example", subject: "alice", budget_used: 4 })
        expect((yield* credits.getWorkspace).credits).toBe(before - 12)
        // A raised maximum (the policy changed) admits again; the count is kept, not restarted.
        expect((yield* admitPaid({ keyId: "sub_alice", holds: holds(5), amount: 0, request_id: "req_s_more" }))._tag).toBe("Admitted")
        expect((yield* admitPaid({ keyId: "sub_alice", holds: holds(5), amount: 0, request_id: "req_s_over" }))._tag).toBe("BudgetExhausted")
        // Sightings create a row without touching the count, and update last_seen_at only.
        yield* subjects.touchSubjects([
          { id: "sub_alice", issuer: "https://idp.example", subject: "alice", seen_at: "2030-01-01T00:00:00.000Z" },
          { id: "sub_bob", issuer: "https://idp.example", subject: "bob", seen_at: "2029-01-01T00:00:00.000Z" }
        ])
        expect(yield* subjects.getSubject("sub_alice")).toMatchObject({ budget_used: 5, last_seen_at: "2030-01-01T00:00:00.000Z" })
        expect(yield* subjects.getSubject("sub_bob")).toMatchObject({ budget_used: 0, first_seen_at: "2029-01-01T00:00:00.000Z" })
        // The list pages by first sighting, newest first: alice (first seen mid-2029) before bob.
        expect((yield* subjects.pageSubjects({ limit: 10 })).items.map((s) => s.id).slice(0, 2)).toEqual(["sub_alice", "sub_bob"])
        expect(yield* subjects.resetBudget("sub_alice")).toMatchObject({ budget_used: 0 })
      }))
    })

    it("holds a charge as a reservation owned by its replica until it is settled or refunded, once, giving its budgets back", async () => {
      await run(Effect.gen(function*() {
        const credits = yield* CreditsRepo
        yield* credits.addCredits("topup", { amount: 50, actor: "test" })
        const holds = [{ holder: "key_r", period: "", max_credits: 40 }]
        const admit = (request_id: string) => admitPaid({ keyId: "key_r", holds, amount: 4, request_id, owner: "rep_a" })
        const before = (yield* credits.getWorkspace).credits
        yield* admit("req_r1")
        yield* admit("req_r2")
        yield* admit("req_r3")
        expect((yield* credits.getWorkspace).credits).toBe(before - 12)
        expect(yield* usageOf("key_r")).toEqual({ requests: 3, credits: 12 })
        // Refunded once, however many ask at the same time; the budget gets its credits back once.
        const refunds = yield* Effect.all(
          Array.from({ length: 5 }, () => credits.refundReservation("req_r2", "key_r", "provider failed")),
          { concurrency: "unbounded" }
        )
        expect(refunds.filter((r) => r !== undefined)).toHaveLength(1)
        expect(refunds.find((r) => r !== undefined)).toMatchObject({ request_id: "req_r2", owner: "rep_a", amount: 4, key_id: "key_r", endpoint: "/v1/chat/completions" })
        expect((yield* credits.getWorkspace).credits).toBe(before - 8)
        expect(yield* usageOf("key_r")).toEqual({ requests: 3, credits: 8 })
        expect((yield* credits.ledger({ limit: 10, request_id: "req_r2" })).map((e) => [e.kind, e.amount])).toEqual([["refund", 4], ["charge", -4]])

        // Orphans: open reservations of replicas whose lease lapsed (or never was), never one's own.
        // Leases are written and judged by the store's clock.
        yield* credits.renewReplica("rep_a", 10_000)
        expect(yield* credits.orphanedReservations("rep_b", 10)).toEqual([])
        expect((yield* credits.orphanedReservations("rep_b", 10, 20_000)).map((r) => r.request_id).sort()).toEqual(["req_r1", "req_r3"])
        yield* credits.renewReplica("rep_a", -1)
        expect((yield* credits.orphanedReservations("rep_b", 10)).map((r) => r.request_id).sort()).toEqual(["req_r1", "req_r3"])
        expect(yield* credits.orphanedReservations("rep_a", 10)).toEqual([])
        yield* credits.removeReplica("rep_a")
        yield* credits.refundReservation("req_r3", "replica:rep_b", "replica_lost")
        yield* credits.refundReservation("req_r1", "replica:rep_b", "replica_lost")
        expect(yield* credits.orphanedReservations("rep_b", 10)).toEqual([])
        expect(yield* usageOf("key_r")).toEqual({ requests: 3, credits: 0 })

        const ledger = yield* credits.ledger({ limit: 1000 })
        expect(ledger.reduce((sum, e) => sum + e.amount, 0)).toBe((yield* credits.getWorkspace).credits)
      }))
    })

    it("commits a replica's batch exactly once: a block's lease, charges, ends, a retry after an abandoned commit, a return, budgets in order", async () => {
      await run(Effect.gen(function*() {
        const credits = yield* CreditsRepo
        const keys = yield* KeysRepo
        yield* credits.addCredits("topup", { amount: 100, actor: "test" })
        const start = (yield* credits.getWorkspace).credits
        yield* credits.renewReplica("rep_batch", 60_000)
        const ids = ["blk_one", "blk_two"]
        const newId = () => ids.shift()!
        const empty: CreditBatch = {
          owner: "rep_batch", checks: [], releases: [], charges: [], settles: [], partialSettles: [], refunds: [], returns: [], strays: undefined,
          lease: undefined, reclaim: false, now: Date.now()
        }
        const charge = (request_id: string, extra: Partial<BatchCharge> = {}): BatchCharge => ({
          block: "blk_one", request_id, amount: 3, key_id: "key_c", model: "m", open: undefined, refundNote: undefined, retried: false, ...extra
        })

        // A block of the pool: the balance does not move, the free part does.
        const leased = yield* credits.commitBatch({ ...empty, lease: { min: 1, size: 20 } }, newId)
        expect(leased.lease).toEqual({ _tag: "Leased", id: "blk_one", amount: 20 })
        expect((yield* credits.getWorkspace).credits).toBe(start)

        // Settled before it was written (a charge), in flight (a charge and a reservation), refunded (both rows).
        const first = yield* credits.commitBatch({
          ...empty,
          charges: [charge("req_c1"), charge("req_c2", { open: { method: "POST", endpoint: "/v1/chat/completions" } }), charge("req_c3", { refundNote: "provider failed" })]
        }, newId)
        expect([...first.written]).toEqual(["req_c1", "req_c2", "req_c3"])
        expect((yield* credits.getWorkspace).credits).toBe(start - 6)
        expect((yield* credits.orphanedReservations("rep_other", 10, 3_600_000)).map((r) => r.request_id)).toEqual(["req_c2"])

        // Written twice is refused whole; a retry marked as such finds what was written and writes the rest.
        const twice = yield* Effect.flip(credits.commitBatch({ ...empty, charges: [charge("req_c4"), charge("req_c1")] }, newId))
        expect(twice._tag).toBe("StoreError")
        expect((yield* credits.getWorkspace).credits).toBe(start - 6)
        const retried = yield* credits.commitBatch({ ...empty, charges: [charge("req_c1", { retried: true }), charge("req_c4", { retried: true })] }, newId)
        expect([...retried.found]).toEqual(["req_c1"])
        expect([...retried.written]).toEqual(["req_c4"])
        expect((yield* credits.getWorkspace).credits).toBe(start - 9)

        // The in-flight one ends with a refund, once.
        const ended = yield* credits.commitBatch({ ...empty, refunds: [{ request_id: "req_c2", actor: "key_c", note: "failed" }] }, newId)
        expect(ended.refunded.map((r) => [r.request_id, r.amount])).toEqual([["req_c2", 3]])
        const again = yield* credits.commitBatch({ ...empty, refunds: [{ request_id: "req_c2", actor: "key_c", note: "failed" }] }, newId)
        expect(again.refunded).toEqual([])
        expect((yield* credits.getWorkspace).credits).toBe(start - 6)

        // Returned: its rest is free again, and a charge still naming it is not written.
        yield* credits.commitBatch({ ...empty, returns: ["blk_one"] }, newId)
        const late = yield* credits.commitBatch({ ...empty, charges: [charge("req_c5")] }, newId)
        expect([...late.dropped]).toEqual(["req_c5"])
        const short = yield* credits.commitBatch({ ...empty, lease: { min: 1_000_000, size: 1_000_000 }, reclaim: true }, newId)
        expect(short.lease).toEqual({ _tag: "Short", free: start - 6, held: 0, heldLive: 0 })

        // Budgets: of five requests checked at once against a budget of three, the first three pass.
        const check = (id: string, holder: string, max_requests: number, amount = 0) => ({ id, holds: [{ holder, period: "", max_requests }], amount })
        const counted = yield* credits.commitBatch({ ...empty, checks: ["a", "b", "c", "d", "e"].map((id) => check(id, "key_batch", 3)) }, newId)
        expect([...counted.checks.values()].map((v) => v._tag)).toEqual(["Counted", "Counted", "Counted", "Refused", "Refused"])

        // Charges conditional on their checks in the same batch: only the admitted request is charged.
        expect((yield* credits.commitBatch({ ...empty, lease: { min: 1, size: 20 } }, newId)).lease).toEqual({ _tag: "Leased", id: "blk_two", amount: 20 })
        const before = (yield* credits.getWorkspace).credits
        const conditional = yield* credits.commitBatch({
          ...empty,
          checks: [check("c6", "key_cond", 1, 3), check("c7", "key_cond", 1, 3)],
          charges: [
            charge("req_c6", { block: "blk_two", key_id: "key_cond", check: "c6", budgets: [["key_cond", ""]] }),
            charge("req_c7", { block: "blk_two", key_id: "key_cond", check: "c7", budgets: [["key_cond", ""]] })
          ]
        }, newId)
        expect(conditional.checks.get("c6")?._tag).toBe("Counted")
        expect([...conditional.written]).toEqual(["req_c6"])
        expect([...conditional.unbudgeted]).toEqual(["req_c7"])
        expect((yield* credits.getWorkspace).credits).toBe(before - 3)
        // A settlement before the charge was written keeps only its cost: the rest is refunded in the same commit.
        const partial = yield* credits.commitBatch({ ...empty, charges: [charge("req_c8", { block: "blk_two", keep: 1 })] }, newId)
        expect([...partial.written]).toEqual(["req_c8"])
        expect((yield* credits.getWorkspace).credits).toBe(before - 4)
        expect((yield* credits.ledger({ limit: 10, request_id: "req_c8" })).map((e) => [e.kind, e.amount])).toEqual([["refund", 2], ["charge", -3]])
        // The block's rest back to the pool, as the tests after this one expect it.
        yield* credits.commitBatch({ ...empty, returns: ["blk_two"] }, newId)

        const ledger = [...yield* credits.ledger({ limit: 1000 })].reverse()
        let running = 0
        for (const row of ledger) {
          running += row.amount
          expect(row.balance_after).toBe(running)
        }
        expect(running).toBe((yield* credits.getWorkspace).credits)
        expect(ledger.filter((r) => r.request_id === "req_c1").map((r) => r.kind)).toEqual(["charge"])
        expect(ledger.filter((r) => r.request_id === "req_c3").map((r) => r.kind)).toEqual(["charge", "refund"])
      }))
    })
  })

const toolsContract = (name: string, makeLayer: StoreFixture) =>
  describe(`Store connections, MCP sessions, SQL history and usage: ${name}`, () => {
    const run = useStore(makeLayer, 0)

    it("keeps connections and grants, and a grant change bumps the key change version", async () => {
      await run(Effect.gen(function*() {
        const connections = yield* ConnectionsRepo
        const keys = yield* KeysRepo
        yield* keys.insertKey(key("key_g", "hash_g"))
        const c = { id: 7, name: "warehouse", dialect: "postgres" as const, url: "postgres://x/y", read_url: null, default_schema: "public", environment: "development" as const, ssh: null }
        expect(yield* connections.insertConnection(c)).toBe(true)
        expect(yield* connections.insertConnection(c)).toBe(false)
        expect(yield* connections.listConnections).toEqual([{ ...c, source: "admin" }])
        const v0 = yield* keys.keyChangeVersion
        yield* connections.putGrant("key_g", 7, "read")
        yield* connections.putGrant("key_g", 7, "edit")
        expect(yield* keys.keyChangeVersion).toBe(v0 + 2)
        expect(yield* connections.grantsOf("key_g")).toMatchObject([{ key_id: "key_g", connection_id: 7, role: "edit" }])
        expect(yield* connections.deleteGrant("key_g", 7)).toBe(true)
        expect(yield* connections.deleteGrant("key_g", 7)).toBe(false)
        expect(yield* keys.keyChangeVersion).toBe(v0 + 3)
        expect(yield* connections.grantsOf("key_g")).toEqual([])
      }))
    })

    it("slides an MCP session's expiry only for its own key while it lives, by the store's clock", async () => {
      await run(Effect.gen(function*() {
        const sessions = yield* McpSessionsRepo
        const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/
        const base = { key_id: "key_s", protocol_version: "2025-06-18" }
        const before = Date.now()
        const session = yield* sessions.insertSession({ ...base, id: "mcp_1" }, 600_000)
        // The store's clock, written as Date.toISOString writes it (the columns compare as text).
        expect(session.created_at).toMatch(ISO)
        expect(session.expires_at).toMatch(ISO)
        expect(Date.parse(session.expires_at) - Date.parse(session.created_at)).toBe(600_000)
        expect(Math.abs(Date.parse(session.created_at) - before)).toBeLessThan(60_000)
        expect(yield* sessions.touchSession("mcp_1", "key_other", 1_200_000)).toBeUndefined()
        const touched = yield* sessions.touchSession("mcp_1", "key_s", 1_200_000)
        expect(touched).toMatchObject({ ...base, id: "mcp_1", created_at: session.created_at })
        expect(Date.parse(touched!.expires_at)).toBeGreaterThan(Date.parse(session.expires_at))
        // One that expired a second ago (by the store's clock) is gone for its key too.
        yield* sessions.insertSession({ ...base, id: "mcp_old" }, -1000)
        expect(yield* sessions.touchSession("mcp_old", "key_s", 600_000)).toBeUndefined()
        yield* sessions.deleteExpiredSessions
        yield* sessions.insertSession({ ...base, id: "mcp_2" }, 600_000)
        yield* sessions.deleteSession("mcp_2", "key_other")
        expect(yield* sessions.touchSession("mcp_2", "key_s", 600_000)).toBeDefined()
        yield* sessions.deleteSession("mcp_2", "key_s")
        expect(yield* sessions.touchSession("mcp_2", "key_s", 600_000)).toBeUndefined()
      }))
    })

    it("lists a key's SQL history on a connection, newest first", async () => {
      await run(Effect.gen(function*() {
        const history = yield* SqlHistoryRepo
        for (let i = 0; i < 3; i++) {
          yield* history.appendSqlHistory({ ts: `2026-01-01T00:00:0${i}.000Z`, statement: `SELECT ${i}`, duration_ms: 1.25, kind: "rows", row_count: i, key_id: "key_h", connection_id: 1 })
        }
        yield* history.appendSqlHistory({ ts: "2026-01-01T00:00:09.000Z", statement: "DELETE FROM t", duration_ms: 2, kind: "affected", row_count: 4, key_id: "key_h", connection_id: 2 })
        expect(yield* history.sqlHistory("key_h", 1, 2)).toEqual([
          { ts: "2026-01-01T00:00:02.000Z", statement: "SELECT 2", duration_ms: 1.25, kind: "rows", row_count: 2 },
          { ts: "2026-01-01T00:00:01.000Z", statement: "SELECT 1", duration_ms: 1.25, kind: "rows", row_count: 1 }
        ])
        expect(yield* history.sqlHistory("key_other", 1, 10)).toEqual([])
      }))
    })

    it("totals usage from the audit trail as numbers, grouped as asked", async () => {
      await run(Effect.gen(function*() {
        const audit = yield* AuditRepo
        yield* audit.appendAudit(Array.from({ length: 6 }, (_, i) => ({
          ...auditRecord(i, i < 4 ? "key_u" : "key_v", i === 0 ? 401 : 200),
          // Two of them answered by another deployment (issue 20: usage by provider).
          ...(i >= 4 ? { provider: "echo-b" } : {})
        })))
        const totals = (requests: number, errors: number) => ({
          requests,
          errors,
          prompt_tokens: 3 * requests,
          completion_tokens: 4 * requests,
          cache_read_tokens: 0,
          cache_write_tokens: 0,
          credits_micros: AUDIT_CREDIT_MICROS * requests
        })
        expect(yield* audit.usage({ group_by: ["key"] })).toEqual([
          { key_id: "key_u", ...totals(4, 1) },
          { key_id: "key_v", ...totals(2, 0) }
        ])
        expect(yield* audit.usage({ group_by: [], key_id: "key_v" })).toEqual([totals(2, 0)])
        expect(yield* audit.usage({ group_by: ["day", "model"] })).toEqual([{ day: "2026-01-01", model: "echo-1", ...totals(6, 1) }])
        expect(yield* audit.usage({ group_by: ["provider", "model"] })).toEqual([
          { model: "echo-1", provider: "echo", ...totals(4, 1) },
          { model: "echo-1", provider: "echo-b", ...totals(2, 0) }
        ])
      }))
    })

    it("keeps cache tokens, end user and team per record, and reports by team, end user and day (issue 33)", async () => {
      await run(Effect.gen(function*() {
        const audit = yield* AuditRepo
        const spend = (i: number, team: string | null, user: string | null, day: number): AuditRecord => ({
          ...auditRecord(100 + i, "key_s", 200),
          ts: new Date(Date.UTC(2026, 2, day, 12, 0, i)).toISOString(),
          prompt_tokens: 1000,
          completion_tokens: 50,
          cache_read_tokens: 600,
          cache_write_tokens: 100,
          end_user: user,
          team_id: team,
          credits: 2
        })
        yield* audit.appendAudit([
          spend(0, "team_a", "alice", 1),
          spend(1, "team_a", "bob", 1),
          spend(2, "team_a", "alice", 2),
          spend(3, "team_b", "alice", 2),
          spend(4, null, null, 2)
        ])
        const page = yield* audit.queryAudit({ limit: 10, key_id: "key_s" })
        expect(page.items[0]).toMatchObject({ request_id: "req_104", cache_read_tokens: 600, cache_write_tokens: 100, end_user: null, team_id: null })
        expect(page.items[4]).toMatchObject({ request_id: "req_100", cache_read_tokens: 600, cache_write_tokens: 100, end_user: "alice", team_id: "team_a" })
        const sum = (n: number) => ({
          requests: n,
          errors: 0,
          prompt_tokens: 1000 * n,
          completion_tokens: 50 * n,
          cache_read_tokens: 600 * n,
          cache_write_tokens: 100 * n,
          credits_micros: 2 * AUDIT_CREDIT_MICROS * n
        })
        const byTeamUser = yield* audit.usage({ group_by: ["team", "end_user"], key_id: "key_s" })
        // NULLs sort first on SQLite, last on Postgres: compared as a set.
        expect(new Set(byTeamUser.map((r) => JSON.stringify(r)))).toEqual(new Set([
          { team_id: "team_a", end_user: "alice", ...sum(2) },
          { team_id: "team_a", end_user: "bob", ...sum(1) },
          { team_id: "team_b", end_user: "alice", ...sum(1) },
          { team_id: null, end_user: null, ...sum(1) }
        ].map((r) => JSON.stringify(r))))
        // With a statement bound of its own (GET /usage's store_timeouts.report_ms): a transaction of its own on Postgres.
        expect(yield* audit.usage({ group_by: ["day", "team"], team_id: "team_a", statement_ms: 30_000 })).toEqual([
          { day: "2026-03-01", team_id: "team_a", ...sum(2) },
          { day: "2026-03-02", team_id: "team_a", ...sum(1) }
        ])
        expect(yield* audit.usage({ group_by: ["team"], end_user: "alice", since: "2026-03-02T00:00:00.000Z", until: "2026-03-03T00:00:00.000Z" })).toEqual([
          { team_id: "team_a", ...sum(1) },
          { team_id: "team_b", ...sum(1) }
        ])
        // At most limit + 1 rows: the caller can tell there were more.
        expect(yield* audit.usage({ group_by: ["end_user", "team"], key_id: "key_s", limit: 2 })).toHaveLength(3)
      }))
    })
  })

for (const [name, fixture] of fixtures) {
  contract(name, fixture("mg_store"))
  creditContract(name, fixture("mg_credits"))
  toolsContract(name, fixture("mg_tools"))
}

describe("Store rows", () => {
  it("fail as one StoreError naming the method, not an outage, when a row does not decode", async () => {
    const dir = mkdtempSync(join(tmpdir(), "mg-store-rows-"))
    const file = join(dir, "store.db")
    const runtime = ManagedRuntime.make(StoreLayer.sqlite(file))
    try {
      await runtime.runPromise(Effect.flatMap(CreditsRepo, (credits) => credits.ensureWorkspace(0)))
      await runtime.runPromise(Effect.flatMap(KeysRepo, (keys) => keys.insertKey(key("key_bad", "hash_bad"))))
      // Another writer (a hand edit, a broken migration) leaves a row the schema does not allow.
      const raw = new DatabaseSync(file)
      raw.exec("UPDATE api_keys SET allowed_models = '{not json' WHERE id = 'key_bad'")
      raw.close()
      const error = await runtime.runPromise(Effect.flip(Effect.flatMap(KeysRepo, (keys) => keys.findKeyById("key_bad"))))
      expect(error).toBeInstanceOf(StoreError)
      expect(error).toMatchObject({ _tag: "StoreError", operation: "KeysRepo.findKeyById", outage: false })
      expect(error.message).toContain("did not decode")
    } finally {
      await runtime.dispose()
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
