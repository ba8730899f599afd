import { describe, expect, it } from "vitest"
import { classifyExplain, classifyStatement, preloadGuard } from "../../../../src/services/sql/guard/index.ts"
import { lexMysql, renderForParser } from "../../../../src/services/sql/guard/mysql-lexer.ts"
import { bindSuffix, type GuardCase, mysqlCases, postgresCases } from "./cases.ts"

const label = (c: GuardCase) => `[${c.section}] ${JSON.stringify(c.sql)} -> ${c.verdict} ${c.kind}`

const checkCase = async (c: GuardCase) => {
  const verdict = await classifyStatement(c.dialect, c.sql)
  expect({ verdict: verdict.verdict, kind: verdict.kind }).toEqual({ verdict: c.verdict, kind: c.kind })
  if (verdict.verdict === "refused") expect(verdict.reason).toMatch(/\S/)
}

describe("case table", () => {
  it("has at least 50 statements per dialect and covers every class", () => {
    for (const cases of [postgresCases, mysqlCases]) {
      expect(cases.length).toBeGreaterThanOrEqual(50)
      expect(new Set(cases.map((c) => c.section))).toEqual(new Set([1, 2, 3, 4, 5, 6, 7, 8]))
    }
  })

  it("renames fixture objects without touching other words", () => {
    expect(bindSuffix("SELECT nextval('guard_seq') FROM guard_items, guard_items_x", "a1")).toBe(
      "SELECT nextval('guard_seq_a1') FROM guard_items_a1, guard_items_x"
    )
  })
})

describe("postgres", () => {
  it.each(postgresCases.map((c) => [label(c), c] as const))("%s", async (_, c) => checkCase(c))
})

describe("mysql", () => {
  it.each(mysqlCases.map((c) => [label(c), c] as const))("%s", async (_, c) => checkCase(c))
})

describe("classifyExplain", () => {
  it("plain EXPLAIN of a write is a read, and keeps the inner verdict", async () => {
    for (const dialect of ["postgres", "mysql"] as const) {
      const result = await classifyExplain(dialect, "DELETE FROM guard_items WHERE id = 1", { analyze: false })
      expect(result).toMatchObject({ verdict: "read", kind: "EXPLAIN", inner: { verdict: "write", kind: "DELETE" } })
    }
  })

  it("EXPLAIN ANALYZE of a write is a write, of a read a read", async () => {
    for (const dialect of ["postgres", "mysql"] as const) {
      expect(await classifyExplain(dialect, "UPDATE guard_items SET qty = 1", { analyze: true })).toMatchObject({
        verdict: "write",
        kind: "EXPLAIN ANALYZE",
        inner: { verdict: "write", kind: "UPDATE" }
      })
      expect(await classifyExplain(dialect, "SELECT * FROM guard_items", { analyze: true })).toMatchObject({
        verdict: "read",
        kind: "EXPLAIN ANALYZE",
        inner: { verdict: "read", kind: "SELECT" }
      })
    }
  })

  it("refuses what is refused on its own, even as a plan", async () => {
    expect(await classifyExplain("postgres", "SELECT pg_sleep(10)", { analyze: false })).toMatchObject({
      verdict: "refused",
      kind: "EXPLAIN",
      inner: { verdict: "refused", kind: "SELECT" }
    })
    expect(await classifyExplain("mysql", "SELECT (SELECT SLEEP(10))", { analyze: false })).toMatchObject({
      verdict: "refused",
      inner: { verdict: "refused" }
    })
    expect(await classifyExplain("postgres", "SELECT 1; DROP TABLE guard_items", { analyze: false })).toMatchObject({
      verdict: "refused",
      inner: { kind: "MULTIPLE STATEMENTS" }
    })
  })

  it("refuses statements EXPLAIN cannot take", async () => {
    for (const [dialect, sql] of [
      ["postgres", "CREATE TABLE guard_new (id int)"],
      ["postgres", "SHOW search_path"],
      ["postgres", "EXPLAIN SELECT 1"],
      ["mysql", "SHOW TABLES"],
      ["mysql", "DESCRIBE guard_items"],
      ["mysql", "EXPLAIN SELECT 1"],
      ["mysql", "TRUNCATE TABLE guard_items"]
    ] as const) {
      const result = await classifyExplain(dialect, sql, { analyze: false })
      expect(result.verdict, `${dialect}: ${sql}`).toBe("refused")
    }
  })

  it("accepts CREATE TABLE AS and MERGE on Postgres, REPLACE and TABLE on MySQL", async () => {
    expect((await classifyExplain("postgres", "CREATE TABLE guard_new AS SELECT 1", { analyze: false })).verdict).toBe("read")
    expect((await classifyExplain("postgres", "CREATE TABLE guard_new AS SELECT 1", { analyze: true })).verdict).toBe("write")
    expect((await classifyExplain("mysql", "REPLACE INTO guard_other VALUES (1, 'x')", { analyze: false })).verdict).toBe("read")
    expect((await classifyExplain("mysql", "TABLE guard_items", { analyze: true })).verdict).toBe("read")
  })
})

