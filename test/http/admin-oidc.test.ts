/**
 * Identity-provider admins (admin.oidc) against a real OpenID provider (test/support/oidc-issuer.ts):
 * bearer tokens on the admin API (admin, not an admin, expired, wrong audience, forged, issuer
 * down), and the app's sign-in flow walked over HTTP (the browser version is
 * test/app/oidc-signin.e2e.test.ts): PKCE S256, state and nonce, the session it ends with,
 * refusals for a user who is not an admin and for a state that does not match.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Result } from "effect"
import { resolveConfig } from "../../src/services/config/load.ts"
import { ADMIN_TOKEN, auditFor, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { signInWithDevPages, startTestIssuer, tamperSignature, type TestIssuer } from "../support/oidc-issuer.ts"
import { stringify } from "yaml"

const bearer = (gw: TestGateway, token: string, path = "/workspace", init: RequestInit = {}) =>
  fetch(`${gw.url}${path}`, { ...init, headers: { authorization: `Bearer ${token}`, ...init.headers } })

/** The value part of a named cookie among a response's Set-Cookie lines. */
const cookieFrom = (response: Response, name: string) =>
  response.headers.getSetCookie().find((line) => line.startsWith(`${name}=`))

const adminOidc = (issuer: TestIssuer, extra: Record<string, unknown> = {}) => ({
  issuer: issuer.issuer,
  name: "Test IdP",
  client_id: issuer.client.client_id,
  client_secret: issuer.client.client_secret,
  audience: issuer.audience,
  scopes: ["openid", "email", "profile", "groups"],
  admin_claim: { claim: "groups", includes: "gateway-admins" },
  ...extra
})

describe("admin API with identity-provider bearer tokens", () => {
  let issuer: TestIssuer
  let gw: TestGateway
  beforeAll(async () => {
    issuer = await startTestIssuer()
    gw = await startGateway(testConfig({ admin: { token: ADMIN_TOKEN, oidc: adminOidc(issuer) } }))
  })
  afterAll(async () => {
    await gw?.close()
    await issuer?.close()
  })

  it("accepts an admin's token and names the admin (never the token) in the audit record", async () => {
    const token = await issuer.mint({ subject: "alice", claims: { groups: ["staff", "gateway-admins"] } })
    const response = await bearer(gw, token)
    expect(response.status).toBe(200)
    expect(await response.json()).toHaveProperty("credits")
    const [record] = await auditFor(gw, response.headers.get("x-request-id")!)
    expect(record!.details).toMatchObject({ admin: { issuer: issuer.issuer, subject: "alice" } })
    expect(JSON.stringify(record)).not.toContain(token.split(".")[2])
  })

  it("lets an admin's token change things (no CSRF for a bearer token)", async () => {
    const token = await issuer.mint({ subject: "alice", claims: { groups: ["gateway-admins"] } })
    const response = await bearer(gw, token, "/api-keys", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name: "made by alice" })
    })
    expect(response.status).toBe(201)
    const created = await response.json() as { id: string; key: string; name: string }
    expect(created.name).toBe("made by alice")
    // The key exists (read back with the admin token, another credential) and works.
    const stored = await fetch(`${gw.url}/api-keys/${created.id}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })
    expect(stored.status).toBe(200)
    expect(await stored.json()).toMatchObject({ id: created.id, name: "made by alice", is_active: true })
    expect((await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${created.key}` } })).status).toBe(200)
    // Attributed to the person signed in: the creation's audit record names alice and the key.
    const [record] = await auditFor(gw, response.headers.get("x-request-id")!)
    expect(record).toMatchObject({ method: "POST", endpoint: "/api-keys", status: 201 })
    expect(record!.details).toMatchObject({ admin: { issuer: issuer.issuer, subject: "alice" }, target: { kind: "api_key", id: created.id } })
  })

  it("refuses a valid token of someone who is not an admin with 403 scope_violation", async () => {
    const token = await issuer.mint({ subject: "bob", claims: { groups: ["staff"] } })
    const response = await bearer(gw, token)
    expect(response.status).toBe(403)
    const body = await response.json() as { error: string; message: string }
    expect(body.error).toBe("scope_violation")
    expect(body.message).toContain("claim groups including \"gateway-admins\"")
  })

  it.each([
    ["expired", { expiresIn: -120 }],
    ["for another audience", { audience: "some-other-api" }],
    ["not valid yet", { notBefore: 600 }],
    ["from another issuer", { issuer: "https://elsewhere.example" }]
  ] as const)("refuses a token %s with 401 unauthorized and WWW-Authenticate", async (_, options) => {
    const token = await issuer.mint({ subject: "alice", claims: { groups: ["gateway-admins"] }, ...options })
    const response = await bearer(gw, token)
    expect(response.status).toBe(401)
    expect(response.headers.get("www-authenticate")).toMatch(/^Bearer error="invalid_token"/)
    const body = await response.json() as { error: string; message: string }
    expect(body.error).toBe("unauthorized")
    expect(body.message).toMatch(/^invalid identity-provider token: /)
  })

  it("refuses a subject longer than OpenID Connect allows (it would ride in cookies and the ledger)", async () => {
    const token = await issuer.mint({ subject: "a".repeat(256), claims: { groups: ["gateway-admins"] } })
    const response = await bearer(gw, token)
    expect(response.status).toBe(403)
    expect((await response.json() as { message: string }).message).toContain("longer than 255")
  })

  it("refuses a token whose signature was tampered with", async () => {
    const token = tamperSignature(await issuer.mint({ subject: "alice", claims: { groups: ["gateway-admins"] } }))
    const response = await bearer(gw, token)
    expect(response.status).toBe(401)
    expect((await response.json() as { error: string }).error).toBe("unauthorized")
  })

  it("still accepts the admin token, and refuses a wrong one that is not a JWT", async () => {
    expect((await bearer(gw, ADMIN_TOKEN)).status).toBe(200)
    const wrong = await bearer(gw, "not-the-admin-token")
    expect(wrong.status).toBe(401)
    expect((await wrong.json() as { message: string }).message).toBe("invalid admin token")
  })

  it("answers 503 while the issuer cannot be reached, instead of letting the token in or blaming it", async () => {
    // A fresh gateway: its verifier has not fetched discovery or keys yet.
    const cold = await startGateway(testConfig({ admin: { token: ADMIN_TOKEN, oidc: adminOidc(issuer) } }))
    issuer.setDown(true)
    try {
      const token = await issuer.mint({ subject: "alice", claims: { groups: ["gateway-admins"] } })
      const response = await bearer(cold, token)
      expect(response.status).toBe(503)
      expect((await response.json() as { error: string }).error).toBe("dependency_unavailable")
      const metrics = await (await fetch(`${cold.url}/metrics`)).text()
      expect(metrics).toMatch(/modelgate_dependency_errors_total\{dependency="identity_provider"\} [1-9]/)
    } finally {
      issuer.setDown(false)
      await cold.close()
    }
  })
})

