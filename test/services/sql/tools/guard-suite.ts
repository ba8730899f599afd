/**
 * The proof that a read key cannot change either database (one test file per dialect calls
 * `defineGuardSuite`, so the two run in parallel): every case of the guard's table
 * goes through `sql_run` against the real database of its dialect, once with a read key and
 * once with an edit key.
 *
 * - read verdict: rows (or the engine's own refusal, listed below), for both keys;
 * - write verdict: 403 `sql_gate_blocked` for the read key, run for the edit key;
 * - refused verdict: 422 `query_too_dangerous` for both keys;
 * - every blocked or refused case makes no driver call at all, and a checksum of the fixture
 *   data, the catalog and the server state the case aims at is unchanged afterwards; so is every
 *   read of the read key. After an edit key's write the fixtures are restored (data) or rebuilt
 *   (schema), and the checksum must be back to its baseline.
 */
import { existsSync, statSync } from "node:fs"
import { randomBytes } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { Dialect } from "../../../../src/services/sql/guard/index.ts"
import type { ToolOutcome } from "../../../../src/services/sql/SqlTools.ts"
import { createMysqlDatabase, createPostgresDatabase, type TempDatabase } from "../../../support/databases.ts"
import {
  bindSuffix,
  fixtureSetup,
  type GuardCase,
  mysqlCases,
  mysqlCatalogueCases,
  postgresCases,
  postgresCatalogueCases
} from "../guard/cases.ts"
import {
  type Admin,
  callTool,
  context,
  countingDrivers,
  type DriverCalls,
  expectFailure,
  makeConfig,
  makeToolsRuntime,
  mysqlAdmin,
  postgresAdmin,
  type ToolsRuntime
} from "./support.ts"

const PG = 1
const MY = 2
const readKey = context("guard_read", { [PG]: "read", [MY]: "read" })
const editKey = context("guard_edit", { [PG]: "edit", [MY]: "edit" })
const suffix = randomBytes(4).toString("hex")

/**
 * Reads the guard allows that the engine itself refuses under the driver's read mode, or that
 * fail on this server for reasons of their own. The code is the database's (SQLSTATE on
 * Postgres, errno on MariaDB).
 */
const engineRefusals: Readonly<Record<Dialect, Readonly<Record<string, string>>>> = {
  postgres: {
    "SELECT currval('guard_seq')": "55000" // not yet defined in this session
  },
  mysql: {
    "VALUES ROW(1, 'a'), ROW(2, 'b')": "1064", // MySQL 8 syntax; MariaDB has no ROW constructor here
    "TABLE guard_items": "1064", // MySQL 8 syntax
    "EXPLAIN DELETE FROM guard_items": "1792", // MariaDB refuses EXPLAIN of a write in a read-only transaction
    "EXPLAIN FORMAT=JSON UPDATE guard_items SET qty = 0": "1792",
    "EXPLAIN SELECT * FROM guard_items FOR UPDATE": "1792",
    "EXPLAIN ANALYZE SELECT * FROM guard_items": "1064", // MySQL 8 syntax; MariaDB spells it ANALYZE SELECT
    "SELECT `a`` ; DROP` FROM guard_items": "1054" // a quoted column name that does not exist
  }
}

/** The one bound parameter each dialect's cases use. */
const paramsFor = (c: GuardCase): ReadonlyArray<unknown> =>
  c.dialect === "postgres" ? (c.sql.includes("$1") ? ["apple"] : []) : (/= \?$/.test(c.sql) ? [1] : [])

/** Files the refused cases name on the machine the servers run on. */
const SERVER_FILES = ["/tmp/guard_copy", "/tmp/guard_lo", "/tmp/guard_out", "/tmp/guard_dump"]
const filesState = () =>
  SERVER_FILES.map((file) => (existsSync(file) ? `${file}@${statSync(file).mtimeMs}` : `${file}:absent`)).join(",")

