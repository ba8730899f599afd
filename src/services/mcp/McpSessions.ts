/**
 * MCP sessions owned by the gateway, kept in the store so any replica serves any session (no
 * sticky routing). A session belongs to the key that opened it: presented with another key it
 * is answered exactly like an unknown one. Expiry slides with every use.
 */
import { Context, Duration, Effect, Layer, Schedule } from "effect"
import { randomBytes } from "node:crypto"
import { type DependencyUnavailable, SessionExpired } from "../../domain/errors.ts"
import type { McpSessionRecord } from "../../domain/records.ts"
import { storeUnavailable } from "../credits/Credits.ts"
import { McpSessionsRepo } from "../store/McpSessionsRepo.ts"

const expired = () =>
  new SessionExpired({ message: "unknown or expired MCP session: start a new one with initialize" })

export class McpSessions extends Context.Service<McpSessions, {
  readonly open: (keyId: string, protocolVersion: string) => Effect.Effect<McpSessionRecord, DependencyUnavailable>
  /** The session if it is live and this key's, its expiry pushed forward; otherwise 404 session_expired. */
  readonly use: (id: string, keyId: string) => Effect.Effect<McpSessionRecord, SessionExpired | DependencyUnavailable>
  readonly close: (id: string, keyId: string) => Effect.Effect<void, SessionExpired | DependencyUnavailable>
}>()("modelgate/McpSessions") {
  static readonly layer = (ttlSeconds: number) =>
    Layer.effect(
      McpSessions,
      Effect.gen(function*() {
        const store = yield* McpSessionsRepo
        const ttlMs = ttlSeconds * 1000
        const use = (id: string, keyId: string) =>
          Effect.gen(function*() {
            // The key is part of the match: another key's request never touches the session. Its
            // expiry is the store's clock (any replica may serve the next request).
            const session = yield* store.touchSession(id, keyId, ttlMs).pipe(
              Effect.mapError(storeUnavailable)
            )
            if (session === undefined) return yield* expired()
            return session
          })
        // Expired sessions are answered as unknown already; this only keeps the table small.
        const prune = store.deleteExpiredSessions.pipe(
          Effect.catch((error) => Effect.logWarning("could not prune expired MCP sessions", error))
        )
        yield* Effect.forkScoped(Effect.repeat(prune, Schedule.spaced(Duration.minutes(5))))
        return McpSessions.of({
          open: (keyId, protocolVersion) =>
            store.insertSession({ id: `mcp_${randomBytes(24).toString("hex")}`, key_id: keyId, protocol_version: protocolVersion }, ttlMs).pipe(
              Effect.mapError(storeUnavailable)
            ),
          use,
          close: (id, keyId) =>
            Effect.flatMap(use(id, keyId), () => store.deleteSession(id, keyId).pipe(Effect.mapError(storeUnavailable)))
        })
      })
    )
}
