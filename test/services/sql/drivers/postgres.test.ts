/**
 * The Postgres driver against the machine's real Postgres, in a database of its own: the shared
 * driver contract (contract.ts), then what only Postgres does.
 */
import { assert } from "@effect/vitest"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import { makeSqlDriver } from "../../../../src/services/sql/drivers/SqlDrivers.ts"
import { createPostgresDatabase } from "../../../support/databases.ts"
import { authorCount, DriverDb, driverContract, read, rowsOf, scalar, write } from "./contract.ts"

const FIXTURES = [
  `CREATE TABLE authors (id bigint PRIMARY KEY, name text NOT NULL UNIQUE, email text,
     created_at timestamptz NOT NULL DEFAULT now())`,
  `CREATE TABLE books (id serial PRIMARY KEY, author_id bigint NOT NULL REFERENCES authors (id),
     title text NOT NULL, price numeric(10, 2), UNIQUE (author_id, title))`,
  "CREATE INDEX books_title_lower ON books (lower(title))",
  "CREATE VIEW author_names AS SELECT name FROM authors",
  "INSERT INTO authors (id, name) VALUES (1, 'Ada'), (2, 'Grace'), (3, 'Barbara')",
  "INSERT INTO books (author_id, title, price) VALUES (1, 'Notes', 12.50), (2, 'Compilers', 30)",
  "CREATE TABLE big (id int PRIMARY KEY, pad text NOT NULL)",
  "INSERT INTO big SELECT g, repeat('x', 100) FROM generate_series(1, 100000) AS g",
  "ANALYZE big",
  "CREATE SEQUENCE produced_rows",
  `CREATE TABLE kinds (i8 bigint, n numeric, b bytea, j jsonb, ts timestamptz, t timestamp, d date,
     iv interval, a bigint[], nothing text)`,
  `INSERT INTO kinds VALUES (9007199254740993, 12345678901234567890.123456789, '\\xdeadbeef',
     '{"a": [1, 2, {"b": null}]}', '2024-02-29 23:59:59.123456+00', '2024-02-29 23:59:59.5', '2024-02-29',
     '1 day 02:03:04.5', '{1, 9007199254740993}', NULL)`
]

const makeFixture = Effect.gen(function*() {
  const database = yield* Effect.acquireRelease(
    Effect.promise(() => createPostgresDatabase("mg_drv_pg")),
    (created) => Effect.promise(() => created.drop())
  )
  const driver = yield* makeSqlDriver({ dialect: "postgres", url: database.url })
  for (const statement of FIXTURES) {
    yield* driver.run({ statement, params: [], mode: "write", maxRows: 10, timeoutMs: 30_000 })
  }
  return {
    driver,
    url: database.url,
    defaultSchema: "public",
    dialect: "postgres" as const,
    sql: {
      param: (n: number) => `$${n}`,
      textType: "text",
      echoText: "SELECT $1::text",
      sleep: (token: string) => `SELECT pg_sleep(20) /* ${token} */`,
      running: "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()",
      tableCount: "SELECT count(*) FROM pg_class WHERE relname = $1",
      readOnly: {
        writes: [
          "INSERT INTO authors (id, name) VALUES (50, 'Mallory')",
          "WITH gone AS (DELETE FROM authors RETURNING *) SELECT count(*) FROM gone",
          "CREATE TABLE sneaky (x int)",
          "SELECT nextval('produced_rows')"
        ],
        refusal: { code: "25006" },
        stackedCode: "42601"
      },
      estimates: "exact" as const,
      kinds: {
        row: {
          i8: "9007199254740993",
          n: "12345678901234567890.123456789",
          b: "3q2+7w==",
          j: { a: [1, 2, { b: null }] },
          ts: "2024-02-29T23:59:59.123456Z",
          t: "2024-02-29T23:59:59.5",
          d: "2024-02-29",
          iv: "P1DT2H3M4.5S",
          a: ["1", "9007199254740993"],
          nothing: null
        },
        types: [
          "bigint",
          "numeric",
          "bytea",
          "jsonb",
          "timestamp with time zone",
          "timestamp without time zone",
          "date",
          "interval",
          "bigint[]",
          "text"
        ]
      },
      unreachable: (secret: string) => [
        `postgres://postgres:${secret}@127.0.0.1:1/test`,
        `postgres://nobody_${randomBytes(3).toString("hex")}:${secret}@127.0.0.1:5432/test`
      ]
    }
  }
})

