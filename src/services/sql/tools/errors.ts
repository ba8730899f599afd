/**
 * How the SQL tools' failures become spec section 7 errors. Driver messages are already
 * scrubbed of credentials by the drivers; they are scrubbed again here against both DSNs of
 * the connection, so no driver change can ever put a DSN or password in front of a client.
 */
import { createHash } from "node:crypto"
import {
  ConnectionUnreachable,
  QueryTooDangerous,
  ScopeViolation,
  SqlGateBlocked,
  UpstreamTimeout,
  ValidationFailed
} from "../../../domain/errors.ts"
import type { ConnectionRecord } from "../../../domain/records.ts"
import { makeRedactor, type SqlDriverError } from "../drivers/SqlDrivers.ts"
import type { ExplainVerdict, Verdict } from "../guard/index.ts"

/** What the audit trail keeps instead of the statement: equal statements share a hash, and the text never leaves. */
export const statementHash = (statement: string): string => createHash("sha256").update(statement, "utf8").digest("hex")

/** The same answer for a connection that does not exist and one the key has no grant on. */
export const noAccess = (connectionId: number) =>
  new ScopeViolation({
    message: `this API key has no access to connection ${connectionId}`,
    details: { connection_id: connectionId }
  })

export const refusedStatement = (verdict: Extract<Verdict, { verdict: "refused" }>) =>
  new QueryTooDangerous({
    message: `the statement is refused for every role: ${verdict.reason}`,
    details: { statement_kind: verdict.kind }
  })

export const gateBlocked = (verdict: Verdict) =>
  new SqlGateBlocked({
    message: verdict.verdict === "write" && verdict.reason !== undefined
      ? `${verdict.kind} needs the edit role on this connection (${verdict.reason}); this API key has read`
      : `${verdict.kind} writes or changes the schema and needs the edit role on this connection; this API key has read`,
    details: { statement_kind: verdict.kind, required_role: "edit", role: "read" }
  })

export const refusedExplain = (verdict: ExplainVerdict) =>
  verdict.verdict === "refused"
    ? new QueryTooDangerous({
      message: `the statement cannot be explained: ${verdict.reason}`,
      details: { statement_kind: verdict.kind, explained_kind: verdict.inner.kind }
    })
    : new QueryTooDangerous({
      message: `EXPLAIN ANALYZE executes the ${verdict.inner.kind} it explains, which needs the edit role; ` +
        "this API key has read (plain EXPLAIN is allowed)",
      details: { statement_kind: verdict.kind, explained_kind: verdict.inner.kind }
    })

export const makeScrubber = (connection: ConnectionRecord): ((text: string) => string) => {
  const redactors = [connection.url, connection.read_url].filter((url) => url !== null).map(makeRedactor)
  // The tunnel's inline secrets too, should a library ever quote one (ssh-tunnel.ts never does).
  const sshSecrets = [connection.ssh?.password, connection.ssh?.private_key].filter((secret): secret is string => secret !== undefined && secret.length >= 4)
  return (text) => sshSecrets.reduce((acc, secret) => acc.split(secret).join("***"), redactors.reduce((acc, redact) => redact(acc), text))
}

export const fromDriverError = (error: SqlDriverError, connection: ConnectionRecord) => {
  const scrub = makeScrubber(connection)
  switch (error._tag) {
    case "SqlConnectionUnreachable":
      return new ConnectionUnreachable({
        message: scrub(error.message),
        details: {
          connection_id: connection.id,
          hop: error.hop ?? "database",
          ...(error.reason === undefined ? {} : { reason: error.reason })
        }
      })
    case "SqlQueryTimeout":
      return new UpstreamTimeout({
        message: scrub(error.message),
        details: { connection_id: connection.id, timeout_ms: error.timeoutMs }
      })
    case "SqlQueryFailed": {
      const databaseMessage = scrub(error.message)
      return new ValidationFailed({
        status: 422,
        message: `the database refused the statement: ${databaseMessage}`,
        details: {
          code: error.code,
          ...(error.sqlstate !== undefined && error.sqlstate !== error.code ? { sqlstate: error.sqlstate } : {}),
          database_message: databaseMessage
        }
      })
    }
  }
}
