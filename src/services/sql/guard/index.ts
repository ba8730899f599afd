/**
 * The SQL guard: classifies one statement before any database is contacted.
 *
 * - `read`: allowed for the read role; `write`: write or DDL, needs the edit role;
 *   `refused`: never run, for any role (stacked statements, transaction control, session and
 *   server state, server files and programs, opaque code, dangerous functions).
 * - Parse failures, empty input, NUL bytes and more than one statement are refused: the guard
 *   fails closed.
 * - The `*Loaded` functions are synchronous and need the parsers loaded: they are what the
 *   guard's worker threads run (pool.ts), so that no parse ever runs on the event loop of the
 *   gateway. The async ones load the parsers in the calling thread, for tests and tools.
 */
import { analyzeMysql, loadMysqlParsers } from "./mysql.ts"
import { analyzePostgres, loadPostgresParser } from "./postgres.ts"
import {
  type Analysis,
  type Dialect,
  type ExplainVerdict,
  explainVerdict,
  type FunctionCall,
  refused,
  type Verdict
} from "./verdict.ts"

export type { Dialect, ExplainVerdict, FunctionCall, Verdict } from "./verdict.ts"

/** A verdict plus the function calls it saw, which the catalogue check (routines.ts) classifies further. */
export interface Classified<V extends Verdict = Verdict> {
  readonly verdict: V
  readonly calls: ReadonlyArray<FunctionCall>
}

const NUL_BYTE = "the statement contains a NUL byte, which the database and the guard would not read alike."

const analyzeLoaded = (dialect: Dialect, sql: string): Analysis => {
  // Postgres ends a query string at NUL on the wire while the parser here reads past it; MySQL's
  // lexer treats it as a blank. Neither is worth the ambiguity.
  if (sql.includes("\u0000")) return { verdict: refused("INVALID TEXT", NUL_BYTE), explainable: false, calls: [] }
  return dialect === "postgres" ? analyzePostgres(sql) : analyzeMysql(sql)
}

/** The verdict for running `sql` as is (`sql_run`). The dialect's parsers must be loaded. */
export const classifyStatementLoaded = (dialect: Dialect, sql: string): Classified => {
  const analysis = analyzeLoaded(dialect, sql)
  return { verdict: analysis.verdict, calls: analysis.calls }
}

/**
 * The verdict for `sql_explain`: `sql` is the statement to explain (without EXPLAIN), which
 * the tool prefixes with its engine's EXPLAIN syntax. `inner` is the verdict of the statement
 * itself. Plain EXPLAIN of any explainable statement that is not refused is a read; with
 * `analyze` the statement is executed, so a write stays a write.
 */
export const classifyExplainLoaded = (
  dialect: Dialect,
  sql: string,
  options: { readonly analyze: boolean }
): Classified<ExplainVerdict> => {
  const inner = analyzeLoaded(dialect, sql)
  const innerKind = inner.verdict.kind
  if (innerKind === "EXPLAIN" || innerKind === "EXPLAIN ANALYZE" || innerKind === "DESCRIBE") {
    const kind = options.analyze ? "EXPLAIN ANALYZE" : "EXPLAIN"
    return {
      verdict: { ...refused(kind, "sql_explain takes the statement to explain, without EXPLAIN."), inner: inner.verdict },
      calls: inner.calls
    }
  }
  return { verdict: { ...explainVerdict(inner, options.analyze), inner: inner.verdict }, calls: inner.calls }
}

/** Loads the parsers of the given dialects in this thread. */
export const preloadGuard = async (dialects: ReadonlyArray<Dialect> = ["postgres", "mysql"]): Promise<void> => {
  await Promise.all(dialects.map((d) => (d === "postgres" ? loadPostgresParser() : loadMysqlParsers())))
}

/** `classifyStatementLoaded`, loading the parsers first. Runs in the calling thread. */
export const classifyStatement = async (dialect: Dialect, sql: string): Promise<Verdict> => {
  await preloadGuard([dialect])
  return classifyStatementLoaded(dialect, sql).verdict
}

/** `classifyExplainLoaded`, loading the parsers first. Runs in the calling thread. */
export const classifyExplain = async (
  dialect: Dialect,
  sql: string,
  options: { readonly analyze: boolean }
): Promise<ExplainVerdict> => {
  await preloadGuard([dialect])
  return classifyExplainLoaded(dialect, sql, options).verdict
}
