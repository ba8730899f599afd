/**
 * Issue 12, finding 3: results are bounded in bytes, not only rows. Rows of 1 MB, read by five
 * calls in parallel from one read key, used to take the process to gigabytes (300 of them gave
 * a 500). Now each call stops at `mcp.max_result_bytes` and says `truncated`, the calls share
 * `mcp.max_result_bytes_in_flight`, and the gateway keeps answering.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createMysqlDatabase, createPostgresDatabase, type TempDatabase } from "../support/databases.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { mcpSession, toolKey } from "./support.ts"

const MiB = 1024 * 1024
// Two rows of 1 MB fit (a 4 MiB budget only cost twice the JSON, 20 MB per dialect, for the same check).
const BUDGET = 2 * MiB

describe("sql_run results are bounded in bytes", () => {
  let pg: TempDatabase
  let my: TempDatabase
  let gw: TestGateway
  let key: string

  beforeAll(async () => {
    pg = await createPostgresDatabase("mg_bytes_pg")
    my = await createMysqlDatabase("mg_bytes_my")
    gw = await startGateway(testConfig({
      connections: [
        { id: 1, name: "pg", dialect: "postgres", url: pg.url },
        { id: 2, name: "my", dialect: "mysql", url: my.url }
      ],
      // Room for two calls' budgets at a time: the other three wait their turn.
      mcp: { max_result_bytes: BUDGET, max_result_bytes_in_flight: 2 * BUDGET, max_rows_cap: 10_000 },
      limits: { requests_per_minute: 1000 }
    }))
    key = await toolKey(gw, [{ connection_id: 1, role: "read" }, { connection_id: 2, role: "read" }])
  })
  afterAll(async () => {
    await gw?.close()
    await pg?.drop()
    await my?.drop()
  })

  const huge = {
    postgres: "SELECT g AS n, repeat('x', 1000000) AS payload FROM generate_series(1, 300) AS g",
    mysql: "SELECT seq AS n, REPEAT('x', 1000000) AS payload FROM seq_1_to_300"
  } as const

  for (const [dialect, connectionId] of [["postgres", 1], ["mysql", 2]] as const) {
    it(`${dialect}: five parallel reads of 300 rows of 1 MB each stop at the byte budget`, async () => {
      const session = await mcpSession(gw.url, key)
      const results = await Promise.all(
        Array.from({ length: 5 }, () =>
          session.call("sql_run", { connection_id: connectionId, statement: huge[dialect], max_rows: 300 }))
      )
      for (const result of results) {
        expect(result.isError, JSON.stringify(result.structuredContent).slice(0, 400)).toBeFalsy()
        const run = result.structuredContent as { rows: Array<{ n: unknown; payload: string }>; row_count: number; truncated: boolean }
        expect(run.truncated).toBe(true)
        expect(run.row_count).toBeGreaterThanOrEqual(1)
        expect(run.row_count).toBe(run.rows.length)
        expect(run.rows.reduce((sum, row) => sum + row.payload.length, 0)).toBeLessThanOrEqual(BUDGET)
        expect(run.rows[0]!.payload).toHaveLength(1_000_000)
      }
      // The process is fine and still serves everything else.
      expect((await fetch(`${gw.url}/healthz`)).status).toBe(200)
      const small = await session.call("sql_run", { connection_id: connectionId, statement: "SELECT 1 AS one" })
      expect(small.structuredContent).toMatchObject({ rows: [{ one: 1 }], truncated: false })
    })
  }
})
