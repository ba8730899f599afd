/**
 * The audit trail (decisions section 8): one record per request, appended to an in-memory
 * buffer on the request path and written to the store in batches by a background fiber. The
 * layer's finalizer writes whatever is left, so a graceful stop (SIGTERM/SIGINT) loses nothing.
 */
import { Context, Deferred, Duration, Effect, Layer, Semaphore } from "effect"
import type { AuditRecord } from "../../domain/records.ts"
import { Store } from "../store/Store.ts"

/** Beyond this many unwritten records (store down for a long time) the oldest are dropped, loudly. */
const MAX_BUFFERED = 200_000

export interface AuditShape {
  /** Never blocks and never fails: safe to call from anywhere, including Node callbacks. */
  readonly append: (record: AuditRecord) => void
  /** Writes everything buffered so far; used by tests and shutdown. */
  readonly flush: Effect.Effect<void>
}

export class Audit extends Context.Service<Audit, AuditShape>()("modelgate/Audit") {
  static readonly makeLayer = (options: { readonly flushInterval: Duration.Input; readonly batchSize: number }) =>
    Layer.effect(
      Audit,
      Effect.gen(function*() {
        const store = yield* Store
        let buffer: Array<AuditRecord> = []
        let wake = yield* Deferred.make<void>()

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
        yield* Effect.forkScoped(loop)
        yield* Effect.addFinalizer(() => flush)

        return Audit.of({
          append: (record) => {
            buffer.push(record)
            if (buffer.length > MAX_BUFFERED) buffer.splice(0, buffer.length - MAX_BUFFERED)
            if (buffer.length >= options.batchSize) Deferred.doneUnsafe(wake, Effect.void)
          },
          flush
        })
      })
    )
}
