/**
 * The block writer against the real store, made to fail on demand (issue 14): what a request sees when a
 * commit fails, and that the writer finds its way back by itself once the store answers, even
 * when the failed commit left nothing pending (a budget count, a lease): it keeps probing with
 * backoff instead of refusing paid requests forever.
 */
import { createHash } from "node:crypto"
import { mkdtempSync, readdirSync, readFileSync, renameSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Effect, Exit, ManagedRuntime, Scope } from "effect"
import { describe, expect, it } from "vitest"
import { makeBlockWriter } from "../../../src/services/credits/BlockWriter.ts"
import type { CreditBatch } from "../../../src/services/store/credit-batches.ts"
import { CreditsRepo } from "../../../src/services/store/CreditsRepo.ts"
import { KeysRepo } from "../../../src/services/store/KeysRepo.ts"
import { DEFAULT_WORKSPACE } from "../../../src/services/store/rows.ts"
import { StoreError } from "../../../src/services/store/StoreError.ts"
import { StoreLayer } from "../../../src/services/store/StoreLayer.ts"

const outage = new StoreError({ operation: "CreditsRepo.commitBatch", message: "connection refused", outage: true, cause: null })

/**
 * The real store (SQLite in memory, the workspace and keys `key_a`, `key_b` in it) whose commits
 * fail while `down` is set, recording each batch it was given. `budget`: key_a's request budget (1000).
 * Every rule a commit applies (budget counts, a charge left unwritten when its count was refused,
 * leases) is the store's own, so these tests follow the store when it changes (issue 39 item 2:
 * a hand-made copy of those rules kept passing whatever the store did).
 */
const realStore = async (options: { readonly budget?: number } = {}) => {
  const runtime = ManagedRuntime.make(StoreLayer.memory)
  const { credits, keys } = await runtime.runPromise(Effect.gen(function*() {
    return { credits: yield* CreditsRepo, keys: yield* KeysRepo }
  }))
  await runtime.runPromise(credits.ensureWorkspace(1000))
  const now = new Date().toISOString()
  for (const id of ["key_a", "key_b"]) {
    await runtime.runPromise(keys.insertKey({
      id,
      workspace_id: DEFAULT_WORKSPACE,
      name: id,
      key_hash: createHash("sha256").update(id).digest("hex"),
      key_hint: "sk-mg-0000...0000",
      is_active: true,
      allowed_models: null,
      tools_enabled: false,
      budget: id === "key_a" ? { max_requests: options.budget ?? 1000 } : null,
      budget_used: 0,
      limits: null,
      expires_at: null,
      created_at: now,
      updated_at: now,
      last_used_at: null,
      previous_key_hash: null,
      previous_key_expires_at: null,
      mcp_servers: []
    }))
  }
  const state = { down: false, commits: [] as Array<CreditBatch> }
  const store: CreditsRepo["Service"] = {
    ...credits,
    commitBatch: (batch, newBlockId) =>
      Effect.suspend(() => {
        if (state.down) return Effect.fail(outage)
        state.commits.push(batch)
        return credits.commitBatch(batch, newBlockId)
      })
  }
  return { state, store, dispose: () => runtime.dispose() }
}

/** key_a's budget as a hold (its maximum from `realStore`'s `budget`), never resetting. */
const keyA = (max_requests = 1000) => [{ holder: "key_a", period: "", max_requests }]

const waitUntil = async (what: string, check: () => boolean) => {
  for (let i = 0; i < 200; i++) {
    if (check()) return
    await new Promise((r) => setTimeout(r, 25))
  }
  throw new Error(`timed out waiting for ${what}`)
}

/**
 * `store` as seen by a replica that stops answering until `open()`: its commits and its polls of
 * the reclaim counter wait (a replica that renews its lease but whose worker is stuck).
 */
