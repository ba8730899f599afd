/**
 * Authentication of client requests: one API key from `Authorization: Bearer` or `x-api-key`,
 * checked against the cached key record. Rules (spec section 5, docs/decisions.md section 3):
 * missing, malformed, unknown or deleted -> unauthorized; inactive or expired -> key_inactive.
 * When both headers carry a key they must be the same key, otherwise the request is refused:
 * guessing which one the client meant could authenticate it as the wrong principal.
 */
import { Clock, Context, Effect, Layer, Schedule } from "effect"
import type { Headers } from "effect/http/Headers"
import { type DependencyUnavailable, KeyInactive, Unauthorized } from "../../domain/errors.ts"
import { storeUnavailable } from "../credits/Credits.ts"
import type { ApiKeyRecord } from "../../domain/records.ts"
import { hashKey, KEY_PATTERN } from "../keys/key-material.ts"
import { KeysRepo } from "../store/KeysRepo.ts"
import { KeyCache } from "./KeyCache.ts"

export interface AuthShape {
  readonly authenticate: (headers: Headers) => Effect.Effect<ApiKeyRecord, Unauthorized | KeyInactive | DependencyUnavailable>
}

const bearerPattern = /^Bearer\s+(.+)$/i

/** The key the request presents, or an Unauthorized explaining why there is none. */
export const presentedKey = (headers: Headers): string | Unauthorized => {
  const authorization = headers["authorization"]
  const apiKeyHeader = headers["x-api-key"]?.trim()
  let bearer: string | undefined
  if (authorization !== undefined) {
    const match = bearerPattern.exec(authorization.trim())
    if (!match) return new Unauthorized({ message: "Authorization header must be `Bearer <API key>`" })
    bearer = match[1]!.trim()
  }
  if (bearer !== undefined && apiKeyHeader !== undefined && apiKeyHeader !== "" && bearer !== apiKeyHeader) {
    return new Unauthorized({ message: "Authorization and x-api-key carry different keys; send one key" })
  }
  const key = bearer ?? apiKeyHeader
  if (key === undefined || key === "") {
    return new Unauthorized({ message: "missing API key: send `Authorization: Bearer <key>` or `x-api-key: <key>`" })
  }
  if (!KEY_PATTERN.test(key)) {
    return new Unauthorized({ message: "malformed API key: expected sk-mg- followed by 32 hexadecimal characters" })
  }
  return key
}

export class Auth extends Context.Service<Auth, AuthShape>()("modelgate/Auth") {
  static readonly layer = Layer.effect(
    Auth,
    Effect.gen(function*() {
      const store = yield* KeysRepo
      const cache = yield* KeyCache
      let lastUsed = new Map<string, string>()

      const lookup = (hash: string): Effect.Effect<ApiKeyRecord | null, DependencyUnavailable> => {
        const cached = cache.get(hash)
        if (cached !== undefined) return Effect.succeed(cached)
        return store.findKeyByHash(hash).pipe(
          Effect.map((record) => record ?? null),
          Effect.tap((record) => Effect.sync(() => cache.set(hash, record))),
          // A store that cannot answer is an outage (503), not a client error and not a crash.
          Effect.mapError(storeUnavailable)
        )
      }

      const authenticate = Effect.fnUntraced(function*(headers: Headers) {
        const key = presentedKey(headers)
        if (typeof key !== "string") return yield* key
        const hash = hashKey(key)
        const record = yield* lookup(hash)
        if (record === null) return yield* new Unauthorized({ message: "unknown API key" })
        // Effect's Clock, so tests can move time past an expiry or a rotation's grace.
        const now = yield* Clock.currentTimeMillis
        if (record.key_hash !== hash) {
          // Presented the key replaced by a rotation: valid only during its grace period.
          const until = record.previous_key_expires_at
          if (until === null || Date.parse(until) <= now) {
            return yield* new Unauthorized({ message: "this key was rotated and is no longer valid" })
          }
        }
        if (!record.is_active) return yield* new KeyInactive({ message: "this API key is inactive" })
        if (record.expires_at !== null && Date.parse(record.expires_at) <= now) {
          return yield* new KeyInactive({ message: `this API key expired at ${record.expires_at}` })
        }
        lastUsed.set(record.id, new Date(now).toISOString())
        return record
      })

      // last_used_at is written in batches off the request path, and once more on shutdown.
      const flushLastUsed = Effect.suspend(() => {
        if (lastUsed.size === 0) return Effect.void
        const batch = lastUsed
        lastUsed = new Map()
        return store.touchKeys(batch)
      }).pipe(Effect.catch((error) => Effect.logWarning("could not record key last use", error)))
      yield* Effect.forkScoped(Effect.repeat(flushLastUsed, Schedule.spaced("1 second")))
      yield* Effect.addFinalizer(() => flushLastUsed)

      return Auth.of({ authenticate })
    })
  )
}
