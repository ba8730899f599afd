/**
 * MCP sessions: owned by one key, alive until a sliding expiry. Their times are the store's
 * clock (store-clock.ts): any replica may serve the session's next request.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { SqlClient } from "effect/sql/SqlClient"
import type { McpSessionRecord } from "../../domain/records.ts"
import { decodeRows } from "./rows.ts"
import { storeDialect, storeIso } from "./store-clock.ts"
import { storeOp, type StoreError } from "./StoreError.ts"

const SessionRow = Schema.Struct({
  id: Schema.String,
  key_id: Schema.String,
  protocol_version: Schema.String,
  created_at: Schema.String,
  expires_at: Schema.String
})

const decodeSessions = decodeRows(SessionRow)

export class McpSessionsRepo extends Context.Service<McpSessionsRepo, {
  /** A new session, created now and expiring `ttlMs` later by the store's clock; as stored. */
  readonly insertSession: (
    session: Omit<McpSessionRecord, "created_at" | "expires_at">,
    ttlMs: number
  ) => Effect.Effect<McpSessionRecord, StoreError>
  /**
   * The live session with this id owned by this key, its expiry slid forward to `ttlMs` from now
   * in the same statement (sliding TTL); undefined when unknown, expired or another key's, in which
   * case nothing was changed: ownership is part of the match, so another key cannot keep a
   * session alive.
   */
  readonly touchSession: (id: string, keyId: string, ttlMs: number) => Effect.Effect<McpSessionRecord | undefined, StoreError>
  /** Deletes the session if this key owns it. */
  readonly deleteSession: (id: string, keyId: string) => Effect.Effect<void, StoreError>
  readonly deleteExpiredSessions: Effect.Effect<void, StoreError>
}>()("modelgate/McpSessionsRepo") {
  static readonly layer = Layer.effect(
    McpSessionsRepo,
    Effect.gen(function*() {
      const sql = yield* SqlClient
      const dialect = yield* storeDialect
      const now = sql.literal(storeIso(dialect))
      return McpSessionsRepo.of({
        insertSession: (session, ttlMs) =>
          sql`INSERT INTO mcp_sessions (id, key_id, protocol_version, created_at, expires_at)
              VALUES (${session.id}, ${session.key_id}, ${session.protocol_version}, ${now}, ${sql.literal(storeIso(dialect, ttlMs))})
              RETURNING id, key_id, protocol_version, created_at, expires_at`.pipe(
            decodeSessions,
            Effect.flatMap((rows) => rows[0] === undefined ? Effect.die(new Error("INSERT ... RETURNING gave no row")) : Effect.succeed(rows[0])),
            storeOp("McpSessionsRepo.insertSession")
          ),
        touchSession: (id, keyId, ttlMs) =>
          sql`UPDATE mcp_sessions SET expires_at = ${sql.literal(storeIso(dialect, ttlMs))}
              WHERE id = ${id} AND key_id = ${keyId} AND expires_at > ${now}
              RETURNING id, key_id, protocol_version, created_at, expires_at`.pipe(
            decodeSessions,
            Effect.map((rows) => rows[0]),
            storeOp("McpSessionsRepo.touchSession")
          ),
        deleteSession: (id, keyId) =>
          sql`DELETE FROM mcp_sessions WHERE id = ${id} AND key_id = ${keyId}`.pipe(Effect.asVoid, storeOp("McpSessionsRepo.deleteSession")),
        deleteExpiredSessions: sql`DELETE FROM mcp_sessions WHERE expires_at <= ${now}`.pipe(Effect.asVoid, storeOp("McpSessionsRepo.deleteExpiredSessions"))
      })
    })
  )
}
