/**
 * The store's clock as the ISO 8601 text the expiry columns hold (what `Date.toISOString`
 * writes: `2026-11-28T12:00:00.000Z`), as SQL (issue 35 item 6). Rows several replicas judge by
 * time (stored responses, MCP sessions) are written and compared with the one clock they share,
 * like the credit leases (`storeNowMs`): a replica whose clock ran 31 days ahead found the
 * others' fresh rows expired, and its sweep deleted them.
 */
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { SqliteDatabase } from "./sqlite-client.ts"

export type Dialect = "sqlite" | "postgres"

/** The store's dialect, from the context of a repository's layer: the SQLite client layer also provides the raw connection. */
export const storeDialect: Effect.Effect<Dialect> = Effect.map(
  Effect.serviceOption(SqliteDatabase),
  (sqlite) => Option.isSome(sqlite) ? "sqlite" : "postgres"
)

/**
 * The store's now plus `offsetMs` (whole milliseconds), as ISO text; a SQL expression to inline.
 * One instant per statement (Postgres's `statement_timestamp()`, SQLite's `'now'`), so a row's
 * created_at and expires_at written together are exactly `offsetMs` apart.
 */
export const storeIso = (dialect: Dialect, offsetMs = 0): string => {
  const ms = Math.round(offsetMs)
  if (!Number.isSafeInteger(ms)) throw new Error(`not an offset in milliseconds: ${offsetMs}`)
  return dialect === "postgres"
    ? `to_char((statement_timestamp() + make_interval(secs => ${ms / 1000})) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`
    : `strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '${ms >= 0 ? "+" : ""}${ms / 1000} seconds')`
}
