/**
 * The MySQL/MariaDB driver against the machine's real MariaDB, in a database of its own: the
 * shared driver contract (contract.ts), then what only MySQL/MariaDB does.
 * The server's flavor is read before the tests are collected, so a test of one flavor's branch
 * is skipped visibly (named, with its reason, in the run's skipped count) on the other, never
 * passed by returning early: MySQL 8's branches (max_execution_time, EXPLAIN ANALYZE as a tree)
 * show as skipped on a machine with MariaDB, MariaDB's (SET STATEMENT ... FOR) on MySQL 8.
 * On MariaDB the MySQL 8 branches still run, through a proxy that presents the server as MySQL 8
 * (test/support/mysql8-face.ts): what the driver sends a MySQL 8 server, and what it makes of the
 * answers, over real sessions; the two skipped tests are what only a real MySQL 8 can show (its
 * own enforcement of max_execution_time and its own EXPLAIN ANALYZE tree).
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import { makeSqlDriver, type RunInput } from "../../../../src/services/sql/drivers/SqlDrivers.ts"
import { createConnection } from "mysql2/promise"
import { createMysqlDatabase, MYSQL_ADMIN_URL, type TempDatabase } from "../../../support/databases.ts"
import { MYSQL8_TREE, MYSQL8_VERSION, type Mysql8Face, startMysql8Face } from "../../../support/mysql8-face.ts"
import { authorCount, DriverDb, driverContract, eventually, read, rowsOf, running, scalar } from "./contract.ts"

/** The machine's server: MariaDB or MySQL, read once before the tests are collected. */
const flavor = await (async () => {
  const connection = await createConnection(MYSQL_ADMIN_URL)
  try {
    const [rows] = await connection.query("SELECT VERSION() AS v")
    return /mariadb/i.test(String((rows as Array<{ v: string }>)[0]?.v)) ? "mariadb" : "mysql"
  } finally {
    await connection.end()
  }
})()
const onMariadb = flavor === "mariadb"
const onMysql8 = flavor === "mysql"

/** 0..9 as a derived table; five of them cross-joined count to 100 000 without engine-specific helpers. */
const DIGITS = "(SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 " +
  "UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"

const FIXTURES = [
  `CREATE TABLE authors (id BIGINT PRIMARY KEY, name VARCHAR(100) NOT NULL UNIQUE, email VARCHAR(200) NULL,
     created_at TIMESTAMP NULL DEFAULT CURRENT_TIMESTAMP)`,
  `CREATE TABLE books (id INT AUTO_INCREMENT PRIMARY KEY, author_id BIGINT NOT NULL, title VARCHAR(200) NOT NULL,
     price DECIMAL(10, 2) NULL, UNIQUE KEY books_author_title (author_id, title), KEY books_title (title),
     CONSTRAINT books_author_fk FOREIGN KEY (author_id) REFERENCES authors (id))`,
  "CREATE VIEW author_names AS SELECT name FROM authors",
  "INSERT INTO authors (id, name) VALUES (1, 'Ada'), (2, 'Grace'), (3, 'Barbara')",
  "INSERT INTO books (author_id, title, price) VALUES (1, 'Notes', 12.50), (2, 'Compilers', 30)",
  "CREATE TABLE big (id INT PRIMARY KEY, pad VARCHAR(200) NOT NULL)",
  `INSERT INTO big SELECT a.n + b.n * 10 + c.n * 100 + d.n * 1000 + e.n * 10000 + 1, REPEAT('x', 100)
     FROM ${DIGITS} a, ${DIGITS} b, ${DIGITS} c, ${DIGITS} d, ${DIGITS} e`,
  "ANALYZE TABLE big",
  `CREATE TABLE kinds (i8 BIGINT, n DECIMAL(30, 9), b BLOB, j JSON, ts TIMESTAMP(6) NULL, dt DATETIME(6) NULL,
     d DATE NULL, flag BIT(3) NULL, nothing VARCHAR(10) NULL)`,
  `INSERT INTO kinds VALUES (9007199254740993, 12345678901234567890.123456789, X'DEADBEEF',
     '{"a": [1, 2, {"b": null}]}', '2024-02-29 23:59:59.123456', '2024-02-29 23:59:59.5', '2024-02-29', b'101', NULL)`
]

