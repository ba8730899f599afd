/**
 * The guard's worker pool. Both parsers are super-linear on some inputs (nested block comments
 * on Postgres are quadratic; some nestings of subqueries blow up node-sql-parser's grammar), so
 * no statement is ever parsed on the gateway's event loop: each one goes to a worker thread,
 * and a worker that has not answered within the time budget is terminated (the only way to stop
 * a synchronous parse) and replaced.
 *
 * Workers start on demand, up to `size`, load both dialects' parsers before they take a task
 * (so the budget measures the parse, not the loading), and take one statement at a time from a
 * FIFO queue. They are unref'd: an idle pool never keeps a process alive.
 */
import { Worker } from "node:worker_threads"
import type { Classified } from "./index.ts"
import type { GuardReply, GuardTask } from "./protocol.ts"

export type GuardJob =
  | { readonly op: "statement"; readonly dialect: GuardTask["dialect"]; readonly sql: string }
  | { readonly op: "explain"; readonly dialect: GuardTask["dialect"]; readonly sql: string; readonly analyze: boolean }

export type PoolOutcome =
  | { readonly _tag: "Done"; readonly result: Classified }
  /** The statement used up its time budget; its worker was terminated. */
  | { readonly _tag: "TimedOut"; readonly budgetMs: number }
  /** The worker died or threw while on this statement, or no worker could start. */
  | { readonly _tag: "Crashed"; readonly error: string }

export interface GuardPoolOptions {
  readonly size: number
  readonly timeoutMs: number
  /** The worker's module; the default is worker.ts next to this file. */
  readonly workerUrl?: URL
}

interface Pending {
  readonly job: GuardJob
  readonly resolve: (outcome: PoolOutcome) => void
}

interface Slot {
  readonly worker: Worker
  ready: boolean
  current: { readonly pending: Pending; readonly timer: NodeJS.Timeout } | undefined
}

export class GuardPool {
  private readonly slots = new Set<Slot>()
  private readonly queue: Array<Pending> = []
  private nextId = 1
  private closed = false
  private readonly options: GuardPoolOptions

  constructor(options: GuardPoolOptions) {
    this.options = options
  }

  /** Classifies one statement on a worker; never rejects. */
  run(job: GuardJob): Promise<PoolOutcome> {
    if (this.closed) return Promise.resolve({ _tag: "Crashed", error: "the SQL guard is shut down" })
    return new Promise((resolve) => {
      this.queue.push({ job, resolve })
      this.pump()
    })
  }

  /** Starts one worker ahead of the first statement, so it pays the parsers' loading time. */
  warm(): void {
    if (!this.closed && this.slots.size === 0) this.spawn()
  }

  /** Statements waiting for a worker, and workers running or starting. */
  stats(): { readonly queued: number; readonly workers: number; readonly busy: number } {
    let busy = 0
    for (const slot of this.slots) if (slot.current !== undefined) busy++
    return { queued: this.queue.length, workers: this.slots.size, busy }
  }

  async close(): Promise<void> {
    this.closed = true
    for (const pending of this.queue.splice(0)) pending.resolve({ _tag: "Crashed", error: "the SQL guard is shut down" })
    const slots = [...this.slots]
    this.slots.clear()
    for (const slot of slots) this.finishCurrent(slot, { _tag: "Crashed", error: "the SQL guard is shut down" })
    await Promise.all(slots.map((slot) => slot.worker.terminate()))
  }

  private pump(): void {
    if (this.closed) return
    for (const slot of this.slots) {
      if (this.queue.length === 0) return
      if (slot.ready && slot.current === undefined) this.assign(slot, this.queue.shift()!)
    }
    // Workers still loading will take queued statements when ready; start more only for the rest.
    const starting = [...this.slots].filter((slot) => !slot.ready).length
    let missing = Math.min(this.queue.length - starting, this.options.size - this.slots.size)
    while (missing-- > 0) this.spawn()
  }

  private assign(slot: Slot, pending: Pending): void {
    const id = this.nextId++
    const timer = setTimeout(() => {
      this.finishCurrent(slot, { _tag: "TimedOut", budgetMs: this.options.timeoutMs })
      this.retire(slot)
    }, this.options.timeoutMs)
    slot.current = { pending, timer }
    slot.worker.postMessage({ ...pending.job, id } satisfies GuardTask)
  }

  private finishCurrent(slot: Slot, outcome: PoolOutcome): void {
    const current = slot.current
    if (current === undefined) return
    slot.current = undefined
    clearTimeout(current.timer)
    current.pending.resolve(outcome)
  }

  /** Takes a worker out of the pool for good and starts what the queue still needs. */
  private retire(slot: Slot): void {
    if (!this.slots.delete(slot)) return
    slot.worker.removeAllListeners()
    // Errors after retirement concern no statement any more.
    slot.worker.on("error", () => undefined)
    void slot.worker.terminate()
    this.pump()
  }

  private spawn(): void {
    const worker = new Worker(this.options.workerUrl ?? new URL("./worker.ts", import.meta.url))
    worker.unref()
    const slot: Slot = { worker, ready: false, current: undefined }
    this.slots.add(slot)
    worker.on("message", (reply: GuardReply) => {
      if ("ready" in reply) {
        slot.ready = true
        this.pump()
        return
      }
      this.finishCurrent(slot, reply.ok ? { _tag: "Done", result: reply.result } : { _tag: "Crashed", error: reply.error })
      this.pump()
    })
    const died = (error: string) => {
      if (!slot.ready) {
        // A worker that cannot even load the parsers will not do better on a second try now:
        // fail what is waiting (the guard fails closed) rather than respawn in a loop.
        this.slots.delete(slot)
        for (const pending of this.queue.splice(0)) pending.resolve({ _tag: "Crashed", error })
        return
      }
      this.finishCurrent(slot, { _tag: "Crashed", error })
      this.retire(slot)
    }
    worker.on("error", (error) => died(error instanceof Error ? error.message : String(error)))
    worker.on("exit", (code) => died(`the guard worker exited with code ${code}`))
  }
}
