/**
 * The audit trail (docs/decisions.md section 8): one record per request, appended to an in-memory
 * buffer on the request path and written to the store in batches by a background fiber. The
 * layer's finalizer writes whatever is left, so a graceful stop (SIGTERM/SIGINT) loses nothing.
 */
import { Context, Deferred, Duration, Effect, Layer, Semaphore } from "effect"
import type { AuditRecord } from "../../domain/records.ts"
import { Store } from "../store/Store.ts"

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
}

export class Audit extends Context.Service<Audit, AuditShape>()("modelgate/Audit") {
  /** Keeps every record in memory, in order, for tests that assert on audit contents without a store. */
  static readonly layerCollect = () => {
    const records: Array<AuditRecord> = []
    const layer = Layer.succeed(Audit, Audit.of({ append: (record) => void records.push(record), flush: Effect.void, dropped: () => 0 }))
    return { layer, records }
  }

  static readonly makeLayer = (options: {
    readonly flushInterval: Duration.Input
    readonly batchSize: number
    readonly maxBuffered?: number
  }) =>
    Layer.effect(
      Audit,
      Effect.gen(function*() {
        const store = yield* Store
        let buffer: Array<AuditRecord> = []
        let wake = yield* Deferred.make<void>()
        const maxBuffered = options.maxBuffered ?? MAX_BUFFERED
        let dropped = 0
        let droppedUnlogged = 0
        let lastDropLog = 0
        // append is synchronous and may run outside any fiber, so the log line is written by a
        // fiber of its own, at most once per interval, with the count since the last one.
        const logDrops = Effect.suspend(() => {
          const count = droppedUnlogged
          droppedUnlogged = 0
          return Effect.logError(
            `audit buffer full (${maxBuffered} unwritten records; the store is not accepting writes): dropped ${count} oldest records, ${dropped} in all`
          )
        })

        const writeAll = Effect.gen(function*() {
          while (buffer.length > 0) {
            const batch = buffer.slice(0, options.batchSize)
            const written = yield* store.appendAudit(batch).pipe(
              Effect.as(true),
              Effect.catch((error) => Effect.as(Effect.logError("audit write failed; will retry", error), false))
            )
            if (!written) return
            buffer = buffer.slice(batch.length)
          }
        })
        // Serialise writers so the periodic flush and an explicit flush never write a record twice.
        const lock = yield* Semaphore.make(1)
        const flush = lock.withPermits(1)(writeAll)

        const loop = Effect.gen(function*() {
          while (true) {
            yield* Deferred.await(wake).pipe(Effect.timeoutOption(options.flushInterval))
            wake = yield* Deferred.make<void>()
            yield* flush
          }
        })
        const context = yield* Effect.context<never>()
        yield* Effect.forkScoped(loop)
        yield* Effect.addFinalizer(() => flush)

        return Audit.of({
          append: (record) => {
            buffer.push(record)
            if (buffer.length > maxBuffered) {
              const over = buffer.length - maxBuffered
              buffer.splice(0, over)
              dropped += over
              droppedUnlogged += over
              const now = Date.now()
              if (now - lastDropLog >= DROP_LOG_INTERVAL_MS) {
                lastDropLog = now
                Effect.runFork(Effect.provideContext(logDrops, context))
              }
            }
            if (buffer.length >= options.batchSize) Deferred.doneUnsafe(wake, Effect.void)
          },
          flush,
          dropped: () => dropped
        })
      })
    )
}