const pgChecksumSql = (s: string) => `SELECT md5(concat_ws('|',
  (SELECT string_agg(nspname, ',' ORDER BY nspname) FROM pg_namespace
     WHERE nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema'),
  (SELECT string_agg(format('%s.%s:%s:%s:%s', n.nspname, c.relname, c.relkind, c.relacl, c.relpersistence), ','
       ORDER BY n.nspname, c.relname)
     FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname NOT LIKE 'pg\\_%' AND n.nspname <> 'information_schema'),
  (SELECT string_agg(format('%s.%s:%s:%s:%s', c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
       pg_get_expr(d.adbin, d.adrelid)), ',' ORDER BY c.relname, a.attnum)
     FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
     LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
     WHERE a.attnum > 0 AND NOT a.attisdropped AND n.nspname = 'public'),
  (SELECT string_agg(format('%s:%s', c.relname, d.description), ',' ORDER BY c.relname)
     FROM pg_description d JOIN pg_class c ON c.oid = d.objoid JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = 'public'),
  (SELECT string_agg(format('%s.%s', n.nspname, p.proname), ',' ORDER BY n.nspname, p.proname)
     FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
     WHERE n.nspname NOT LIKE 'pg\\_%' AND n.nspname <> 'information_schema'),
  (SELECT string_agg(extname, ',' ORDER BY extname) FROM pg_extension),
  (SELECT string_agg(lanname, ',' ORDER BY lanname) FROM pg_language),
  (SELECT string_agg(srvname, ',' ORDER BY srvname) FROM pg_foreign_server),
  (SELECT string_agg(spcname, ',' ORDER BY spcname) FROM pg_tablespace),
  (SELECT count(*) FROM pg_largeobject_metadata),
  (SELECT string_agg(format('%s:%s:%s', rolname, rolsuper, rolcanlogin), ',' ORDER BY rolname) FROM pg_roles
     WHERE rolname LIKE 'guard%' OR rolname = 'postgres'),
  (SELECT string_agg(m.roleid::regrole::text, ',' ORDER BY m.roleid::regrole::text) FROM pg_auth_members m
     WHERE m.member = 'postgres'::regrole),
  (SELECT string_agg(format('%s:%s:%s', s.setdatabase, s.setrole, s.setconfig), ',' ORDER BY s.setdatabase, s.setrole)
     FROM pg_db_role_setting s
     -- One list (not a scalar subquery: with both databases present it would return two rows and
     -- fail as soon as any database or role setting exists on the shared server).
     WHERE s.setdatabase IN (SELECT 0::oid UNION ALL SELECT oid FROM pg_database WHERE datname IN ('test', current_database()))
       AND s.setrole IN (0, 'postgres'::regrole)),
  (SELECT string_agg(format('%s=%s', name, setting), ',' ORDER BY name) FROM pg_file_settings
     WHERE sourcefile LIKE '%postgresql.auto.conf'),
  (SELECT string_agg(format('%s:%s:%s', id, name, qty), ',' ORDER BY id) FROM guard_items_${s}),
  (SELECT string_agg(format('%s:%s', id, note), ',' ORDER BY id) FROM guard_other_${s}),
  (SELECT format('%s:%s', last_value, is_called) FROM guard_seq_${s})
)) AS sum`

const mysqlChecksumSql = (s: string) => `SELECT SHA2(CONCAT_WS('|',
  -- This run's names only (every case's fixture names carry the run's suffix): a second suite on
  -- the same server creates guard_db_<its suffix> with its edit key, which this run must not see
  -- as its own refused statement's doing (npm run test:stress found it).
  (SELECT GROUP_CONCAT(SCHEMA_NAME ORDER BY SCHEMA_NAME) FROM information_schema.SCHEMATA
     WHERE SCHEMA_NAME LIKE 'guard%\\_${s}' OR SCHEMA_NAME = DATABASE()),
  (SELECT GROUP_CONCAT(CONCAT(TABLE_NAME, ':', TABLE_TYPE, ':', COALESCE(ENGINE, ''), ':', COALESCE(CREATE_OPTIONS, ''))
       ORDER BY TABLE_NAME) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()),
  (SELECT GROUP_CONCAT(CONCAT(TABLE_NAME, '.', COLUMN_NAME, ':', COLUMN_TYPE, ':', IS_NULLABLE, ':', COALESCE(COLUMN_DEFAULT, ''))
       ORDER BY TABLE_NAME, ORDINAL_POSITION) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE()),
  (SELECT GROUP_CONCAT(CONCAT(TABLE_NAME, '.', INDEX_NAME, '.', COLUMN_NAME) ORDER BY TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX)
     FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE()),
  (SELECT GROUP_CONCAT(ROUTINE_NAME ORDER BY ROUTINE_NAME) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE()),
  (SELECT GROUP_CONCAT(TRIGGER_NAME ORDER BY TRIGGER_NAME) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE()),
  (SELECT GROUP_CONCAT(CONCAT(User, '@', Host) ORDER BY User, Host) FROM mysql.user WHERE User LIKE 'guard%'),
  (SELECT GROUP_CONCAT(CONCAT(User, '@', Host, ':', Db) ORDER BY User, Host, Db) FROM mysql.db WHERE User LIKE 'guard%'),
  (SELECT GROUP_CONCAT(PLUGIN_NAME ORDER BY PLUGIN_NAME) FROM information_schema.PLUGINS),
  @@global.max_connections, @@global.general_log, @@global.sql_mode, @@global.max_statement_time,
  (SELECT GROUP_CONCAT(CONCAT(id, ':', name, ':', qty) ORDER BY id) FROM guard_items_${s}),
  (SELECT GROUP_CONCAT(CONCAT(id, ':', COALESCE(note, '')) ORDER BY id) FROM guard_other_${s}),
  (SELECT CONCAT(next_not_cached_value, ':', cycle_count) FROM guard_seq_${s})
), 256) AS sum`

