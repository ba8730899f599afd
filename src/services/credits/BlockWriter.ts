/**
 * A replica's credits between requests and the store (issue 14, docs/decisions.md section 10).
 *
 * The replica leases a **block** of the pool and decides admissions in memory: a paid request is
 * admitted by taking its price from the block, with no store query to ask whether the pool can
 * pay. Everything the store must learn (the request's charge, held open as a reservation while
 * the request is in flight; its settlement or refund; budget counts; block returns and leases) is
 * written by one fiber, in one transaction per round (**group commit**): what accumulates while a
 * commit is in flight goes in the next one, so under load one commit serves many requests.
 *
 * A paid request waits for the commit that writes its charge before its provider is called, and
 * a refund for the commit that writes it; a settlement is not waited for, and does not take a
 * commit of its own at once either: it goes with the next round that happens anyway (the next
 * request's), or after SETTLE_DELAY_MS (issue 25: at concurrency 1 its own commit, right after the
 * response, was what the client's next request found the writer busy with). So a crash costs what
 * it cost before blocks: the sweep of a live replica refunds the open reservations (the customer
 * is never charged for a request that did not finish; at worst a finished one whose settlement
 * was still in memory is not charged) and returns the block's unspent rest to the pool.
 *
 * Near empty, a replica whose lease comes up short while other replicas hold blocks bumps the
 * workspace's reclaim counter; every replica that sees it move (in its next commit, or by polling
 * while it holds a block) returns its block, and the short replica retries until no live replica
 * holds a block any more (issue 39: a state, not a fixed wait; a loaded machine made the others
 * answer after the old 2 s and the 402 came while they still held credits). Then its 402 is exact
 * but for a dead replica's block, which comes back only once a sweep finds its lease lapsed.
 * RECLAIM_SAFETY_MS only bounds the wait should a live replica never answer.
 *
 * Budgets are not split into blocks (a budget per key per replica would strand requests with an
 * idle replica): a budgeted request waits for the commit that counts it, shared with every other
 * request of its round, and each count is checked in order, so a budget stays exact. A budgeted
 * paid request the block can pay at once (`countAndSpend`) has its count and its charge in the
 * same commit, the charge conditional on the count (the store writes it only if the count
 * admitted the request): one commit to wait for instead of two, a count refused is never charged.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import type * as Scope from "effect/Scope"
import * as Semaphore from "effect/Semaphore"
import { randomBytes } from "node:crypto"
import { abandonAfter, backoffDelayMs, outageTracker } from "../durability/backoff.ts"
import { reportLoss } from "../durability/losses.ts"
import { claimSpools, ownSpool, spoolFailure, writeSpool } from "../durability/spool.ts"
import { type BatchCharge, type BatchResult, type BudgetHold, type BudgetRefusal, type BudgetRows, type CreditBatch, rowsOfHolds } from "../store/credit-batches.ts"
import type { CreditsRepo } from "../store/CreditsRepo.ts"
import type { StoreError } from "../store/StoreError.ts"


/**
 * The writer's timers (settle delay, retry and reclaim waits, idle return) run on monotonic time
 * (issue 35): a wall clock set back must not hold settlements or a block for the length of the
 * jump.
 */
const tick = () => performance.now()

export const SPOOL_FILE = "credit-outbox.jsonl"

/**
 * The longest a request short of credits waits for live replicas to return their blocks before its
 * 402: a safety net for a replica that renews its lease but never answers (a replica answers
 * within RECLAIM_POLL_MS when idle, or with its next commit when busy).
 */
export const RECLAIM_SAFETY_MS = 10_000
/** Between two lease attempts while waiting for blocks to come back. */
const RECLAIM_RETRY_MS = 10
/** A block nothing was spent from for this long goes back to the pool. */
const IDLE_RETURN_MS = 1_000
/** With other replicas live, a held block checks this often whether one of them asked for it back. */
const RECLAIM_POLL_MS = 50
/**
 * How long a settlement may wait for a round that happens anyway (the next request's) before it
 * gets one of its own. Nobody waits for a settlement, but its own commit right after a response
 * held the writer when the client's next request came in (at concurrency 1 on Postgres, the next
 * admission waited ~1 ms for it); under load every round carries the settlements of the last.
 */
export const SETTLE_DELAY_MS = 20

export interface SpendRequest {
  readonly amount: number
  readonly key_id: string
  readonly request_id: string
  readonly model: string
  readonly method?: string | null | undefined
  readonly endpoint?: string | null | undefined
  /** The budget rows a count of an earlier commit took its amount against (released should it not be charged). */
  readonly budgets?: BudgetRows | undefined
}

