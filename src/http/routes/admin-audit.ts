/**
 * What an admin action writes into its request's audit record (issue 26, item 5): the target it
 * acted on (`details.target: {kind, id}`), and what the target looked like before and after, as
 * the admin API shows it. Views never hold secrets (a key's hash, a DSN's password), so neither
 * do these. Only the fields that changed are kept, so a record says what changed, not everything
 * the target holds; a creation has only `after`, a deletion only `before`.
 *
 * Who acted (`details.actor`) is written by the admin guard (admin-auth.ts), which is where the
 * credential is known.
 */
import { Effect } from "effect"
import { CurrentRequest } from "../../pipelines/request.ts"

export type TargetKind = "api_key" | "connection" | "key_grant" | "workspace" | "subject" | "config" | "mcp_server" | "team"

export interface AuditTarget {
  readonly kind: TargetKind
  readonly id: string
}

const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b)

/** The fields of `before` and `after` that differ (a field only one side has counts as changed). */
export const changedFields = (
  before: Readonly<Record<string, unknown>>,
  after: Readonly<Record<string, unknown>>
): { readonly before: Record<string, unknown>; readonly after: Record<string, unknown> } => {
  const was: Record<string, unknown> = {}
  const now: Record<string, unknown> = {}
  for (const name of new Set([...Object.keys(before), ...Object.keys(after)])) {
    if (same(before[name], after[name])) continue
    if (name in before) was[name] = before[name]
    if (name in after) now[name] = after[name]
  }
  return { before: was, after: now }
}

/**
 * Records the target and the change on the current request's audit record. `before`/`after`
 * undefined: the target did not exist before (creation) or does not after (deletion).
 */
export const auditChange = (change: {
  readonly target: AuditTarget
  readonly before?: object | undefined
  readonly after?: object | undefined
}) =>
  Effect.map(CurrentRequest, (state) => {
    const diff = change.before !== undefined && change.after !== undefined
      ? changedFields(change.before as Record<string, unknown>, change.after as Record<string, unknown>)
      : change
    state.audit.details = {
      ...state.audit.details,
      target: { kind: change.target.kind, id: change.target.id },
      ...(diff.before === undefined ? {} : { before: diff.before }),
      ...(diff.after === undefined ? {} : { after: diff.after })
    }
  })

/** Just the target, for an action that fails before anything changed (the record still names what was aimed at). */
export const auditTarget = (target: AuditTarget) =>
  Effect.map(CurrentRequest, (state) => {
    state.audit.details = { ...state.audit.details, target: { kind: target.kind, id: target.id } }
  })
