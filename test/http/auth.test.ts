/** Every authentication outcome, through the real server, on a key-authenticated route. */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { startGateway, type TestGateway } from "../support/gateway.ts"
import { waitFor } from "../support/wait.ts"

describe("authentication", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway()
  })
  afterAll(() => gw.close())

  const call = (headers: Record<string, string>) => fetch(`${gw.url}/v1/models`, { headers })
  const slug = async (response: Response) => ((await response.json()) as { error: string }).error

  it("accepts a key as Bearer (any case of the scheme) or as x-api-key", async () => {
    const { key } = await gw.createKey()
    expect((await call({ authorization: `Bearer ${key}` })).status).toBe(200)
    expect((await call({ authorization: `bearer ${key}` })).status).toBe(200)
    expect((await call({ "x-api-key": key })).status).toBe(200)
    expect((await call({ "x-api-key": key, authorization: `Bearer ${key}` })).status).toBe(200)
  })

  it("refuses missing, malformed, wrong-length, unknown and conflicting keys with 401 unauthorized", async () => {
    const { key } = await gw.createKey()
    const other = (await gw.createKey()).key
    const cases: Array<Record<string, string>> = [
      {},
      { authorization: "" },
      { authorization: `Basic ${Buffer.from("a:b").toString("base64")}` },
      { authorization: "Bearer" },
      { authorization: "Bearer sk-other-0123456789abcdef0123456789abcdef" },
      { authorization: `Bearer ${key}0` },
      { authorization: `Bearer ${key.slice(0, -1)}` },
      { authorization: `Bearer ${key.toUpperCase()}` },
      { "x-api-key": "sk-mg-00000000000000000000000000000000" },
      { authorization: `Bearer ${key}`, "x-api-key": other }
    ]
    for (const headers of cases) {
      const response = await call(headers)
      expect(response.status, JSON.stringify(headers)).toBe(401)
      expect(response.headers.get("www-authenticate")).toContain("Bearer")
      expect(await slug(response)).toBe("unauthorized")
    }
  })

  it("refuses an inactive key with key_inactive, and admits it again at once when reactivated", async () => {
    const { key, id } = await gw.createKey()
    expect((await call({ authorization: `Bearer ${key}` })).status).toBe(200)
    expect((await gw.admin("POST", `/api-keys/${id}/revoke`)).status).toBe(200)
    const refused = await call({ authorization: `Bearer ${key}` })
    expect(refused.status).toBe(401)
    expect(await slug(refused)).toBe("key_inactive")
    expect((await gw.admin("PATCH", `/api-keys/${id}`, { is_active: true })).status).toBe(200)
    expect((await call({ authorization: `Bearer ${key}` })).status).toBe(200)
  })

  it("refuses an expired key with key_inactive", async () => {
    const { key } = await gw.createKey({ expires_at: "2020-01-01T00:00:00Z" })
    const response = await call({ "x-api-key": key })
    expect(response.status).toBe(401)
    expect(await slug(response)).toBe("key_inactive")
  })

  it("refuses a deleted key with unauthorized, immediately", async () => {
    const { key, id } = await gw.createKey()
    expect((await call({ "x-api-key": key })).status).toBe(200)
    expect((await gw.admin("DELETE", `/api-keys/${id}`)).status).toBe(204)
    const response = await call({ "x-api-key": key })
    expect(response.status).toBe(401)
    expect(await slug(response)).toBe("unauthorized")
  })

  it("stops the old key at once on rotation, or after the grace period when one is given", async () => {
    const { key, id } = await gw.createKey()
    expect((await call({ "x-api-key": key })).status).toBe(200)
    const rotated = (await (await gw.admin("POST", `/api-keys/${id}/rotate`)).json()) as { key: string; id: string }
    expect(rotated.id).toBe(id)
    expect((await call({ "x-api-key": key })).status).toBe(401)
    expect((await call({ "x-api-key": rotated.key })).status).toBe(200)

    const graced = (await (await gw.admin("POST", `/api-keys/${id}/rotate`, { grace_seconds: 60 })).json()) as { key: string }
    expect((await call({ "x-api-key": rotated.key })).status).toBe(200)
    expect((await call({ "x-api-key": graced.key })).status).toBe(200)
  })

  it("notices a change made by another replica (directly in the store) at its next poll of the change counter", async () => {
    const { key, id } = await gw.createKey()
    expect((await call({ "x-api-key": key })).status).toBe(200)
    // Count the cache's polls of the store's key-change counter (every 250 ms): the state that
    // keeps the promise, where a wall-clock bound failed on a loaded machine.
    let polls = 0
    const original = gw.store.keys.keyChangeVersion
    ;(gw.store.keys as { keyChangeVersion: typeof original }).keyChangeVersion = Effect.tap(original, () => Effect.sync(() => void polls++))
    try {
      // Two polls: the key's creation (a change too) has been seen, so the cache is not cleared for it later.
      await waitFor("the cache polling the change counter", () => polls >= 2)
      expect((await call({ "x-api-key": key })).status).toBe(200)
      // Another replica's revoke: it bumps the shared change counter but cannot clear our cache.
      await Effect.runPromise(gw.store.keys.updateKey(id, { is_active: false }))
      // Still cached (no poll since): the old answer, which proves the next step is the poll's doing.
      const afterRevoke = polls
      const cached = (await call({ "x-api-key": key })).status
      if (polls === afterRevoke) expect(cached).toBe(200)
      // Two polls later one poll read the counter entirely after the revoke: the key is refused at once.
      await waitFor("two polls after the revoke", () => polls >= afterRevoke + 2)
      const refused = await call({ "x-api-key": key })
      expect(refused.status).toBe(401)
      expect(await slug(refused)).toBe("key_inactive")
    } finally {
      ;(gw.store.keys as { keyChangeVersion: typeof original }).keyChangeVersion = original
    }
  })

  it("does not hit the store for every request (cache)", async () => {
    const { key } = await gw.createKey()
    let lookups = 0
    const original = gw.store.keys.findKeyByHash
    ;(gw.store.keys as { findKeyByHash: typeof original }).findKeyByHash = (hash) => {
      lookups++
      return original(hash)
    }
    try {
      for (let i = 0; i < 20; i++) expect((await call({ "x-api-key": key })).status).toBe(200)
    } finally {
      ;(gw.store.keys as { findKeyByHash: typeof original }).findKeyByHash = original
    }
    expect(lookups).toBeLessThanOrEqual(2)
  })
})
