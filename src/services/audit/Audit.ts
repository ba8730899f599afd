/**
 * The audit trail (docs/decisions.md sections 8 and 10): one record per request, appended to an
 * in-memory buffer on the request path and written to the store in batches by a background fiber.
 *
 * Faults: a batch the store refuses stays buffered and is retried with exponential backoff and
 * jitter, with one log line when the outage starts and one when it ends. The layer's finalizer
 * writes whatever is left; what the store still refuses then is spooled to the data directory
 * and written by the next start, so a graceful stop loses nothing, store up or down; a stop that
 * could keep them nowhere (no data directory, a full or read-only one) says how many it lost and
 * makes the process exit non-zero (losses.ts). A SIGKILL loses what was buffered: at most one
 * flush interval of records (more during an outage); a SIGKILL during a spool's replay loses
 * nothing (spool.ts).
 */
import * as Context from "effect/Context"
import * as Deferred from "effect/Deferred"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Fiber from "effect/Fiber"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Semaphore from "effect/Semaphore"
import type { AuditRecord } from "../../domain/records.ts"
import { abandonAfter, backoffDelayMs, DEFAULT_BACKOFF, outageTracker } from "../durability/backoff.ts"
import { reportLoss } from "../durability/losses.ts"
import { claimSpools, ownSpool, spoolFailure, writeSpool } from "../durability/spool.ts"
import { Metrics } from "../metrics/Metrics.ts"
import { AuditRepo } from "../store/AuditRepo.ts"

export const AUDIT_SPOOL_FILE = "audit-spool.jsonl"
/** How long a stop waits for the store before spooling what is left. */
const STOP_WRITE_TIMEOUT = Duration.seconds(3)

/** Beyond this many unwritten records (store down for a long time) the oldest are dropped, loudly. */
const MAX_BUFFERED = 200_000
/** At most one "records dropped" log line per this interval, each with the count since the last. */
const DROP_LOG_INTERVAL_MS = 10_000

export interface AuditShape {
  /** Never blocks and never fails: safe to call from anywhere, including Node callbacks. */
  readonly append: (record: AuditRecord) => void
  /** Writes everything buffered so far; used by tests and shutdown. */
  readonly flush: Effect.Effect<void>
  /** Records dropped since start because the buffer was full (the store was down too long). */
  readonly dropped: () => number
  /** Records appended and not yet written (what a crash now would lose, barring the spool). */
  readonly buffered: () => number
}

export class Audit extends Context.Service<Audit, AuditShape>()("modelgate/Audit") {
  /** Keeps every record in memory, in order, for tests that assert on audit contents without a store. */
  static readonly layerCollect = () => {
    const records: Array<AuditRecord> = []
    const layer = Layer.succeed(Audit, Audit.of({ append: (record) => void records.push(record), flush: Effect.void, dropped: () => 0, buffered: () => 0 }))
    return { layer, records }
  }

  /** Keeps nothing: the bench's ladder rung that measures the pipeline without its audit trail. */
  static readonly layerDiscard = Layer.succeed(Audit, Audit.of({ append: () => {}, flush: Effect.void, dropped: () => 0, buffered: () => 0 }))