export type SpendOutcome =
  | { readonly _tag: "Admitted" }
  | { readonly _tag: "Insufficient"; readonly available: number }
  | { readonly _tag: "StoreFailed"; readonly error: unknown }

export type BudgetOutcome =
  | { readonly _tag: "Counted" }
  | { readonly _tag: "Exhausted"; readonly refusal: BudgetRefusal }
  | { readonly _tag: "StoreFailed"; readonly error: unknown }

/** A budgeted paid admission: refused by a budget (429), else what the spend came to. */
export type CountAndSpendOutcome = { readonly _tag: "Exhausted"; readonly refusal: BudgetRefusal } | SpendOutcome

interface End {
  readonly op: "settle" | "refund"
  readonly note: string
  /** A settlement that keeps only this much (micros, less than the amount): the rest goes back. */
  readonly keep?: number | undefined
}

/** One paid request's charge until the store holds all of it. */
interface Entry {
  readonly request_id: string
  readonly key_id: string
  readonly amount: number
  readonly model: string | null
  readonly method: string | null
  readonly endpoint: string | null
  readonly block: string
  /** The budget rows its amount is counted against, once that count is known to be in the store. */
  budgets: BudgetRows | undefined
  /** pending: not written; writing: in the commit in flight; written: its reservation is open; ending: its end is in flight. */
  state: "pending" | "writing" | "written" | "ending"
  end: End | undefined
  /** Sent with its end already known (no reservation was written for it). */
  sentEnded: boolean
  retried: boolean
  /** The request's refund waits for the commit that carries it (or for that commit to fail). */
  acknowledge: (() => void) | undefined
  /** The admission waits for the commit that writes its charge: true once it is durable. */
  onWritten: ((written: boolean) => void) | undefined
  /** The budget count its charge depends on, in the same commit (countAndSpend); cleared once that commit is over. */
  counted: BudgetWaiter | undefined
}

/** What a graceful stop could not write: taken back by the next start. The first two are the outbox's older format. */
type Spooled =
  | { readonly op: "settle" | "refund"; readonly request_id: string; readonly actor: string; readonly note: string; readonly keep?: number | undefined }
  | {
    readonly op: "charge"
    readonly block: string
    readonly request_id: string
    readonly actor: string
    readonly amount: number
    readonly model: string | null
    readonly end: "settle" | "refund"
    readonly note: string
    readonly keep?: number | undefined
    readonly budgets?: BudgetRows | undefined
  }
  | { readonly op: "return"; readonly block: string }

interface Waiter {
  readonly request: SpendRequest
  readonly since: number
  readonly resume: (outcome: SpendOutcome) => void
}

interface BudgetWaiter {
  /** Names its check in the batch. */
  readonly id: string
  readonly holds: ReadonlyArray<BudgetHold>
  readonly amount: number
  /** Requests it counts (1, or 0 for one already counted). */
  readonly requests: number
  readonly resume: (outcome: BudgetOutcome) => void
}

export interface BlockWriter {
  /** Takes `request.amount` from the block (at once when it holds enough), else waits for a lease. */
  readonly spend: (request: SpendRequest) => Effect.Effect<SpendOutcome>
  /** Counts one request and `amount` micros against every budget of `holds`, all or none, in the next commit. */
  readonly countBudget: (holds: ReadonlyArray<BudgetHold>, amount: number, requests?: number) => Effect.Effect<BudgetOutcome>
  /** Gives back `amount` counted against `budgets` by an earlier commit, for a request that was not charged after all. */
  readonly release: (budgets: BudgetRows, amount: number) => void
  /**
   * `countBudget` then `spend`, as one admission: when the block can pay at once, the count and
   * the charge go in the same commit, the charge written only if the count admitted the request
   * (one commit to wait for instead of two); otherwise the count, then the spend.
   */
  readonly countAndSpend: (request: SpendRequest, holds: ReadonlyArray<BudgetHold>, requests?: number) => Effect.Effect<CountAndSpendOutcome>
  /**
   * The request ended: its charge stays (settle; with `keep`, only that much of it) or goes back
   * (refund). Waits for the commit that writes it, or for that commit to fail (then it is retried
   * in the background). Never fails.
   */
  readonly end: (requestId: string, op: "settle" | "refund", note: string, keep?: number) => Effect.Effect<void>
  /** Movements the store does not hold yet (charges, settlements, refunds). */
  readonly pending: () => number
  /** True while commits fail: new paid requests are refused rather than spent blind. */
  readonly down: () => boolean
}