describe("admin app sign-in through the identity provider (over HTTP)", () => {
  let issuer: TestIssuer
  let gw: TestGateway
  let callback: string
  beforeAll(async () => {
    issuer = await startTestIssuer()
    gw = await startGateway(testConfig({ admin: { token: ADMIN_TOKEN, oidc: adminOidc(issuer) } }))
    // No public_url on loopback: the redirect URI is the bound address's.
    callback = `${gw.url}/app/oidc/callback`
    issuer.client.redirect_uris.push(callback)
    issuer.setAccountClaims("alice", { groups: ["gateway-admins"], email: "alice@example.com", name: "Alice" })
    issuer.setAccountClaims("bob", { groups: ["staff"], email: "bob@example.com" })
  })
  afterAll(async () => {
    await gw?.close()
    await issuer?.close()
  })

  /** GET /app/oidc/start: where it sends the browser and the flow cookie it sets. */
  const start = async () => {
    const response = await fetch(`${gw.url}/app/oidc/start`, { redirect: "manual" })
    expect(response.status).toBe(303)
    const flow = cookieFrom(response, "mg_oidc_flow")!
    return { location: new URL(response.headers.get("location")!), flow, flowCookie: flow.split(";")[0]! }
  }

  const finish = (redirect: URL, flowCookie: string | undefined) =>
    fetch(`${gw.url}${redirect.pathname}${redirect.search}`, {
      redirect: "manual",
      headers: flowCookie === undefined ? {} : { cookie: flowCookie }
    })

  it("offers the provider on the sign-in page's options", async () => {
    const response = await fetch(`${gw.url}/app/sign-in`)
    expect(await response.json()).toEqual({
      identity_provider: { name: "Test IdP", start_url: `${gw.url}/app/oidc/start` }
    })
  })

  it("starts an authorization code request with PKCE S256, state, nonce and the configured redirect URI", async () => {
    const { location, flow } = await start()
    expect(`${location.origin}${location.pathname}`).toBe(`${issuer.issuer}/auth`)
    const params = Object.fromEntries(location.searchParams)
    expect(params).toMatchObject({
      response_type: "code",
      client_id: issuer.client.client_id,
      redirect_uri: callback,
      scope: "openid email profile groups",
      code_challenge_method: "S256"
    })
    expect(params.code_challenge).toMatch(/^[A-Za-z0-9_-]{43}$/)
    expect(params.state).toMatch(/^[A-Za-z0-9_-]{43}$/)
    expect(params.nonce).toMatch(/^[A-Za-z0-9_-]{43}$/)
    expect(params.state).not.toBe(params.nonce)
    expect(flow).toMatch(/; Path=\/app\/oidc/)
    expect(flow).toMatch(/HttpOnly/)
    expect(flow).toMatch(/SameSite=Lax/)
    // The flow cookie holds no secret: not the state, nonce or verifier.
    expect(flow).not.toContain(params.state!)
    expect(flow).not.toContain(params.nonce!)
  })

  it("signs an admin in: a session cookie like the admin token's, naming the admin, usable for writes with CSRF", async () => {
    const { location, flowCookie } = await start()
    const redirect = await signInWithDevPages(issuer.issuer, location.toString(), "alice")
    expect(`${redirect.origin}${redirect.pathname}`).toBe(callback)
    const response = await finish(redirect, flowCookie)
    expect(response.status).toBe(303)
    expect(response.headers.get("location")).toBe("/app")
    const session = cookieFrom(response, "mg_session")!
    expect(session).toMatch(/HttpOnly; SameSite=Strict/)
    expect(cookieFrom(response, "mg_oidc_flow")).toMatch(/Max-Age=0/)
    const cookie = session.split(";")[0]!

    const view = await fetch(`${gw.url}/app/session`, { headers: { cookie } })
    expect(view.status).toBe(200)
    const body = await view.json() as { csrf_token: string; admin: unknown }
    expect(body.admin).toEqual({ subject: "alice", name: "alice@example.com" })

    const topUp = await fetch(`${gw.url}/workspace/credits`, {
      method: "POST",
      headers: { cookie, "x-csrf-token": body.csrf_token, "content-type": "application/json" },
      body: JSON.stringify({ credits: 5 })
    })
    expect(topUp.status).toBe(200)
    const [record] = await auditFor(gw, topUp.headers.get("x-request-id")!)
    expect(record!.details).toMatchObject({ admin: { issuer: issuer.issuer, subject: "alice" } })
    // The ledger names who added the credits too.
    const ledger = await (await gw.admin("GET", "/workspace/ledger?kind=topup")).json() as { data: Array<{ actor: string }> }
    expect(ledger.data[0]!.actor).toBe("admin:alice")

    // The code was used once: replaying the callback (even with the flow cookie) gets no session.
    const replay = await finish(redirect, flowCookie)
    expect(replay.headers.get("location")).toBe("/app?sign_in_error=failed")
    expect(cookieFrom(replay, "mg_session")).toBeUndefined()
  })

  it("refuses a user whose claims do not name an admin, with no session", async () => {
    const { location, flowCookie } = await start()
    const redirect = await signInWithDevPages(issuer.issuer, location.toString(), "bob")
    const response = await finish(redirect, flowCookie)
    expect(response.status).toBe(303)
    expect(response.headers.get("location")).toBe("/app?sign_in_error=not_admin")
    expect(cookieFrom(response, "mg_session")).toBeUndefined()
    const [record] = await auditFor(gw, response.headers.get("x-request-id")!)
    expect(record!.details).toMatchObject({ sign_in: { refused: "not_admin" } })
  })

  it("refuses a tampered state, and a callback without this browser's flow cookie, before redeeming the code", async () => {
    const { location, flowCookie } = await start()
    const redirect = await signInWithDevPages(issuer.issuer, location.toString(), "alice")
    const tampered = new URL(redirect)
    const state = tampered.searchParams.get("state")!
    tampered.searchParams.set("state", `${state.slice(0, -1)}${state.endsWith("A") ? "B" : "A"}`)
    const refused = await finish(tampered, flowCookie)
    expect(refused.headers.get("location")).toBe("/app?sign_in_error=invalid_state")
    expect(cookieFrom(refused, "mg_session")).toBeUndefined()

    // Another browser (no flow cookie) holding the real redirect is refused too.
    const elsewhere = await finish(redirect, undefined)
    expect(elsewhere.headers.get("location")).toBe("/app?sign_in_error=invalid_state")

    // The code was not spent by those refusals: the right browser still completes.
    const good = await finish(redirect, flowCookie)
    expect(good.headers.get("location")).toBe("/app")
    expect(cookieFrom(good, "mg_session")).toBeDefined()
  })

  it("refuses a forged flow cookie", async () => {
    const { location, flowCookie } = await start()
    const redirect = await signInWithDevPages(issuer.issuer, location.toString(), "alice")
    const [name, value] = flowCookie.split("=") as [string, string]
    const parts = value.split(".")
    parts[1] = String(Number(parts[1]) + 3_600_000) // a later expiry under the old MAC
    const response = await finish(redirect, `${name}=${parts.join(".")}`)
    expect(response.headers.get("location")).toBe("/app?sign_in_error=invalid_state")
  })

  it("passes on a refusal from the provider as a fixed code", async () => {
    const { location, flowCookie } = await start()
    const denied = new URL(callback)
    denied.searchParams.set("error", "access_denied")
    denied.searchParams.set("error_description", "<script>alert(1)</script>")
    denied.searchParams.set("state", location.searchParams.get("state")!)
    const response = await finish(denied, flowCookie)
    expect(response.headers.get("location")).toBe("/app?sign_in_error=denied")
  })
})

