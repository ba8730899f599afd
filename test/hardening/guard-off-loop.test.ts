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
      const order: Array<string> = []
      const call = session.call("sql_run", { connection_id: connectionId, statement }).then((result) => {
        order.push("tool")
        return result
      })
      // Give the request time to reach the guard, then ask another route.
      await new Promise((resolve) => setTimeout(resolve, 150))
      const health = fetch(`${gw.url}/healthz`).then(async (response) => {
        order.push("healthz")
        return { status: response.status, body: await response.json() }
      })
      const [result, healthz] = await Promise.all([call, health])
      expect(healthz).toEqual({ status: 200, body: { status: "ok" } })
      expect(order).toEqual(["healthz", "tool"])
      expect(result.isError).toBe(true)
      expect(result.structuredContent).toMatchObject({
        status: 422,
        error: "query_too_dangerous",
        details: { statement_kind: "too_complex" }
      })

      // The worker that ran out of time was replaced: ordinary statements still classify and run.
      const next = await session.call("sql_run", { connection_id: connectionId, statement: "SELECT 1 AS one" })
      expect(next.isError).toBeFalsy()
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

