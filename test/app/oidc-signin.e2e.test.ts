/**
 * The admin app's identity-provider sign-in in a real browser: Debian's Chromium (playwright-core)
 * against the real gateway (port 0, SQLite in memory) and a real OpenID provider
 * (test/support/oidc-issuer.ts, its development sign-in pages). The steps share one browser and
 * run in order: an admin signs in and lands on the app signed in; sign out; someone who is not an
 * admin is refused with the app's own sentence; a callback whose state was tampered with is
 * refused. Screenshots go to test-results/app/ next to the main app suite's.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { join } from "node:path"
import type { BrowserContext, Page } from "playwright-core"
import { HAS_CHROMIUM, openBrowser, prepareApp, SHOTS, type TestBrowser } from "../support/browser.ts"
import { ADMIN_TOKEN, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { startTestIssuer, type TestIssuer } from "../support/oidc-issuer.ts"


describe.skipIf(!HAS_CHROMIUM)("admin app sign-in through an identity provider, in Chromium", () => {
  let issuer: TestIssuer
  let gw: TestGateway
  let browser: TestBrowser
  let context: BrowserContext
  let page: Page
  let pageErrors: Array<string> = []

  const shot = (name: string) => page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true })

  /** The provider's development pages: any login name is accepted and becomes the subject; then consent. */
  const signInAtProvider = async (login: string) => {
    await page.waitForURL((url) => url.origin === issuer.issuer)
    await page.locator("input[name=login]").fill(login)
    await page.locator("input[name=password]").fill("any password")
    await page.locator("button[type=submit]").click()
    const consent = page.locator("input[name=prompt][value=consent]")
    await consent.waitFor({ state: "attached" })
    await page.locator("button[type=submit]").click()
  }

  const forgetProviderSession = () => context.clearCookies({ name: /^_/ })

  beforeAll(async () => {
    prepareApp()
    issuer = await startTestIssuer()
    gw = await startGateway(testConfig({
      admin: {
        token: ADMIN_TOKEN,
        oidc: {
          issuer: issuer.issuer,
          name: "Test IdP",
          client_id: issuer.client.client_id,
          client_secret: issuer.client.client_secret,
          scopes: ["openid", "email", "profile", "groups"],
          admin_claim: { claim: "groups", includes: "gateway-admins" }
        }
      }
    }))
    issuer.client.redirect_uris.push(`${gw.url}/app/oidc/callback`)
    issuer.setAccountClaims("alice", { groups: ["gateway-admins"], email: "alice@example.com" })
    issuer.setAccountClaims("bob", { groups: ["staff"], email: "bob@example.com" })
    browser = await openBrowser({ timeoutMs: 10_000 })
    ;({ context, page, pageErrors } = browser)
  }, 60_000)

  afterAll(async () => {
    await browser?.close()
    await gw?.close()
    await issuer?.close()
  })

  it("offers the identity provider next to the admin-token form, and signs an admin in", async () => {
    await page.goto(`${gw.url}/app`)
    const button = page.getByRole("link", { name: "Sign in with Test IdP" })
    await button.waitFor()
    expect(await page.getByLabel("Admin token").isVisible()).toBe(true)
    await shot("oidc-01-sign-in-options")
    await button.click()
    await signInAtProvider("alice")
    await page.getByRole("heading", { level: 1, name: "API keys" }).waitFor()
    expect(new URL(page.url()).pathname).toBe("/app")
    expect(await page.locator(".signed-in-as").textContent()).toBe("alice@example.com")
    const cookies = await context.cookies(gw.url)
    expect(cookies.find((c) => c.name === "mg_session")).toMatchObject({ httpOnly: true, sameSite: "Strict", path: "/" })
    // The flow is over: its cookie is gone, and the browser holds no token of the provider's.
    expect((await context.cookies(`${gw.url}/app/oidc/callback`)).find((c) => c.name === "mg_oidc_flow")).toBeUndefined()
    expect(JSON.stringify(await page.evaluate("JSON.stringify({ ...localStorage, ...sessionStorage })"))).not.toMatch(/eyJ/)
    await shot("oidc-02-signed-in")
  })

  it("works as a session like the admin token's: a write goes through with the app's CSRF token", async () => {
    await page.getByRole("navigation", { name: "Sections" }).getByRole("link", { name: "Credits" }).click()
    await page.getByRole("heading", { level: 1, name: "Credits" }).waitFor()
    await page.getByLabel("Credits", { exact: true }).fill("7")
    await page.getByLabel("Note").fill("by alice")
    await page.getByRole("button", { name: "Add credits" }).click()
    await page.getByRole("table").getByText("by alice").waitFor()
    const response = await gw.admin("GET", "/workspace")
    expect((await response.json() as { credits: number }).credits).toBe(1007)
    await page.getByRole("button", { name: "Sign out" }).click()
    await page.getByRole("link", { name: "Sign in with Test IdP" }).waitFor()
  })

  it("refuses someone whose claims do not name an admin, with the app's own sentence", async () => {
    // The provider remembers alice's sign-in in its own cookies (all named `_...`); forget it so
    // that its login page asks again.
    await forgetProviderSession()
    await page.getByRole("link", { name: "Sign in with Test IdP" }).click()
    await signInAtProvider("bob")
    const refusal = page.getByRole("alert")
    await refusal.waitFor()
    expect(await refusal.textContent()).toContain("not an admin of this gateway")
    // The code is read once and removed from the address bar.
    expect(new URL(page.url()).search).toBe("")
    expect((await context.cookies(gw.url)).find((c) => c.name === "mg_session")).toBeUndefined()
    await shot("oidc-03-not-an-admin")
  })

  it("refuses a callback whose state was tampered with", async () => {
    await forgetProviderSession()
    await page.goto(`${gw.url}/app`)
    // The gateway's redirect to the provider is answered as it is (flow cookie included) but with
    // one character of its state changed, so the provider hands the tampered state back.
    await page.route(`${gw.url}/app/oidc/start`, async (route) => {
      const response = await route.fetch({ maxRedirects: 0 })
      const location = new URL(response.headers()["location"]!)
      const state = location.searchParams.get("state")!
      location.searchParams.set("state", `${state.slice(0, -1)}${state.endsWith("A") ? "B" : "A"}`)
      await route.fulfill({ response, headers: { ...response.headers(), location: location.toString() } })
    })
    await page.getByRole("link", { name: "Sign in with Test IdP" }).click()
    await page.waitForURL((url) => url.origin === issuer.issuer)
    // This browser's flow is in progress: the refusal below is the state's doing, not a missing cookie.
    expect((await context.cookies(`${gw.url}/app/oidc/callback`)).map((c) => c.name)).toContain("mg_oidc_flow")
    await signInAtProvider("alice")
    await page.unroute(`${gw.url}/app/oidc/start`)
    const refusal = page.getByRole("alert")
    await refusal.waitFor()
    expect(await refusal.textContent()).toContain("could not be verified")
    expect((await context.cookies(gw.url)).find((c) => c.name === "mg_session")).toBeUndefined()
    await shot("oidc-04-tampered-state")
  })

  it("had no script errors and no 5xx", () => {
    expect(pageErrors).toEqual([])
  })
})
