/**
 * Who may call the admin API: the bearer token or the app's session cookie (with CSRF proof for
 * writes), failed attempts throttled per client address (in one process and across replicas
 * through Redis), and a session cookie any replica with the same admin token accepts.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { randomBytes } from "node:crypto"
import { sameSecret } from "../../src/http/routes/admin-auth.ts"
import { ADMIN_TOKEN, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

const randomAddress = () => `10.${randomBytes(3).join(".")}`

/** Behind a trusted proxy, so each test picks its client address with X-Forwarded-For. */
const proxied = (address: string, headers: Record<string, string> = {}) => ({
  "x-forwarded-proto": "https",
  "x-forwarded-for": address,
  ...headers
})

const signIn = (gw: TestGateway, token: string, headers: Record<string, string> = {}) =>
  fetch(`${gw.url}/app/session`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify({ token })
  })

const sessionOf = async (response: Response) => {
  const setCookie = response.headers.get("set-cookie") ?? ""
  const cookie = setCookie.split(";")[0]!
  const body = await response.json() as { csrf_token: string; expires_at: string }
  return { cookie, setCookie, csrf: body.csrf_token, expiresAt: body.expires_at }
}

describe("admin token throttling", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway(testConfig({ server: { host: "127.0.0.1", port: 0, trust_proxy: true } }))
  })
  afterAll(() => gw.close())

  it("refuses an address after 10 failed attempts with 429 rate_limited and Retry-After, even with the right token", async () => {
    const address = randomAddress()
    for (let i = 0; i < 10; i++) {
      const response = await fetch(`${gw.url}/workspace`, { headers: proxied(address, { authorization: `Bearer wrong-${i}` }) })
      expect(response.status).toBe(401)
    }
    const limited = await fetch(`${gw.url}/workspace`, { headers: proxied(address, { authorization: `Bearer ${ADMIN_TOKEN}` }) })
    expect(limited.status).toBe(429)
    const body = await limited.json() as { error: string; details: Record<string, unknown> }
    expect(body.error).toBe("rate_limited")
    expect(body.details).toMatchObject({ limit: "admin_failed_attempts", max_failures: 10 })
    const retryAfter = Number(limited.headers.get("retry-after"))
    expect(retryAfter).toBeGreaterThanOrEqual(1)
    expect(retryAfter).toBeLessThanOrEqual(60)

    // The app's sign-in is the same door: refused too, before the token is looked at.
    const signInLimited = await signIn(gw, ADMIN_TOKEN, proxied(address))
    expect(signInLimited.status).toBe(429)
    expect(signInLimited.headers.get("retry-after")).not.toBeNull()

    // Another address is not affected.
    const other = await fetch(`${gw.url}/workspace`, { headers: proxied(randomAddress(), { authorization: `Bearer ${ADMIN_TOKEN}` }) })
    expect(other.status).toBe(200)
  })

  it("counts wrong tokens at the app's sign-in against the same address", async () => {
    const address = randomAddress()
    for (let i = 0; i < 10; i++) {
      const response = await signIn(gw, `wrong-${i}`, proxied(address))
      expect(response.status).toBe(401)
      expect((await response.json() as { message: string }).message).toBe("invalid admin token")
    }
    const limited = await fetch(`${gw.url}/workspace`, { headers: proxied(address, { authorization: `Bearer ${ADMIN_TOKEN}` }) })
    expect(limited.status).toBe(429)
  })

  it("does not count successful calls or calls without any credential", async () => {
    const address = randomAddress()
    for (let i = 0; i < 15; i++) {
      expect((await fetch(`${gw.url}/workspace`, { headers: proxied(address, { authorization: `Bearer ${ADMIN_TOKEN}` }) })).status).toBe(200)
      expect((await fetch(`${gw.url}/workspace`, { headers: proxied(address) })).status).toBe(401)
    }
  })

  it("compares tokens in constant time over digests, whatever their lengths", () => {
    expect(sameSecret(ADMIN_TOKEN, ADMIN_TOKEN)).toBe(true)
    expect(sameSecret("", ADMIN_TOKEN)).toBe(false)
    expect(sameSecret(ADMIN_TOKEN + "x", ADMIN_TOKEN)).toBe(false)
    expect(sameSecret("x".repeat(10_000), ADMIN_TOKEN)).toBe(false)
  })
})

