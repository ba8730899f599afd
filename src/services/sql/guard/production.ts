/**
 * Production connections (issue 36): no schema change runs on them, whatever the key's role.
 * An allow-list over the guard's own classification: reads pass (they run in a read-only
 * transaction anyway), and of the writes only those whose kind is a data change the guard
 * recognised (INSERT, UPDATE, DELETE, MERGE, REPLACE, a locking or sequence-advancing SELECT).
 * Every other write kind, CREATE, ALTER, DROP, TRUNCATE, RENAME, COMMENT, CALL, VACUUM, REINDEX,
 * a SELECT INTO..., and anything the guard learns to classify later, is refused. Statements the
 * guard cannot see into (DO blocks, EXECUTE, PREPARE, stacked statements) it already refuses for
 * every connection.
 */
import type { Finding } from "./verdict.ts"
import { type Dialect, refused, type Verdict } from "./verdict.ts"

const DATA_CHANGES = new Set([
  "INSERT",
  "UPDATE",
  "DELETE",
  "MERGE",
  "REPLACE",
  // A SELECT the guard made a write: nextval(), a function the catalogue says may change data
  // (checked again below), or a locking clause.
  "SELECT",
  "SELECT FOR UPDATE",
  "SELECT FOR NO KEY UPDATE",
  "SELECT FOR SHARE",
  "SELECT FOR KEY SHARE",
  "SELECT LOCK IN SHARE MODE"
])

export const isDataChange = (kind: string): boolean => DATA_CHANGES.has(kind)

const refusal = (kind: string, why: string): Verdict =>
  refused(kind, `this connection is marked production, where schema changes are refused for every key: ${why}`)

/** The verdict on a production connection: a write that is not a known data change is refused. */
export const productionVerdict = (verdict: Verdict): Verdict =>
  verdict.verdict !== "write" || isDataChange(verdict.kind)
    ? verdict
    : refusal(verdict.kind, `${verdict.kind} is not a data change (only reads, INSERT, UPDATE, DELETE and MERGE run here).`)

/**
 * A data change that calls a function the catalogue says may write is refused too on Postgres,
 * where a volatile function (or one of another owner) can run DDL the guard cannot see. MySQL
 * stored functions cannot commit, so cannot run DDL: there they stay data changes.
 */
export const productionCalls = (dialect: Dialect, verdict: Verdict, findings: ReadonlyArray<Finding>): Verdict => {
  if (verdict.verdict !== "write" || dialect !== "postgres") return verdict
  const hidden = findings.find((f) => f.level === "write")
  return hidden === undefined ? verdict : refusal(verdict.kind, `${hidden.reason} It could change the schema unseen.`)
}
