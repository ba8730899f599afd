/**
 * Authentication of client requests: one credential from `Authorization: Bearer` or `x-api-key`.
 * An API key (`sk-mg-...`) is checked against the cached key record. Rules (spec section 5,
 * docs/decisions.md section 3): missing, malformed, unknown or deleted -> unauthorized; inactive or
 * expired -> key_inactive. When both headers carry a value they must be the same, otherwise the
 * request is refused: guessing which one the client meant could authenticate it as the wrong
 * principal. Any other bearer value is tried as an identity-provider token when `auth.oidc` is
 * configured (IdentityTokens, decisions section 11); without it, it stays a malformed key.
 */
import { Clock, Context, Effect, Layer, Option, Schedule } from "effect"
import type { Headers } from "effect/http/Headers"
import { type DependencyUnavailable, KeyInactive, Unauthorized } from "../../domain/errors.ts"
import { storeUnavailable } from "../credits/Credits.ts"
import type { ApiKeyRecord, Principal } from "../../domain/records.ts"
import { IdentityTokens } from "../identity/IdentityTokens.ts"
import { hashKey, KEY_PATTERN } from "../keys/key-material.ts"
import { KeysRepo } from "../store/KeysRepo.ts"
import { KeyCache } from "./KeyCache.ts"

export interface AuthShape {
  readonly authenticate: (headers: Headers) => Effect.Effect<Principal, Unauthorized | KeyInactive | DependencyUnavailable>
}

const bearerPattern = /^Bearer\s+(.+)$/i

/** What the request presents: an API key, another bearer value (maybe a token), or why there is nothing usable. */
export type PresentedCredential =
  | { readonly kind: "key"; readonly value: string }
  | { readonly kind: "bearer"; readonly value: string }

export const presentedCredential = (headers: Headers): PresentedCredential | Unauthorized => {
  const authorization = headers["authorization"]
  const apiKeyHeader = headers["x-api-key"]?.trim()
  let bearer: string | undefined
  if (authorization !== undefined) {
    const match = bearerPattern.exec(authorization.trim())
    if (!match) return new Unauthorized({ message: "Authorization header must be `Bearer <API key or token>`" })
    bearer = match[1]!.trim()
  }
  if (bearer !== undefined && apiKeyHeader !== undefined && apiKeyHeader !== "" && bearer !== apiKeyHeader) {
    return new Unauthorized({ message: "Authorization and x-api-key carry different keys; send one key" })
  }
  const value = bearer ?? apiKeyHeader
  if (value === undefined || value === "") {
    return new Unauthorized({
      message: "missing API key: send `Authorization: Bearer <key>` or `x-api-key: <key>`",
      missing: true
    })
  }
  if (KEY_PATTERN.test(value)) return { kind: "key", value }
  if (bearer !== undefined) return { kind: "bearer", value }
  return new Unauthorized({ message: MALFORMED_KEY })
}

const MALFORMED_KEY = "malformed API key: expected sk-mg- followed by 32 hexadecimal characters"

/** What a key may do, as every stage after authentication sees it. */
const keyPrincipal = (record: ApiKeyRecord): Principal => ({
  kind: "key",
  id: record.id,
  allowed_models: record.allowed_models,
  tools_enabled: record.tools_enabled,
  mcp_servers: record.mcp_servers,
  budget: record.budget,
  limits: record.limits,
  team: record.team ?? null
})

export class Auth extends Context.Service<Auth, AuthShape>()("modelgate/Auth") {
  static readonly layer = Layer.effect(
    Auth,
    Effect.gen(function*() {
      const store = yield* KeysRepo
      const cache = yield* KeyCache
      const identity = Option.getOrUndefined(yield* Effect.serviceOption(IdentityTokens))
      // Last use per key id, in epoch milliseconds: formatted as a timestamp only when written.
      let lastUsed = new Map<string, number>()

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

      const authenticateKey = Effect.fnUntraced(function*(key: string) {
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
        if (!record.is_active) return yield* new KeyInactive({ message: "this API key is inactive", keyId: record.id })
        if (record.expires_at !== null && Date.parse(record.expires_at) <= now) {
          return yield* new KeyInactive({ message: `this API key expired at ${record.expires_at}`, keyId: record.id })
        }
        lastUsed.set(record.id, now)
        return keyPrincipal(record)
      })

      const authenticate = (headers: Headers): Effect.Effect<Principal, Unauthorized | KeyInactive | DependencyUnavailable> => {
        const credential = presentedCredential(headers)
        if (credential instanceof Unauthorized) return Effect.fail(credential)
        if (credential.kind === "key") return authenticateKey(credential.value)
        if (identity === undefined || !identity.enabled) return Effect.fail(new Unauthorized({ message: MALFORMED_KEY }))
        return identity.authenticate(credential.value)
      }

      // last_used_at is written in batches off the request path, and once more on shutdown.
      const flushLastUsed = Effect.suspend(() => {
        if (lastUsed.size === 0) return Effect.void
        const batch = new Map<string, string>()
        for (const [id, at] of lastUsed) batch.set(id, new Date(at).toISOString())
        lastUsed = new Map()
        return store.touchKeys(batch)
      }).pipe(Effect.catch((error) => Effect.logWarning("could not record key last use", error)))
      yield* Effect.forkScoped(Effect.repeat(flushLastUsed, Schedule.spaced("1 second")))
      yield* Effect.addFinalizer(() => flushLastUsed)

      return Auth.of({ authenticate })
    })
  )
}