const makeFixture = Effect.gen(function*() {
  const database = yield* Effect.acquireRelease(
    Effect.promise(() => createMysqlDatabase("mg_drv_my")),
    (created) => Effect.promise(() => created.drop())
  )
  const driver = yield* makeSqlDriver({ dialect: "mysql", url: database.url })
  for (const statement of FIXTURES) {
    yield* driver.run({ statement, params: [], mode: "write", maxRows: 10, timeoutMs: 60_000 })
  }
  return {
    driver,
    url: database.url,
    defaultSchema: database.name,
    dialect: "mysql" as const,
    sql: {
      param: () => "?",
      textType: "varchar",
      echoText: "SELECT ? AS v",
      sleep: (token: string) => `SELECT SLEEP(20) AS s, '${token}' AS t`,
      running:
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE CONCAT('%', ?, '%') AND ID <> CONNECTION_ID()",
      tableCount: "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
      readOnly: {
        writes: [
          "INSERT INTO authors (id, name) VALUES (50, 'Mallory')",
          "DELETE FROM authors",
          "CREATE TABLE sneaky (x INT)",
          "DROP TABLE books"
        ],
        refusal: { code: "1792", sqlstate: "25006" },
        stackedCode: "1064"
      },
      estimates: "sampled" as const,
      kinds: {
        row: {
          i8: "9007199254740993",
          n: "12345678901234567890.123456789",
          b: "3q2+7w==",
          j: { a: [1, 2, { b: null }] },
          ts: "2024-02-29T23:59:59.123456Z",
          dt: "2024-02-29T23:59:59.500000",
          d: "2024-02-29",
          flag: 5,
          nothing: null
        },
        types: ["bigint", "decimal", "blob", "json", "timestamp", "datetime", "date", "bit", "varchar"]
      },
      unreachable: (secret: string) => [
        `mysql://root:${secret}@127.0.0.1:1/test`,
        `mysql://nobody_${randomBytes(3).toString("hex")}:${secret}@127.0.0.1:3306/test`
      ]
    }
  }
})

