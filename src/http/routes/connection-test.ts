/**
 * `POST /connections/:id/test`: connect with each DSN of a connection (the edit `url`, and the
 * `read_url` when it differs) and report the server version or the reason it failed, so an
 * operator learns about a typo before a key's first tool call does. Each probe gets its own
 * one-connection pool, closed when the probe ends, and a deadline.
 */
import { Effect } from "effect"
import type { ConnectionRecord } from "../../domain/records.ts"
import { SqlDrivers } from "../../services/sql/drivers/SqlDrivers.ts"
import { redactDsn } from "../../services/sql/Connections.ts"

const PROBE_TIMEOUT_MS = 10_000

export interface ProbeResult {
  readonly role: "edit" | "read"
  readonly url: string
  readonly ok: boolean
  readonly version?: string
  readonly flavor?: string
  readonly error?: {
    readonly error: string
    readonly message: string
    /** For connection_unreachable: the hop that failed (`ssh` or `database`) and, for the tunnel, why. */
    readonly details?: { readonly hop: "ssh" | "database"; readonly reason?: string }
  }
  /** The same as `error.details`, where a client reading a failed result's `details.hop` looks first. */
  readonly details?: { readonly hop: "ssh" | "database"; readonly reason?: string }
  readonly duration_ms: number
}

const slugOf = (tag: string) =>
  tag === "SqlConnectionUnreachable" ? "connection_unreachable" : tag === "SqlQueryTimeout" ? "upstream_timeout" : "query_failed"

const probe = (connection: ConnectionRecord, role: "edit" | "read", url: string) =>
  Effect.gen(function*() {
    const drivers = yield* SqlDrivers
    const started = performance.now()
    const elapsed = () => Math.round(performance.now() - started)
    const outcome = yield* Effect.scoped(
      Effect.flatMap(drivers.make({ dialect: connection.dialect, url, poolSize: 1, ssh: connection.ssh }), (driver) => driver.serverInfo)
    ).pipe(
      Effect.timeoutOption(PROBE_TIMEOUT_MS),
      Effect.result
    )
    const base = { role, url: redactDsn(url) }
    if (outcome._tag === "Failure") {
      const failure = outcome.failure
      const details = failure._tag === "SqlConnectionUnreachable"
        ? { details: { hop: failure.hop ?? "database", ...(failure.reason === undefined ? {} : { reason: failure.reason }) } }
        : {}
      return { ...base, ok: false, error: { error: slugOf(failure._tag), message: failure.message, ...details }, ...details, duration_ms: elapsed() }
    }
    if (outcome.success._tag === "None") {
      return {
        ...base,
        ok: false,
        error: { error: "upstream_timeout", message: `no answer within ${PROBE_TIMEOUT_MS} ms` },
        duration_ms: elapsed()
      }
    }
    const info = outcome.success.value
    return { ...base, ok: true, version: info.version, flavor: info.flavor, duration_ms: elapsed() }
  })

export const testConnection = (connection: ConnectionRecord) =>
  Effect.all(
    [
      probe(connection, "edit", connection.url),
      ...(connection.read_url !== null && connection.read_url !== connection.url ? [probe(connection, "read", connection.read_url)] : [])
    ],
    { concurrency: "unbounded" }
  ) as Effect.Effect<ReadonlyArray<ProbeResult>, never, SqlDrivers>
