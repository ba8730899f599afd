/**
 * The block writer against a store that fails on demand (issue 14): what a request sees when a
 * commit fails, and that the writer finds its way back by itself once the store answers, even
 * when the failed commit left nothing pending (a budget count, a lease): it keeps probing with
 * backoff instead of refusing paid requests forever.
 */
import { Effect, Exit, Scope } from "effect"
import { describe, expect, it } from "vitest"
import { makeBlockWriter } from "../../../src/services/credits/BlockWriter.ts"
import type { BatchResult, CreditBatch } from "../../../src/services/store/credit-batches.ts"
import type { CreditsRepo } from "../../../src/services/store/CreditsRepo.ts"
import { StoreError } from "../../../src/services/store/StoreError.ts"

const outage = new StoreError({ operation: "CreditsRepo.commitBatch", message: "connection refused", outage: true, cause: null })

/** A store whose commits fail while `down` is set; otherwise it admits every budget count and leases what is asked. */
const fakeStore = () => {
  const state = { down: false, commits: [] as Array<CreditBatch> }
  const store = {
    dialect: "sqlite",
    reclaimCounter: Effect.succeed(0),
    commitBatch: (batch: CreditBatch, newBlockId: () => string) =>
      Effect.suspend(() => {
        if (state.down) return Effect.fail(outage)
        state.commits.push(batch)
        const result: BatchResult = {
          budgets: new Map(batch.budgets.map((b) => [b.keyId, b.count])),
          written: new Set(batch.charges.map((c) => c.request_id)),
          found: new Set(),
          dropped: new Set(),
          unbudgeted: new Set(),
          refunded: [],
          lease: batch.lease === undefined ? undefined : { _tag: "Leased", id: newBlockId(), amount: batch.lease.size },
          reclaim: 0,
          live: 1
        }
        return Effect.succeed(result)
      })
  } as unknown as CreditsRepo["Service"]
  return { state, store }
}

const waitUntil = async (what: string, check: () => boolean) => {
  for (let i = 0; i < 200; i++) {
    if (check()) return
    await new Promise((r) => setTimeout(r, 25))
  }
  throw new Error(`timed out waiting for ${what}`)
}

describe("BlockWriter", () => {
  it("refuses while commits fail, and admits again once the store answers though nothing was left pending", async () => {
    const { state, store } = fakeStore()
    const scope = Effect.runSync(Scope.make())
    const writer = await Effect.runPromise(
      Scope.provide(makeBlockWriter({ store, owner: "rep_t", blockSize: 10, commitTimeout: "1 second", spoolDir: undefined }), scope)
    )
    try {
      state.down = true
      expect((await Effect.runPromise(writer.countBudget("key_a")))._tag).toBe("StoreFailed")
      expect(writer.down()).toBe(true)
      // While it is down, paid requests are refused at once (nothing is spent blind).
      expect((await Effect.runPromise(writer.spend({ amount: 1, key_id: "key_a", request_id: "req_1", model: "m" })))._tag).toBe("StoreFailed")
      state.down = false
      await waitUntil("the writer to see the store again", () => !writer.down())
      expect(await Effect.runPromise(writer.countBudget("key_a"))).toEqual({ _tag: "Counted" })
      expect(await Effect.runPromise(writer.spend({ amount: 1, key_id: "key_a", request_id: "req_2", model: "m" }))).toEqual({ _tag: "Admitted" })
      // The charge was in a commit before the admission returned.
      expect(state.commits.flatMap((c) => c.charges.map((x) => x.request_id))).toContain("req_2")
      await Effect.runPromise(writer.end("req_2", "settle", ""))
      await waitUntil("the settlement", () => writer.pending() === 0)
    } finally {
      await Effect.runPromise(Scope.close(scope, Exit.void))
    }
  })

  it("a charge whose commit failed is refused (503) and its refund is queued with it, never the charge alone", async () => {
    const { state, store } = fakeStore()
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
    }
  })
})
