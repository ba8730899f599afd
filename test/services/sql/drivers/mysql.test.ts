/**
 * The MySQL/MariaDB driver against the machine's real MariaDB, in a database of its own.
 * MySQL 8 is not installed here: its branches (max_execution_time, EXPLAIN ANALYZE as a tree)
 * are not exercised.
 */
import { assert, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { randomBytes } from "node:crypto"
import {
  makeSqlDriver,
  type RunInput,
  type RunResult,
  type SqlDriver
} from "../../../../src/services/sql/drivers/SqlDrivers.ts"
import { createMysqlDatabase } from "../../../support/databases.ts"

class Db extends Context.Service<Db, { readonly driver: SqlDriver; readonly url: string; readonly name: string }>()(
  "test/MysqlDriverDb"
) {}

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

const DbLayer = Layer.effect(
  Db,
  Effect.gen(function*() {
    const database = yield* Effect.acquireRelease(
      Effect.promise(() => createMysqlDatabase("mg_drv_my")),
      (created) => Effect.promise(() => created.drop())
    )
    const driver = yield* makeSqlDriver({ dialect: "mysql", url: database.url })
    for (const statement of FIXTURES) {
      yield* driver.run({ statement, params: [], mode: "write", maxRows: 10, timeoutMs: 60_000 })
    }
    return { driver, url: database.url, name: database.name }
  })
)

const read = (statement: string, params: ReadonlyArray<unknown> = [], extra: Partial<RunInput> = {}) =>
  Db.use(({ driver }) => driver.run({ statement, params, mode: "read", maxRows: 1000, timeoutMs: 10_000, ...extra }))

const write = (statement: string, params: ReadonlyArray<unknown> = []) =>
  Db.use(({ driver }) => driver.run({ statement, params, mode: "write", maxRows: 1000, timeoutMs: 10_000 }))

const rowsOf = (result: RunResult) => {
  assert.strictEqual(result.kind, "rows")
  return result.kind === "rows" ? result : assert.fail("expected rows")
}

const scalar = (statement: string, params: ReadonlyArray<unknown> = []) =>
  Effect.map(read(statement, params), (result) => Object.values(rowsOf(result).rows[0] ?? {})[0])

const authorCount = scalar("SELECT COUNT(*) FROM authors")

const running = (token: string) =>
  scalar(
    "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE CONCAT('%', ?, '%') AND ID <> CONNECTION_ID()",
    [token]
  )

/** Polls until `check` holds or the deadline passes; server-side cleanup is asynchronous. */
const eventually = <E, R>(check: Effect.Effect<boolean, E, R>, timeoutMs = 3_000) =>
  Effect.gen(function*() {
    const deadline = Date.now() + timeoutMs
    while (Date.now() < deadline) {
      if (yield* check) return true
      yield* Effect.sleep("50 millis")
    }
    return yield* check
  })

layer(DbLayer, { excludeTestServices: true, timeout: "120 seconds" })("MySQL/MariaDB driver", (it) => {
  it.effect("returns rows with their columns and types", () =>
    Effect.gen(function*() {
      const result = rowsOf(yield* read("SELECT id, name FROM authors ORDER BY id"))
      assert.deepStrictEqual(result.columns, [{ name: "id", type: "bigint" }, { name: "name", type: "varchar" }])
      assert.deepStrictEqual(result.rows, [{ id: "1", name: "Ada" }, { id: "2", name: "Grace" }, {
        id: "3",
        name: "Barbara"
      }])
      assert.strictEqual(result.row_count, 3)
      assert.isFalse(result.truncated)
      assert.isTrue(result.duration_ms >= 0)
      const empty = rowsOf(yield* read("SELECT id FROM authors WHERE 1 = 0"))
      assert.strictEqual(empty.row_count, 0)
      assert.deepStrictEqual(empty.columns, [{ name: "id", type: "bigint" }])
      const shown = rowsOf(yield* read("SHOW TABLES LIKE 'auth%'"))
      assert.strictEqual(shown.row_count, 2)
    }))

  it.effect("returns affected rows for writes and DDL", () =>
    Effect.gen(function*() {
      assert.deepInclude(yield* write("CREATE TABLE scratch (id INT PRIMARY KEY, v VARCHAR(10))"), {
        kind: "affected",
        affected_rows: 0
      })
      assert.deepInclude(yield* write("INSERT INTO scratch VALUES (1, 'v'), (2, 'v'), (3, 'v'), (4, 'v'), (5, 'v')"), {
        kind: "affected",
        affected_rows: 5
      })
      assert.deepInclude(yield* write("UPDATE scratch SET v = 'w' WHERE id > ?", [2]), {
        kind: "affected",
        affected_rows: 3
      })
      assert.deepInclude(yield* write("DELETE FROM scratch WHERE id <= ?", [2]), { kind: "affected", affected_rows: 2 })
      assert.strictEqual(yield* scalar("SELECT COUNT(*) FROM scratch"), "3")
      yield* write("DROP TABLE scratch")
    }))

  it.effect("binds parameters as data, never as SQL", () =>
    Effect.gen(function*() {
      const hostile = "x'; DROP TABLE authors; --"
      assert.strictEqual(yield* scalar("SELECT ? AS v", [hostile]), hostile)
      assert.strictEqual(yield* scalar("SELECT COUNT(*) FROM authors WHERE name = ?", ["x' OR '1'='1"]), "0")
      yield* write("INSERT INTO authors (id, name) VALUES (?, ?)", [90, hostile])
      assert.strictEqual(yield* scalar("SELECT name FROM authors WHERE id = ?", [90]), hostile)
      assert.strictEqual(yield* authorCount, "4")
      yield* write("DELETE FROM authors WHERE id = ?", [90])
      assert.strictEqual(yield* scalar("SELECT title FROM books WHERE price = ?", [12.5]), "Notes")
      assert.deepStrictEqual(yield* scalar("SELECT JSON_EXTRACT(?, '$.k')", [{ k: [1, "two"] }]), [1, "two"])
    }))

  it.effect("stops reading at max_rows and reports truncation", () =>
    Effect.gen(function*() {
      const capped = rowsOf(yield* read("SELECT id, pad FROM big ORDER BY id", [], { maxRows: 10 }))
      assert.strictEqual(capped.row_count, 10)
      assert.isTrue(capped.truncated)
      assert.deepStrictEqual(capped.rows.map((row) => row.id), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
      const exact = rowsOf(yield* read("SELECT id FROM big WHERE id <= 10", [], { maxRows: 10 }))
      assert.isFalse(exact.truncated)

      // 10^10 rows: reading them (or waiting for the server to finish) would run into the 5 s timeout.
      const token = `mg_cap_${randomBytes(6).toString("hex")}`
      const started = Date.now()
      const endless = rowsOf(
        yield* read(`SELECT a.id, b.pad, '${token}' AS t FROM big a CROSS JOIN big b`, [], {
          maxRows: 10,
          timeoutMs: 5_000
        })
      )
      assert.strictEqual(endless.row_count, 10)
      assert.isTrue(endless.truncated)
      assert.isBelow(Date.now() - started, 3_000)
      assert.isTrue(yield* eventually(Effect.map(running(token), (count) => count === "0")))
    }))

  it.effect("cancels a statement past its timeout and leaves nothing running", () =>
    Effect.gen(function*() {
      const token = `mg_timeout_${randomBytes(6).toString("hex")}`
      const started = Date.now()
      const error = yield* Effect.flip(read(`SELECT SLEEP(20) AS s, '${token}' AS t`, [], { timeoutMs: 300 }))
      assert.strictEqual(error._tag, "SqlQueryTimeout")
      assert.isBelow(Date.now() - started, 3_000)
      assert.isTrue(yield* eventually(Effect.map(running(token), (count) => count === "0")))
      assert.strictEqual(yield* scalar("SELECT 1"), 1)
    }))

  it.effect("kills a statement that escapes the server-side limit when the client timer fires", () =>
    Effect.gen(function*() {
      const { driver } = yield* Db
      if ((yield* driver.serverInfo).flavor !== "mariadb") return
      const token = `mg_escape_${randomBytes(6).toString("hex")}`
      const started = Date.now()
      const error = yield* Effect.flip(
        read(`SET STATEMENT max_statement_time = 0 FOR SELECT SLEEP(20) AS s, '${token}' AS t`, [], {
          timeoutMs: 300
        })
      )
      assert.strictEqual(error._tag, "SqlQueryTimeout")
      assert.isBelow(Date.now() - started, 5_000)
      assert.isTrue(yield* eventually(Effect.map(running(token), (count) => count === "0")))
    }))

  it.effect("read mode makes the engine refuse writes, DDL included", () =>
    Effect.gen(function*() {
      for (
        const statement of [
          "INSERT INTO authors (id, name) VALUES (50, 'Mallory')",
          "DELETE FROM authors",
          "CREATE TABLE sneaky (x INT)",
          "DROP TABLE books"
        ]
      ) {
        const error = yield* Effect.flip(read(statement))
        assert.deepInclude(error, { _tag: "SqlQueryFailed", code: "1792", sqlstate: "25006" }, statement)
      }
      const stacked = yield* Effect.flip(read("SELECT 1; DELETE FROM authors"))
      assert.deepInclude(stacked, { _tag: "SqlQueryFailed", code: "1064" })
      assert.strictEqual(yield* authorCount, "3")
      assert.strictEqual(
        yield* scalar("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", [
          "sneaky"
        ]),
        "0"
      )
    }))

  it.effect("encodes values for JSON", () =>
    Effect.gen(function*() {
      const result = rowsOf(yield* read("SELECT * FROM kinds"))
      assert.deepStrictEqual(result.rows[0], {
        i8: "9007199254740993",
        n: "12345678901234567890.123456789",
        b: "3q2+7w==",
        j: { a: [1, 2, { b: null }] },
        ts: "2024-02-29T23:59:59.123456Z",
        dt: "2024-02-29T23:59:59.500000",
        d: "2024-02-29",
        flag: 5,
        nothing: null
      })
      assert.deepStrictEqual(
        result.columns.map((column) => column.type),
        ["bigint", "decimal", "blob", "json", "timestamp", "datetime", "date", "bit", "varchar"]
      )
    }))

  it.effect("lists tables and views with row estimates", () =>
    Effect.gen(function*() {
      const { driver, name } = yield* Db
      const tables = yield* driver.listTables(undefined)
      const byName = new Map(tables.map((table) => [table.name, table]))
      assert.strictEqual(byName.get("authors")?.kind, "table")
      assert.strictEqual(byName.get("authors")?.schema, name)
      assert.strictEqual(byName.get("author_names")?.kind, "view")
      assert.isAbove(byName.get("big")?.rows_estimate ?? 0, 50_000)
      assert.isTrue(tables.every((table) => table.rows_estimate >= 0))
      assert.deepStrictEqual((yield* driver.listTables(name)).map((table) => table.name), tables.map((table) => table.name))
      assert.deepStrictEqual(yield* driver.listTables("no_such_schema"), [])
      assert.deepStrictEqual(yield* driver.listTables(`${name}' OR '1'='1`), [])
    }))

  it.effect("describes columns, keys, indexes and foreign keys", () =>
    Effect.gen(function*() {
      const { driver, name } = yield* Db
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

  it.effect("explains with and without analyze, and an analyzed write leaves no trace", () =>
    Effect.gen(function*() {
      const { driver } = yield* Db
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
      const { url } = yield* Db
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

  it.effect("reports an unreachable server without leaking the password", () =>
    Effect.gen(function*() {
      const secret = "s3cr3t-pa55word"
      for (
        const url of [
          `mysql://root:${secret}@127.0.0.1:1/test`,
          `mysql://nobody_${randomBytes(3).toString("hex")}:${secret}@127.0.0.1:3306/test`
        ]
      ) {
        const driver = yield* makeSqlDriver({ dialect: "mysql", url })
        const error = yield* Effect.flip(
          driver.run({ statement: "SELECT 1", params: [], mode: "read", maxRows: 1, timeoutMs: 5_000 })
        )
        assert.strictEqual(error._tag, "SqlConnectionUnreachable")
        assert.notInclude(error.message, secret)
        assert.notInclude(JSON.stringify(error), secret)
        assert.notInclude(String(error), secret)
      }
    }).pipe(Effect.scoped))

  it.effect("reports the server version and flavor", () =>
    Effect.gen(function*() {
      const { driver } = yield* Db
      const info = yield* driver.serverInfo
      assert.strictEqual(info.flavor, info.version.toLowerCase().includes("mariadb") ? "mariadb" : "mysql")
      assert.match(info.version, /^\d+\.\d+/)
    }))
})
