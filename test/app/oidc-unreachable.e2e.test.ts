/**
 * "Sign in with <IdP>" when the identity provider cannot be reached (discovery fails): the
 * browser stays on the gateway and the sign-in page says why, instead of landing on a page
 * that does not load.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createServer } from "node:net"
import { HAS_CHROMIUM, openBrowser, prepareApp, type TestBrowser } from "../support/browser.ts"
import { ADMIN_TOKEN, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

/** A loopback port nothing listens on: taken, then freed. */
const closedPort = () =>
  new Promise<number>((resolve) => {
    const server = createServer()
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number }
      server.close(() => resolve(port))
    })
  })

describe.skipIf(!HAS_CHROMIUM)("identity-provider sign-in, provider unreachable", () => {
  let gw: TestGateway
  let browser: TestBrowser

  beforeAll(async () => {
    prepareApp()
    const port = await closedPort()
    gw = await startGateway(testConfig({
      admin: {
        token: ADMIN_TOKEN,
        oidc: {
          issuer: `http://127.0.0.1:${port}`,
          name: "Gone IdP",
          client_id: "gateway",
          client_secret: "s3cret-s3cret-s3cret",
          admin_claim: { claim: "groups", includes: "gateway-admins" }
        }
      }
    }))
    browser = await openBrowser({ timeoutMs: 15_000 })
  }, 60_000)

  afterAll(async () => {
    await browser?.close()
    await gw?.close()
  })

  it("shows an in-app error and stays on the gateway", async () => {
    const { page } = browser
    await page.goto(`${gw.url}/app`)
    await page.getByRole("link", { name: "Sign in with Gone IdP" }).click()
    const refusal = page.getByRole("alert")
    await refusal.waitFor()
    expect(await refusal.textContent()).toContain("could not be reached")
    expect(new URL(page.url()).origin).toBe(gw.url)
    expect(new URL(page.url()).search).toBe("")
    // The admin token still works from the same page.
    await page.getByLabel("Admin token").fill(ADMIN_TOKEN)
    await page.getByRole("button", { name: "Sign in" }).click()
    await page.getByRole("heading", { level: 1, name: "API keys" }).waitFor()
    expect(browser.pageErrors).toEqual([])
  })
})
