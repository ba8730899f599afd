/** The admin API: every endpoint, its answers and its errors. */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { ADMIN_TOKEN, startGateway, type TestGateway } from "../support/gateway.ts"

describe("admin API", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway()
  })
  afterAll(() => gw.close())

  const jsonOf = async (response: Response): Promise<any> => response.json()

  it("creates a key (201) and shows the full key only then", async () => {
    const response = await gw.admin("POST", "/api-keys", {
      name: "ci",
      allowed_models: ["echo"],
      tools_enabled: true,
      budget: { max_requests: 20 },
      expires_at: "2099-01-01T00:00:00Z"
    })
    expect(response.status).toBe(201)
    const created = await jsonOf(response)
    expect(created.key).toMatch(/^sk-mg-[0-9a-f]{32}$/)
    expect(created).toMatchObject({
      name: "ci",
      is_active: true,
      allowed_models: ["echo"],
      tools_enabled: true,
      budget: { max_requests: 20, used: 0, remaining: 20 },
      expires_at: "2099-01-01T00:00:00Z"
    })
    expect(created.key_hint).toBe(`${created.key.slice(0, 10)}...${created.key.slice(-4)}`)
    expect(created.id).toMatch(/^key_/)

    const fetched = await jsonOf(await gw.admin("GET", `/api-keys/${created.id}`))
    expect(fetched.key).toBeUndefined()
    expect(JSON.stringify(fetched)).not.toContain(created.key)
    const listed = await jsonOf(await gw.admin("GET", "/api-keys"))
    expect(listed.data.some((k: { id: string }) => k.id === created.id)).toBe(true)
    expect(JSON.stringify(listed)).not.toContain(created.key)
    expect(JSON.stringify(listed)).not.toContain("key_hash")
  })

  it("defaults a new key to all models, tools disabled, no budget", async () => {
    const created = await jsonOf(await gw.admin("POST", "/api-keys", { name: "plain" }))
    expect(created).toMatchObject({ allowed_models: null, tools_enabled: false, budget: null, expires_at: null })
  })

  it("patches a key and refuses an empty patch", async () => {
    const { id } = await gw.createKey()
    const patched = await jsonOf(await gw.admin("PATCH", `/api-keys/${id}`, { name: "renamed", allowed_models: ["a", "b"] }))
    expect(patched).toMatchObject({ name: "renamed", allowed_models: ["a", "b"] })
    const empty = await gw.admin("PATCH", `/api-keys/${id}`, {})
    expect(empty.status).toBe(400)
    expect((await jsonOf(empty)).error).toBe("validation_failed")
  })

  it("rotates, revokes and deletes; delete answers 204 with no body", async () => {
    const { id } = await gw.createKey()
    const rotated = await jsonOf(await gw.admin("POST", `/api-keys/${id}/rotate`))
    expect(rotated.key).toMatch(/^sk-mg-/)
    const revoked = await jsonOf(await gw.admin("POST", `/api-keys/${id}/revoke`))
    expect(revoked.is_active).toBe(false)
    const deleted = await gw.admin("DELETE", `/api-keys/${id}`)
    expect(deleted.status).toBe(204)
    expect(await deleted.text()).toBe("")
    expect(deleted.headers.get("x-request-id")).toMatch(/^req_/)
  })

  it("answers 404 not_found for an unknown id on every key endpoint", async () => {
    const requests: Array<[string, string, unknown?]> = [
      ["GET", "/api-keys/key_nope"],
      ["PATCH", "/api-keys/key_nope", { name: "x" }],
      ["POST", "/api-keys/key_nope/rotate"],
      ["POST", "/api-keys/key_nope/revoke"],
      ["POST", "/api-keys/key_nope/budget/reset"],
      ["DELETE", "/api-keys/key_nope"]
    ]
    for (const [method, path, body] of requests) {
      const response = await gw.admin(method, path, body)
      expect(response.status, `${method} ${path}`).toBe(404)
      expect((await jsonOf(response)).error).toBe("not_found")
    }
  })

  it("refuses bad bodies with 400 naming the field", async () => {
    const cases: Array<[unknown, string]> = [
      [{}, "name"],
      [{ name: "" }, "name"],
      [{ name: 5 }, "name"],
      [{ name: "x", colour: "red" }, "colour"],
      [{ name: "x", budget: { max_requests: 0 } }, "budget.max_requests"],
      [{ name: "x", budget: { max_requests: 5, extra: 1 } }, "budget.extra"],
      [{ name: "x", allowed_models: "echo" }, "allowed_models"],
      [{ name: "x", tools_enabled: "yes" }, "tools_enabled"],
      [{ name: "x", expires_at: "tomorrow" }, "expires_at"]
    ]
    for (const [body, field] of cases) {
      const response = await gw.admin("POST", "/api-keys", body)
      expect(response.status, JSON.stringify(body)).toBe(400)
      const envelope = await jsonOf(response)
      expect(envelope.error).toBe("validation_failed")
      expect(envelope.message.startsWith(`${field}:`), envelope.message).toBe(true)
      expect(envelope.details.field).toBe(field)
    }
    const badGrace = await gw.admin("POST", `/api-keys/${(await gw.createKey()).id}/rotate`, { grace_seconds: -1 })
    expect(badGrace.status).toBe(400)
  })

  it("refuses a missing or wrong admin token with 401, and a client key is not an admin token", async () => {
    const { key } = await gw.createKey()
    for (const headers of [{}, { authorization: "Bearer wrong-token-123" }, { authorization: `Bearer ${key}` }, { authorization: ADMIN_TOKEN }]) {
      const response = await fetch(`${gw.url}/api-keys`, { headers })
      expect(response.status).toBe(401)
      expect((await jsonOf(response)).error).toBe("unauthorized")
    }
  })

  it("shows the workspace balance", async () => {
    const workspace = await jsonOf(await gw.admin("GET", "/workspace"))
    expect(workspace).toMatchObject({ id: "ws_default", credits: 1000 })
  })

  it("serves /healthz without auth", async () => {
    const response = await fetch(`${gw.url}/healthz`)
    expect(response.status).toBe(200)
    expect(await response.json()).toEqual({ status: "ok" })
  })
})

