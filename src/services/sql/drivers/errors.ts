/**
 * What a driver call can fail with. The SqlTools service maps these onto spec section 7:
 * unreachable -> 502 `connection_unreachable`, timeout -> 504, refused statement -> a tool error
 * carrying the database's own code and message.
 */
import { Schema } from "effect"
import { dsnSecrets } from "../dsn.ts"

/** The database could not be reached or refused the login (DNS, refused, TLS, auth, unknown database). */
export class SqlConnectionUnreachable extends Schema.TaggedError<SqlConnectionUnreachable>()(
  "SqlConnectionUnreachable",
  {
    message: Schema.String,
    /** The hop that failed (issue 36): the SSH tunnel, or the database itself (the default). */
    hop: Schema.optional(Schema.Literals(["ssh", "database"])),
    /** Set for the tunnel's failures: server_unreachable, host_key_mismatch, auth_refused, timeout... */
    reason: Schema.optional(Schema.String)
  }
) {}

/** The statement ran past its deadline; the server-side query has been cancelled and its connection discarded. */
export class SqlQueryTimeout extends Schema.TaggedError<SqlQueryTimeout>()("SqlQueryTimeout", {
  timeoutMs: Schema.Number,
  message: Schema.String
}) {}

/**
 * The database refused the statement: syntax, missing table, permission, read-only violation...
 * `code` is the SQLSTATE on Postgres and the server errno (as a string) on MySQL/MariaDB, where
 * `sqlstate` carries the SQLSTATE as well.
 */
export class SqlQueryFailed extends Schema.TaggedError<SqlQueryFailed>()("SqlQueryFailed", {
  code: Schema.String,
  sqlstate: Schema.optional(Schema.String),
  message: Schema.String
}) {}

export type SqlDriverError = SqlConnectionUnreachable | SqlQueryTimeout | SqlQueryFailed

export const queryTimeout = (timeoutMs: number) =>
  new SqlQueryTimeout({ timeoutMs, message: `the statement did not finish within ${timeoutMs} ms and was cancelled` })

/**
 * Builds the scrubber every driver message goes through. Messages are composed from server
 * errors and socket codes, which do not carry the DSN, but a driver upgrade or an unusual
 * server message must still never be able to echo the URL or its password to a client.
 */
export const makeRedactor = (url: string): ((text: string) => string) => {
  // The URL itself first (longest), then each secret it carries (dsn.ts), wherever they appear.
  const secrets = new Set<string>([url, ...dsnSecrets(url)])
  const ordered = [...secrets].filter((secret) => secret.length > 0).sort((a, b) => b.length - a.length)
  return (text) => ordered.reduce((acc, secret) => acc.split(secret).join("***"), text)
}

/** `host:port` for messages, never the credentials. */
export const describeEndpoint = (url: string, defaultPort: number): string => {
  try {
    const parsed = new URL(url)
    return `${parsed.hostname || "localhost"}:${parsed.port || defaultPort}`
  } catch {
    return "an unparsable connection URL"
  }
}