  static readonly makeLayer = (options: {
    readonly flushInterval: Duration.Input
    readonly batchSize: number
    readonly maxBuffered?: number
    /** The data directory for the stop-time spool; none: a stop with the store down loses the buffer (logged). */
    readonly dataDir?: string | undefined
  }) =>
    Layer.effect(
      Audit,
      Effect.gen(function*() {
        const store = yield* AuditRepo
        const metrics = yield* Effect.serviceOption(Metrics)
        const storeFailed = Option.match(metrics, { onNone: () => () => {}, onSome: (m) => () => m.dependencyError("store") })
        let buffer: Array<AuditRecord> = []
        let wake = yield* Deferred.make<void>()
        const maxBuffered = options.maxBuffered ?? MAX_BUFFERED
        let dropped = 0
        let droppedUnlogged = 0
        let lastDropLog = -Infinity
        // append is synchronous and may run outside any fiber, so the log line is written by a
        // fiber of its own, at most once per interval, with the count since the last one.
        const logDrops = Effect.suspend(() => {
          const count = droppedUnlogged
          droppedUnlogged = 0
          return Effect.logError(
            `audit buffer full (${maxBuffered} unwritten records; the store is not accepting writes): dropped ${count} oldest records, ${dropped} in all`
          )
        })

        const outage = outageTracker()
        const spool = options.dataDir === undefined ? undefined : ownSpool(options.dataDir, AUDIT_SPOOL_FILE)
        /** The spools of stopped processes this start took, and how many of their records (at the head of the buffer) are not written yet. */
        let claimed: ReturnType<typeof claimSpools<AuditRecord>> | undefined
        let fromSpool = 0
        if (options.dataDir !== undefined) {
          // Records a previous stop could not write go first: they are the oldest. Their files
          // stay until the records are in the store (a crash meanwhile leaves them to the next start).
          const taken = claimSpools<AuditRecord>(options.dataDir, AUDIT_SPOOL_FILE)
          if (taken.files.length > 0) {
            claimed = taken
            buffer = taken.items
            fromSpool = taken.items.length
            if (fromSpool === 0) taken.release()
            yield* Effect.logInfo(
              `audit: took back ${taken.items.length} spooled records from ${taken.files.length} spool files in ${options.dataDir}` +
                (taken.skipped > 0 ? ` (${taken.skipped} unreadable lines skipped)` : "")
            )
          }
        }
        /** `count` records left the head of the buffer (written, or dropped): the spools they came from go once all of theirs did. */
        const consumed = (count: number) => {
          if (fromSpool === 0) return
          fromSpool = Math.max(0, fromSpool - count)
          if (fromSpool === 0) claimed?.release()
        }

        /** Writes batches until the buffer is empty (true) or the store refuses one (false). */
        const writeAll = Effect.gen(function*() {
          while (buffer.length > 0) {
            const batch = buffer.slice(0, options.batchSize)
            const written = yield* store.appendAudit(batch).pipe(
              Effect.as(true),
              Effect.catch((error) => {
                storeFailed()
                return Effect.as(
                  outage.failed()
                    ? Effect.logError(`audit records cannot be written (${error.message}); ${buffer.length} buffered, retrying with backoff`)
                    : Effect.void,
                  false
                )
              })
            )
            if (!written) return false
            buffer = buffer.slice(batch.length)
            consumed(batch.length)
          }
          const lasted = outage.succeeded()
          if (lasted !== undefined) yield* Effect.logInfo(`audit records are written again after ${Math.round(lasted)} ms`)
          return true
        })
        // Serialise writers so the periodic flush and an explicit flush never write a record twice.
        const lock = yield* Semaphore.make(1)
        const write = lock.withPermits(1)(writeAll)
        const flush = Effect.asVoid(write)

        const loop = Effect.gen(function*() {
          let attempt = 0
          while (true) {
            if (outage.down) yield* Effect.sleep(Duration.millis(backoffDelayMs(attempt++, DEFAULT_BACKOFF)))
            else {
              attempt = 0
              yield* Deferred.await(wake).pipe(Effect.timeoutOption(options.flushInterval))
            }
            wake = yield* Deferred.make<void>()
            yield* write
          }
        })
        const context = yield* Effect.context<never>()
        const writer = yield* Effect.forkScoped(loop)
        // Spooled records are written at once, not after a flush interval.
        if (buffer.length > 0) Deferred.doneUnsafe(wake, Effect.void)
        yield* Effect.addFinalizer(() =>
          Effect.gen(function*() {
            yield* Fiber.interrupt(writer)
            // Not waiting for a write stuck on a frozen store: what it may still write later is
            // also spooled, and written twice at worst, never lost.
            yield* Effect.ignore(abandonAfter(writeAll, STOP_WRITE_TIMEOUT))
            if (dropped > 0) reportLoss("audit records dropped from a full buffer", dropped)
            if (buffer.length === 0) return
            const left = buffer
            if (spool === undefined) {
              reportLoss("audit records", left.length)
              return yield* Effect.logError(`audit: ${left.length} records could not be written and there is no data directory to spool them to`)
            }
            yield* Effect.try({ try: () => writeSpool(spool, left), catch: spoolFailure }).pipe(
              Effect.andThen(Effect.sync(() => {
                buffer = []
                // Their records are all in this process's own spool now.
                claimed?.release()
              })),
              Effect.andThen(Effect.logWarning(`audit: ${left.length} records spooled to ${spool}; the next start writes them`)),
              Effect.catch((error) => {
                // Those still in the spool files this start took stay there for the next start.
                const lost = left.length - fromSpool
                reportLoss("audit records", lost)
                return Effect.logError(
                  `audit: could not spool ${left.length} records to ${spool}: ${lost} records lost` +
                    (fromSpool > 0 ? ` (${fromSpool} stay in the spool files this start took)` : "") + `; ${error.message}`
                )
              })
            )
          })
        )

        return Audit.of({
          append: (record) => {
            buffer.push(record)
            if (buffer.length > maxBuffered) {
              const over = buffer.length - maxBuffered
              buffer.splice(0, over)
              consumed(over)
              dropped += over
              droppedUnlogged += over
              const now = performance.now()
              if (now - lastDropLog >= DROP_LOG_INTERVAL_MS) {
                lastDropLog = now
                Effect.runFork(Effect.provideContext(logDrops, context))
              }
            }
            if (buffer.length >= options.batchSize) Deferred.doneUnsafe(wake, Effect.void)
          },
          flush,
          dropped: () => dropped,
          buffered: () => buffer.length
        })
      })
    )
}
