/**
 * Issue 12, finding 1: a statement that is expensive to parse must cost the gateway one guard
 * worker's time budget, not its event loop. Through the real server and /v1/mcp: while the
 * guard chews on a pathological statement, /healthz answers (before the tool call does), the
 * statement is refused with 422 `query_too_dangerous` / `too_complex`, and the next statement
 * is served by a fresh worker.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createMysqlDatabase, createPostgresDatabase, type TempDatabase } from "../support/databases.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { watchLoopCpu } from "../support/loop-cpu.ts"
import { mcpSession, toolKey } from "./support.ts"

/** Quadratic in libpg-query: 80 KB take tens of seconds. */
const nestedComments = `SELECT 1 ${"/*".repeat(20_000)}${"*/".repeat(20_000)}`
/** node-sql-parser's expression grammar: 120 KB take seconds. */
const longSum = `SELECT ${"1+".repeat(60_000)}1`

describe("the SQL guard runs off the event loop, within a budget", () => {
  let pg: TempDatabase
  let my: TempDatabase
  let gw: TestGateway
  let key: string

  beforeAll(async () => {
    pg = await createPostgresDatabase("mg_guardloop_pg")
    my = await createMysqlDatabase("mg_guardloop_my")
    gw = await startGateway(testConfig({
      connections: [
        { id: 1, name: "pg", dialect: "postgres", url: pg.url },
        { id: 2, name: "my", dialect: "mysql", url: my.url }
      ],
      // Well under what the statements below take even on a fast machine (seconds), far above an ordinary parse (ms).
      mcp: { guard_timeout_ms: 500 }
    }))
    key = await toolKey(gw, [{ connection_id: 1, role: "read" }, { connection_id: 2, role: "read" }])
  })
  afterAll(async () => {
    await gw?.close()
    await pg?.drop()
    await my?.drop()
  })

  for (const [dialect, connectionId, statement] of [["postgres", 1, nestedComments], ["mysql", 2, longSum]] as const) {
    it(`${dialect}: /healthz answers while the guard is busy, and the statement is refused as too complex`, async () => {
      const session = await mcpSession(gw.url, key)
      // The gateway runs in this process: its loop is this thread. Parsing the statement on it
      // would take seconds of this thread's CPU in one turn; off it, a turn costs milliseconds.
      // Counted in CPU time, which a loaded machine does not stretch (a 150 ms pause before asking
      // /healthz guessed when the request reached the guard, and proved nothing when it had not).
      const loop = watchLoopCpu()
      let pending = true
      const call = session.call("sql_run", { connection_id: connectionId, statement }).finally(() => {
        pending = false
      })
      // /healthz answers meanwhile, as many times as asked.
      let answered = 0
      while (pending) {
        const health = await fetch(`${gw.url}/healthz`)
        expect({ status: health.status, body: await health.json() }).toEqual({ status: 200, body: { status: "ok" } })
        answered++
      }
      const result = await call
      const worstTurnMs = loop.stop()
      expect(answered).toBeGreaterThan(0)
      // 250 ms: a tenth of the parse's cost on the loop, far above a turn of ordinary request work.
      expect(worstTurnMs, "the longest turn of the event loop, in CPU ms of its thread").toBeLessThan(250)
      expect(result.isError).toBe(true)
      expect(result.structuredContent).toMatchObject({
        status: 422,
        error: "query_too_dangerous",
        details: { statement_kind: "too_complex" }
      })

      // The worker that ran out of time was replaced: ordinary statements still classify and run.
      const next = await session.call("sql_run", { connection_id: connectionId, statement: "SELECT 1 AS one" })
      expect(next.isError, JSON.stringify(next.structuredContent)).toBeFalsy()
      expect(next.structuredContent).toMatchObject({ kind: "rows", rows: [{ one: 1 }] })
    })
  }

  it("refuses a statement over the size limit before parsing it", async () => {
    const session = await mcpSession(gw.url, key)
    const huge = `SELECT '${"x".repeat(300_000)}'`
    const result = await session.call("sql_run", { connection_id: 1, statement: huge })
    expect(result.structuredContent).toMatchObject({ status: 422, error: "query_too_dangerous", details: { statement_kind: "too_large" } })
  })
})