describe("admin token throttling across replicas (Redis)", () => {
  let a: TestGateway
  let b: TestGateway
  beforeAll(async () => {
    const config = testConfig({ server: { host: "127.0.0.1", port: 0, trust_proxy: true }, redis: "redis://127.0.0.1:6379" })
    a = await startGateway(config)
    b = await startGateway(config)
  })
  afterAll(async () => {
    await a.close()
    await b.close()
  })

  it("shares one count per address: guesses spread over two replicas are refused at the 11th", async () => {
    const address = randomAddress()
    for (let i = 0; i < 10; i++) {
      const gw = i % 2 === 0 ? a : b
      expect((await fetch(`${gw.url}/workspace`, { headers: proxied(address, { authorization: `Bearer wrong-${i}` }) })).status).toBe(401)
    }
    for (const gw of [a, b]) {
      const limited = await fetch(`${gw.url}/workspace`, { headers: proxied(address, { authorization: `Bearer ${ADMIN_TOKEN}` }) })
      expect(limited.status).toBe(429)
      expect(Number(limited.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
    }
  })

  it("accepts a session cookie signed by the other replica", async () => {
    const { cookie, csrf } = await sessionOf(await signIn(a, ADMIN_TOKEN, proxied(randomAddress())))
    const read = await fetch(`${b.url}/workspace`, { headers: proxied(randomAddress(), { cookie }) })
    expect(read.status).toBe(200)
    const write = await fetch(`${b.url}/workspace/credits`, {
      method: "POST",
      headers: proxied(randomAddress(), { cookie, "x-csrf-token": csrf, "content-type": "application/json" }),
      body: JSON.stringify({ credits: 1 })
    })
    expect(write.status).toBe(200)
  })
})

describe("admin token throttling with Redis unreachable", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway(testConfig({ server: { host: "127.0.0.1", port: 0, trust_proxy: true }, redis: "redis://127.0.0.1:1" }))
  })
  afterAll(() => gw.close())

  it("keeps the admin API open to the right token and still throttles guesses, in this process", async () => {
    const address = randomAddress()
    expect((await fetch(`${gw.url}/workspace`, { headers: proxied(address, { authorization: `Bearer ${ADMIN_TOKEN}` }) })).status).toBe(200)
    for (let i = 0; i < 10; i++) {
      expect((await fetch(`${gw.url}/workspace`, { headers: proxied(address, { authorization: `Bearer wrong-${i}` }) })).status).toBe(401)
    }
    const limited = await fetch(`${gw.url}/workspace`, { headers: proxied(address, { authorization: `Bearer ${ADMIN_TOKEN}` }) })
    expect(limited.status).toBe(429)
    expect(limited.headers.get("retry-after")).not.toBeNull()
  })
})