interface Target {
  readonly dialect: Dialect
  readonly connectionId: number
  readonly cases: ReadonlyArray<GuardCase>
  database: TempDatabase
  admin: Admin
  baseline: string
}

const checksum = async (target: Target) => {
  const sql = target.dialect === "postgres" ? pgChecksumSql(suffix) : mysqlChecksumSql(suffix)
  const rows = await target.admin.exec(sql)
  return `${String(rows[0]?.sum)}|${filesState()}`
}

const isUnchanged = (target: Target) => checksum(target).then((sum) => sum === target.baseline, () => false)

/** Puts the fixture rows and the sequence back: enough after most writes, which only change data. */
const restoreData = async (target: Target) => {
  const { admin } = target
  const inserts = fixtureSetup[target.dialect].filter((statement) => statement.startsWith("INSERT"))
  if (target.dialect === "mysql") await admin.exec(`DROP DATABASE IF EXISTS guard_db_${suffix}`)
  for (const table of ["guard_items", "guard_other"]) await admin.exec(`DELETE FROM ${table}_${suffix}`)
  for (const statement of inserts) await admin.exec(bindSuffix(statement, suffix))
  await admin.exec(`ALTER SEQUENCE guard_seq_${suffix} RESTART`)
}

/** Rebuilds the fixtures from nothing, whatever an edit key's write did to the schema. */
const rebuild = async (target: Target) => {
  const { admin } = target
  if (target.dialect === "postgres") {
    await admin.exec(`DROP SCHEMA IF EXISTS guard_schema_${suffix} CASCADE`)
    await admin.exec("DROP SCHEMA public CASCADE")
    await admin.exec("CREATE SCHEMA public")
  } else {
    await admin.exec(`DROP DATABASE IF EXISTS guard_db_${suffix}`)
    await admin.exec("SET SESSION foreign_key_checks = 0")
    const objects = await admin.exec(
      "SELECT TABLE_NAME AS name, TABLE_TYPE AS type FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()"
    )
    for (const { name, type } of objects) {
      const what = type === "VIEW" ? "VIEW" : type === "SEQUENCE" ? "SEQUENCE" : "TABLE"
      await admin.exec(`DROP ${what} IF EXISTS \`${String(name)}\``)
    }
    const routines = await admin.exec(
      "SELECT ROUTINE_NAME AS name, ROUTINE_TYPE AS type FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE()"
    )
    for (const { name, type } of routines) await admin.exec(`DROP ${String(type)} IF EXISTS \`${String(name)}\``)
    await admin.exec("SET SESSION foreign_key_checks = 1")
  }
  for (const statement of fixtureSetup[target.dialect]) await admin.exec(bindSuffix(statement, suffix))
}

const label = (c: GuardCase) => `[${c.section}] ${JSON.stringify(c.sql)} -> ${c.verdict} ${c.kind}`

