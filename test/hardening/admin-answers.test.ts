/**
 * Issue 22, "also": admin answers carry `Cache-Control: no-store` and `X-Content-Type-Options:
 * nosniff` (above all `POST /api-keys`, which holds the full key), errors included; behind HTTPS
 * the session cookie takes the `__Host-` prefix (Secure, Path=/, no Domain).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ADMIN_TOKEN, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

describe("admin answers are not cached or sniffed", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway(testConfig())
  })
  afterAll(() => gw?.close())

  it("POST /api-keys (the full key), GET /workspace and a 401 carry no-store and nosniff", async () => {
    const created = await gw.admin("POST", "/api-keys", { name: "k" })
    expect(created.status).toBe(201)
    const unauthorized = await fetch(`${gw.url}/workspace`, { headers: { authorization: "Bearer wrong-token-123" } })
    expect(unauthorized.status).toBe(401)
    for (const response of [created, await gw.admin("GET", "/workspace"), unauthorized]) {
      expect(response.headers.get("cache-control")).toBe("no-store")
      expect(response.headers.get("x-content-type-options")).toBe("nosniff")
    }
  })
})

describe("the session cookie behind HTTPS", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway(testConfig({ server: { host: "127.0.0.1", port: 0, trust_proxy: true } }))
  })
  afterAll(() => gw?.close())

  it("is __Host-mg_session, Secure, Path=/, without Domain, and it signs in", async () => {
    const origin = new URL(gw.url).origin.replace("http:", "https:")
    const signIn = await fetch(`${gw.url}/app/session`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-forwarded-proto": "https", origin, host: new URL(gw.url).host, "sec-fetch-site": "same-origin" },
      body: JSON.stringify({ token: ADMIN_TOKEN })
    })
    expect(signIn.status).toBe(201)
    const setCookie = signIn.headers.get("set-cookie")!
    expect(setCookie).toMatch(/^__Host-mg_session=[^;]+; Path=\/; HttpOnly; SameSite=Strict; Max-Age=\d+; Secure$/)
    expect(setCookie).not.toMatch(/Domain=/i)
    expect(signIn.headers.get("cache-control")).toBe("no-store")
    const cookie = setCookie.split(";")[0]!
    const workspace = await fetch(`${gw.url}/workspace`, { headers: { cookie, "x-forwarded-proto": "https" } })
    expect(workspace.status).toBe(200)
    // The plain name is not accepted in its place.
    const plain = await fetch(`${gw.url}/workspace`, { headers: { cookie: cookie.replace("__Host-", ""), "x-forwarded-proto": "https" } })
    expect(plain.status).toBe(401)
  })
})