describe("admin API without a configured token", () => {
  it("is disabled, saying how to enable it", async () => {
    const { testConfig } = await import("../support/gateway.ts")
    const gw = await startGateway(testConfig({ admin: {} }))
    try {
      const response = await fetch(`${gw.url}/api-keys`, { headers: { authorization: "Bearer anything-at-all" } })
      expect(response.status).toBe(401)
      expect(((await response.json()) as { message: string }).message).toContain("admin.token")
    } finally {
      await gw.close()
    }
  })
})

describe("GET /usage", () => {
  it("sums requests, errors, tokens and credits per key and model from the audit trail", async () => {
    const gw = await startGateway()
    try {
      const { key, id } = await gw.createKey()
      const call = (content: string) =>
        fetch(`${gw.url}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
          body: JSON.stringify({ model: "echo", messages: [{ role: "user", content }] })
        })
      expect((await call("one two three")).status).toBe(200)
      expect((await call("four five")).status).toBe(200)
      await fetch(`${gw.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "nope", messages: [{ role: "user", content: "x" }] })
      })
      const usage: any = await (await gw.admin("GET", `/usage?key_id=${id}`)).json()
      const echo = usage.data.find((r: { model: string | null }) => r.model === "echo-1")
      expect(echo).toMatchObject({ key_id: id, requests: 2, errors: 0, prompt_tokens: 5, completion_tokens: 5, credits: 0 })
      const failed = usage.data.find((r: { model: string | null }) => r.model === null)
      expect(failed).toMatchObject({ requests: 1, errors: 1 })
      expect((await gw.admin("GET", "/usage?since=soon")).status).toBe(400)
    } finally {
      await gw.close()
    }
  })
})

describe("connections and grants", () => {
  it("creates connections without ever showing their passwords, and grants roles that only go up", async () => {
    const gw = await startGateway()
    try {
      const created = await gw.admin("POST", "/connections", {
        id: 7,
        name: "warehouse",
        dialect: "postgres",
        url: "postgres://editor:s3cret-edit@db.internal:5432/wh",
        read_url: "postgres://reader:s3cret-read@db.internal:5432/wh",
        default_schema: "public"
      })
      expect(created.status).toBe(201)
      const view: any = await created.json()
      expect(view).toMatchObject({ id: 7, name: "warehouse", dialect: "postgres", source: "admin" })
      expect(view.url).toBe("postgres://editor:***@db.internal:5432/wh")
      expect(JSON.stringify(view)).not.toContain("s3cret")

      const duplicate = await gw.admin("POST", "/connections", { id: 7, name: "again", dialect: "mysql", url: "mysql://a@b/c" })
      expect(duplicate.status).toBe(409)
      expect(((await duplicate.json()) as any).error).toBe("conflict")
      const bad = await gw.admin("POST", "/connections", { id: 8, name: "x", dialect: "oracle", url: "oracle://x" })
      expect(bad.status).toBe(400)
      expect(((await bad.json()) as any).details.field).toBe("dialect")

      const listed = await (await gw.admin("GET", "/connections")).text()
      expect(listed).toContain("warehouse")
      expect(listed).not.toContain("s3cret")

      const { id } = await gw.createKey({ tools_enabled: true })
      const grant = (role: string, connection = 7, key = id) => gw.admin("PUT", `/api-keys/${key}/connections/${connection}`, { role })
      expect((await grant("read")).status).toBe(200)
      const raised = await grant("edit")
      expect(raised.status).toBe(200)
      expect(await raised.json()).toMatchObject({ connection_id: 7, role: "edit" })
      const lowered = await grant("read")
      expect(lowered.status).toBe(409)
      expect(await lowered.json()).toMatchObject({ error: "conflict", details: { current_role: "edit", requested_role: "read" } })
      expect(((await (await gw.admin("GET", `/api-keys/${id}`)).json()) as any).connections).toEqual([{ connection_id: 7, role: "edit" }])

      expect((await grant("read", 99)).status).toBe(404)
      expect((await grant("read", 7, "key_nope")).status).toBe(404)
      expect((await grant("owner")).status).toBe(400)
      expect((await gw.admin("PUT", `/api-keys/${id}/connections/abc`, { role: "read" })).status).toBe(400)

      const revoked = await gw.admin("DELETE", `/api-keys/${id}/connections/7`)
      expect(revoked.status).toBe(204)
      expect((await gw.admin("DELETE", `/api-keys/${id}/connections/7`)).status).toBe(404)
      expect((await grant("read")).status).toBe(200)

      const badGrantOnCreate = await gw.admin("POST", "/api-keys", { name: "x", connections: [{ connection_id: 99, role: "read" }] })
      expect(badGrantOnCreate.status).toBe(400)
      expect(((await badGrantOnCreate.json()) as any).details.field).toBe("connections.0.connection_id")
      const keys: any = await (await gw.admin("GET", "/api-keys")).json()
      expect(keys.data.some((k: { name: string }) => k.name === "x")).toBe(false)

      const audit = JSON.stringify(await Effect.runPromise(gw.store.audit.queryAudit({ limit: 1000 })))
      expect(audit).not.toContain("s3cret")
    } finally {
      await gw.close()
    }
  })
})
