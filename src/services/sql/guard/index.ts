/**
 * The SQL guard: classifies one statement before any database is contacted.
 *
 * - `read`: allowed for the read role; `write`: write or DDL, needs the edit role;
 *   `refused`: never run, for any role (stacked statements, transaction control, session and
 *   server state, server files and programs, opaque code, dangerous functions).
 * - Parse failures, empty input and more than one statement are refused: the guard fails closed.
 * - Async only because the parsers load once, lazily; after that a call parses and walks one
 *   tree (well under a millisecond for ordinary statements).
 */
import { analyzeMysql, loadMysqlParsers } from "./mysql.ts"
import { analyzePostgres, loadPostgresParser } from "./postgres.ts"
import { type Analysis, type Dialect, type ExplainVerdict, explainVerdict, refused, type Verdict } from "./verdict.ts"

export type { Dialect, ExplainVerdict, Verdict } from "./verdict.ts"

const analyze = async (dialect: Dialect, sql: string): Promise<Analysis> => {
  if (dialect === "postgres") {
    await loadPostgresParser()
    return analyzePostgres(sql)
  }
  await loadMysqlParsers()
  return analyzeMysql(sql)
}

/** Loads the parsers of the given dialects ahead of the first request. */
export const preloadGuard = async (dialects: ReadonlyArray<Dialect> = ["postgres", "mysql"]): Promise<void> => {
  await Promise.all(dialects.map((d) => (d === "postgres" ? loadPostgresParser() : loadMysqlParsers())))
}

/** The verdict for running `sql` as is (`sql_run`). */
export const classifyStatement = async (dialect: Dialect, sql: string): Promise<Verdict> =>
  (await analyze(dialect, sql)).verdict

/**
 * The verdict for `sql_explain`: `sql` is the statement to explain (without EXPLAIN), which
 * the tool prefixes with its engine's EXPLAIN syntax. `inner` is the verdict of the statement
 * itself. Plain EXPLAIN of any explainable statement that is not refused is a read; with
 * `analyze` the statement is executed, so a write stays a write.
 */
export const classifyExplain = async (
  dialect: Dialect,
  sql: string,
  options: { readonly analyze: boolean }
): Promise<ExplainVerdict> => {
  const inner = await analyze(dialect, sql)
  const innerKind = inner.verdict.kind
  if (innerKind === "EXPLAIN" || innerKind === "EXPLAIN ANALYZE" || innerKind === "DESCRIBE") {
    const kind = options.analyze ? "EXPLAIN ANALYZE" : "EXPLAIN"
    return { ...refused(kind, "sql_explain takes the statement to explain, without EXPLAIN."), inner: inner.verdict }
  }
  return { ...explainVerdict(inner, options.analyze), inner: inner.verdict }
}