export const defineGuardSuite = (dialect: Dialect) => {
  const connectionId = dialect === "postgres" ? PG : MY
  const cases: ReadonlyArray<GuardCase> = dialect === "postgres"
    ? [...postgresCases, ...postgresCatalogueCases]
    : [...mysqlCases, ...mysqlCatalogueCases]
  const target = { dialect, connectionId, cases } as Target
  let runtime: ToolsRuntime
  let calls: DriverCalls

  beforeAll(async () => {
    target.database = dialect === "postgres"
      ? await createPostgresDatabase("mg_guard_pg")
      : await createMysqlDatabase("mg_guard_my")
    target.admin = dialect === "postgres" ? postgresAdmin(target.database.url) : await mysqlAdmin(target.database.url)
    for (const statement of fixtureSetup[dialect]) await target.admin.exec(bindSuffix(statement, suffix))
    target.baseline = await checksum(target)
    const counting = countingDrivers()
    calls = counting.calls
    runtime = makeToolsRuntime(
      makeConfig([{ id: connectionId, name: `guard-${dialect}`, dialect, url: target.database.url }]),
      counting.layer
    )
  })

  afterAll(async () => {
    await runtime?.dispose()
    // The one object outside the throwaway database that an edit key's case creates.
    if (dialect === "mysql") await target.admin?.exec(`DROP DATABASE IF EXISTS guard_db_${suffix}`).catch(() => undefined)
    await target.admin?.close()
    await target.database?.drop()
  })

  const runCase = async (c: GuardCase, ctx: typeof readKey) => {
    const before = calls.count()
    const outcome = await callTool(runtime, "sql_run", {
      connection_id: connectionId,
      statement: bindSuffix(c.sql, suffix),
      params: paramsFor(c)
    }, ctx)
    return { outcome, driverCalls: calls.log.slice(before) }
  }

  const expectRead = (c: GuardCase, outcome: ToolOutcome) => {
    const refusal = engineRefusals[dialect][c.sql]
    if (refusal !== undefined) {
      expect(expectFailure(outcome)).toMatchObject({ status: 422, error: "validation_failed", details: { code: refusal } })
      return
    }
    if (outcome._tag === "Failure") expect.fail(JSON.stringify(expectFailure(outcome)))
    expect(outcome.structured).toMatchObject({ kind: "rows", truncated: false })
    expect(outcome.audit.details).toMatchObject({ verdict: "read", statement_kind: c.kind })
  }

  describe(`${dialect}: every guard case through sql_run`, () => {
    it("has enough cases to mean something", () => {
      expect(target.cases.length).toBeGreaterThanOrEqual(40)
      for (const verdict of ["read", "write", "refused"]) {
        expect(target.cases.filter((c) => c.verdict === verdict).length).toBeGreaterThanOrEqual(10)
      }
    })

    describe("read key", () => {
      it.each(target.cases.map((c) => [label(c), c] as const))("%s", async (_, c) => {
        const { outcome, driverCalls } = await runCase(c, readKey)
        if (c.verdict === "read") {
          expectRead(c, outcome)
          expect(driverCalls).toEqual([expect.objectContaining({ method: "run", mode: "read" })])
        } else {
          const expected = c.verdict === "write"
            ? { status: 403, error: "sql_gate_blocked" }
            : { status: 422, error: "query_too_dangerous" }
          expect(expectFailure(outcome)).toMatchObject({ ...expected, details: { statement_kind: c.kind } })
          expect(driverCalls).toEqual([])
        }
        expect(await checksum(target)).toBe(target.baseline)
      })
    })

    describe("edit key", () => {
      it.each(target.cases.map((c) => [label(c), c] as const))("%s", async (_, c) => {
        const { outcome, driverCalls } = await runCase(c, editKey)
        if (c.verdict === "refused") {
          expect(expectFailure(outcome)).toMatchObject({
            status: 422,
            error: "query_too_dangerous",
            details: { statement_kind: c.kind }
          })
          expect(driverCalls).toEqual([])
          expect(await checksum(target)).toBe(target.baseline)
        } else if (c.verdict === "read") {
          // Not checksummed one by one: the next refused case's checksum would still catch a change.
          expectRead(c, outcome)
          expect(driverCalls).toEqual([expect.objectContaining({ method: "run", mode: "read" })])
        } else {
          // The write ran, or the database itself refused it (a missing procedure, VACUUM in a transaction...).
          if (outcome._tag === "Failure") {
            expect(expectFailure(outcome)).toMatchObject({
              status: 422,
              error: "validation_failed",
              details: { code: expect.any(String) }
            })
          } else {
            expect(outcome.audit.details).toMatchObject({ verdict: "write", statement_kind: c.kind })
          }
          expect(driverCalls).toEqual([expect.objectContaining({ method: "run", mode: "write" })])
          // A dropped or renamed fixture table makes the checksum query itself fail: rebuild then too.
          if (!(await isUnchanged(target))) {
            await restoreData(target).catch(() => undefined)
            if (!(await isUnchanged(target))) await rebuild(target)
            expect(await checksum(target)).toBe(target.baseline)
          }
        }
      })
    })
  })
}