driverContract("Postgres driver", makeFixture, (it) => {
  it.effect("returns the rows of statements a cursor cannot hold", () =>
    Effect.gen(function*() {
      const shown = rowsOf(yield* read("SHOW server_encoding"))
      assert.deepStrictEqual(shown.rows, [{ server_encoding: "UTF8" }])
    }))

  it.effect("returns RETURNING rows, and runs what a transaction block refuses on its own", () =>
    Effect.gen(function*() {
      assert.deepInclude(yield* write("CREATE TABLE scratch_returning (id int PRIMARY KEY, v text)"), {
        kind: "affected",
        affected_rows: 0
      })
      assert.deepInclude(yield* write("INSERT INTO scratch_returning SELECT g, 'v' FROM generate_series(1, 5) AS g"), {
        kind: "affected",
        affected_rows: 5
      })
      const deleted = rowsOf(yield* write("DELETE FROM scratch_returning WHERE id <= $1 RETURNING id", [2]))
      assert.deepStrictEqual(deleted.rows, [{ id: 1 }, { id: 2 }])
      assert.strictEqual(yield* scalar("SELECT count(*) FROM scratch_returning"), "3")
      // Refused inside a transaction block, so it runs on its own.
      assert.deepInclude(yield* write("VACUUM scratch_returning"), { kind: "affected", affected_rows: 0 })
      yield* write("DROP TABLE scratch_returning")
    }))

  it.effect("binds JSON values: arrays feed ANY() and typed arrays, objects jsonb", () =>
    Effect.gen(function*() {
      const byIds = rowsOf(yield* read("SELECT name FROM authors WHERE id = ANY($1) ORDER BY id", [[1, 3]]))
      assert.deepStrictEqual(byIds.rows, [{ name: "Ada" }, { name: "Barbara" }])
      assert.deepStrictEqual(yield* scalar("SELECT $1::jsonb", [{ k: [1, "two"] }]), { k: [1, "two"] })
      const awkward = ["a\"b", "c\\d", null, "NULL", "{x,y}", ""]
      assert.deepStrictEqual(yield* scalar("SELECT $1::text[]", [awkward]), awkward)
      assert.deepStrictEqual(yield* scalar("SELECT $1::int[]", [[[1, 2], [3, 4]]]), [[1, 2], [3, 4]])
    }))

  it.effect("stops the executor at max_rows through a cursor", () =>
    Effect.gen(function*() {
      // A server-side counter: every row the executor produces draws from the sequence.
      yield* DriverDb.use(({ driver }) =>
        driver.run({
          statement: "SELECT id, nextval('produced_rows') FROM big",
          params: [],
          mode: "write",
          maxRows: 25,
          timeoutMs: 10_000
        }))
      assert.strictEqual(yield* scalar("SELECT last_value FROM produced_rows"), "26")
    }))

  it.effect("encodes arrays, points, bits, timestamp edges and intervals for JSON", () =>
    Effect.gen(function*() {
      const odd = rowsOf(yield* read("SELECT ARRAY[[1, 2], [3, NULL]] AS grid, point(1, 2) AS p, B'101' AS bits"))
      assert.deepStrictEqual(odd.rows[0], { grid: [[1, 2], [3, null]], p: "\\x3ff00000000000004000000000000000", bits: "101" })

      const edges = rowsOf(
        yield* read(`SELECT '0001-01-01 00:00:00 BC'::timestamp AS bc, '294276-12-31 23:59:59.999999'::timestamp AS far,
          '1999-12-31 23:59:59.999999'::timestamp AS before_epoch, 'infinity'::timestamptz AS inf,
          '-infinity'::timestamp AS minus_inf`)
      )
      assert.deepStrictEqual(edges.rows[0], {
        bc: "0000-01-01T00:00:00",
        far: "+294276-12-31T23:59:59.999999",
        before_epoch: "1999-12-31T23:59:59.999999",
        inf: "infinity",
        minus_inf: "-infinity"
      })

      // Intervals must read exactly as Postgres itself prints them in the iso_8601 style.
      const intervals = rowsOf(
        yield* read(`SELECT set_config('intervalstyle', 'iso_8601', true) AS style, v::text AS text, v
          FROM (VALUES (interval '0'), (interval '1 mon'), (interval '-1 year -2 mons +3 days -04:05:06.000001'),
            (interval '100 hours 0.25 seconds')) AS t(v)`)
      )
      assert.strictEqual(intervals.row_count, 4)
      for (const row of intervals.rows) assert.strictEqual(row.v, row.text)
    }))

  it.effect("describes columns, keys, indexes and foreign keys", () =>
    Effect.gen(function*() {
      const { driver } = yield* DriverDb
      const books = yield* driver.describe(undefined, "books")
      assert.deepStrictEqual(books, {
        schema: "public",
        name: "books",
        columns: [
          { name: "id", type: "integer", nullable: false, default: "nextval('books_id_seq'::regclass)", pk: true },
          { name: "author_id", type: "bigint", nullable: false },
          { name: "title", type: "text", nullable: false },
          { name: "price", type: "numeric(10,2)", nullable: true }
        ],
        indexes: [
          { name: "books_author_id_title_key", columns: ["author_id", "title"], unique: true },
          { name: "books_pkey", columns: ["id"], unique: true },
          { name: "books_title_lower", columns: ["lower(title)"], unique: false }
        ],
        foreign_keys: [
          {
            name: "books_author_id_fkey",
            columns: ["author_id"],
            references: { schema: "public", table: "authors", columns: ["id"] }
          }
        ]
      })
      const authors = yield* driver.describe("public", "authors")
      assert.deepStrictEqual(authors?.columns.find((column) => column.name === "name"), {
        name: "name",
        type: "text",
        nullable: false,
        unique: true
      })
      assert.strictEqual(authors?.columns.find((column) => column.name === "created_at")?.default, "now()")
      assert.strictEqual(yield* driver.describe(undefined, "nope"), undefined)
      assert.strictEqual(yield* driver.describe(undefined, "authors' OR '1'='1"), undefined)
    }))

  it.effect("explains with and without analyze, and an analyzed write leaves no trace", () =>
    Effect.gen(function*() {
      const { driver } = yield* DriverDb
      const explain = (statement: string, analyze: boolean, mode: "read" | "write", params: Array<unknown> = []) =>
        driver.explain({ statement, params, analyze, mode, timeoutMs: 10_000 })
      const plain = (yield* explain("SELECT * FROM authors WHERE id = $1", false, "read", [1])).plan as Array<
        { Plan: Record<string, unknown> }
      >
      assert.isObject(plain[0]?.Plan)
      assert.notProperty(plain[0]?.Plan, "Actual Rows")
      const analyzed = (yield* explain("SELECT * FROM authors", true, "read")).plan as Array<
        { Plan: Record<string, unknown> }
      >
      assert.strictEqual(analyzed[0]?.Plan["Actual Rows"], 3)

      const deleting = (yield* explain("DELETE FROM authors WHERE id = $1", true, "write", [3])).plan as Array<
        { Plan: Record<string, unknown> }
      >
      assert.strictEqual(deleting[0]?.Plan["Node Type"], "ModifyTable")
      assert.strictEqual(yield* authorCount, "3")
      const refused = yield* Effect.flip(explain("DELETE FROM authors WHERE id = 3", true, "read"))
      assert.deepInclude(refused, { _tag: "SqlQueryFailed", code: "25006" })
    }))

  it.effect("resets each session and replaces the ones that timed out", () =>
    Effect.gen(function*() {
      const { url } = yield* DriverDb
      const single = yield* makeSqlDriver({ dialect: "postgres", url, poolSize: 1 })
      const run = (statement: string, mode: "read" | "write" = "read", timeoutMs = 5_000) =>
        Effect.map(single.run({ statement, params: [], mode, maxRows: 10, timeoutMs }), (result) =>
          result.kind === "rows" ? Object.values(result.rows[0] ?? {})[0] : result.affected_rows)
      const pid = yield* run("SELECT pg_backend_pid()")
      // What a statement may leave on its session: settings, temporary tables.
      yield* run("SELECT set_config('search_path', 'pg_catalog', false)", "write")
      yield* run("CREATE TEMP TABLE leftover (x int)", "write")
      assert.strictEqual(yield* run("SELECT current_setting('search_path')"), "\"$user\", public")
      assert.strictEqual(yield* run("SELECT to_regclass('pg_temp.leftover') IS NULL"), true)
      assert.strictEqual(yield* run("SELECT pg_backend_pid()"), pid)

      yield* Effect.flip(run("SELECT pg_sleep(5)", "read", 200))
      assert.notStrictEqual(yield* run("SELECT pg_backend_pid()"), pid)
    }).pipe(Effect.scoped))

  it.effect("reports the server version", () =>
    Effect.gen(function*() {
      const { driver } = yield* DriverDb
      const info = yield* driver.serverInfo
      assert.strictEqual(info.flavor, "postgres")
      assert.match(info.version, /^\d+/)
    }))
})
