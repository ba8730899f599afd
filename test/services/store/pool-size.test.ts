/**
 * `store_pool_size`: the most connections one replica opens to a Postgres store. Replicas times
 * this must fit the server's `max_connections` (two test suites at once on the machine's Postgres,
 * 100 connections, once ran out of them with every gateway at the old fixed 20). Told by the
 * server: after a burst of store work, the database sees no more of the gateway's sessions than
 * the configured size.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createPostgresDatabase, type TempDatabase } from "../../support/databases.ts"
import { Client } from "../../support/pg-admin.ts"
import { startGateway, testConfig, type TestGateway } from "../../support/gateway.ts"

describe("store_pool_size", () => {
  let db: TempDatabase
  let gw: TestGateway

  beforeAll(async () => {
    db = await createPostgresDatabase("mg_pool_size")
    gw = await startGateway(testConfig({ store: db.url, store_pool_size: 3 }))
  })

  afterAll(async () => {
    await gw?.close()
    await db?.drop()
  })

  it("opens at most that many connections however many calls wait", async () => {
    const replies = await Promise.all(Array.from({ length: 24 }, (_, i) => gw.admin("POST", "/api-keys", { name: `pooled-${i}` })))
    expect(replies.map((r) => r.status)).toEqual(Array(24).fill(201))
    const [row] = await new Client(db.url).query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1 AND application_name = 'modelgate'`,
      [db.name]
    )
    expect(row!.n).toBeGreaterThan(0)
    expect(row!.n).toBeLessThanOrEqual(3)
  })

  it("is refused past 1,000 or below 1", () => {
    expect(() => testConfig({ store_pool_size: 0 })).toThrow(/store_pool_size/)
    expect(() => testConfig({ store_pool_size: 1001 })).toThrow(/store_pool_size/)
  })
})
