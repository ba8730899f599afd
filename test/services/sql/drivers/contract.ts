/**
 * What every SQL driver must do, whatever its engine: one suite, run by postgres.test.ts and
 * mysql.test.ts against the machine's real databases, each in a database of its own loaded with
 * the same fixture tables (authors, books, the author_names view, 100 000 rows in big, and a
 * kinds table of awkward values). A dialect supplies its SQL where the engines differ (parameter
 * markers, catalog queries, error codes) and registers its own tests in the same layer, so each
 * file builds its database once.
 */
import { assert, layer } from "@effect/vitest"
import type { Vitest } from "@effect/vitest"
import { Context, Effect, Layer, type Scope } from "effect"
import { randomBytes } from "node:crypto"
import {
  makeSqlDriver,
  type RunInput,
  type RunResult,
  type SqlDialect,
  type SqlDriver
} from "../../../../src/services/sql/drivers/SqlDrivers.ts"

/** Where the engines differ, for the shared tests. */
export interface DialectSql {
  /** The n-th (1-based) positional parameter marker. */
  readonly param: (n: number) => string
  /** The type the driver reports for the fixtures' `name` column. */
  readonly textType: string
  /** A statement returning its one text parameter as is. */
  readonly echoText: string
  /** A statement that sleeps 20 s and carries `token` in its text, so `running` can find it. */
  readonly sleep: (token: string) => string
  /** Counts the other sessions whose current statement contains its one parameter. */
  readonly running: string
  /** Counts the tables named by its one parameter. */
  readonly tableCount: string
  /** Writes of several kinds that read mode must make the engine refuse, and how it refuses them. */
  readonly readOnly: {
    readonly writes: ReadonlyArray<string>
    readonly refusal: Readonly<Record<string, string>>
    readonly stackedCode: string
  }
  /** Postgres' ANALYZE counts a table this small exactly; InnoDB's statistics sample it. */
  readonly estimates: "exact" | "sampled"
  /** The kinds table's one row as the driver returns it, and its column types. */
  readonly kinds: { readonly row: Readonly<Record<string, unknown>>; readonly types: ReadonlyArray<string> }
  /** Unreachable servers: a closed port, and an unknown user on the real one; both carry `secret` as password. */
  readonly unreachable: (secret: string) => ReadonlyArray<string>
}

export interface DriverFixture {
  readonly driver: SqlDriver
  readonly url: string
  /** The schema a driver lists by default: `public` on Postgres, the database itself on MySQL. */
  readonly defaultSchema: string
  readonly dialect: SqlDialect
  readonly sql: DialectSql
}

export class DriverDb extends Context.Service<DriverDb, DriverFixture>()("test/DriverDb") {}

export const read = (statement: string, params: ReadonlyArray<unknown> = [], extra: Partial<RunInput> = {}) =>
  DriverDb.use(({ driver }) => driver.run({ statement, params, mode: "read", maxRows: 1000, timeoutMs: 10_000, ...extra }))

export const write = (statement: string, params: ReadonlyArray<unknown> = []) =>
  DriverDb.use(({ driver }) => driver.run({ statement, params, mode: "write", maxRows: 1000, timeoutMs: 10_000 }))

export const rowsOf = (result: RunResult) => {
  assert.strictEqual(result.kind, "rows")
  return result.kind === "rows" ? result : assert.fail("expected rows")
}

export const scalar = (statement: string, params: ReadonlyArray<unknown> = []) =>
  Effect.map(read(statement, params), (result) => Object.values(rowsOf(result).rows[0] ?? {})[0])

export const authorCount = scalar("SELECT COUNT(*) FROM authors")

/** How many other sessions are running a statement that contains `token`. */
export const running = (token: string) => DriverDb.use(({ sql }) => scalar(sql.running, [token]))

/** Polls until `check` holds or the deadline passes; server-side cleanup is asynchronous. */
export const eventually = <E, R>(check: Effect.Effect<boolean, E, R>, timeoutMs = 3_000) =>
  Effect.gen(function*() {
    const deadline = Date.now() + timeoutMs
    while (Date.now() < deadline) {
      if (yield* check) return true
      yield* Effect.sleep("50 millis")
    }
    return yield* check
  })