describe("mysql lexer", () => {
  it("reads -- as a comment only before whitespace, a control character or the end", () => {
    const comments = (sql: string) => {
      const lex = lexMysql(sql)
      return lex.ok ? lex.comments.map((c) => c.kind) : lex.reason
    }
    expect(comments("SELECT 1 --1")).toEqual([])
    expect(comments("SELECT 1 --")).toEqual(["line"])
    expect(comments("SELECT 1 -- x")).toEqual(["line"])
    expect(comments("SELECT 1 --\u0001x")).toEqual(["line"])
    expect(comments("SELECT 1 # x")).toEqual(["line"])
    expect(comments("SELECT /*!1 */ /*M!2 */ /*+ BKA(t) */ /* c */ 1")).toEqual(["executable", "executable", "hint", "block"])
  })

  it("renders parser input without comments, literals or -- pairs", () => {
    const render = (sql: string) => {
      const lex = lexMysql(sql)
      if (!lex.ok) throw new Error(lex.reason)
      return renderForParser(lex.tokens)
    }
    expect(render("SELECT 1--1 # c\n, 'x;y' /* z */, `a``b`, `ok`")).toBe("SELECT 1- -1 , '' , `q`, `ok`")
    expect(render("SELECT _utf8mb4'x', x'41', N'n'")).toBe("SELECT _utf8mb4'', x'', N''")
  })

  it("refuses quoting that depends on sql_mode, and unterminated tokens", () => {
    expect(lexMysql("SELECT 'a\\'b'").ok).toBe(false)
    expect(lexMysql('SELECT "a\\"b"').ok).toBe(false)
    expect(lexMysql("SELECT 'a\\\\b'").ok).toBe(true)
    expect(lexMysql("SELECT 'a\\nb'").ok).toBe(true)
    expect(lexMysql("SELECT `a").ok).toBe(false)
    expect(lexMysql("SELECT 'a").ok).toBe(false)
  })
})

describe("robustness", () => {
  it("fails closed on hostile input instead of throwing", async () => {
    const deep = `SELECT ${"(".repeat(3000)}1${")".repeat(3000)}`
    for (const dialect of ["postgres", "mysql"] as const) {
      for (const sql of [deep, "\u0000", "SELECT '\u0000'", "SELECT \uD800", ")))", "SELECT 1 /* a */ */"]) {
        const verdict = await classifyStatement(dialect, sql)
        expect(["read", "refused"]).toContain(verdict.verdict)
      }
    }
  })

  it("loads the parsers once and classifies cheaply afterwards", async () => {
    await preloadGuard()
    const statements = [
      "SELECT g.id, g.name, count(*) FROM guard_items g JOIN guard_other o ON o.id = g.id WHERE g.qty > 1 GROUP BY g.id, g.name ORDER BY 3 DESC LIMIT 10",
      "UPDATE guard_items SET qty = qty + 1 WHERE id IN (SELECT id FROM guard_other)"
    ]
    for (const dialect of ["postgres", "mysql"] as const) {
      for (const sql of statements) await classifyStatement(dialect, sql)
      // The CPU this process spent, not the wall clock: on a loaded two-core machine the worker
      // may wait for a core longer than it computes (10.9 ms "per call" was measured that way).
      const started = process.cpuUsage()
      for (let i = 0; i < 100; i++) for (const sql of statements) await classifyStatement(dialect, sql)
      const spent = process.cpuUsage(started)
      const perCall = (spent.user + spent.system) / 1000 / (100 * statements.length)
      // Generous bound; typical is well under a millisecond.
      expect(perCall, `${dialect} CPU ms per call`).toBeLessThan(10)
    }
  })
})
