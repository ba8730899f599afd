/**
 * Stored Responses' bounds (issue 24 item 1): a stored response is gone after
 * `responses.retention_days` (for retrieval and for `previous_response_id`), and one larger than
 * `responses.max_stored_bytes` is answered but not kept, saying `store: false`, with the reason
 * in its audit record; a conversation whose stored chain exceeds `responses.max_conversation_bytes`
 * is refused by name instead of being read into the request.
 */
import { join } from "node:path"
import { DatabaseSync } from "node:sqlite"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { auditFor, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { tempDir } from "../support/process.ts"

const DAY = 24 * 60 * 60 * 1000

let gateway: TestGateway
let key: string

/**
 * Moves every stored response `ms` into the past: expiry is judged by the store's clock (issue
 * 35 item 6), which a test cannot move, so the rows age instead.
 */
const storePath = join(tempDir("modelgate-retention-"), "store.db")
const age = (ms: number) => {
  const db = new DatabaseSync(storePath)
  try {
    for (const table of ["stored_responses", "stored_response_items"]) {
      const rows = db.prepare(`SELECT rowid, created_at, expires_at FROM ${table}`).all() as Array<{ rowid: number; created_at: string; expires_at: string }>
      const update = db.prepare(`UPDATE ${table} SET created_at = ?, expires_at = ? WHERE rowid = ?`)
      const older = (iso: string) => new Date(Date.parse(iso) - ms).toISOString()
      for (const row of rows) update.run(older(row.created_at), older(row.expires_at), row.rowid)
    }
  } finally {
    db.close()
  }
}

beforeAll(async () => {
  gateway = await startGateway(
    testConfig({
      store: `sqlite:${storePath}`,
      providers: [{ name: "echo", kind: "echo" }],
      models: [{ alias: "echo", id: "echo-1", provider: "echo", credits: 0 }],
      responses: { retention_days: 2, max_stored_bytes: 4000, max_conversation_bytes: 6000 }
    })
  )
  key = (await gateway.createKey()).key
})

afterAll(async () => {
  await gateway?.close()
})

const create = (body: Record<string, unknown>) =>
  fetch(`${gateway.url}/v1/responses`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "echo", ...body })
  })

const retrieve = (id: string) => fetch(`${gateway.url}/v1/responses/${id}`, { headers: { authorization: `Bearer ${key}` } })

describe("stored responses", () => {
  it("are kept for retention_days, then gone for retrieval and continuation", async () => {
    const created = await create({ input: "keep me" })
    expect(created.status).toBe(200)
    const response = await created.json() as { id: string; store: boolean }
    expect(response.store).toBe(true)
    age(DAY)
    expect((await retrieve(response.id)).status).toBe(200)
    expect((await create({ input: "next", previous_response_id: response.id })).status).toBe(200)
    age(DAY + 1000)
    const gone = await retrieve(response.id)
    expect(gone.status).toBe(404)
    expect(await gone.json()).toMatchObject({ error: "not_found" })
    const refused = await create({ input: "next", previous_response_id: response.id })
    expect(refused.status).toBe(404)
    expect(await refused.json()).toMatchObject({ error: "not_found", details: { field: "previous_response_id" } })
  })

  it("a conversation longer than max_conversation_bytes is refused by name, not read whole", async () => {
    let previous: string | undefined
    const turn = (input: string) => create({ input, ...(previous === undefined ? {} : { previous_response_id: previous }) })
    // Each turn stores its input and echo's answer, about 2 KB together; the third continuation
    // would bring back more than 6,000 bytes of stored text.
    for (let i = 0; i < 3; i++) {
      const answered = await turn(`turn ${i} ${"x".repeat(900)}`)
      expect(answered.status).toBe(200)
      previous = (await answered.json() as { id: string }).id
    }
    const refused = await turn("one more")
    expect(refused.status).toBe(400)
    const body = await refused.json() as { error: string; message: string; details: { field: string } }
    expect(body).toMatchObject({ error: "validation_failed", details: { field: "previous_response_id" } })
    expect(body.message).toContain("6000 bytes")
  })

  it("larger than max_stored_bytes are answered but not kept", async () => {
    const created = await create({ input: "x".repeat(5000) })
    expect(created.status).toBe(200)
    const response = await created.json() as { id: string; store: boolean }
    expect(response.store).toBe(false)
    expect((await retrieve(response.id)).status).toBe(404)
    const [record] = await auditFor(gateway, created.headers.get("x-request-id")!)
    expect(record!.details).toMatchObject({ response_not_stored: "too_large" })
  })
})
