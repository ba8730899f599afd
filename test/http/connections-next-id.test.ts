/**
 * Issue 31.5: `POST /connections` without an `id` assigns the next free one (above the config
 * file's ids too) and answers 201 with it; concurrent creates never collide, on either store
 * (on Postgres, through two replicas at once); an explicit id still works and a taken one is 409.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createPostgresDatabase } from "../support/databases.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

const stores: ReadonlyArray<readonly [string, () => Promise<{ store: string; replicas: number; drop: () => Promise<void> }>]> = [
  ["sqlite", async () => ({ store: "sqlite::memory:", replicas: 1, drop: async () => {} })],
  ["postgres", async () => {
    const db = await createPostgresDatabase("mg_connection_ids")
    return { store: db.url, replicas: 2, drop: db.drop }
  }]
]

const FROM_FILE = { id: 3, name: "from-file", dialect: "postgres", url: "postgres://f:filepw@127.0.0.1:5432/db" }
const body = (name: string) => ({ name, dialect: "postgres", url: `postgres://u:pw@127.0.0.1:5432/${name}` })

for (const [name, makeStore] of stores) {
  describe(`POST /connections without an id: ${name}`, () => {
    const gateways: Array<TestGateway> = []
    let drop: () => Promise<void> = async () => {}
    beforeAll(async () => {
      const made = await makeStore()
      drop = made.drop
      for (let i = 0; i < made.replicas; i++) gateways.push(await startGateway(testConfig({ store: made.store, connections: [FROM_FILE] })))
    })
    afterAll(async () => {
      for (const gw of gateways) await gw.close()
      await drop()
    })

    it("assigns the next free id atomically; an explicit id still works", async () => {
      const [first] = gateways
      const created = await first!.admin("POST", "/connections", body("one"))
      expect(created.status).toBe(201)
      // Above the config file's id 3: ids 1 and 2 are free but a file may be using the low numbers.
      expect(await created.json()).toMatchObject({ id: 4, name: "one", source: "admin", url: "postgres://u:***@127.0.0.1:5432/one" })

      const explicit = await first!.admin("POST", "/connections", { id: 10, ...body("ten") })
      expect(explicit.status).toBe(201)
      expect(((await explicit.json()) as { id: number }).id).toBe(10)
      expect((await first!.admin("POST", "/connections", { id: 10, ...body("again") })).status).toBe(409)
      expect((await first!.admin("POST", "/connections", { id: 3, ...body("file") })).status).toBe(409)

      // Twenty at once, spread over the replicas: twenty distinct ids, the next ones after 10.
      const answers = await Promise.all(
        Array.from({ length: 20 }, (_, i) => gateways[i % gateways.length]!.admin("POST", "/connections", body(`c${i}`)))
      )
      expect(answers.map((a) => a.status)).toEqual(Array(20).fill(201))
      const ids = (await Promise.all(answers.map(async (a) => ((await a.json()) as { id: number }).id))).sort((a, b) => a - b)
      expect(ids).toEqual(Array.from({ length: 20 }, (_, i) => 11 + i))

      const listed = (await (await first!.admin("GET", "/connections")).json()) as { data: Array<{ id: number }> }
      expect(listed.data.map((c) => c.id)).toEqual([3, 4, 10, ...ids])

      const bad = await first!.admin("POST", "/connections", { id: 0, ...body("zero") })
      expect(bad.status).toBe(400)
    })
  })
}