driverContract("MySQL/MariaDB driver", makeFixture, (it) => {
  it.effect("returns the rows of SHOW statements", () =>
    Effect.gen(function*() {
      const shown = rowsOf(yield* read("SHOW TABLES LIKE 'auth%'"))
      assert.strictEqual(shown.row_count, 2)
    }))

  it.effect("binds objects as JSON", () =>
    Effect.gen(function*() {
      assert.deepStrictEqual(yield* scalar("SELECT JSON_EXTRACT(?, '$.k')", [{ k: [1, "two"] }]), [1, "two"])
    }))

  it.effect("stops reading a result too large to finish at max_rows, and leaves nothing running", () =>
    Effect.gen(function*() {
      // 10^10 rows: reading them (or waiting for the server to finish) would run into the 5 s timeout.
      const token = `mg_cap_${randomBytes(6).toString("hex")}`
      const endless = rowsOf(
        yield* read(`SELECT a.id, b.pad, '${token}' AS t FROM big a CROSS JOIN big b`, [], {
          maxRows: 10,
          timeoutMs: 5_000
        })
      )
      // Rows, not the 5 s timeout's failure: it stopped reading at the cap (no clock needed to tell).
      assert.strictEqual(endless.row_count, 10)
      assert.isTrue(endless.truncated)
      assert.isTrue(yield* eventually(Effect.map(running(token), (count) => count === "0")))
    }))

  // MariaDB only: SET STATEMENT ... FOR is not MySQL 8's grammar (its escape would be another).
  it.effect.skipIf(!onMariadb)("MariaDB: kills a statement that escapes the server-side limit when the client timer fires", () =>
    Effect.gen(function*() {
      const token = `mg_escape_${randomBytes(6).toString("hex")}`
      const started = Date.now()
      const error = yield* Effect.flip(
        read(`SET STATEMENT max_statement_time = 0 FOR SELECT SLEEP(20) AS s, '${token}' AS t`, [], {
          timeoutMs: 300
        })
      )
      assert.strictEqual(error._tag, "SqlQueryTimeout")
      // Killed at the client's 300 ms timer, not after the statement's 20 s: 10 s is generous for a machine at load 10.
      assert.isBelow(Date.now() - started, 10_000)
      assert.isTrue(yield* eventually(Effect.map(running(token), (count) => count === "0")))
    }))

  it.effect("describes columns, keys, indexes and foreign keys", () =>
    Effect.gen(function*() {
      const { driver, defaultSchema: name } = yield* DriverDb
      const books = yield* driver.describe(undefined, "books")
      assert.deepStrictEqual(books?.columns, [
        { name: "id", type: "int(11)", nullable: false, pk: true },
        { name: "author_id", type: "bigint(20)", nullable: false },
        { name: "title", type: "varchar(200)", nullable: false },
        { name: "price", type: "decimal(10,2)", nullable: true }
      ])
      assert.deepStrictEqual(books?.indexes, [
        { name: "books_author_title", columns: ["author_id", "title"], unique: true },
        { name: "books_title", columns: ["title"], unique: false },
        { name: "PRIMARY", columns: ["id"], unique: true }
      ])
      assert.deepStrictEqual(books?.foreign_keys, [
        { name: "books_author_fk", columns: ["author_id"], references: { schema: name, table: "authors", columns: ["id"] } }
      ])
      const authors = yield* driver.describe(name, "authors")
      assert.deepStrictEqual(authors?.columns.find((column) => column.name === "name"), {
        name: "name",
        type: "varchar(100)",
        nullable: false,
        unique: true
      })
      assert.strictEqual(authors?.columns.find((column) => column.name === "created_at")?.default, "current_timestamp()")
      assert.strictEqual(authors?.columns.find((column) => column.name === "email")?.default, undefined)
      assert.strictEqual(yield* driver.describe(undefined, "nope"), undefined)
      assert.strictEqual(yield* driver.describe(undefined, "authors' OR '1'='1"), undefined)
    }))

  // MySQL 8 only (skipped on MariaDB, which has neither): its statement limit is
  // max_execution_time (ms), set on every session, and it ends a read that runs past it. What the
  // driver sends and makes of MySQL 8's answer runs on MariaDB too (the proxy tests at the end);
  // this one is MySQL 8's own server enforcing it.
  it.effect.skipIf(!onMysql8)("MySQL 8: a session's statements are limited by max_execution_time", () =>
    Effect.gen(function*() {
      const limit = rowsOf(yield* read("SELECT @@SESSION.max_execution_time AS ms", [], { timeoutMs: 4_000 }))
      assert.strictEqual(String(limit.rows[0]?.ms), "4000")
      const token = `mg_met_${randomBytes(6).toString("hex")}`
      const error = yield* Effect.flip(read(`SELECT SLEEP(20) AS s, '${token}' AS t FROM authors`, [], { timeoutMs: 500 }))
      assert.strictEqual(error._tag, "SqlQueryTimeout")
      assert.isTrue(yield* eventually(Effect.map(running(token), (count) => count === "0")))
    }))

  // MySQL 8 only (skipped on MariaDB, which spells it ANALYZE FORMAT=JSON): EXPLAIN ANALYZE is a
  // text tree, returned as its lines. The proxy tests at the end check the driver's side with a
  // tree in MySQL 8's format; this one checks the real server's tree still has that format.
  it.effect.skipIf(!onMysql8)("MySQL 8: explain with analyze is the server's tree, one line per entry", () =>
    Effect.gen(function*() {
      const { driver } = yield* DriverDb
      const { plan } = yield* driver.explain({ statement: "SELECT * FROM big WHERE pad = 'y'", params: [], analyze: true, mode: "read", timeoutMs: 10_000 })
      assert.isArray(plan)
      const lines = plan as ReadonlyArray<string>
      assert.isAbove(lines.length, 0)
      assert.match(lines[0]!, /^-> .*\(actual time=/)
    }))

  // MariaDB's plan fields (r_total_time_ms, r_loops); MySQL 8's analysis is the tree above.
  it.effect.skipIf(!onMariadb)("MariaDB: explains with and without analyze, and an analyzed write leaves no trace", () =>
    Effect.gen(function*() {
      const { driver } = yield* DriverDb
      const explain = (statement: string, analyze: boolean, mode: "read" | "write", params: Array<unknown> = []) =>
        driver.explain({ statement, params, analyze, mode, timeoutMs: 10_000 })
      const plain = (yield* explain("SELECT * FROM authors WHERE name = ?", false, "read", ["Ada"])).plan as Record<
        string,
        Record<string, unknown>
      >
      assert.isObject(plain.query_block)
      assert.notProperty(plain.query_block, "r_loops")
      const analyzed = (yield* explain("SELECT * FROM big WHERE pad = 'y'", true, "read")).plan as Record<
        string,
        Record<string, unknown>
      >
      assert.property(analyzed.query_block, "r_total_time_ms")

      yield* explain("DELETE FROM authors WHERE id = ?", true, "write", [3])
      assert.strictEqual(yield* authorCount, "3")
      const refused = yield* Effect.flip(explain("DELETE FROM authors WHERE id = 3", true, "read"))
      assert.deepInclude(refused, { _tag: "SqlQueryFailed", code: "1792" })
    }))

  it.effect("resets each session and replaces the ones it had to abandon", () =>
    Effect.gen(function*() {
      const { url } = yield* DriverDb
      const single = yield* makeSqlDriver({ dialect: "mysql", url, poolSize: 1 })
      const run = (statement: string, mode: "read" | "write" = "read", extra: Partial<RunInput> = {}) =>
        Effect.map(single.run({ statement, params: [], mode, maxRows: 10, timeoutMs: 5_000, ...extra }), (result) =>
          result.kind === "rows" ? Object.values(result.rows[0] ?? {})[0] : result.affected_rows)
      const thread = yield* run("SELECT CONNECTION_ID()")
      // What a statement may leave on its session: variables, settings, temporary tables.
      yield* run("SET @leftover = 42", "write")
      yield* run("SET SESSION sql_mode = 'ANSI_QUOTES'", "write")
      yield* run("CREATE TEMPORARY TABLE leftover (x INT)", "write")
      assert.strictEqual(yield* run("SELECT @leftover"), null)
      assert.notInclude(String(yield* run("SELECT @@SESSION.sql_mode")), "ANSI_QUOTES")
      assert.include(
        (yield* Effect.flip(run("SELECT * FROM leftover"))).message,
        "doesn't exist"
      )
      assert.strictEqual(yield* run("SELECT CONNECTION_ID()"), thread)

      // A read stopped at the cap cannot be resumed: its session is replaced.
      yield* run("SELECT id FROM big", "read", { maxRows: 1 })
      const replaced = yield* run("SELECT CONNECTION_ID()")
      assert.notStrictEqual(replaced, thread)
      yield* Effect.flip(run("SELECT SLEEP(5)", "read", { timeoutMs: 200 }))
      assert.notStrictEqual(yield* run("SELECT CONNECTION_ID()"), replaced)
    }).pipe(Effect.scoped))

  it.effect("reports the server version and flavor", () =>
    Effect.gen(function*() {
      const { driver } = yield* DriverDb
      const info = yield* driver.serverInfo
      assert.strictEqual(info.flavor, info.version.toLowerCase().includes("mariadb") ? "mariadb" : "mysql")
      assert.match(info.version, /^\d+\.\d+/)
    }))
})

/**
 * MySQL 8's branches on a machine that only has MariaDB: the server behind a proxy that reports
 * version 8.0.36, turns the driver's `max_execution_time` into MariaDB's `max_statement_time`
 * (so a real server enforces it) and answers `EXPLAIN ANALYZE` with a MySQL 8 tree. Each test
 * asserts what the driver sent, as a MySQL 8 server would have received it: the flavor's
 * statements are the part the skipped tests above cannot reach here.
 */
describe.skipIf(!onMariadb)("MySQL/MariaDB driver on a server that reports MySQL 8 (MariaDB behind a proxy)", () => {
  let database: TempDatabase
  let face: Mysql8Face
  beforeAll(async () => {
    database = await createMysqlDatabase("mg_drv_my8")
    face = await startMysql8Face(Number(new URL(MYSQL_ADMIN_URL).port || 3306))
  })
  afterAll(async () => {
    await face?.close()
    await database?.drop()
  })

  /** A driver of its own through the proxy, and the statements it sent from here on. */
  const withDriver = <A, E>(body: (driver: Effect.Success<ReturnType<typeof makeSqlDriver>>, sent: () => ReadonlyArray<string>) => Effect.Effect<A, E>) =>
    Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const from = face.statements.length
      const driver = yield* makeSqlDriver({ dialect: "mysql", url: face.urlFor(database.url), poolSize: 1 })
      return yield* body(driver, () => face.statements.slice(from))
    })))

  it("reads the flavor from the server's version: MySQL", () =>
    withDriver((driver) =>
      Effect.map(driver.serverInfo, (info) => assert.deepStrictEqual(info, { version: MYSQL8_VERSION, flavor: "mysql" }))
    ))

  it("limits every session with max_execution_time in milliseconds, and a read past it ends as a timeout with nothing left running", () =>
    withDriver((driver, sent) =>
      Effect.gen(function*() {
        const run = (statement: string, timeoutMs: number) => driver.run({ statement, params: [], mode: "read", maxRows: 10, timeoutMs })
        const one = yield* run("SELECT 1 AS one", 4_000)
        assert.deepStrictEqual(one.kind === "rows" ? one.rows : one, [{ one: 1 }])
        const limits = sent().filter((statement) => /^SET SESSION time_zone/i.test(statement))
        assert.isAbove(limits.length, 0)
        // MySQL 8's variable, in milliseconds; never MariaDB's max_statement_time (unknown to MySQL 8).
        for (const statement of limits) {
          assert.include(statement, "max_execution_time = 4000")
          assert.notInclude(statement, "max_statement_time")
        }
        const token = `mg_met_${randomBytes(6).toString("hex")}`
        const error = yield* Effect.flip(run(`SELECT SLEEP(20) AS s, '${token}' AS t`, 500))
        assert.strictEqual(error._tag, "SqlQueryTimeout")
        assert.include(sent().filter((statement) => /^SET SESSION time_zone/i.test(statement)).at(-1), "max_execution_time = 500")
        const leftRunning = () =>
          Effect.map(
            run(`SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE INFO LIKE '%${token}%' AND INFO NOT LIKE '%PROCESSLIST%'`, 5_000),
            (result) => (result.kind === "rows" ? String(result.rows[0]?.n) : "?")
          )
        assert.isTrue(yield* eventually(Effect.map(leftRunning(), (n) => n === "0")))
      })
    ))

  it("takes MySQL 8's error for a statement past max_execution_time (3024) as a timeout", () =>
    withDriver((driver) =>
      Effect.gen(function*() {
        // The real server raises MySQL 8's errno and message (a SIGNAL): the driver must know it.
        const error = yield* Effect.flip(driver.run({
          statement: "SIGNAL SQLSTATE 'HY000' SET MYSQL_ERRNO = 3024, MESSAGE_TEXT = 'Query execution was interrupted, maximum statement execution time exceeded'",
          params: [],
          mode: "read",
          maxRows: 10,
          timeoutMs: 2_000
        }))
        assert.deepInclude(error, { _tag: "SqlQueryTimeout", timeoutMs: 2_000 })
      })
    ))

  it("explains with analyze as EXPLAIN ANALYZE, rolled back, and answers the tree one line per entry", () =>
    withDriver((driver, sent) =>
      Effect.gen(function*() {
        const { plan } = yield* driver.explain({ statement: "SELECT * FROM big WHERE pad = 'y'", params: [], analyze: true, mode: "read", timeoutMs: 10_000 })
        // The server's lines as printed, the blank end dropped; not parsed as JSON.
        assert.deepStrictEqual(plan, MYSQL8_TREE.split("\n").filter((line) => line !== ""))
        const statements = sent()
        const at = statements.indexOf("EXPLAIN ANALYZE SELECT * FROM big WHERE pad = 'y'")
        assert.isAtLeast(at, 0, statements.join("\n"))
        assert.notInclude(statements.join("\n"), "ANALYZE FORMAT=JSON")
        // Inside a read-only transaction, rolled back after: what the analysis ran leaves nothing.
        assert.include(statements.slice(0, at), "START TRANSACTION READ ONLY")
        assert.include(statements.slice(at + 1), "ROLLBACK")
        // A plain EXPLAIN is JSON on MySQL 8 as on MariaDB.
        const plain = yield* driver.explain({ statement: "SELECT 1 AS one", params: [], analyze: false, mode: "read", timeoutMs: 10_000 })
        assert.isObject((plain.plan as Record<string, unknown>).query_block)
        assert.include(sent(), "EXPLAIN FORMAT=JSON SELECT 1 AS one")
      })
    ))
})
