/**
 * The admin audit trail answers "who changed what" (issue 26, item 5): every admin action's
 * record names its target, its actor and what changed, never a secret; a refusal keeps its
 * message (the trail's filters, by kind of traffic and by target, are in admin-audit-filters.test.ts,
 * on each store). And connections can be edited and deleted (item 6), audited the same way.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { auditFor, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

describe("admin audit trail", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway(testConfig({
      connections: [{ id: 50, name: "from-config", dialect: "postgres", url: "postgres://cfg:cfgsecret@127.0.0.1:5432/x" }]
    }))
  })
  afterAll(() => gw.close())

  const recordOf = async (response: Response) => {
    const records = await auditFor(gw, response.headers.get("x-request-id")!)
    expect(records).toHaveLength(1)
    return records[0]!
  }
  const jsonOf = async (response: Response): Promise<any> => response.json()

  it("names the target, the actor and what changed for every key action, never the key", async () => {
    const created = await gw.admin("POST", "/api-keys", { name: "audited", budget: { max_requests: 5 } })
    expect(created.status).toBe(201)
    const { id, key } = await jsonOf(created)
    const createRecord = await recordOf(created)
    expect(createRecord.details).toMatchObject({
      target: { kind: "api_key", id },
      actor: { kind: "admin_token" },
      after: { id, name: "audited", is_active: true, budget: { max_requests: 5, used: 0, remaining: 5 } }
    })
    expect(createRecord.details!.before).toBeUndefined()

    const patched = await gw.admin("PATCH", `/api-keys/${id}`, { name: "renamed", allowed_models: ["echo"] })
    expect(patched.status).toBe(200)
    const patchRecord = await recordOf(patched)
    expect(patchRecord.details).toMatchObject({
      target: { kind: "api_key", id },
      actor: { kind: "admin_token" },
      before: { name: "audited", allowed_models: null },
      after: { name: "renamed", allowed_models: ["echo"] }
    })
    // Only what changed: the fields that stayed are not repeated.
    expect(patchRecord.details!.before).not.toHaveProperty("budget")

    const rotated = await gw.admin("POST", `/api-keys/${id}/rotate`, {})
    const newKey = (await jsonOf(rotated)).key as string
    const rotateRecord = await recordOf(rotated)
    expect(rotateRecord.details).toMatchObject({ target: { kind: "api_key", id } })
    expect((rotateRecord.details!.before as any).key_hint).not.toBe((rotateRecord.details!.after as any).key_hint)

    const revoked = await gw.admin("POST", `/api-keys/${id}/revoke`)
    expect((await recordOf(revoked)).details).toMatchObject({
      target: { kind: "api_key", id },
      before: { is_active: true },
      after: { is_active: false }
    })

    const reset = await gw.admin("POST", `/api-keys/${id}/budget/reset`)
    expect((await recordOf(reset)).details).toMatchObject({ target: { kind: "api_key", id } })

    const deleted = await gw.admin("DELETE", `/api-keys/${id}`)
    expect(deleted.status).toBe(204)
    const deleteRecord = await recordOf(deleted)
    expect(deleteRecord.details).toMatchObject({ target: { kind: "api_key", id }, before: { id, name: "renamed" } })
    expect(deleteRecord.details!.after).toBeUndefined()

    // A refusal still names what it was aimed at.
    const again = await gw.admin("DELETE", `/api-keys/${id}`)
    expect(again.status).toBe(404)
    expect((await recordOf(again)).details).toMatchObject({ target: { kind: "api_key", id }, message: `no API key with id ${id}` })

    const all = JSON.stringify((await gw.admin("GET", `/audit?target_id=${id}&limit=1000`).then(jsonOf)).data)
    expect(all).not.toContain(key)
    expect(all).not.toContain(newKey)
    expect(all).not.toContain("key_hash")
  })

  it("records grants, top-ups and subject resets with before and after", async () => {
    const connection = await gw.admin("POST", "/connections", { id: 60, name: "grants", dialect: "postgres", url: "postgres://u:pw60@h/db" })
    expect(connection.status).toBe(201)
    const { id } = await gw.createKey()
    const granted = await gw.admin("PUT", `/api-keys/${id}/connections/60`, { role: "read" })
    expect((await recordOf(granted)).details).toMatchObject({
      target: { kind: "key_grant", id: `${id}/60` },
      after: { key_id: id, connection_id: 60, role: "read" }
    })
    const raised = await gw.admin("PUT", `/api-keys/${id}/connections/60`, { role: "edit" })
    expect((await recordOf(raised)).details).toMatchObject({ before: { role: "read" }, after: { role: "edit" } })
    const revoked = await gw.admin("DELETE", `/api-keys/${id}/connections/60`)
    const revokeRecord = await recordOf(revoked)
    expect(revokeRecord.details).toMatchObject({ target: { kind: "key_grant", id: `${id}/60` }, before: { role: "edit" } })
    expect(revokeRecord.details!.after).toBeUndefined()

    const topup = await gw.admin("POST", "/workspace/credits", { credits: 25, note: "invoice 7" })
    expect(topup.status).toBe(200)
    const balance = (await jsonOf(topup)).credits as number
    expect((await recordOf(topup)).details).toMatchObject({
      target: { kind: "workspace" },
      actor: { kind: "admin_token" },
      before: { credits: balance - 25 },
      after: { credits: balance, added: 25, note: "invoice 7" }
    })
  })

  it("keeps a refusal's message, with secrets it quotes masked", async () => {
    const bad = await gw.admin("POST", "/api-keys", { name: "x", budget: { max_requests: -3 } })
    expect(bad.status).toBe(400)
    const told = (await jsonOf(bad)).message as string
    const record = await recordOf(bad)
    expect(record.error).toBe("validation_failed")
    expect(record.details).toMatchObject({ message: told, actor: { kind: "admin_token" } })

    const leaky = await gw.admin("POST", "/connections", { id: 61, name: "x", dialect: "postgres", url: "postgre://me:hunter2@h/db" })
    expect(leaky.status).toBe(400)
    const leakyRecord = await recordOf(leaky)
    expect(typeof leakyRecord.details!.message).toBe("string")
    expect(JSON.stringify(leakyRecord)).not.toContain("hunter2")
  })

  it("edits and deletes connections (PATCH, DELETE), audited without passwords", async () => {
    expect((await gw.admin("POST", "/connections", { id: 70, name: "edit-me", dialect: "postgres", url: "postgres://u:oldpass@h/db" })).status)
      .toBe(201)
    const { id: keyId } = await gw.createKey()
    expect((await gw.admin("PUT", `/api-keys/${keyId}/connections/70`, { role: "read" })).status).toBe(200)

    // A rotated password: the view stays redacted; the record says the credentials changed.
    const rotated = await gw.admin("PATCH", "/connections/70", { url: "postgres://u:newpass@h/db", default_schema: "app" })
    expect(rotated.status).toBe(200)
    const view = await jsonOf(rotated)
    expect(view).toMatchObject({ id: 70, name: "edit-me", default_schema: "app", source: "admin" })
    expect(JSON.stringify(view)).not.toContain("newpass")
    const stored = (await gw.admin("GET", "/connections").then(jsonOf)).data.find((c: any) => c.id === 70)
    expect(stored.default_schema).toBe("app")
    const [raw] = await import("effect").then(({ Effect }) =>
      Effect.runPromise(gw.store.connections.listConnections).then((all) => all.filter((c) => c.id === 70))
    )
    expect(raw!.url).toBe("postgres://u:newpass@h/db")
    const record = await recordOf(rotated)
    expect(record.details).toMatchObject({
      target: { kind: "connection", id: "70" },
      before: { default_schema: null, url_credentials: "previous" },
      after: { default_schema: "app", url_credentials: "changed" }
    })
    expect(JSON.stringify(record)).not.toMatch(/oldpass|newpass/)

    const renamed = await gw.admin("PATCH", "/connections/70", { name: "renamed", read_url: null })
    expect(renamed.status).toBe(200)
    expect((await recordOf(renamed)).details).toMatchObject({ before: { name: "edit-me" }, after: { name: "renamed" } })

    // Refusals: nothing to change, unknown fields, bad values, missing and config-file connections.
    const refusals: Array<[Response, number, string]> = [
      [await gw.admin("PATCH", "/connections/70", {}), 400, "validation_failed"],
      [await gw.admin("PATCH", "/connections/70", { id: 71 }), 400, "validation_failed"],
      [await gw.admin("PATCH", "/connections/70", { dialect: "oracle" }), 400, "validation_failed"],
      [await gw.admin("PATCH", "/connections/70", { url: "http://x" }), 400, "validation_failed"],
      [await gw.admin("PATCH", "/connections/abc", { name: "x" }), 400, "validation_failed"],
      [await gw.admin("PATCH", "/connections/99", { name: "x" }), 404, "not_found"],
      [await gw.admin("PATCH", "/connections/50", { name: "x" }), 409, "conflict"],
      [await gw.admin("DELETE", "/connections/50"), 409, "conflict"],
      [await gw.admin("DELETE", "/connections/99"), 404, "not_found"]
    ]
    for (const [response, status, slug] of refusals) {
      expect(response.status).toBe(status)
      expect((await jsonOf(response)).error).toBe(slug)
    }

    const deleted = await gw.admin("DELETE", "/connections/70")
    expect(deleted.status).toBe(204)
    const deleteRecord = await recordOf(deleted)
    expect(deleteRecord.details).toMatchObject({ target: { kind: "connection", id: "70" }, before: { id: 70, name: "renamed" } })
    expect(JSON.stringify(deleteRecord)).not.toContain("newpass")
    expect((await gw.admin("GET", "/connections").then(jsonOf)).data.map((c: any) => c.id)).not.toContain(70)
    // The grant went with it: the key holds nothing on a connection that no longer exists.
    expect((await gw.admin("GET", `/api-keys/${keyId}`).then(jsonOf)).connections).toEqual([])
    // And the id can be used again, without inheriting the old grants.
    expect((await gw.admin("POST", "/connections", { id: 70, name: "new", dialect: "mysql", url: "mysql://a@b/c" })).status).toBe(201)
    expect((await gw.admin("GET", `/api-keys/${keyId}`).then(jsonOf)).connections).toEqual([])
  })
})
