/**
 * The admin lists besides the keys page like /audit and /api-keys (issue 31, item 7):
 * `GET /connections` and `GET /subjects` answer `{data, next_cursor}`, `limit` rows at a time,
 * and following the cursor visits every row once; a bad limit or cursor is a 400 naming it.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { startGateway, type TestGateway } from "../support/gateway.ts"

interface Page {
  readonly data: ReadonlyArray<{ id: string | number }>
  readonly next_cursor: string | null
}

describe("admin list paging", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway()
  })
  afterAll(() => gw.close())

  /** Every page of `path`, each checked to hold at most `limit` rows. */
  const walk = async (path: string, limit: number) => {
    const ids: Array<string | number> = []
    let cursor: string | null = null
    for (let pages = 0; pages < 100; pages++) {
      const response = await gw.admin("GET", `${path}?limit=${limit}${cursor === null ? "" : `&cursor=${encodeURIComponent(cursor)}`}`)
      expect(response.status).toBe(200)
      const page = (await response.json()) as Page
      expect(page.data.length).toBeLessThanOrEqual(limit)
      ids.push(...page.data.map((row) => row.id))
      cursor = page.next_cursor
      if (cursor === null) break
    }
    return ids
  }

  it("pages GET /connections by id", async () => {
    for (const id of [5, 1, 12, 3, 8]) {
      const created = await gw.admin("POST", "/connections", { id, name: `db${id}`, dialect: "postgres", url: `postgres://u:pw${id}@h/db` })
      expect(created.status).toBe(201)
    }
    expect(await walk("/connections", 2)).toEqual([1, 3, 5, 8, 12])
    const all = (await (await gw.admin("GET", "/connections")).json()) as Page
    expect(all.data.map((c) => c.id)).toEqual([1, 3, 5, 8, 12])
    expect(all.next_cursor).toBeNull()
    expect(JSON.stringify(all)).not.toContain("pw5")
  })

  it("pages GET /subjects, the newest first, a subject seen again during the walk counted once", async () => {
    const sightings = Array.from({ length: 25 }, (_, i) => ({
      id: `sub_${String(i).padStart(32, "0")}`,
      issuer: "https://idp.example",
      subject: `user${i}`,
      // Pairs seen first at the same instant: the order leans on the id too.
      seen_at: new Date(Date.UTC(2026, 0, 1, 0, Math.floor(i / 2))).toISOString()
    }))
    await Effect.runPromise(gw.store.subjects.touchSubjects(sightings))
    const first = (await (await gw.admin("GET", "/subjects?limit=10")).json()) as Page
    // The oldest subject is seen again: it must still come on its own page, not vanish or repeat.
    await Effect.runPromise(gw.store.subjects.touchSubjects([{ ...sightings[0]!, seen_at: "2027-01-01T00:00:00.000Z" }]))
    const rest = await (async () => {
      const ids: Array<string | number> = []
      let cursor = first.next_cursor
      while (typeof cursor === "string") {
        const page = (await (await gw.admin("GET", `/subjects?limit=10&cursor=${cursor}`)).json()) as Page
        ids.push(...page.data.map((s) => s.id))
        cursor = page.next_cursor
      }
      return ids
    })()
    const ids = [...first.data.map((s) => s.id), ...rest]
    expect(ids).toEqual(sightings.map((s) => s.id).reverse())
  })

  it.each([
    ["/connections?limit=0", "limit"],
    ["/connections?limit=1001", "limit"],
    ["/connections?cursor=abc", "cursor"],
    ["/connections?name=x", "name"],
    ["/subjects?limit=-1", "limit"],
    ["/subjects?cursor=bm90LWpzb24", "cursor"]
  ])("refuses %s with 400 validation_failed naming %s", async (path, field) => {
    const response = await gw.admin("GET", path)
    expect(response.status).toBe(400)
    const body = (await response.json()) as { error: string; details: { field: string } }
    expect(body).toMatchObject({ error: "validation_failed", details: { field } })
  })
})
