/**
 * What the admin API gained for the app: ledger filters (key, kind), audit filters (error slug,
 * endpoint), usage per day / key / model, a connection test against the real Postgres, and the
 * model catalogue.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { POSTGRES_ADMIN_URL } from "../support/databases.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

describe("admin API for the app", () => {
  let gw: TestGateway
  let key: { key: string; id: string }
  const jsonOf = async (response: Response): Promise<any> => response.json()
  const chat = (apiKey: string) =>
    fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "paid", messages: [{ role: "user", content: "one two three" }] })
    })

  beforeAll(async () => {
    gw = await startGateway(testConfig({ models: [{ alias: "paid", id: "echo-paid", provider: "echo", credits: 2 }] }))
    key = await gw.createKey({ name: "usage" })
    for (let i = 0; i < 3; i++) expect((await chat(key.key)).status).toBe(200)
    expect((await chat("sk-mg-" + "0".repeat(32))).status).toBe(401)
    expect((await gw.admin("POST", "/workspace/credits", { credits: 7, note: "filter me" })).status).toBe(200)
  })
  afterAll(() => gw.close())

  it("filters the ledger by key and by kind", async () => {
    const byKey = await jsonOf(await gw.admin("GET", `/workspace/ledger?key_id=${key.id}`))
    expect(byKey.data).toHaveLength(3)
    for (const entry of byKey.data) expect(entry).toMatchObject({ kind: "charge", amount: -2, key_id: key.id })
    const topups = await jsonOf(await gw.admin("GET", "/workspace/ledger?kind=topup"))
    expect(topups.data).toHaveLength(1)
    expect(topups.data[0]).toMatchObject({ amount: 7, note: "filter me" })
    const bad = await gw.admin("GET", "/workspace/ledger?kind=gift")
    expect(bad.status).toBe(400)
    expect((await jsonOf(bad)).details.field).toBe("kind")
  })

  it("filters the audit trail by error slug and endpoint", async () => {
    const refused = await jsonOf(await gw.admin("GET", "/audit?error=unauthorized&endpoint=/v1/chat/completions"))
    expect(refused.data).toHaveLength(1)
    expect(refused.data[0]).toMatchObject({ status: 401, error: "unauthorized", endpoint: "/v1/chat/completions" })
    const chats = await jsonOf(await gw.admin("GET", `/audit?endpoint=${encodeURIComponent("/v1/chat/completions")}&status=200`))
    expect(chats.data).toHaveLength(3)
  })

  it("groups usage by day, key, model and provider as asked, keeping the old default", async () => {
    // Three requests of `echo-paid` (3 tokens in, 3 out, 2 credits each); issue 33 added the tokens by kind.
    const PAID = {
      requests: 3,
      errors: 0,
      credits: 6,
      input_tokens: 9,
      output_tokens: 9,
      cache_read_tokens: 0,
      cache_write_tokens: 0,
      prompt_tokens: 9,
      completion_tokens: 9
    }
    const today = new Date().toISOString().slice(0, 10)
    const byDay = await jsonOf(await gw.admin("GET", "/usage?group_by=day"))
    expect(byDay.group_by).toEqual(["day"])
    expect(byDay.data).toHaveLength(1)
    expect(byDay.data[0]).toMatchObject({ day: today })
    expect(byDay.data[0].key_id).toBeUndefined()
    expect(byDay.data[0].requests).toBeGreaterThanOrEqual(4)

    const byDayKeyModel = await jsonOf(await gw.admin("GET", `/usage?group_by=model,day,key&key_id=${key.id}`))
    expect(byDayKeyModel.data).toEqual([
      { day: today, key_id: key.id, model: "echo-paid", ...PAID }
    ])
    const defaults = await jsonOf(await gw.admin("GET", `/usage?key_id=${key.id}`))
    expect(defaults.group_by).toEqual(["key", "model"])
    expect(defaults.data[0]).toEqual({ key_id: key.id, model: "echo-paid", ...PAID })

    const tomorrow = new Date(Date.now() + 86_400_000).toISOString().slice(0, 10)
    expect((await jsonOf(await gw.admin("GET", `/usage?group_by=day&since=${tomorrow}T00:00:00Z`))).data).toEqual([])

    // By the provider that answered (issue 20: a routed model's requests spread over deployments).
    const byProvider = await jsonOf(await gw.admin("GET", `/usage?group_by=provider,day&key_id=${key.id}`))
    expect(byProvider.group_by).toEqual(["provider", "day"])
    expect(byProvider.data).toEqual([
      { day: today, provider: "echo", ...PAID }
    ])

    const bad = await gw.admin("GET", "/usage?group_by=day,vendor")
    expect(bad.status).toBe(400)
    expect(await jsonOf(bad)).toMatchObject({ error: "validation_failed", details: { field: "group_by" } })
  })

  it("lists the model catalogue", async () => {
    const models = await jsonOf(await gw.admin("GET", "/models"))
    expect(models.data).toEqual([{ name: "paid", id: "echo-paid", alias: "paid", provider: "echo", credits: 2 }])
  })

  it("tests a connection: the server version per role, or the reason it failed, never the password", async () => {
    const url = POSTGRES_ADMIN_URL.replace("postgres@", "postgres:hunter2@")
    expect((await gw.admin("POST", "/connections", { id: 1, name: "pg", dialect: "postgres", url })).status).toBe(201)
    expect((await gw.admin("POST", "/connections", {
      id: 2,
      name: "down",
      dialect: "postgres",
      url,
      read_url: "postgres://reader:hunter2@127.0.0.1:1/nowhere"
    })).status).toBe(201)

    const ok = await gw.admin("POST", "/connections/1/test")
    expect(ok.status).toBe(200)
    const okBody = await jsonOf(ok)
    expect(okBody.results).toHaveLength(1)
    expect(okBody.results[0]).toMatchObject({ role: "edit", ok: true, flavor: "postgres" })
    expect(okBody.results[0].version).toMatch(/^\d+\.\d+/)

    const mixed = await jsonOf(await gw.admin("POST", "/connections/2/test"))
    expect(mixed.results.map((r: { role: string; ok: boolean }) => [r.role, r.ok])).toEqual([["edit", true], ["read", false]])
    expect(mixed.results[1].error.error).toBe("connection_unreachable")
    expect(JSON.stringify(mixed)).not.toContain("hunter2")

    expect((await gw.admin("POST", "/connections/9/test")).status).toBe(404)
  })
})