describe("admin.oidc configuration", () => {
  const load = (admin: Record<string, unknown>, server: Record<string, unknown> = { host: "127.0.0.1" }) =>
    resolveConfig({ fileText: stringify({ server, store: "sqlite::memory:", admin }), env: {} })
  const oidc = {
    issuer: "https://idp.example.com",
    client_id: "modelgate",
    admin_claim: { claim: "groups", includes: "admins" }
  }
  const problem = (result: ReturnType<typeof load>) => Result.isFailure(result) ? result.failure.message : undefined

  it("accepts a minimal setup on loopback, with defaults", () => {
    const result = load({ token: ADMIN_TOKEN, oidc })
    expect(problem(result)).toBeUndefined()
    if (Result.isSuccess(result)) expect(result.success.admin.oidc?.scopes).toEqual(["openid", "email", "profile"])
  })

  it.each([
    [{ ...oidc, admin_claim: { claim: "groups" } }, "admin.oidc.admin_claim: give exactly one of equals or includes"],
    [{ ...oidc, admin_claim: { claim: "groups", equals: "a", includes: "b" } }, "admin.oidc.admin_claim: give exactly one of equals or includes"],
    [{ ...oidc, issuer: "http://idp.example.com" }, "admin.oidc.issuer: expected an https:// URL"],
    [{ ...oidc, public_url: "https://gw.example.com/admin" }, "admin.oidc.public_url: expected an origin only"],
    [{ ...oidc, scopes: ["email"] }, "admin.oidc.scopes: must include openid"]
  ])("refuses %j", (value, message) => {
    expect(problem(load({ token: ADMIN_TOKEN, oidc: value }))).toContain(message)
  })

  it("off loopback, wants public_url (never the Host header) and the admin token", () => {
    const server = { host: "0.0.0.0", trust_proxy: true }
    expect(problem(load({ token: ADMIN_TOKEN, oidc }, server))).toContain("admin.oidc.public_url: required")
    expect(problem(load({ oidc: { ...oidc, public_url: "https://gw.example.com" } }, server))).toContain("admin.token: required with admin.oidc")
    expect(problem(load({ token: ADMIN_TOKEN, oidc: { ...oidc, public_url: "https://gw.example.com" } }, server))).toBeUndefined()
  })

  it("takes the client secret from MODELGATE_ADMIN_OIDC_CLIENT_SECRET", () => {
    const result = resolveConfig({
      fileText: stringify({ store: "sqlite::memory:", admin: { token: ADMIN_TOKEN, oidc } }),
      env: { MODELGATE_ADMIN_OIDC_CLIENT_SECRET: "from-the-environment" }
    })
    expect(Result.isSuccess(result) && result.success.admin.oidc?.client_secret).toBe("from-the-environment")
  })
})