const gated = (store: CreditsRepo["Service"]) => {
  let opened = false
  const waiting: Array<() => void> = []
  const gate = <A, E>(effect: Effect.Effect<A, E>): Effect.Effect<A, E> =>
    Effect.suspend(() =>
      opened ? effect : Effect.andThen(Effect.callback<void>((resume) => {
        waiting.push(() => resume(Effect.void))
      }), effect)
    )
  const view: CreditsRepo["Service"] = {
    ...store,
    commitBatch: (batch, newBlockId) => gate(store.commitBatch(batch, newBlockId)),
    reclaimCounter: gate(store.reclaimCounter)
  }
  return {
    store: view,
    close: () => {
      opened = false
    },
    open: () => {
      opened = true
      for (const resume of waiting.splice(0)) resume()
    }
  }
}

describe("BlockWriter", () => {
  it("refuses while commits fail, and admits again once the store answers though nothing was left pending", async () => {
    const { state, store, dispose } = await realStore()
    const scope = Effect.runSync(Scope.make())
    const writer = await Effect.runPromise(
      Scope.provide(makeBlockWriter({ store, owner: "rep_t", blockSize: 10, commitTimeout: "1 second", spoolDir: undefined }), scope)
    )
    try {
      state.down = true
      expect((await Effect.runPromise(writer.countBudget(keyA(), 0)))._tag).toBe("StoreFailed")
      expect(writer.down()).toBe(true)
      // While it is down, paid requests are refused at once (nothing is spent blind).
      expect((await Effect.runPromise(writer.spend({ amount: 1, key_id: "key_a", request_id: "req_1", model: "m" })))._tag).toBe("StoreFailed")
      state.down = false
      await waitUntil("the writer to see the store again", () => !writer.down())
      expect(await Effect.runPromise(writer.countBudget(keyA(), 0))).toEqual({ _tag: "Counted" })
      expect(await Effect.runPromise(writer.spend({ amount: 1, key_id: "key_a", request_id: "req_2", model: "m" }))).toEqual({ _tag: "Admitted" })
      // The charge was in a commit before the admission returned.
      expect(state.commits.flatMap((c) => c.charges.map((x) => x.request_id))).toContain("req_2")
      await Effect.runPromise(writer.end("req_2", "settle", ""))
      await waitUntil("the settlement", () => writer.pending() === 0)
    } finally {
      await Effect.runPromise(Scope.close(scope, Exit.void))
      await dispose()
    }
  })

  it("a charge whose commit failed is refused (503) and its refund is queued with it, never the charge alone", async () => {
    const { state, store, dispose } = await realStore()
    const scope = Effect.runSync(Scope.make())
    const writer = await Effect.runPromise(
      Scope.provide(makeBlockWriter({ store, owner: "rep_t", blockSize: 10, commitTimeout: "1 second", spoolDir: undefined }), scope)
    )
    try {
      // A block first, then the store goes away under the next charge.
      expect(await Effect.runPromise(writer.spend({ amount: 1, key_id: "key_a", request_id: "req_1", model: "m" }))).toEqual({ _tag: "Admitted" })
      state.down = true
      expect((await Effect.runPromise(writer.spend({ amount: 1, key_id: "key_a", request_id: "req_2", model: "m" })))._tag).toBe("StoreFailed")
      expect(writer.pending()).toBeGreaterThanOrEqual(1)
      state.down = false
      await waitUntil("the queued movement to land", () => writer.pending() === 0)
      const req2 = state.commits.flatMap((c) => c.charges).filter((c) => c.request_id === "req_2")
      // Written once, as a charge with its refund, marked as a retry (an abandoned commit may have written it).
      expect(req2).toHaveLength(1)
      expect(req2[0]).toMatchObject({ retried: true, open: undefined })
      expect(req2[0]!.refundNote).toMatch(/unknown/)
    } finally {
      await Effect.runPromise(Scope.close(scope, Exit.void))
      await dispose()
    }
  })

  it("a budgeted paid admission waits for one commit: its count and its charge together, the charge written only if the count admits it", async () => {
    const { state, store, dispose } = await realStore({ budget: 1 })
    const scope = Effect.runSync(Scope.make())
    const writer = await Effect.runPromise(
      Scope.provide(makeBlockWriter({ store, owner: "rep_t", blockSize: 10, commitTimeout: "1 second", spoolDir: undefined }), scope)
    )
    try {
      // A block first (its lease is a commit of its own).
      expect(await Effect.runPromise(writer.spend({ amount: 1, key_id: "key_a", request_id: "req_1", model: "m" }))).toEqual({ _tag: "Admitted" })
      const before = state.commits.length
      expect(await Effect.runPromise(writer.countAndSpend({ amount: 1, key_id: "key_a", request_id: "req_2", model: "m" }, keyA(1)))).toEqual({ _tag: "Admitted" })
      const admitted = state.commits.slice(before)
      expect(admitted).toHaveLength(1)
      expect(admitted[0]!.checks).toMatchObject([{ holds: keyA(1), amount: 1 }])
      expect(admitted[0]!.charges).toMatchObject([{ request_id: "req_2", check: admitted[0]!.checks[0]!.id, budgets: [["key_a", ""]] }])

      // The budget is used up: 429, and nothing is charged or left pending.
      expect(await Effect.runPromise(writer.countAndSpend({ amount: 1, key_id: "key_a", request_id: "req_3", model: "m" }, keyA(1)))).toMatchObject({
        _tag: "Exhausted",
        refusal: { holder: "key_a", limit: "max_requests", max: 1, used: 1 }
      })
      expect(writer.pending()).toBe(0)
      // The refused request's price went back to the block: the 8 it still holds pay without a lease.
      const leases = state.commits.filter((c) => c.lease !== undefined).length
      expect(await Effect.runPromise(writer.spend({ amount: 8, key_id: "key_b", request_id: "req_4", model: "m" }))).toEqual({ _tag: "Admitted" })
      expect(state.commits.filter((c) => c.lease !== undefined)).toHaveLength(leases)
    } finally {
      await Effect.runPromise(Scope.close(scope, Exit.void))
      await dispose()
    }
  })

  it("near empty, a request waits for the live replicas to return their blocks however long they take, not a fixed time (issue 39)", async () => {
    const { store, dispose } = await realStore()
    await Effect.runPromise(Effect.zip(store.renewReplica("rep_a", 600_000), store.renewReplica("rep_b", 600_000)))
    const b = gated(store)
    b.open()
    const scope = Effect.runSync(Scope.make())
    // A safety net far beyond the test's own timeout: only the state can end the wait.
    const make = (owner: string, over: CreditsRepo["Service"]) =>
      Effect.runPromise(Scope.provide(
        makeBlockWriter({ store: over, owner, blockSize: 600, commitTimeout: "1 second", spoolDir: undefined, reclaimSafetyMs: 3_600_000 }),
        scope
      ))
    try {
      const writerB = await make("rep_b", b.store)
      // B leases its share of half the free pool (1000 / (2 * 2 live replicas) = 250) and spends 1 of it.
      expect(await Effect.runPromise(writerB.spend({ amount: 1, key_id: "key_b", request_id: "req_b", model: "m" }))).toEqual({ _tag: "Admitted" })
      await Effect.runPromise(writerB.end("req_b", "settle", ""))
      await waitUntil("B's settlement", () => writerB.pending() === 0)
      // From now on B answers nothing: not the reclaim, not its idle return.
      b.close()
      const writerA = await make("rep_a", store)
      const counter0 = await Effect.runPromise(store.reclaimCounter)
      let outcome: unknown
      void Effect.runPromise(writerA.spend({ amount: 800, key_id: "key_a", request_id: "req_a", model: "m" })).then((o) => {
        outcome = o
      })
      // A asked for the blocks back 210 times (one ask per retry, every 10 ms: more than the old
      // fixed 2 s) and is still waiting: 750 are free, B holds the other 249 and has not answered.
      for (let i = 0; (await Effect.runPromise(store.reclaimCounter)) < counter0 + 210; i++) {
        if (i > 2000) throw new Error("A stopped asking for the blocks back")
        await new Promise((r) => setTimeout(r, 20))
      }
      expect(outcome).toBeUndefined()
      // B answers: its block goes back, and A is served from it.
      b.open()
      await waitUntil("A's admission", () => outcome !== undefined)
      expect(outcome).toEqual({ _tag: "Admitted" })
    } finally {
      b.open()
      await Effect.runPromise(Scope.close(scope, Exit.void))
      await dispose()
    }
  }, 30_000)

  it("near empty, a block only a dead replica holds does not hold the 402 back: it is refused at once with what is free", async () => {
    const { store, dispose } = await realStore()
    await Effect.runPromise(store.renewReplica("rep_a", 600_000))
    const dead = gated(store)
    dead.open()
    const scope = Effect.runSync(Scope.make())
    const make = (owner: string, over: CreditsRepo["Service"]) =>
      Effect.runPromise(Scope.provide(
        makeBlockWriter({ store: over, owner, blockSize: 600, commitTimeout: "1 second", spoolDir: undefined, reclaimSafetyMs: 3_600_000 }),
        scope
      ))
    try {
      // A replica without a lease row (it died, its lease lapsed) holding a block: half the free pool, 500 (rep_a the one live replica).
      const writerDead = await make("rep_dead", dead.store)
      expect(await Effect.runPromise(writerDead.spend({ amount: 1, key_id: "key_b", request_id: "req_d", model: "m" }))).toEqual({ _tag: "Admitted" })
      await Effect.runPromise(writerDead.end("req_d", "settle", ""))
      await waitUntil("the dead replica's settlement", () => writerDead.pending() === 0)
      dead.close()
      const writerA = await make("rep_a", store)
      expect(await Effect.runPromise(writerA.spend({ amount: 900, key_id: "key_a", request_id: "req_a", model: "m" }))).toEqual({
        _tag: "Insufficient",
        available: 500
      })
    } finally {
      dead.open()
      await Effect.runPromise(Scope.close(scope, Exit.void))
      await dispose()
    }
  })

  it("a settlement does not take a commit of its own right after its request: it goes with the next round", async () => {
    const { state, store, dispose } = await realStore()
    const scope = Effect.runSync(Scope.make())
    const writer = await Effect.runPromise(
      Scope.provide(makeBlockWriter({ store, owner: "rep_t", blockSize: 10, commitTimeout: "1 second", spoolDir: undefined, settleDelayMs: 60_000 }), scope)
    )
    try {
      expect(await Effect.runPromise(writer.spend({ amount: 1, key_id: "key_a", request_id: "req_1", model: "m" }))).toEqual({ _tag: "Admitted" })
      const before = state.commits.length
      await Effect.runPromise(writer.end("req_1", "settle", ""))
      expect(writer.pending()).toBe(1)
      // The next admission's commit carries it: the one commit since the settlement (issue 39: no
      // sleep to show that none ran in between, the list of commits says it).
      expect(await Effect.runPromise(writer.spend({ amount: 1, key_id: "key_a", request_id: "req_2", model: "m" }))).toEqual({ _tag: "Admitted" })
      expect(state.commits.slice(before)).toEqual([expect.objectContaining({ settles: ["req_1"], charges: [expect.objectContaining({ request_id: "req_2" })] })])
      expect(writer.pending()).toBe(0)
    } finally {
      await Effect.runPromise(Scope.close(scope, Exit.void))
      await dispose()
    }
  })

  it("a settlement no request follows gets a commit of its own once its delay is over (issue 38: a timer, the writer is not woken before)", async () => {
    const { state, store, dispose } = await realStore()
    const scope = Effect.runSync(Scope.make())
    const writer = await Effect.runPromise(
      Scope.provide(makeBlockWriter({ store, owner: "rep_t", blockSize: 10, commitTimeout: "1 second", spoolDir: undefined, settleDelayMs: 20 }), scope)
    )
    try {
      expect(await Effect.runPromise(writer.spend({ amount: 1, key_id: "key_a", request_id: "req_1", model: "m" }))).toEqual({ _tag: "Admitted" })
      const before = state.commits.length
      await Effect.runPromise(writer.end("req_1", "settle", ""))
      await waitUntil("the settlement to land by itself", () => writer.pending() === 0)
      expect(state.commits.slice(before)).toEqual([expect.objectContaining({ settles: ["req_1"], charges: [] })])
      const reservations = await Effect.runPromise(store.orphanedReservations("rep_other", 10, 3_600_000))
      expect(reservations).toEqual([])
    } finally {
      await Effect.runPromise(Scope.close(scope, Exit.void))
      await dispose()
    }
  })

  it("a settlement to a smaller cost returns the rest to the pool and the budget, through an outage and a spool, once", async () => {
    const { state, store, dispose } = await realStore()
    const dir = mkdtempSync(join(tmpdir(), "mg-settle-"))
    const holds = [{ holder: "key_a", period: "", max_credits: 100 }]
    const ledgerOf = (id: string) => Effect.runPromise(Effect.map(store.ledger({ limit: 10, request_id: id }), (rows) => rows.map((r) => [r.kind, r.amount])))
    const usage = () => Effect.runPromise(Effect.map(store.budgetUsage([["key_a", ""]]), (m) => m.get("key_a ")))
    const open = async () => {
      const scope = Effect.runSync(Scope.make())
      const writer = await Effect.runPromise(
        Scope.provide(makeBlockWriter({ store, owner: "rep_s", blockSize: 50, commitTimeout: "1 second", spoolDir: dir }), scope)
      )
      return { writer, close: () => Effect.runPromise(Scope.close(scope, Exit.void)) }
    }
    try {
      let { writer, close } = await open()
      expect(await Effect.runPromise(writer.countAndSpend({ amount: 10, key_id: "key_a", request_id: "req_s1", model: "m" }, holds))).toEqual({ _tag: "Admitted" })
      expect(await Effect.runPromise(writer.countAndSpend({ amount: 10, key_id: "key_a", request_id: "req_s2", model: "m" }, holds))).toEqual({ _tag: "Admitted" })
      expect(await usage()).toEqual({ requests: 2, credits: 20 })
      // Settled while the store is away: retried until it lands.
      state.down = true
      await Effect.runPromise(writer.end("req_s1", "settle", "", 4))
      await waitUntil("the settlement to be tried", () => writer.down())
      state.down = false
      await waitUntil("the settlement to land", () => writer.pending() === 0)
      expect(await ledgerOf("req_s1")).toEqual([["refund", 6], ["charge", -10]])
      expect(await usage()).toEqual({ requests: 2, credits: 14 })
      // Settled as the process stops with the store away: spooled, and written by the next start.
      state.down = true
      await Effect.runPromise(writer.end("req_s2", "settle", "", 7))
      await close()
      expect(await ledgerOf("req_s2")).toEqual([["charge", -10]])
      state.down = false
      // This process's own spool is its own while it lives: hand it over as a previous start's.
      const spooled = readdirSync(dir).filter((f) => f.startsWith("credit-outbox.") && f.endsWith(".jsonl"))
      expect(spooled).toHaveLength(1)
      expect(readFileSync(join(dir, spooled[0]!), "utf8")).toContain(`"keep":7`)
      renameSync(join(dir, spooled[0]!), join(dir, "credit-outbox.jsonl"))
      ;({ writer, close } = await open())
      await waitUntil("the spool to be written", () => writer.pending() === 0)
      expect(await ledgerOf("req_s2")).toEqual([["refund", 3], ["charge", -10]])
      expect(await usage()).toEqual({ requests: 2, credits: 11 })
      // A second end of the same request changes nothing.
      await Effect.runPromise(writer.end("req_s2", "settle", "", 0))
      await close()
      const books = await Effect.runPromise(Effect.zip(store.getWorkspace, store.ledger({ limit: 100 })))
      expect(books[1].reduce((sum, r) => sum + r.amount, 0)).toBe(books[0].credits)
      expect(books[0].credits).toBe(1000 - 11)
    } finally {
      await dispose()
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
