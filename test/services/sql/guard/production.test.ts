/**
 * Issue 36: the production rule over the guard's own classification, in both dialects, without
 * a database: every schema change is refused whatever its spelling, data changes and reads pass.
 * The end-to-end version, with the databases checked afterwards, is test/http/sql-production.test.ts.
 */
import { describe, expect, it } from "vitest"
import { classifyStatement, type Dialect } from "../../../../src/services/sql/guard/index.ts"
import { productionCalls, productionVerdict } from "../../../../src/services/sql/guard/production.ts"

const onProduction = async (dialect: Dialect, sql: string) => productionVerdict(await classifyStatement(dialect, sql))

const REFUSED: Record<Dialect, ReadonlyArray<readonly [string, string]>> = {
  postgres: [
    ["ALTER TABLE t ADD COLUMN c int", "ALTER TABLE"],
    ["alter   TABLE \"T\" drop column \"c\"", "ALTER TABLE"],
    ["/* harmless */ DROP TABLE t", "DROP TABLE"],
    ["-- comment\nDROP VIEW v", "DROP VIEW"],
    ["DROP INDEX CONCURRENTLY i", "DROP INDEX"],
    ["CREATE UNIQUE INDEX CONCURRENTLY i ON t (c)", "CREATE INDEX"],
    ["CREATE OR REPLACE VIEW v AS SELECT 1", "CREATE VIEW"],
    ["CREATE MATERIALIZED VIEW m AS SELECT 1", "CREATE MATERIALIZED VIEW"],
    ["CREATE SCHEMA s", "CREATE SCHEMA"],
    ["CREATE SEQUENCE s", "CREATE SEQUENCE"],
    ["ALTER SEQUENCE s RESTART", "ALTER SEQUENCE"],
    ["CREATE TYPE mood AS ENUM ('a')", "CREATE TYPE"],
    ["CREATE TRIGGER tr AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION f()", "CREATE TRIGGER"],
    ["CREATE EXTENSION hstore", "CREATE EXTENSION"],
    ["CREATE POLICY p ON t USING (true)", "CREATE POLICY"],
    ["TRUNCATE ONLY t RESTART IDENTITY", "TRUNCATE"],
    ["COMMENT ON COLUMN t.c IS 'x'", "COMMENT"],
    ["ALTER TABLE t RENAME COLUMN a TO b", "ALTER TABLE"],
    ["SELECT 1 AS a INTO TEMP tmp", "SELECT INTO"],
    ["CREATE TABLE t2 AS TABLE t", "CREATE TABLE AS"],
    ["REFRESH MATERIALIZED VIEW m", "REFRESH MATERIALIZED VIEW"],
    ["CLUSTER t USING i", "CLUSTER"],
    ["ANALYZE t", "ANALYZE"],
    ["LOCK TABLE t IN ACCESS EXCLUSIVE MODE", "LOCK TABLE"],
    ["NOTIFY chan", "NOTIFY"],
    ["CALL p(1)", "CALL"],
    ["CREATE PROCEDURE p() LANGUAGE sql AS $$ DROP TABLE t $$", "CREATE PROCEDURE"],
    ["CREATE DATABASE d", "CREATE DATABASE"],
    ["DO $$ BEGIN EXECUTE format('DROP TABLE %I', 't'); END $$", "DO"],
    ["EXECUTE stmt(1)", "EXECUTE"],
    ["PREPARE q AS ALTER TABLE t ADD c int", "PREPARE"],
    ["INSERT INTO t VALUES (1); DROP TABLE t", "MULTIPLE STATEMENTS"],
    ["SELECT 1;\n/* ; */ ALTER TABLE t ADD c int", "MULTIPLE STATEMENTS"]
  ],
  mysql: [
    ["ALTER TABLE t ADD COLUMN c int", "ALTER TABLE"],
    ["alter table `t` drop column `c`", "ALTER TABLE"],
    ["/* harmless */ DROP TABLE t", "DROP TABLE"],
    ["-- comment\nDROP VIEW v", "DROP VIEW"],
    ["# comment\nDROP INDEX i ON t", "DROP INDEX"],
    ["CREATE UNIQUE INDEX i ON t (c)", "CREATE INDEX"],
    ["CREATE OR REPLACE VIEW v AS SELECT 1", "CREATE VIEW"],
    ["CREATE DATABASE d", "CREATE DATABASE"],
    ["DROP DATABASE d", "DROP DATABASE"],
    ["TRUNCATE TABLE t", "TRUNCATE"],
    ["RENAME TABLE a TO b, c TO d", "RENAME TABLE"],
    ["CREATE TRIGGER tr BEFORE INSERT ON t FOR EACH ROW SET NEW.a = 1", "CREATE TRIGGER"],
    ["ANALYZE TABLE t", "ANALYZE TABLE"],
    ["CALL p()", "CALL"],
    ["PREPARE s FROM 'ALTER TABLE t ADD c int'", "PREPARE"],
    ["EXECUTE s", "EXECUTE"],
    ["INSERT INTO t VALUES (1); DROP TABLE t", "MULTIPLE STATEMENTS"],
    ["/*! DROP TABLE t */", "UNKNOWN"],
    ["/*M!100000 ALTER TABLE t ADD c int */", "UNKNOWN"]
  ]
}

const PASSES: Record<Dialect, ReadonlyArray<string>> = {
  postgres: [
    "SELECT * FROM t",
    "insert into t (c) values ('DROP TABLE t')",
    "UPDATE t SET c = 'ALTER TABLE x' WHERE id = 1",
    "DELETE FROM t WHERE c = $1",
    "WITH gone AS (DELETE FROM t RETURNING *) INSERT INTO archive SELECT * FROM gone",
    "MERGE INTO t USING s ON t.id = s.id WHEN NOT MATCHED THEN INSERT VALUES (s.id)",
    "SELECT * FROM t FOR NO KEY UPDATE",
    "SELECT nextval('s')"
  ],
  mysql: [
    "SELECT * FROM t",
    "insert into t (c) values ('DROP TABLE t')",
    "UPDATE t SET c = 'ALTER TABLE x' WHERE id = 1",
    "DELETE FROM t WHERE c = ?",
    "REPLACE INTO t VALUES (1)",
    "INSERT INTO t SELECT * FROM u ON DUPLICATE KEY UPDATE c = VALUES(c)",
    "SELECT * FROM t LOCK IN SHARE MODE"
  ]
}

describe("production connections: the guard's classification as an allow-list", () => {
  for (const dialect of ["postgres", "mysql"] as const) {
    it(`refuses every schema change on ${dialect}, however it is written, naming its kind`, async () => {
      for (const [sql, kind] of REFUSED[dialect]) {
        expect({ sql, ...(await onProduction(dialect, sql)) }).toMatchObject({ sql, verdict: "refused", kind })
      }
    })

    it(`lets reads and data changes through on ${dialect}`, async () => {
      for (const sql of PASSES[dialect]) {
        expect({ sql, verdict: (await onProduction(dialect, sql)).verdict }).toMatchObject({ sql, verdict: expect.stringMatching(/^(read|write)$/) })
      }
    })
  }

  it("refuses a Postgres data change calling a function that may write, but not a MySQL one", () => {
    const insert = { verdict: "write", kind: "INSERT" } as const
    const volatile = [{ level: "write", reason: "f() is volatile: it may change data." }] as const
    expect(productionCalls("postgres", insert, volatile)).toMatchObject({ verdict: "refused", kind: "INSERT" })
    expect(productionCalls("postgres", insert, [])).toEqual(insert)
    expect(productionCalls("mysql", insert, volatile)).toEqual(insert)
  })
})