describe("app session and CSRF", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway()
  })
  afterAll(() => gw.close())

  const topUp = (headers: Record<string, string>) =>
    fetch(`${gw.url}/workspace/credits`, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: JSON.stringify({ credits: 5 })
    })

  it("signs in for an HttpOnly, SameSite=Strict cookie with an expiry, and reports the session", async () => {
    const response = await signIn(gw, ADMIN_TOKEN)
    expect(response.status).toBe(201)
    expect(response.headers.get("cache-control")).toBe("no-store")
    const { setCookie, cookie, csrf, expiresAt } = await sessionOf(response)
    expect(setCookie).toMatch(/^mg_session=v1\.\d+\.[\w-]+\.[\w-]+; Path=\/; HttpOnly; SameSite=Strict; Max-Age=28800$/)
    expect(Date.parse(expiresAt) - Date.now()).toBeGreaterThan(7 * 3600 * 1000)
    expect(csrf).toMatch(/^[\w-]{43}$/)
    const session = await fetch(`${gw.url}/app/session`, { headers: { cookie } })
    expect(session.status).toBe(200)
    const view = await session.json() as { csrf_token: string; signed_in: boolean }
    expect(view.csrf_token).toBe(csrf)
    expect(view.signed_in).toBe(true)
    // No session is an answer the sign-in page asks on every load, not an error (no 401 in its console).
    const none = await fetch(`${gw.url}/app/session`)
    expect(none.status).toBe(200)
    expect(none.headers.get("cache-control")).toBe("no-store")
    expect(await none.json()).toEqual({ signed_in: false })
  })

  it("authenticates reads with the cookie alone and writes only with the CSRF token from the same origin", async () => {
    const { cookie, csrf } = await sessionOf(await signIn(gw, ADMIN_TOKEN))
    expect((await fetch(`${gw.url}/api-keys`, { headers: { cookie } })).status).toBe(200)

    const noToken = await topUp({ cookie })
    expect(noToken.status).toBe(403)
    expect((await noToken.json() as { error: string }).error).toBe("csrf_rejected")

    const wrongToken = await topUp({ cookie, "x-csrf-token": csrf.slice(0, -1) + (csrf.endsWith("A") ? "B" : "A") })
    expect(wrongToken.status).toBe(403)

    const foreignOrigin = await topUp({ cookie, "x-csrf-token": csrf, origin: "http://127.0.0.1:1" })
    expect(foreignOrigin.status).toBe(403)
    expect((await foreignOrigin.json() as { error: string }).error).toBe("csrf_rejected")

    const crossSite = await topUp({ cookie, "x-csrf-token": csrf, "sec-fetch-site": "cross-site" })
    expect(crossSite.status).toBe(403)

    const before = (await (await gw.admin("GET", "/workspace")).json() as { credits: number }).credits
    const ok = await topUp({ cookie, "x-csrf-token": csrf, origin: gw.url, "sec-fetch-site": "same-origin" })
    expect(ok.status).toBe(200)
    expect((await ok.json() as { credits: number }).credits).toBe(before + 5)

    // Another session's CSRF token does not fit this cookie.
    const other = await sessionOf(await signIn(gw, ADMIN_TOKEN))
    expect((await topUp({ cookie, "x-csrf-token": other.csrf })).status).toBe(403)
  })

  it("refuses a sign-in posted from another origin", async () => {
    const response = await signIn(gw, ADMIN_TOKEN, { origin: "http://evil.example" })
    expect(response.status).toBe(403)
    expect(response.headers.get("set-cookie")).toBeNull()
  })

  it("refuses a forged or tampered cookie with 401 and an expired one too", async () => {
    const { cookie } = await sessionOf(await signIn(gw, ADMIN_TOKEN))
    const [name, value] = cookie.split("=") as [string, string]
    const [v, expiry, nonce, mac] = value.split(".") as [string, string, string, string]
    const extended = `${name}=${v}.${Number(expiry) + 1_000_000}.${nonce}.${mac}`
    expect((await fetch(`${gw.url}/workspace`, { headers: { cookie: extended } })).status).toBe(401)
    expect((await fetch(`${gw.url}/workspace`, { headers: { cookie: `${name}=garbage` } })).status).toBe(401)
    // A cookie from a gateway with another admin token is a forgery here.
    const elsewhere = await startGateway(testConfig({ admin: { token: "another-admin-token-0123456789" } }))
    try {
      const foreign = await sessionOf(await signIn(elsewhere, "another-admin-token-0123456789"))
      expect((await fetch(`${gw.url}/workspace`, { headers: { cookie: foreign.cookie } })).status).toBe(401)
    } finally {
      await elsewhere.close()
    }
  })

  it("signs out: the cookie is cleared, with CSRF proof required", async () => {
    const { cookie, csrf } = await sessionOf(await signIn(gw, ADMIN_TOKEN))
    expect((await fetch(`${gw.url}/app/session`, { method: "DELETE", headers: { cookie } })).status).toBe(403)
    const out = await fetch(`${gw.url}/app/session`, { method: "DELETE", headers: { cookie, "x-csrf-token": csrf } })
    expect(out.status).toBe(204)
    expect(out.headers.get("set-cookie")).toBe("mg_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
  })

  it("serves the app with a strict Content-Security-Policy and hashed assets as immutable", async () => {
    const page = await fetch(`${gw.url}/app`)
    expect(page.status).toBe(200)
    const csp = page.headers.get("content-security-policy")!
    expect(csp).toContain("default-src 'none'")
    expect(csp).toContain("script-src 'self'")
    expect(csp).toContain("frame-ancestors 'none'")
    expect(csp).not.toContain("unsafe")
    const html = await page.text()
    // Nothing inline and nothing from another origin: every script and stylesheet is a same-origin file.
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/)
    expect(html).not.toMatch(/\bstyle=/)
    expect(html).not.toMatch(/(src|href)="https?:/)
    const asset = /src="(\/app\/assets\/[^"]+\.js)"/.exec(html)![1]!
    const js = await fetch(gw.url + asset)
    expect(js.status).toBe(200)
    expect(js.headers.get("cache-control")).toContain("immutable")
    expect(js.headers.get("content-type")).toContain("text/javascript")
    expect((await fetch(`${gw.url}/app/assets/missing.js`)).status).toBe(404)
    // Client-side routes get the page.
    expect((await fetch(`${gw.url}/app/keys`)).headers.get("content-type")).toContain("text/html")
  })
})
