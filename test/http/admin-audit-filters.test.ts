/**
 * The admin audit trail's filters (issue 26, item 5): by kind of traffic (include / exclude),
 * writes only, and by target, answered the same by each store the gateway runs on (SQLite, and
 * Postgres in a private database of the test server).
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { createPostgresDatabase, type TempDatabase } from "../support/databases.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

const stores: ReadonlyArray<readonly [string, () => Promise<{ store: string; drop: () => Promise<void> }>]> = [
  ["sqlite", async () => ({ store: "sqlite::memory:", drop: async () => {} })],
  ["postgres", async () => {
    const db: TempDatabase = await createPostgresDatabase("mg_audit_filters")
    return { store: db.url, drop: db.drop }
  }]
]

for (const [name, makeStore] of stores) {
  describe(`admin audit filters: ${name}`, () => {
    let gw: TestGateway
    let drop: () => Promise<void> = async () => {}
    beforeAll(async () => {
      const made = await makeStore()
      drop = made.drop
      gw = await startGateway(testConfig({ store: made.store }))
    })
    afterAll(async () => {
      await gw?.close()
      await drop()
    })
    const jsonOf = async (response: Response): Promise<any> => response.json()

    it("filters by kind of traffic, by writes and by target", async () => {
      const { key, id } = await gw.createKey()
      await fetch(`${gw.url}/v1/models`, { headers: { "x-api-key": key } })
      await fetch(`${gw.url}/healthz`)
      await fetch(`${gw.url}/readyz`)
      await fetch(`${gw.url}/app`)
      await fetch(`${gw.url}/app/session`)
      await gw.admin("GET", "/api-keys")
      await gw.admin("PATCH", `/api-keys/${id}`, { name: "filtered" })

      const endpoints = async (query: string) => {
        const response = await gw.admin("GET", `/audit?limit=1000&${query}`)
        expect(response.status).toBe(200)
        return new Set(((await jsonOf(response)).data as Array<{ endpoint: string }>).map((r) => r.endpoint))
      }
      const quiet = await endpoints("exclude=app,health")
      expect(quiet.has("/healthz") || quiet.has("/readyz") || quiet.has("/app") || quiet.has("/app/session")).toBe(false)
      expect(quiet.has("/v1/models") && quiet.has("/api-keys") && quiet.has("/api-keys/:id")).toBe(true)

      const health = await endpoints("include=health")
      expect([...health].sort()).toEqual(["/healthz", "/readyz"])
      const app = await endpoints("include=app")
      expect(app.has("/app") && app.has("/app/session")).toBe(true)
      expect([...app].every((e) => e === "/app" || e.startsWith("/app/"))).toBe(true)
      const api = await endpoints("include=api")
      expect([...api].every((e) => e.startsWith("/v1/"))).toBe(true)
      const admin = await endpoints("include=admin")
      expect(admin.has("/api-keys") && !admin.has("/v1/models") && !admin.has("/healthz") && !admin.has("/app")).toBe(true)

      const writes = await gw.admin("GET", "/audit?limit=1000&include=admin&writes_only=true").then(jsonOf)
      expect(writes.data.length).toBeGreaterThan(0)
      expect(writes.data.every((r: { method: string }) => r.method !== "GET")).toBe(true)

      const onKey = await gw.admin("GET", `/audit?target_kind=api_key&target_id=${id}`).then(jsonOf)
      expect(onKey.data.map((r: any) => [r.method, r.endpoint])).toEqual([["PATCH", "/api-keys/:id"]])
      // `_` in an id is matched literally, not as LIKE's one-character wildcard.
      const wildcard = await gw.admin("GET", `/audit?target_id=${id.replace("_", "x")}`).then(jsonOf)
      expect(wildcard.data).toEqual([])

      for (const bad of ["include=everything", "exclude=health,nope", "writes_only=yes"]) {
        const response = await gw.admin("GET", `/audit?${bad}`)
        expect(response.status).toBe(400)
        expect((await jsonOf(response)).error).toBe("validation_failed")
      }
    })
  })
}
