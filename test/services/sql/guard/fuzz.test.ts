/**
 * Property tests over the SQL guard (fast-check): on statements built from SQL's own pieces
 * (keywords, names, literals of every quoting style, comments, operators, stray bytes) and on
 * mutations of the case table,
 * - every statement is classified within the guard's default time budget, and
 * - nothing the dialect's parser rejects is ever allowed: a read or write verdict on Postgres
 *   means libpg-query parses exactly one statement; on MySQL that the lexer accepts the text
 *   and either node-sql-parser parses it or it is one of the small statement families the
 *   guard parses itself (SHOW, DESCRIBE/EXPLAIN, table maintenance).
 * Kept to a few seconds of CPU: the seed is fixed so a failure reproduces.
 */
import fc from "fast-check"
import { parseSync } from "libpg-query"
import { beforeAll, describe, expect, it } from "vitest"
import { classifyStatementLoaded, type Dialect, preloadGuard } from "../../../../src/services/sql/guard/index.ts"
import { lexMysql, renderForParser } from "../../../../src/services/sql/guard/mysql-lexer.ts"
import { mysqlCases, postgresCases } from "./cases.ts"

/** The guard's default budget per statement (mcp.guard_timeout_ms). */
const BUDGET_MS = 1_000

const pieces = (dialect: Dialect) => fc.oneof(
  fc.constantFrom(
    "SELECT", "select", "FROM", "WHERE", "INSERT", "INTO", "VALUES", "UPDATE", "SET", "DELETE", "WITH", "AS", "UNION",
    "CREATE", "TABLE", "DROP", "ALTER", "GRANT", "COPY", "EXPLAIN", "ANALYZE", "SHOW", "DESCRIBE", "BEGIN", "COMMIT",
    "CALL", "DO", "LOAD", "PREPARE", "EXECUTE", "FOR", "UPDATE", "LOCK", "TABLES", "ORDER", "BY", "LIMIT", "RETURNING",
    "pg_sleep", "sleep", "ts_rewrite", "query_to_xml", "dblink", "nextval", "load_file", "benchmark", "upper", "count",
    "guard_items", "t", "x", "`q`", "\"id\"", "@v", "@@global.x", "$1", "?", "*", "(", ")", ",", ";", ".", "=", ":=",
    "+", "-", "#", "--", "/*", "*/", "/*!", "/*+", "'", "\"", "`", "$$", "$tag$", "\\", "E'", "N'", "x'41'", "0x41",
    "1", "1.5e3", "NULL", "TRUE", "::text", "[1]", "{", "}", "\u0000", "\n", "\t", "é", "\uD800"
  ),
  fc.string({ maxLength: 6 }),
  dialect === "postgres"
    ? fc.string({ maxLength: 8 }).map((s) => `$$${s.replaceAll("$", "")}$$`)
    : fc.string({ maxLength: 8 }).map((s) => `'${s.replaceAll("'", "''").replaceAll("\\", "")}'`)
)

const statements = (dialect: Dialect) => fc.oneof(
  // Built from pieces, joined by nothing, a blank or a newline.
  fc.array(fc.tuple(pieces(dialect), fc.constantFrom("", " ", "\n")), { minLength: 1, maxLength: 24 })
    .map((parts) => parts.map(([piece, gap]) => piece + gap).join("")),
  // A case from the table with a few characters changed, inserted or dropped.
  fc.tuple(
    fc.constantFrom(...(dialect === "postgres" ? postgresCases : mysqlCases).map((c) => c.sql)),
    fc.array(fc.tuple(fc.nat(), fc.constantFrom("insert", "delete", "replace"), fc.constantFrom(";", "'", "(", "/*", "-- ", "$", "`", " ", "\u0000", "x")), { maxLength: 4 })
  ).map(([sql, edits]) => edits.reduce((text, [at, op, char]) => {
    const i = text.length === 0 ? 0 : at % text.length
    return op === "insert" ? text.slice(0, i) + char + text.slice(i) : op === "delete" ? text.slice(0, i) + text.slice(i + 1) : text.slice(0, i) + char + text.slice(i + 1)
  }, sql))
)

const postgresParsesOne = (sql: string): boolean => {
  try {
    const tree = parseSync(sql) as { stmts?: Array<unknown> }
    return (tree.stmts?.length ?? 0) === 1
  } catch {
    return false
  }
}

const OWN_GRAMMARS = new Set(["SHOW", "DESCRIBE", "DESC", "EXPLAIN", "ANALYZE", "OPTIMIZE", "REPAIR", "CHECK", "CHECKSUM", "TABLE", "VALUES"])
let sqlParsers: Array<{ astify: (sql: string, options: { database: string }) => unknown }> = []

const mysqlParses = (sql: string): boolean => {
  const lex = lexMysql(sql)
  if (!lex.ok) return false
  const tokens = lex.tokens.filter((t, i, all) => !(t.type === "punct" && t.text === ";" && i === all.length - 1))
  const head = tokens[0]?.type === "word" ? tokens[0].value.toUpperCase() : ""
  if (OWN_GRAMMARS.has(head)) return true
  const text = renderForParser(tokens)
  return sqlParsers.some((parser, i) => {
    try {
      parser.astify(text, { database: i === 0 ? "mysql" : "mariadb" })
      return true
    } catch {
      return false
    }
  })
}

describe("guard fuzzing", () => {
  beforeAll(async () => {
    await preloadGuard()
    const load = async (path: string) =>
      new ((await import(path)) as { default: { Parser: new () => (typeof sqlParsers)[number] } }).default.Parser()
    sqlParsers = [await load("node-sql-parser/build/mysql.js"), await load("node-sql-parser/build/mariadb.js")]
  })

  for (const dialect of ["postgres", "mysql"] as const) {
    it(`${dialect}: classifies every statement within the budget and allows nothing unparseable`, () => {
      let allowed = 0
      fc.assert(
        fc.property(statements(dialect), (sql) => {
          // CPU, not the wall clock (guard.test.ts measures the same way): a loaded machine's
          // worker may wait for a core longer than it computes.
          const started = process.cpuUsage()
          const { verdict } = classifyStatementLoaded(dialect, sql)
          const spent = process.cpuUsage(started)
          const elapsed = (spent.user + spent.system) / 1000
          expect(elapsed, `${JSON.stringify(sql)} took ${elapsed} ms`).toBeLessThan(BUDGET_MS)
          if (verdict.verdict !== "refused") {
            allowed++
            const parses = dialect === "postgres" ? postgresParsesOne(sql) : mysqlParses(sql)
            expect(parses, `${JSON.stringify(sql)} was allowed (${verdict.verdict} ${verdict.kind}) but does not parse`).toBe(true)
            expect(sql.includes("\u0000"), "a NUL byte was allowed").toBe(false)
          }
        }),
        { numRuns: 1500, seed: 20261123 }
      )
      // The property says nothing if the generator only ever makes refused statements.
      expect(allowed).toBeGreaterThan(100)
    })
  }
})
