/**
 * Verdicts of the SQL guard. `read` runs under the read role, `write` needs the edit role,
 * `refused` is never run. `kind` is the statement's verb as a user would name it and ends up
 * in `details.statement_kind` of the error envelope.
 */
export type Dialect = "postgres" | "mysql"

export type Verdict =
  | { readonly verdict: "read"; readonly kind: string }
  /** `reason` is set when the write hides behind a read-looking statement (CTE, FOR UPDATE, nextval...). */
  | { readonly verdict: "write"; readonly kind: string; readonly reason?: string }
  | { readonly verdict: "refused"; readonly kind: string; readonly reason: string }

export type ExplainVerdict = Verdict & { readonly inner: Verdict }

/** A function call found in a statement, by the name it was written with. */
export interface FunctionCall {
  /** Schema or database qualifier, if any. */
  readonly schema: string | undefined
  readonly name: string
  /** Number of arguments, when the caller knows it. */
  readonly argCount?: number
}

/** What a dialect classifier knows about one statement, beyond the verdict itself. */
export interface Analysis {
  readonly verdict: Verdict
  /** Whether `EXPLAIN <this statement>` is valid syntax for the dialect. */
  readonly explainable: boolean
  /**
   * Calls the parser alone cannot vouch for: every call on Postgres, calls of anything but the
   * known-safe built-ins on MySQL. The database's catalogue classifies them (routines.ts).
   */
  readonly calls: ReadonlyArray<FunctionCall>
}

export const read = (kind: string): Verdict => ({ verdict: "read", kind })

export const write = (kind: string, reason?: string): Verdict =>
  reason === undefined ? { verdict: "write", kind } : { verdict: "write", kind, reason }

export const refused = (kind: string, reason: string): Verdict => ({ verdict: "refused", kind, reason })

const rank = { read: 0, write: 1, refused: 2 } as const

/** The stricter of two verdicts; on a tie the first one stands, so the earliest finding names the kind. */
export const stricter = (a: Verdict, b: Verdict): Verdict => (rank[b.verdict] > rank[a.verdict] ? b : a)

/**
 * Something found inside a statement that makes it stricter than its verb says: a refused
 * function, a data-modifying CTE, a locking clause. `kind` replaces the statement's kind when
 * the finding is what the user would call the statement (a `DELETE` inside a CTE), and is left
 * out when the verb still describes it (`SELECT pg_sleep(1)` stays a `SELECT`).
 */
export interface Finding {
  readonly level: "write" | "refused"
  readonly reason: string
  readonly kind?: string
}

/** Applies findings to the verdict the statement's verb gives; the first refusal wins. */
export const settle = (base: Verdict, findings: ReadonlyArray<Finding>): Verdict => {
  if (base.verdict === "refused") return base
  const refusal = findings.find((f) => f.level === "refused")
  if (refusal !== undefined) return refused(refusal.kind ?? base.kind, refusal.reason)
  if (base.verdict === "write") return base
  const hiddenWrite = findings.find((f) => f.level === "write")
  return hiddenWrite === undefined ? base : write(hiddenWrite.kind ?? base.kind, hiddenWrite.reason)
}

const EXPLAINABLE_HINT =
  "EXPLAIN only applies to SELECT, TABLE, VALUES, INSERT, UPDATE, DELETE, MERGE, REPLACE or CREATE TABLE AS"

/**
 * The verdict of explaining a statement. Plain EXPLAIN only plans, so a write is readable; the
 * analyzing form executes the statement, so it inherits its verdict. A statement refused on its
 * own is refused explained too: planners fold constant subqueries and stable functions, so a
 * plan is not guaranteed to be free of the side effects the refusal is about.
 */
export const explainVerdict = (inner: Analysis, analyze: boolean): Verdict => {
  const kind = analyze ? "EXPLAIN ANALYZE" : "EXPLAIN"
  if (inner.verdict.verdict === "refused") return refused(kind, inner.verdict.reason)
  if (!inner.explainable) return refused(kind, `${EXPLAINABLE_HINT}, not ${inner.verdict.kind}.`)
  if (!analyze) return read(kind)
  return inner.verdict.verdict === "write"
    ? write(kind, `EXPLAIN ANALYZE executes the ${inner.verdict.kind} it explains.`)
    : read(kind)
}

/** A node of a parse tree: an object that is not an array. */
export type TreeNode = Record<string, unknown>

export const isTreeNode = (value: unknown): value is TreeNode =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/**
 * Every node under `root`, the root included, visited with an explicit stack: parse trees of
 * hostile input can be thousands of levels deep, deeper than the call stack.
 */
export function* treeNodes(root: unknown): Generator<TreeNode> {
  const stack: Array<unknown> = [root]
  while (stack.length > 0) {
    const value = stack.pop()
    if (Array.isArray(value)) {
      for (const item of value) if (typeof item === "object" && item !== null) stack.push(item)
      continue
    }
    if (!isTreeNode(value)) continue
    yield value
    for (const child of Object.values(value)) if (typeof child === "object" && child !== null) stack.push(child)
  }
}
