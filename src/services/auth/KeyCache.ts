/**
 * In-process cache of key records by hash, so authentication does not hit the store on every
 * request. Local changes clear it at once; changes made by another replica or by the CLI are
 * noticed by polling the store's key-change counter (one indexed read per interval).
 */
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schedule from "effect/Schedule"
import type { ApiKeyRecord } from "../../domain/records.ts"
import { KeysRepo } from "../store/KeysRepo.ts"

const MAX_ENTRIES = 50_000

export interface KeyCacheShape {
  /** `null` caches "no such key" so floods of bad keys stay off the store too. */
  readonly get: (hash: string) => ApiKeyRecord | null | undefined
  readonly set: (hash: string, record: ApiKeyRecord | null) => void
  readonly invalidate: Effect.Effect<void>
}

export class KeyCache extends Context.Service<KeyCache, KeyCacheShape>()("modelgate/KeyCache") {
  static readonly makeLayer = (pollInterval: Duration.Input) =>
    Layer.effect(
      KeyCache,
      Effect.gen(function*() {
        const store = yield* KeysRepo
        const entries = new Map<string, ApiKeyRecord | null>()
        let seenVersion = yield* Effect.orElseSucceed(store.keyChangeVersion, () => -1)
        const poll = Effect.gen(function*() {
          const version = yield* store.keyChangeVersion
          if (version !== seenVersion) {
            seenVersion = version
            entries.clear()
          }
        }).pipe(Effect.catch(() => Effect.sync(() => entries.clear())))
        yield* Effect.forkScoped(Effect.repeat(poll, Schedule.spaced(pollInterval)))
        return KeyCache.of({
          get: (hash) => entries.get(hash),
          set: (hash, record) => {
            if (entries.size >= MAX_ENTRIES) entries.clear()
            entries.set(hash, record)
          },
          invalidate: Effect.sync(() => entries.clear())
        })
      })
    )

  static readonly layer = KeyCache.makeLayer(Duration.millis(250))
}