export const makeBlockWriter = (options: {
  readonly store: CreditsRepo["Service"]
  readonly owner: string
  readonly blockSize: number
  /** Postgres: how long one commit may take before it is abandoned (a frozen store); SQLite commits inline. */
  readonly commitTimeout: Duration.Input
  /** The data directory the outbox spools to at stop (a file of this process's own) and takes spools back from at start. */
  readonly spoolDir: string | undefined
  /** How long a request short of credits waits at most for live replicas to return their blocks; default RECLAIM_SAFETY_MS. */
  readonly reclaimSafetyMs?: number | undefined
  /** How long a settlement waits for a round that happens anyway; default SETTLE_DELAY_MS. */
  readonly settleDelayMs?: number | undefined
  /** After each commit: the budget rows it raised and the pool's balance, as they now stand (alerts). */
  readonly onCommitted?: ((result: Pick<BatchResult, "budgetUsage" | "balance">) => void) | undefined
}): Effect.Effect<BlockWriter, never, Scope.Scope> =>
  Effect.gen(function*() {
    const { owner, store } = options
    const entries = new Map<string, Entry>()
    let block: { id: string; remaining: number; reclaimSeen: number } | undefined
    let returns: Array<string> = []
    let waiters: Array<Waiter> = []
    let budgetWaiters: Array<BudgetWaiter> = []
    let releases: Array<{ budgets: BudgetRows; amount: number }> = []
    let checkIds = 0
    let strays = false
    let reclaimRound = false
    let retryAt = 0
    let live = 1
    let lastSpend = -Infinity
    let lastCommit = -Infinity
    /** When the oldest settlement not yet taken by a round gets a round of its own; undefined: none waiting. */
    let settleDue: number | undefined
    const outage = outageTracker()
    let wakeUp: (() => void) | undefined
    /** The round whose commit is in flight, so a stop can hand its waiters an answer. */
    let current: NonNullable<ReturnType<typeof takeBatch>> | undefined
    const newBlockId = () => `blk_${randomBytes(8).toString("hex")}`

    const wake = () => {
      const resume = wakeUp
      wakeUp = undefined
      resume?.()
    }

    /**
     * Wakes the worker when the oldest waiting settlement is due (issue 38). A settlement used to
     * wake the worker at once, only for it to find nothing due and wait again: at concurrency 1
     * that was a run of the worker's loop (about 30 us) on every paid request's way out, for a
     * settlement the next admission's round takes anyway. A plain timer costs a microsecond; a
     * round that takes the settlement first disarms it.
     */
    let settleTimer: ReturnType<typeof setTimeout> | undefined
    const armSettleTimer = (delayMs: number) => {
      if (settleTimer !== undefined) return
      settleTimer = setTimeout(() => {
        settleTimer = undefined
        wake()
      }, delayMs)
      // Never what keeps the process alive: a stop writes every settlement (or spools it).
      settleTimer.unref()
    }
    const disarmSettleTimer = () => {
      if (settleTimer === undefined) return
      clearTimeout(settleTimer)
      settleTimer = undefined
    }

    const detach = () => {
      if (block === undefined) return
      returns.push(block.id)
      block = undefined
    }

    const admit = (
      request: SpendRequest,
      from: { id: string; remaining: number },
      onWritten: (written: boolean) => void,
      counted?: BudgetWaiter
    ) => {
      from.remaining -= request.amount
      lastSpend = tick()
      entries.set(request.request_id, {
        request_id: request.request_id,
        key_id: request.key_id,
        amount: request.amount,
        model: request.model,
        method: request.method ?? null,
        endpoint: request.endpoint ?? null,
        block: from.id,
        budgets: request.budgets,
        state: "pending",
        end: undefined,
        sentEnded: false,
        retried: false,
        acknowledge: undefined,
        onWritten,
        counted
      })
      wake()
    }

    /** The spools of stopped processes this start took: deleted once none of their movements is left in memory. */
    let claimed: ReturnType<typeof claimSpools<Spooled>> | undefined
    const fromSpool = new Set<string>()
    const spoolReturns = new Set<string>()
    if (options.spoolDir !== undefined) {
      const spooled = claimSpools<Spooled>(options.spoolDir, SPOOL_FILE)
      if (spooled.files.length > 0) claimed = spooled
      for (const item of spooled.items) {
        if (item.op !== "return") fromSpool.add(item.request_id)
        if (item.op === "return") {
          returns.push(item.block)
          spoolReturns.add(item.block)
        } else if (item.op === "charge") {
          entries.set(item.request_id, {
            request_id: item.request_id, key_id: item.actor, amount: item.amount, model: item.model, method: null, endpoint: null,
            block: item.block, budgets: item.budgets, state: "pending", end: { op: item.end, note: item.note, keep: item.keep }, sentEnded: false, retried: true, acknowledge: undefined, onWritten: undefined, counted: undefined
          })
        } else {
          entries.set(item.request_id, {
            request_id: item.request_id, key_id: item.actor, amount: 0, model: null, method: null, endpoint: null,
            block: "", budgets: undefined, state: "written", end: { op: item.op, note: item.note, keep: item.keep }, sentEnded: false, retried: false, acknowledge: undefined, onWritten: undefined, counted: undefined
          })
        }
      }
      if (spooled.items.length > 0 || spooled.skipped > 0) {
        yield* Effect.logInfo(
          `credit outbox: took back ${spooled.items.length} spooled movements from ${spooled.files.length} spool files in ${options.spoolDir}` +
            (spooled.skipped > 0 ? ` (${spooled.skipped} unreadable lines skipped)` : "")
        )
      }
    }

    /** Something to commit. `strays` (set by a failed commit) also makes the round that tells an outage is over. */
    const hasWork = (now: number) => {
      if (budgetWaiters.length > 0 || releases.length > 0 || returns.length > 0 || strays || (waiters.length > 0 && now >= retryAt)) return true
      if (settleDue !== undefined && now >= settleDue) return true
      // Settlements wait for settleDue (or ride along with a round that happens anyway); refunds go at once.
      for (const entry of entries.values()) if (entry.state === "pending" || (entry.state === "written" && entry.end?.op === "refund")) return true
      return false
    }

    /** Everything the store should learn now, marked in flight; undefined when there is nothing. */
    const takeBatch = (now: number): { batch: CreditBatch; sent: Array<Entry>; budgets: Array<BudgetWaiter>; returned: Array<string>; leasing: boolean } | undefined => {
      const sent: Array<Entry> = []
      const charges: Array<BatchCharge> = []
      const settles: Array<string> = []
      const partialSettles: Array<{ request_id: string; actor: string; keep: number }> = []
      const refunds: Array<{ request_id: string; actor: string; note: string }> = []
      for (const entry of entries.values()) {
        if (entry.state === "pending") {
          entry.state = "writing"
          entry.sentEnded = entry.end !== undefined
          sent.push(entry)
          charges.push({
            block: entry.block,
            request_id: entry.request_id,
            amount: entry.amount,
            key_id: entry.key_id,
            model: entry.model,
            open: entry.end === undefined ? { method: entry.method, endpoint: entry.endpoint } : undefined,
            refundNote: entry.end?.op === "refund" ? entry.end.note : undefined,
            keep: entry.end?.op === "settle" ? entry.end.keep : undefined,
            retried: entry.retried,
            // The count a pending charge depends on is always in the same batch (both are queued together, and a batch takes every one).
            check: entry.counted?.id,
            budgets: entry.budgets
          })
        } else if (entry.state === "written" && entry.end !== undefined) {
          entry.state = "ending"
          sent.push(entry)
          if (entry.end.op === "settle" && entry.end.keep !== undefined) partialSettles.push({ request_id: entry.request_id, actor: entry.key_id, keep: entry.end.keep })
          else if (entry.end.op === "settle") settles.push(entry.request_id)
          else refunds.push({ request_id: entry.request_id, actor: entry.key_id, note: entry.end.note })
        }
      }
      settleDue = undefined
      disarmSettleTimer()
      const leasing = waiters.length > 0 && now >= retryAt
      // The block cannot pay the first waiter: its rest goes back in the same commit as the new lease.
      if (leasing) detach()
      const budgets = budgetWaiters
      budgetWaiters = []
      const released = releases
      releases = []
      const returned = returns
      returns = []
      if (sent.length === 0 && budgets.length === 0 && released.length === 0 && returned.length === 0 && !leasing && !strays) return undefined
      const head = waiters[0]
      return {
        batch: {
          owner,
          checks: budgets.map((w) => ({ id: w.id, holds: w.holds, amount: w.amount, ...(w.requests === 1 ? {} : { requests: w.requests }) })),
          releases: released,
          charges,
          settles,
          partialSettles,
          refunds,
          returns: returned,
          // Before a lease, any block of ours the store holds besides those returned here is a stray.
          strays: leasing || strays ? { keep: block?.id } : undefined,
          lease: leasing ? { min: head!.request.amount, size: Math.max(options.blockSize, head!.request.amount) } : undefined,
          reclaim: leasing && reclaimRound,
          now: Date.now()
        },
        sent,
        budgets,
        returned,
        leasing
      }
    }

    const settleBudgets = (budgets: Array<BudgetWaiter>, verdicts: BatchResult["checks"]) => {
      for (const waiter of budgets) {
        const verdict = verdicts.get(waiter.id)
        if (verdict?._tag === "Refused") waiter.resume({ _tag: "Exhausted", refusal: verdict.refusal })
        else if (verdict?._tag === "Counted") waiter.resume({ _tag: "Counted" })
        else waiter.resume({ _tag: "StoreFailed", error: new Error("the budget check was not answered") })
      }
    }

    const refuse = (predicate: (waiter: Waiter) => boolean, available: number) => {
      const kept: Array<Waiter> = []
      for (const waiter of waiters) {
        if (predicate(waiter)) waiter.resume({ _tag: "Insufficient", available })
        else kept.push(waiter)
      }
      waiters = kept
    }

    const applied = Effect.fnUntraced(function*(taken: NonNullable<ReturnType<typeof takeBatch>>, result: BatchResult) {
      const now = tick()
      lastCommit = now
      settleBudgets(taken.budgets, result.checks)
      options.onCommitted?.(result)
      let dropped = 0
      const done = (entry: Entry) => {
        entries.delete(entry.request_id)
        entry.acknowledge?.()
      }
      const durable = (entry: Entry, written: boolean) => {
        const onWritten = entry.onWritten
        entry.onWritten = undefined
        onWritten?.(written)
      }
      for (const entry of taken.sent) {
        entry.counted = undefined
        if (entry.state === "ending") {
          done(entry)
        } else if (result.unbudgeted.has(entry.request_id)) {
          // Its budget refused it (the count's waiter answered 429): nothing was charged, so the
          // block still holds its price.
          entry.onWritten = undefined
          done(entry)
          if (block?.id === entry.block) block.remaining += entry.amount
        } else if (result.dropped.has(entry.request_id)) {
          // Not charged, so not served either.
          dropped++
          durable(entry, false)
          done(entry)
          if (block?.id === entry.block) block = undefined
        } else if (result.found.has(entry.request_id)) {
          // An abandoned commit wrote it after all; its end (if any) goes through its reservation.
          entry.state = "written"
          entry.retried = false
          durable(entry, true)
        } else if (entry.sentEnded) {
          done(entry)
        } else {
          entry.state = "written"
          entry.retried = false
          durable(entry, true)
        }
      }
      if (dropped > 0) {
        yield* Effect.logWarning(`${dropped} charges were not written: their block had been returned by another replica (this replica's lease had lapsed); they are not charged`)
      }
      if (taken.batch.strays !== undefined) strays = false

      const lease = result.lease
      if (lease?._tag === "Leased") {
        live = result.live
        reclaimRound = false
        block = { id: lease.id, remaining: lease.amount, reclaimSeen: result.reclaim }
        while (waiters.length > 0 && waiters[0]!.request.amount <= block.remaining) {
          const waiter = waiters.shift()!
          admit(waiter.request, block, (written) => waiter.resume(written ? admitted : notWritten))
        }
        retryAt = 0
      } else if (lease?._tag === "Short") {
        if (lease.held === 0) {
          // No replica holds a block: the balance is all there is, so the refusal is exact.
          refuse((w) => w.request.amount > lease.free, lease.free)
          reclaimRound = false
          retryAt = 0
        } else {
          // Other replicas hold blocks: they return them when they see the reclaim counter move.
          // Once no live one holds any, every one answered (or spent its block): nothing more
          // will come back soon, and the refusal is as exact as it can be now.
          const safety = options.reclaimSafetyMs ?? RECLAIM_SAFETY_MS
          refuse((w) => lease.heldLive === 0 || now - w.since >= safety, lease.free)
          reclaimRound = waiters.length > 0
          retryAt = now + RECLAIM_RETRY_MS
        }
      } else if (block !== undefined && result.reclaim > block.reclaimSeen) {
        detach()
      }
    })

    const failed = (taken: NonNullable<ReturnType<typeof takeBatch>>, error: unknown) => {
      for (const entry of taken.sent) {
        // Retried unconditionally, as a charge with its refund: the count's outcome is unknown.
        // Its budgets are released only through its reservation, should the failed commit have
        // written both after all (the count went with the charge): never for a count that may not be there.
        if (entry.counted !== undefined) entry.budgets = undefined
        entry.counted = undefined
        if (entry.state === "writing") {
          entry.state = "pending"
          entry.retried = true
          // Its request is refused (503) and never served: the charge, whether the failed commit
          // wrote it or a retry will, is refunded.
          if (entry.onWritten !== undefined) {
            const onWritten = entry.onWritten
            entry.onWritten = undefined
            entry.end ??= { op: "refund", note: "the admission's outcome was unknown (store error)" }
            onWritten(false)
          }
        } else if (entry.state === "ending") {
          entry.state = "written"
          // Settlements are retried with the rest, not deferred again.
          settleDue ??= tick()
        }
      }
      // Ends stay queued and are retried; their requests do not wait through an outage.
      for (const entry of entries.values()) {
        const acknowledge = entry.acknowledge
        entry.acknowledge = undefined
        acknowledge?.()
      }
      returns = [...taken.returned, ...returns]
      // Releases whose outcome is unknown are not sent again: one applied twice would free credits
      // another request holds. Left out, a budget counts more than was spent (never less).
      // A commit whose outcome is unknown may have leased a block we never heard of.
      strays = true
      for (const waiter of taken.budgets) waiter.resume({ _tag: "StoreFailed", error })
      if (taken.leasing) {
        for (const waiter of waiters) waiter.resume({ _tag: "StoreFailed", error })
        waiters = []
      }
    }

    const commit = (batch: CreditBatch) =>
      store.dialect === "sqlite"
        ? store.commitBatch(batch, newBlockId)
        : abandonAfter(store.commitBatch(batch, newBlockId), options.commitTimeout)

    /** One round at a time: the worker's, or (SQLite) one a refund runs on its own request's fiber. */
    const rounds = Semaphore.makeUnsafe(1)

    /** One round: returns false when the store refused it. */
    const round = rounds.withPermits(1)(Effect.gen(function*() {
      const taken = takeBatch(tick())
      if (taken === undefined) return true
      current = taken
      const exit = yield* Effect.exit(commit(taken.batch))
      current = undefined
      if (exit._tag === "Success") {
        yield* applied(taken, exit.value)
        for (const id of taken.returned) spoolReturns.delete(id)
        releaseSpools()
        const lasted = outage.succeeded()
        if (lasted !== undefined) yield* Effect.logInfo(`credit movements reach the store again after ${Math.round(lasted)} ms; outbox empty`)
        return true
      }
      const error = exit.cause
      failed(taken, error)
      if (outage.failed()) {
        yield* Effect.logError(`credit movements cannot reach the store; ${pendingCount()} pending, retrying with backoff`)
      }
      return false
    }))

    /**
     * The claimed spool files go once every movement taken from them is in the store (the first
     * round writes the blocks' returns; a movement whose charge an abandoned commit had written
     * may take one more round for its end).
     */
    const releaseSpools = () => {
      if (claimed === undefined) return
      for (const id of fromSpool) {
        if (entries.has(id)) return
        fromSpool.delete(id)
      }
      if (spoolReturns.size > 0) return
      claimed.release()
      claimed = undefined
    }

    /** Between rounds with nothing to write: give an idle block back, or see whether another replica asked for it. */
    const housekeeping = Effect.gen(function*() {
      const now = tick()
      if (block === undefined || waiters.length > 0) return
      if (now - lastSpend >= IDLE_RETURN_MS) return detach()
      if (live > 1 && now - lastCommit >= RECLAIM_POLL_MS) {
        lastCommit = now
        // Bounded like a commit: the worker that writes every admission must not hang on a poll
        // sent down a dead connection (issue 21: paid calls hung for a whole partition).
        const counter = yield* Effect.option(
          store.dialect === "sqlite" ? store.reclaimCounter : abandonAfter(store.reclaimCounter, options.commitTimeout)
        )
        if (counter._tag === "Some" && block !== undefined && counter.value > block.reclaimSeen) detach()
      }
    })

    const idleWait = Effect.callback<void>((resume) => {
      wakeUp = () => resume(Effect.void)
      return Effect.sync(() => {
        wakeUp = undefined
      })
    })

    const worker = Effect.gen(function*() {
      let attempt = 0
      while (true) {
        const now = tick()
        if (!hasWork(now)) {
          const held = waiters.length > 0
            ? Math.max(1, retryAt - now)
            : block !== undefined ? (live > 1 ? RECLAIM_POLL_MS : IDLE_RETURN_MS) : undefined
          const settling = settleDue === undefined ? undefined : Math.max(1, settleDue - now)
          const timeout = held === undefined ? settling : settling === undefined ? held : Math.min(held, settling)
          if (timeout === undefined) yield* idleWait
          else yield* Effect.timeoutOption(idleWait, Duration.millis(timeout))
          yield* housekeeping
          if (!hasWork(tick())) continue
        }
        // Let the admissions of this tick join the round.
        yield* Effect.yieldNow
        if (yield* round) attempt = 0
        else yield* Effect.sleep(Duration.millis(backoffDelayMs(attempt++)))
      }
    })

    const pendingCount = () => {
      let count = 0
      for (const entry of entries.values()) if (entry.state !== "written" || entry.end !== undefined) count++
      return count
    }

    // Taken back from a spool: written before anything else of this start looks at the pool.
    if (entries.size > 0 || returns.length > 0) yield* round
    else releaseSpools()

    const fiber = yield* Effect.forkScoped(worker)

    yield* Effect.addFinalizer(() =>
      Effect.gen(function*() {
        yield* Fiber.interrupt(fiber)
        disarmSettleTimer()
        // A round cut short by the stop is retried like a failed one.
        if (current !== undefined) failed(current, new Error("the gateway is stopping"))
        current = undefined
        for (const entry of entries.values()) {
          if (entry.state === "writing") {
            entry.state = "pending"
            entry.retried = true
          } else if (entry.state === "ending") entry.state = "written"
        }
        for (const waiter of waiters) waiter.resume({ _tag: "StoreFailed", error: new Error("the gateway is stopping") })
        waiters = []
        detach()
        strays = true
        // Bounded: a stop must not hang on a store that does not answer.
        yield* Effect.ignore(abandonAfter(round, Duration.seconds(2)))
        if (entries.size > 0 || returns.length > 0) yield* Effect.ignore(abandonAfter(round, Duration.seconds(1)))
        const left: Array<Spooled> = []
        for (const entry of entries.values()) {
          entry.acknowledge?.()
          entry.onWritten?.(false)
          if (entry.state === "pending") {
            left.push({
              op: "charge", block: entry.block, request_id: entry.request_id, actor: entry.key_id, amount: entry.amount, model: entry.model,
              end: entry.end?.op ?? "refund", note: entry.end?.note ?? "the gateway stopped before the request ended",
              ...(entry.end?.keep === undefined ? {} : { keep: entry.end.keep }),
              ...(entry.budgets === undefined ? {} : { budgets: entry.budgets })
            })
          } else if (entry.end !== undefined) {
            left.push({
              op: entry.end.op, request_id: entry.request_id, actor: entry.key_id, note: entry.end.note,
              ...(entry.end.keep === undefined ? {} : { keep: entry.end.keep })
            })
          }
        }
        for (const id of returns) left.push({ op: "return", block: id })
        const movements = left.filter((item) => item.op !== "return").length
        if (left.length === 0) return claimed?.release()
        if (options.spoolDir === undefined) {
          reportLoss("credit movements", movements)
          return yield* Effect.logError(`credit outbox: ${movements} movements could not be written and there is no data directory to spool them to`)
        }
        const path = ownSpool(options.spoolDir, SPOOL_FILE)
        yield* Effect.try({ try: () => writeSpool(path, left), catch: spoolFailure }).pipe(
          // Everything left of the spools this start took is in this process's own spool now.
          Effect.andThen(Effect.sync(() => claimed?.release())),
          Effect.andThen(Effect.logWarning(`credit outbox: ${movements} movements spooled to ${path}; the next start writes them`)),
          Effect.catch((error) => {
            const kept = left.filter((item) => item.op !== "return" && fromSpool.has(item.request_id)).length
            const lost = movements - kept
            reportLoss("credit movements", lost)
            return Effect.logError(
              `credit outbox: could not spool ${movements} movements to ${path}: ${lost} movements lost` +
                (kept > 0 ? ` (${kept} stay in the spool files this start took)` : "") + `; ${error.message}`
            )
          })
        )
      })
    )

    const admitted: SpendOutcome = { _tag: "Admitted" }
    const notWritten: SpendOutcome = { _tag: "StoreFailed", error: new Error("the charge could not be written to the store") }

    const spendSlow = (request: SpendRequest) =>
      Effect.callback<SpendOutcome>((resume) => {
        waiters.push({ request, since: tick(), resume: (outcome) => resume(Effect.succeed(outcome)) })
        wake()
      })

    const spend = (request: SpendRequest): Effect.Effect<SpendOutcome> =>
      Effect.suspend(() => {
        if (outage.down) return Effect.succeed<SpendOutcome>({ _tag: "StoreFailed", error: new Error("credit movements cannot reach the store") })
        // One charge per request id (the store holds it unique, as it always held the reservation).
        if (entries.has(request.request_id)) return Effect.succeed<SpendOutcome>({ _tag: "StoreFailed", error: new Error(`request ${request.request_id} is already charged`) })
        // Waiters first: a request arriving now does not overtake one waiting for a lease.
        if (waiters.length === 0 && block !== undefined && block.remaining >= request.amount) {
          const from = block
          // The charge is durable before the provider is called (group commit: one transaction for every request of the round).
          return Effect.callback<SpendOutcome>((resume) => {
            admit(request, from, (written) => resume(Effect.succeed(written ? admitted : notWritten)))
          })
        }
        return spendSlow(request)
      })

    const countBudget = (holds: ReadonlyArray<BudgetHold>, amount: number, requests = 1): Effect.Effect<BudgetOutcome> =>
      Effect.suspend(() =>
        outage.down
          ? Effect.succeed<BudgetOutcome>({ _tag: "StoreFailed", error: new Error("credit movements cannot reach the store") })
          : Effect.callback<BudgetOutcome>((resume) => {
            budgetWaiters.push({ id: `c${++checkIds}`, holds, amount, requests, resume: (outcome) => resume(Effect.succeed(outcome)) })
            wake()
          })
      )

    const release = (budgets: BudgetRows, amount: number) => {
      if (amount <= 0 || budgets.length === 0) return
      releases.push({ budgets, amount })
      wake()
    }

    return {
      spend,
      countAndSpend: (request, holds, requests = 1) =>
        Effect.suspend(() => {
          const budgets = rowsOfHolds(holds)
          if (outage.down || entries.has(request.request_id) || waiters.length > 0 || block === undefined || block.remaining < request.amount) {
            // The block cannot pay at once (or the spend refuses by itself): the count, then the
            // spend; a spend that charges nothing gives the count's credits back.
            return Effect.flatMap(countBudget(holds, request.amount, requests), (counted) =>
              counted._tag !== "Counted"
                ? Effect.succeed<CountAndSpendOutcome>(counted)
                : Effect.tap(spend({ ...request, budgets }), (spent) =>
                  Effect.sync(() => {
                    // An entry of its own is refunded with its budgets (a charge whose commit failed).
                    if (spent._tag !== "Admitted" && !entries.has(request.request_id)) release(budgets, request.amount)
                  })))
          }
          const from = block
          return Effect.callback<CountAndSpendOutcome>((resume) => {
            let answered = false
            const answer = (outcome: CountAndSpendOutcome) => {
              if (answered) return
              answered = true
              resume(Effect.succeed(outcome))
            }
            // The count answers first in its commit: a refusal (429) or a failure ends the
            // admission; a count that admitted waits for its charge (written in that commit).
            const counted: BudgetWaiter = {
              id: `c${++checkIds}`,
              holds,
              amount: request.amount,
              requests,
              resume: (outcome) => {
                if (outcome._tag !== "Counted") answer(outcome)
              }
            }
            budgetWaiters.push(counted)
            admit({ ...request, budgets }, from, (written) => answer(written ? admitted : notWritten), counted)
          })
        }),
      countBudget,
      release,
      end: (requestId, op, note, keep) =>
        Effect.suspend(() => {
          const entry = entries.get(requestId)
          if (entry === undefined || entry.end !== undefined) return Effect.void
          // A settlement keeping all of it (or more: clamped) is a plain one.
          const partial = op === "settle" && keep !== undefined && entry.amount > 0 && keep < entry.amount ? Math.max(0, Math.floor(keep)) : undefined
          entry.end = { op, note, ...(partial === undefined ? {} : { keep: partial }) }
          // A settlement changes no balance (the reservation row goes): nobody waits for it, and
          // it goes with the next round (within SETTLE_DELAY_MS). A crash before it lands refunds
          // the request (the sweep), in the customer's favour.
          if (op === "settle") {
            const delay = options.settleDelayMs ?? SETTLE_DELAY_MS
            settleDue ??= tick() + delay
            armSettleTimer(Math.max(1, Math.ceil(settleDue - tick())))
            return Effect.void
          }
          wake()
          if (outage.down) return Effect.void
          // SQLite commits synchronously: the refund is written on this request's fiber before
          // its scope finishes closing, as it was before blocks (the worker would write it a tick later).
          if (store.dialect === "sqlite") return Effect.asVoid(round)
          return Effect.callback<void>((resume) => {
            entry.acknowledge = () => resume(Effect.void)
          })
        }),
      pending: pendingCount,
      down: () => outage.down
    } satisfies BlockWriter
  })
