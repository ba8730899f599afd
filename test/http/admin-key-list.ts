/**
 * GET /api-keys with 50,000 keys (issue 31, item 7): bounded pages, a cursor that visits every
 * key exactly once, filters that combine, and 400s that name the bad parameter. Once on SQLite,
 * once on Postgres: the keyset condition and the filters are SQL both must run alike.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import type { ApiKeyRecord } from "../../src/domain/records.ts"
import { BULK_BASE, bulkKey, insertBulkKeys } from "../support/bulk-keys.ts"
import { createPostgresDatabase, type TempDatabase } from "../support/databases.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

const COUNT = 50_000
const NOW = Date.now()
const ODD = { i: 12_345, name: "Team_A 100% ci" }

interface Page {
  readonly data: ReadonlyArray<{ id: string; name: string; connections: ReadonlyArray<{ connection_id: number; role: string }> }>
  readonly next_cursor: string | null
}

/**
 * The suite on one store, registered by admin-key-list-sqlite.test.ts and
 * admin-key-list-postgres.test.ts: two files run side by side (each store's 50,000 keys and pages
 * took 8-13 s at load, one after the other in one file).
 */
export const describeKeyList = (store: "sqlite" | "postgres") => describe(`GET /api-keys with 50,000 keys (${store})`, () => {
  let gw: TestGateway
  let db: TempDatabase | undefined
  beforeAll(async () => {
    db = store === "postgres" ? await createPostgresDatabase("mg_key_list") : undefined
    gw = await startGateway(testConfig(db === undefined ? {} : { store: db.url }))
    await insertBulkKeys(gw, COUNT, (i) => (i === ODD.i ? ODD.name : undefined))
    await Effect.runPromise(gw.store.connections.putGrant(bulkKey(COUNT - 1).id, 7, "read"))
  }, 120_000)
  afterAll(async () => {
    await gw?.close()
    await db?.drop()
  })

  const page = async (query: string): Promise<Page> => {
    const response = await gw.admin("GET", `/api-keys?${query}`)
    expect(response.status).toBe(200)
    return (await response.json()) as Page
  }

  /** Every page of a query, in order, each checked to hold at most `limit` keys. */
  const all = async (query: string, limit: number) => {
    const ids: Array<string> = []
    let cursor: string | null = null
    let pages = 0
    do {
      const answer: Page = await page(`${query}&limit=${limit}${cursor === null ? "" : `&cursor=${cursor}`}`)
      expect(answer.data.length).toBeLessThanOrEqual(limit)
      if (answer.next_cursor !== null) expect(answer.data.length).toBe(limit)
      ids.push(...answer.data.map((k) => k.id))
      cursor = answer.next_cursor
      pages++
    } while (cursor !== null && pages <= COUNT)
    return ids
  }

  // Every key as inserted, built once: the expectations below filter all 50,000 of them six
  // times, and building two records per key per filter was 1.4 s of the suite's CPU.
  let keys: ReadonlyArray<ApiKeyRecord & { i: number }> | undefined
  const expected = (keep: (k: ApiKeyRecord & { i: number }) => boolean) => {
    keys ??= Array.from({ length: COUNT }, (_, i) => ({ ...bulkKey(i), i }))
    const ids: Array<string> = []
    // Newest first: created_at, then id, both descending (i grows with both).
    for (let i = COUNT - 1; i >= 0; i--) if (keep(keys[i]!)) ids.push(keys[i]!.id)
    return ids
  }

  it("answers 100 keys by default, the newest first, with their grants and a cursor", async () => {
    const first = await page("")
    expect(first.data).toHaveLength(100)
    expect(first.data.map((k) => k.id)).toEqual(expected(() => true).slice(0, 100))
    expect(first.data[0]!.connections).toEqual([{ connection_id: 7, role: "read" }])
    expect(first.data[1]!.connections).toEqual([])
    expect(typeof first.next_cursor).toBe("string")
  })

  it("following next_cursor visits every key exactly once, in order, each page bounded", async () => {
    const started = performance.now()
    const ids = await all("", 1000)
    const elapsed = performance.now() - started
    expect(ids).toHaveLength(COUNT)
    expect(new Set(ids).size).toBe(COUNT)
    expect(ids).toEqual(expected(() => true))
    // 50 pages of 1,000: each one a range scan from the cursor, not a sort of every key.
    expect(elapsed).toBeLessThan(30_000)
  })

  it("filters by status, model and last use, combined, across pages", async () => {
    const now = new Date(NOW).toISOString()
    const active = (k: ApiKeyRecord) => k.is_active && (k.expires_at === null || k.expires_at > now)
    const after = new Date(BULK_BASE + 20_000 * 1000).toISOString()
    const before = new Date(BULK_BASE + 40_000 * 1000).toISOString()
    const ids = await all(`status=active&model=gpt-x&last_used_after=${after}&last_used_before=${before}`, 250)
    const want = expected((k) =>
      active(k) && k.allowed_models?.includes("gpt-x") === true && k.last_used_at !== null && k.last_used_at >= after && k.last_used_at < before
    )
    expect(want.length).toBeGreaterThan(100)
    expect(ids).toEqual(want)

    expect(await all("status=inactive", 1000)).toEqual(expected((k) => !k.is_active))
    expect(await all("status=expired", 1000)).toEqual(expected((k) => k.is_active && k.expires_at !== null && k.expires_at <= now))
    // `gpt-x` is an entry of its own: keys limited to `gpt-x-mini` are not among them.
    expect(await all("model=gpt-x-mini", 1000)).toEqual(expected((k) => k.allowed_models?.[0] === "gpt-x-mini"))
  })

  it("finds a key by a case-insensitive piece of its name, wildcards taken literally", async () => {
    expect((await page("name=A%20100%25")).data.map((k) => k.id)).toEqual([bulkKey(ODD.i).id])
    expect((await page("name=team_a")).data.map((k) => k.id)).toEqual([bulkKey(ODD.i).id])
    expect((await page("name=%25")).data.map((k) => k.id)).toEqual([bulkKey(ODD.i).id])
    expect((await page("name=_")).data.map((k) => k.id)).toEqual([bulkKey(ODD.i).id])
    expect(await all("name=BULK-4999", 1000)).toEqual(expected((k) => k.i !== ODD.i && k.name.startsWith("bulk-4999")))
    expect(await page("name=no-such-key")).toEqual({ data: [], next_cursor: null })
  })

  it.each([
    ["limit=0", "limit"],
    ["limit=1001", "limit"],
    ["limit=ten", "limit"],
    ["limit=1.5", "limit"],
    ["cursor=not-a-cursor!", "cursor"],
    [`cursor=${Buffer.from(JSON.stringify(["x"])).toString("base64url")}`, "cursor"],
    [`cursor=${"A".repeat(1001)}`, "cursor"],
    ["status=revoked", "status"],
    [`name=${"n".repeat(201)}`, "name"],
    ["last_used_before=yesterday", "last_used_before"],
    ["last_used_after=2026-13-45", "last_used_after"],
    ["team=platform", "team"]
  ])("refuses %s with 400 validation_failed naming %s", async (query, field) => {
    const response = await gw.admin("GET", `/api-keys?${query}`)
    expect(response.status).toBe(400)
    const body = (await response.json()) as { error: string; details: { field: string } }
    expect(body.error).toBe("validation_failed")
    expect(body.details.field).toBe(field)
  })
})
