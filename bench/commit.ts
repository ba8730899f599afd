/**
 * `node bench/commit.ts [commits] [--pg]`: what one group commit of credit movements costs on a SQLite
 * store on disk (WAL, `synchronous = NORMAL`, as `modelgate serve` opens it), alone in its process
 * (`--pg`: on a fresh database of the machine's Postgres instead, next to one small read, the round
 * trip every statement of a commit pays):
 * `CreditsRepo.commitBatch` called back to back with the batch a lone request gives, the batches
 * of a budgeted free request (one budget count) and of a budgeted paid one (its count, its charge
 * held open as a reservation, the previous request's settlement) interleaved, so both see the same
 * machine. Prints p50, p90 and p99 of each in microseconds, and the pages the paid batch adds to
 * the WAL (each is written whole at COMMIT; every thousand pages a checkpoint fsyncs).
 */
import { Effect, ManagedRuntime } from "effect"
import { mkdtempSync, rmSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { newRequestId } from "../src/pipelines/request.ts"
import type { CreditBatch } from "../src/services/store/credit-batches.ts"
import { CreditsRepo } from "../src/services/store/CreditsRepo.ts"
import { StoreLayer } from "../src/services/store/StoreLayer.ts"
import { cleanupAll, createPostgresDatabase } from "./processes.ts"

const args = process.argv.slice(2)
const onPostgres = args.includes("--pg")
const commits = Number(args.find((a) => !a.startsWith("--")) ?? 4000)
const dir = mkdtempSync(join(tmpdir(), "modelgate-commit-"))
const store = onPostgres ? await createPostgresDatabase() : `sqlite:${dir}/modelgate.db`
const runtime = ManagedRuntime.make(StoreLayer.fromUrl(store))
try {
  const repo = await runtime.runPromise(Effect.gen(function*() {
    return yield* CreditsRepo
  }))
  await runtime.runPromise(Effect.andThen(repo.ensureWorkspace(1e15), repo.renewReplica("rep_bench", 600_000)))
  let blocks = 0
  const blockId = () => `blk_bench_${blocks++}`
  const empty: CreditBatch = {
    owner: "rep_bench", checks: [], releases: [], charges: [], settles: [], partialSettles: [], refunds: [], returns: [],
    strays: undefined, lease: undefined, reclaim: false, now: Date.now()
  }
  const leased = await runtime.runPromise(repo.commitBatch({ ...empty, lease: { min: 1e6, size: 1e14 } }, blockId))
  if (leased.lease?._tag !== "Leased") throw new Error("no block leased")
  const block = leased.lease.id
  const holds = [{ holder: "key_bench", period: "", max_requests: 1e12 }]
  // The ids the gateway gives its requests: where they land in the ledger's and the reservations'
  // indexes is part of what a commit costs.
  const requestIds: Array<string> = []
  const requestId = (i: number) => (requestIds[i] ??= newRequestId())
  const paid = (i: number): CreditBatch => ({
    ...empty,
    checks: [{ id: "c", holds, amount: 1e6 }],
    charges: [{
      block, request_id: requestId(i), amount: 1e6, key_id: "key_bench", model: "bench", open: { method: "POST", endpoint: "/v1/chat/completions" },
      refundNote: undefined, retried: false, check: "c", budgets: [["key_bench", ""]]
    }],
    settles: i === 0 ? [] : [requestId(i - 1)]
  })
  const budget: CreditBatch = { ...empty, checks: [{ id: "c", holds, amount: 0 }] }
  const times: Record<string, Array<number>> = { budget: [], paid: [], ...(onPostgres ? { "one read": [] } : {}) }
  const wal = () => (onPostgres ? 0 : statSync(`${dir}/modelgate.db-wal`).size)
  let walGrowth = 0
  let walSamples = 0
  for (let i = 0; i < commits; i++) {
    const order: ReadonlyArray<"budget" | "paid"> = i % 2 === 0 ? ["budget", "paid"] : ["paid", "budget"]
    for (const kind of order) {
      const before = wal()
      const start = performance.now()
      await runtime.runPromise(repo.commitBatch(kind === "paid" ? paid(i) : budget, blockId))
      times[kind]!.push((performance.now() - start) * 1000)
      const after = wal()
      // A checkpoint restarts the WAL from its start: only growth counts.
      if (kind === "paid" && after > before) {
        walGrowth += after - before
        walSamples++
      }
    }
    if (onPostgres) {
      const start = performance.now()
      await runtime.runPromise(repo.poolLevels)
      times["one read"]!.push((performance.now() - start) * 1000)
    }
  }
  const at = (sorted: Array<number>, p: number) => sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!.toFixed(0)
  for (const [kind, all] of Object.entries(times)) {
    const sorted = all.slice(Math.floor(all.length / 5)).sort((a, b) => a - b)
    console.log(`${kind.padEnd(8)} ${kind === "one read" ? "      " : "commit"}: p50 ${at(sorted, 0.5)} us, p90 ${at(sorted, 0.9)} us, p99 ${at(sorted, 0.99)} us`)
  }
  if (!onPostgres) console.log(`paid batch: ${(walGrowth / Math.max(1, walSamples) / 4120).toFixed(1)} WAL pages per commit (4 KiB pages)`)
} finally {
  await runtime.dispose()
  rmSync(dir, { recursive: true, force: true })
  await cleanupAll()
}
