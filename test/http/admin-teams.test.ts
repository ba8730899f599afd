/**
 * Teams in the admin API (issue 33): create, list (paged), show, change and delete, as an
 * operator sees them over HTTP; budgets written and shown in credits, exact to six fractional
 * digits; the 400s that name the bad field, 409 for a taken name and for a team that still has
 * keys; keys joining and leaving teams; every action audited with `details.target`. On SQLite
 * and on Postgres (the foreign key and the join are SQL both must run alike).
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { hashKey } from "../../src/services/keys/key-material.ts"
import { createPostgresDatabase, type TempDatabase } from "../support/databases.ts"
import { auditFor, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

const jsonOf = async (response: Response): Promise<any> => response.json()

describe.each(["sqlite", "postgres"] as const)("admin API: teams (%s)", (store) => {
  let gw: TestGateway
  let db: TempDatabase | undefined
  beforeAll(async () => {
    db = store === "postgres" ? await createPostgresDatabase("mg_admin_teams") : undefined
    gw = await startGateway(testConfig({
      ...(db === undefined ? {} : { store: db.url }),
      providers: [{ name: "echo", kind: "echo" }],
      models: [{ alias: "free", id: "echo-free", provider: "echo", credits: 0 }]
    }))
  }, 60_000)
  afterAll(async () => {
    await gw?.close()
    await db?.drop()
  })

  const recordOf = async (response: Response) => {
    const records = await auditFor(gw, response.headers.get("x-request-id")!)
    expect(records).toHaveLength(1)
    return records[0]!
  }
  const expectRefused = async (response: Response, status: number, slug: string, field?: string) => {
    const body = await jsonOf(response)
    expect(response.status, JSON.stringify(body)).toBe(status)
    expect(body.error).toBe(slug)
    if (field !== undefined) expect(body.details?.field, JSON.stringify(body)).toBe(field)
    return body
  }

  it("creates a team (201) with its budget in credits, limits and models, shows it, and audits the creation", async () => {
    const created = await gw.admin("POST", "/teams", {
      name: "platform",
      budget: { max_credits: 200.123456, max_requests: 1000, period: "month" },
      limits: { requests_per_minute: 30, concurrent_streams: 2, tokens_per_minute: 100_000 },
      allowed_models: ["free", "claude-*"]
    })
    expect(created.status).toBe(201)
    const team = await jsonOf(created)
    expect(team).toMatchObject({
      name: "platform",
      budget: { max_credits: 200.123456, max_requests: 1000, period: "month" },
      limits: { requests_per_minute: 30, concurrent_streams: 2, tokens_per_minute: 100_000 },
      allowed_models: ["free", "claude-*"],
      key_count: 0
    })
    expect(team.id).toMatch(/^team_[0-9a-f]{16}$/)
    expect((await recordOf(created)).details).toMatchObject({
      target: { kind: "team", id: team.id },
      actor: { kind: "admin_token" },
      after: { id: team.id, name: "platform" }
    })

    const shown = await gw.admin("GET", `/teams/${team.id}`)
    expect(shown.status).toBe(200)
    expect(await jsonOf(shown)).toEqual(team)
  })

  it("refuses what a client got wrong with 400 naming the field, and a taken name with 409", async () => {
    await expectRefused(await gw.admin("POST", "/teams", {}), 400, "validation_failed", "name")
    await expectRefused(await gw.admin("POST", "/teams", { name: "" }), 400, "validation_failed", "name")
    await expectRefused(await gw.admin("POST", "/teams", { name: "x".repeat(201) }), 400, "validation_failed", "name")
    await expectRefused(await gw.admin("POST", "/teams", { name: "t", colour: "red" }), 400, "validation_failed", "colour")
    await expectRefused(await gw.admin("POST", "/teams", { name: "t", budget: {} }), 400, "validation_failed", "budget")
    await expectRefused(await gw.admin("POST", "/teams", { name: "t", budget: { max_credits: 0.0000001 } }), 400, "validation_failed", "budget.max_credits")
    await expectRefused(await gw.admin("POST", "/teams", { name: "t", budget: { max_credits: 0 } }), 400, "validation_failed", "budget.max_credits")
    await expectRefused(await gw.admin("POST", "/teams", { name: "t", budget: { max_credits: -5 } }), 400, "validation_failed", "budget.max_credits")
    await expectRefused(await gw.admin("POST", "/teams", { name: "t", budget: { max_requests: 5, period: "year" } }), 400, "validation_failed", "budget.period")
    await expectRefused(await gw.admin("POST", "/teams", { name: "t", limits: { requests_per_minute: 0 } }), 400, "validation_failed", "limits.requests_per_minute")
    await expectRefused(await gw.admin("POST", "/teams", { name: "t", limits: { concurrent_streams: 1.5 } }), 400, "validation_failed", "limits.concurrent_streams")
    await expectRefused(await gw.admin("POST", "/teams", { name: "t", allowed_models: [""] }), 400, "validation_failed", "allowed_models.0")
    await expectRefused(await gw.admin("POST", "/teams", { name: "t", allowed_models: Array.from({ length: 1001 }, () => "m") }), 400, "validation_failed", "allowed_models")

    expect((await gw.admin("POST", "/teams", { name: "unique-name" })).status).toBe(201)
    const taken = await expectRefused(await gw.admin("POST", "/teams", { name: "unique-name" }), 409, "conflict")
    expect(taken.message).toContain("unique-name")
    const other = await jsonOf(await gw.admin("POST", "/teams", { name: "another-name" }))
    await expectRefused(await gw.admin("PATCH", `/teams/${other.id}`, { name: "unique-name" }), 409, "conflict")
    await expectRefused(await gw.admin("PATCH", `/teams/${other.id}`, {}), 400, "validation_failed")
    await expectRefused(await gw.admin("GET", "/teams/team_0000000000000000"), 404, "not_found")
    await expectRefused(await gw.admin("PATCH", "/teams/team_0000000000000000", { name: "z" }), 404, "not_found")
    await expectRefused(await gw.admin("DELETE", "/teams/nope"), 404, "not_found")
    // No admin token: 401 like every admin route.
    expect((await fetch(`${gw.url}/teams`)).status).toBe(401)
  })

  it("PATCH changes what is sent (null removes a budget, limits or list) and audits only what changed", async () => {
    const team = await jsonOf(await gw.admin("POST", "/teams", { name: "patchable", budget: { max_requests: 5 }, limits: { requests_per_minute: 9 } }))
    const patched = await gw.admin("PATCH", `/teams/${team.id}`, { budget: { max_credits: 12.5, period: "week" }, allowed_models: ["free"] })
    expect(patched.status).toBe(200)
    const after = await jsonOf(patched)
    expect(after).toMatchObject({
      name: "patchable",
      budget: { max_requests: null, max_credits: 12.5, period: "week" },
      limits: { requests_per_minute: 9 },
      allowed_models: ["free"]
    })
    const record = await recordOf(patched)
    expect(record.details).toMatchObject({
      target: { kind: "team", id: team.id },
      before: { budget: { max_requests: 5, max_credits: null, period: null }, allowed_models: null },
      after: { budget: { max_requests: null, max_credits: 12.5, period: "week" }, allowed_models: ["free"] }
    })
    expect(record.details!.before).not.toHaveProperty("limits")

    const cleared = await jsonOf(await gw.admin("PATCH", `/teams/${team.id}`, { budget: null, limits: null, allowed_models: null }))
    expect(cleared).toMatchObject({ budget: null, limits: null, allowed_models: null })
  })

  it("keys join a team at creation and by PATCH (unknown team 400, null leaves); a team with keys cannot be deleted (409)", async () => {
    const team = await jsonOf(await gw.admin("POST", "/teams", { name: "with-keys" }))
    await expectRefused(await gw.admin("POST", "/api-keys", { name: "k", team_id: "team_ffffffffffffffff" }), 400, "validation_failed", "team_id")
    await expectRefused(await gw.admin("POST", "/api-keys", { name: "k", team_id: "engineering" }), 400, "validation_failed", "team_id")

    const created = await gw.admin("POST", "/api-keys", { name: "member-1", team_id: team.id })
    expect(created.status).toBe(201)
    const first = await jsonOf(created)
    expect(first.team_id).toBe(team.id)
    const second = await jsonOf(await gw.admin("POST", "/api-keys", { name: "member-2" }))
    expect(second.team_id).toBeNull()
    const joined = await gw.admin("PATCH", `/api-keys/${second.id}`, { team_id: team.id })
    expect(joined.status).toBe(200)
    expect((await recordOf(joined)).details).toMatchObject({
      target: { kind: "api_key", id: second.id },
      before: { team_id: null },
      after: { team_id: team.id }
    })
    await expectRefused(await gw.admin("PATCH", `/api-keys/${second.id}`, { team_id: "team_ffffffffffffffff" }), 400, "validation_failed", "team_id")

    expect((await jsonOf(await gw.admin("GET", `/teams/${team.id}`))).key_count).toBe(2)
    const members = await jsonOf(await gw.admin("GET", `/api-keys?team_id=${team.id}`))
    expect(members.data.map((k: any) => k.id).sort()).toEqual([first.id, second.id].sort())

    const refused = await gw.admin("DELETE", `/teams/${team.id}`)
    const body = await expectRefused(refused, 409, "conflict")
    expect(body.details).toEqual({ keys: 2 })
    expect((await recordOf(refused)).details).toMatchObject({ target: { kind: "team", id: team.id } })
    expect((await gw.admin("GET", `/teams/${team.id}`)).status).toBe(200)

    expect((await gw.admin("PATCH", `/api-keys/${first.id}`, { team_id: null })).status).toBe(200)
    expect((await gw.admin("DELETE", `/api-keys/${second.id}`)).status).toBe(204)
    const deleted = await gw.admin("DELETE", `/teams/${team.id}`)
    expect(deleted.status).toBe(204)
    expect((await recordOf(deleted)).details).toMatchObject({
      target: { kind: "team", id: team.id },
      before: { id: team.id, name: "with-keys", key_count: 0 }
    })
    await expectRefused(await gw.admin("GET", `/teams/${team.id}`), 404, "not_found")
  })

  it("authentication reads a key's team with the key, as the TeamScope every later stage uses (budget in micros, every limit)", async () => {
    const team = await jsonOf(await gw.admin("POST", "/teams", {
      name: "scoped",
      allowed_models: ["free"],
      budget: { max_credits: 0.000001, max_requests: 7, period: "week" },
      limits: { requests_per_minute: 5, concurrent_streams: 1, tokens_per_minute: 9000 }
    }))
    const created = await jsonOf(await gw.admin("POST", "/api-keys", { name: "scoped-key", team_id: team.id }))
    const record = await Effect.runPromise(gw.store.keys.findKeyByHash(hashKey(created.key)))
    expect(record?.team).toEqual({
      id: team.id,
      name: "scoped",
      allowed_models: ["free"],
      budget: { max_requests: 7, max_credits_micros: 1, period: "week" },
      limits: { requests_per_minute: 5, concurrent_streams: 1, tokens_per_minute: 9000 }
    })
    const plain = await jsonOf(await gw.admin("POST", "/api-keys", { name: "no-team" }))
    expect((await Effect.runPromise(gw.store.keys.findKeyByHash(hashKey(plain.key))))?.team).toBeNull()
  })

  it("the same name created 10 times at once: one 201, nine 409, no 5xx", async () => {
    const replies = await Promise.all(Array.from({ length: 10 }, () => gw.admin("POST", "/teams", { name: "raced-name" })))
    expect(replies.map((r) => r.status).sort()).toEqual([201, ...Array(9).fill(409)])
  })

  it("keys joining a team while it is deleted: each join is 200 or 400, the deletion 204 or 409, never a key in a deleted team", async () => {
    const team = await jsonOf(await gw.admin("POST", "/teams", { name: "raced-delete" }))
    const keys = await Promise.all(Array.from({ length: 8 }, async (_, i) => (await jsonOf(await gw.admin("POST", "/api-keys", { name: `racer-${i}` }))).id as string))
    const [deleted, ...joins] = await Promise.all([
      gw.admin("DELETE", `/teams/${team.id}`),
      ...keys.map((id) => gw.admin("PATCH", `/api-keys/${id}`, { team_id: team.id }))
    ])
    for (const join of joins) expect([200, 400]).toContain(join.status)
    expect([204, 409]).toContain(deleted!.status)
    const members = (await jsonOf(await gw.admin("GET", `/api-keys?team_id=${team.id}`))).data.length
    const exists = (await gw.admin("GET", `/teams/${team.id}`)).status === 200
    if (!exists) expect(members).toBe(0)
    expect(members).toBe(joins.filter((j) => j.status === 200).length)
  })

  it("GET /teams pages newest first with a cursor that visits every team once, filtered by name, with key counts", async () => {
    const ids: Array<string> = []
    for (let i = 0; i < 7; i++) ids.push((await jsonOf(await gw.admin("POST", "/teams", { name: `paged-${i}` }))).id)
    await gw.admin("POST", "/api-keys", { name: "in-paged-3", team_id: ids[3] })
    const seen: Array<any> = []
    let cursor: string | null = null
    do {
      const page: any = await jsonOf(await gw.admin("GET", `/teams?name=PAGED-&limit=3${cursor === null ? "" : `&cursor=${cursor}`}`))
      expect(page.data.length).toBeLessThanOrEqual(3)
      seen.push(...page.data)
      cursor = page.next_cursor
    } while (cursor !== null)
    expect(seen.map((t) => t.id)).toEqual([...ids].reverse())
    expect(seen.find((t) => t.id === ids[3]).key_count).toBe(1)
    expect(seen.find((t) => t.id === ids[2]).key_count).toBe(0)
    await expectRefused(await gw.admin("GET", "/teams?limit=0"), 400, "validation_failed", "limit")
    await expectRefused(await gw.admin("GET", "/teams?cursor=zz"), 400, "validation_failed", "cursor")
    await expectRefused(await gw.admin("GET", "/teams?owner=me"), 400, "validation_failed", "owner")
  })
})