/**
 * Runs the shared suite, then `dialectTests`, in one layer built from `makeFixture` (which
 * creates and loads the database, and drops it when the scope closes).
 */
export const driverContract = <E>(
  name: string,
  makeFixture: Effect.Effect<DriverFixture, E, Scope.Scope>,
  dialectTests: (it: Vitest.MethodsNonLive<DriverDb>) => void
) =>
  layer(Layer.effect(DriverDb, makeFixture), { excludeTestServices: true, timeout: "120 seconds" })(name, (it) => {
    it.effect("returns rows with their columns and types", () =>
      Effect.gen(function*() {
        const { sql } = yield* DriverDb
        const result = rowsOf(yield* read("SELECT id, name FROM authors ORDER BY id"))
        assert.deepStrictEqual(result.columns, [{ name: "id", type: "bigint" }, { name: "name", type: sql.textType }])
        assert.deepStrictEqual(result.rows, [{ id: "1", name: "Ada" }, { id: "2", name: "Grace" }, {
          id: "3",
          name: "Barbara"
        }])
        assert.strictEqual(result.row_count, 3)
        assert.isFalse(result.truncated)
        assert.isTrue(result.duration_ms >= 0)

        const empty = rowsOf(yield* read("SELECT id FROM authors WHERE 1 = 0"))
        assert.deepStrictEqual(empty.columns, [{ name: "id", type: "bigint" }])
        assert.strictEqual(empty.row_count, 0)
      }))

    it.effect("returns affected rows for writes and DDL", () =>
      Effect.gen(function*() {
        const { sql } = yield* DriverDb
        assert.deepInclude(yield* write("CREATE TABLE scratch (id INT PRIMARY KEY, v VARCHAR(10))"), {
          kind: "affected",
          affected_rows: 0
        })
        assert.deepInclude(yield* write("INSERT INTO scratch VALUES (1, 'v'), (2, 'v'), (3, 'v'), (4, 'v'), (5, 'v')"), {
          kind: "affected",
          affected_rows: 5
        })
        assert.deepInclude(yield* write(`UPDATE scratch SET v = 'w' WHERE id > ${sql.param(1)}`, [2]), {
          kind: "affected",
          affected_rows: 3
        })
        assert.deepInclude(yield* write(`DELETE FROM scratch WHERE id <= ${sql.param(1)}`, [2]), {
          kind: "affected",
          affected_rows: 2
        })
        assert.strictEqual(yield* scalar("SELECT COUNT(*) FROM scratch"), "3")
        yield* write("DROP TABLE scratch")
      }))

    it.effect("binds parameters as data, never as SQL", () =>
      Effect.gen(function*() {
        const { sql } = yield* DriverDb
        const p = sql.param
        const hostile = "x'; DROP TABLE authors; --"
        assert.strictEqual(yield* scalar(sql.echoText, [hostile]), hostile)
        assert.strictEqual(yield* scalar(`SELECT COUNT(*) FROM authors WHERE name = ${p(1)}`, ["x' OR '1'='1"]), "0")
        yield* write(`INSERT INTO authors (id, name) VALUES (${p(1)}, ${p(2)})`, [90, hostile])
        assert.strictEqual(yield* scalar(`SELECT name FROM authors WHERE id = ${p(1)}`, [90]), hostile)
        assert.strictEqual(yield* authorCount, "4")
        yield* write(`DELETE FROM authors WHERE id = ${p(1)}`, [90])
        // JSON numbers compare with numeric columns.
        assert.strictEqual(yield* scalar(`SELECT title FROM books WHERE price = ${p(1)}`, [12.5]), "Notes")
      }))

    it.effect("stops at max_rows and reports truncation", () =>
      Effect.gen(function*() {
        const capped = rowsOf(yield* read("SELECT id, pad FROM big ORDER BY id", [], { maxRows: 10 }))
        assert.strictEqual(capped.row_count, 10)
        assert.isTrue(capped.truncated)
        assert.deepStrictEqual(capped.rows.map((row) => row.id), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10])

        const exact = rowsOf(yield* read("SELECT id FROM big WHERE id <= 10", [], { maxRows: 10 }))
        assert.isFalse(exact.truncated)
      }))

    it.effect("cancels a statement past its timeout and leaves nothing running", () =>
      Effect.gen(function*() {
        const { sql } = yield* DriverDb
        const token = `mg_timeout_${randomBytes(6).toString("hex")}`
        const started = Date.now()
        const error = yield* Effect.flip(read(sql.sleep(token), [], { timeoutMs: 300 }))
        assert.strictEqual(error._tag, "SqlQueryTimeout")
        // Ended by the 300 ms timeout, not the statement's 20 s: 10 s is generous for a machine at load 10.
        assert.isBelow(Date.now() - started, 10_000)
        assert.isTrue(yield* eventually(Effect.map(running(token), (count) => count === "0")))
        // The pool replaced the destroyed session.
        assert.strictEqual(yield* scalar("SELECT 1"), 1)
      }))

    it.effect("read mode makes the engine refuse writes, DDL included", () =>
      Effect.gen(function*() {
        const { sql } = yield* DriverDb
        for (const statement of sql.readOnly.writes) {
          const error = yield* Effect.flip(read(statement))
          assert.deepInclude(error, { _tag: "SqlQueryFailed", ...sql.readOnly.refusal }, statement)
        }
        const stacked = yield* Effect.flip(read("SELECT 1; DELETE FROM authors"))
        assert.deepInclude(stacked, { _tag: "SqlQueryFailed", code: sql.readOnly.stackedCode })
        assert.strictEqual(yield* authorCount, "3")
        assert.strictEqual(yield* scalar(sql.tableCount, ["sneaky"]), "0")
      }))

    it.effect("encodes values for JSON", () =>
      Effect.gen(function*() {
        const { sql } = yield* DriverDb
        const result = rowsOf(yield* read("SELECT * FROM kinds"))
        assert.deepStrictEqual(result.rows[0], sql.kinds.row)
        assert.deepStrictEqual(result.columns.map((column) => column.type), [...sql.kinds.types])
      }))

    it.effect("lists tables and views with row estimates", () =>
      Effect.gen(function*() {
        const { defaultSchema, driver, sql } = yield* DriverDb
        const tables = yield* driver.listTables(undefined)
        const byName = new Map(tables.map((table) => [table.name, table]))
        assert.deepStrictEqual(byName.get("authors"), {
          schema: defaultSchema,
          name: "authors",
          kind: "table",
          rows_estimate: byName.get("authors")?.rows_estimate ?? -1
        })
        assert.strictEqual(byName.get("author_names")?.kind, "view")
        if (sql.estimates === "exact") assert.strictEqual(byName.get("big")?.rows_estimate, 100_000)
        else assert.isAbove(byName.get("big")?.rows_estimate ?? 0, 50_000)
        assert.isTrue(tables.every((table) => table.rows_estimate >= 0))
        assert.deepStrictEqual(
          (yield* driver.listTables(defaultSchema)).map((table) => table.name),
          tables.map((table) => table.name)
        )
        assert.deepStrictEqual(yield* driver.listTables("no_such_schema"), [])
        assert.deepStrictEqual(yield* driver.listTables(`${defaultSchema}' OR '1'='1`), [])
      }))

    it.effect("reports an unreachable server without leaking the password", () =>
      Effect.gen(function*() {
        const { dialect, sql } = yield* DriverDb
        const secret = "s3cr3t-pa55word"
        for (const url of sql.unreachable(secret)) {
          const driver = yield* makeSqlDriver({ dialect, url })
          const error = yield* Effect.flip(
            driver.run({ statement: "SELECT 1", params: [], mode: "read", maxRows: 1, timeoutMs: 5_000 })
          )
          assert.strictEqual(error._tag, "SqlConnectionUnreachable")
          assert.notInclude(error.message, secret)
          assert.notInclude(JSON.stringify(error), secret)
          assert.notInclude(String(error), secret)
        }
      }).pipe(Effect.scoped))

    dialectTests(it)
  })
