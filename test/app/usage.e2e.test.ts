/**
 * The Usage page in Chromium against a gateway whose model has an alias: the page names models
 * as the key form and the ledger do (the configured name, not the upstream id), and each series
 * keeps its colour when the measure changes.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { Page } from "playwright-core"
import { HAS_CHROMIUM, openBrowser, prepareApp, type TestBrowser } from "../support/browser.ts"
import { ADMIN_TOKEN, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

const chat = (gw: TestGateway, key: string, model: string) =>
  fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content: "one two three" }] })
  })

describe.skipIf(!HAS_CHROMIUM)("Usage page in Chromium", () => {
  let gw: TestGateway
  let browser: TestBrowser
  let page: Page

  beforeAll(async () => {
    prepareApp()
    gw = await startGateway(testConfig({
      models: [
        { alias: "paid", id: "echo-paid", provider: "echo", credits: 2 },
        { alias: "cheap", id: "echo-cheap", provider: "echo", credits: 1 }
      ]
    }))
    const a = await gw.createKey({ name: "alpha" })
    const b = await gw.createKey({ name: "beta" })
    // Different shapes per measure: alpha leads on requests, beta on credits.
    for (let i = 0; i < 3; i++) expect((await chat(gw, a.key, "cheap")).status).toBe(200)
    for (let i = 0; i < 2; i++) expect((await chat(gw, b.key, "paid")).status).toBe(200)
    browser = await openBrowser({ timeoutMs: 8000 })
    page = browser.page
  }, 60_000)

  afterAll(async () => {
    await browser?.close()
    await gw?.close()
  })

  it("names models by their configured names and keeps each series' colour across measures", async () => {
    await page.goto(`${gw.url}/app#/usage`)
    await page.getByLabel("Admin token").fill(ADMIN_TOKEN)
    await page.getByRole("button", { name: "Sign in" }).click()
    await page.getByRole("heading", { level: 1, name: "Usage" }).waitFor()
    const totals = page.getByRole("table", { name: "Usage totals by key and model" })
    await totals.locator("tr", { hasText: "alpha" }).waitFor()
    expect(await totals.locator("tr", { hasText: "alpha" }).locator("td[data-label='Model']").textContent()).toBe("cheap")
    expect(await totals.locator("tr", { hasText: "beta" }).locator("td[data-label='Model']").textContent()).toBe("paid")
    expect(await totals.textContent()).not.toContain("echo-")

    const seriesOf = async () => {
      const figures = page.locator("figure.chart")
      // Workspace, by key, by model, by provider.
      await expect.poll(() => figures.count()).toBe(4)
      const parse = (attr: string | null) => Object.fromEntries((attr ?? "").split(";").map((p) => p.split("=")))
      return { byKey: parse(await figures.nth(1).getAttribute("data-series")), byModel: parse(await figures.nth(2).getAttribute("data-series")) }
    }
    const byRequests = await seriesOf()
    expect(Object.keys(byRequests.byModel).sort()).toEqual(["cheap", "paid"])
    expect(byRequests.byKey.alpha).not.toBe(byRequests.byKey.beta)
    await page.getByLabel("Measure").selectOption("credits")
    await page.getByText("Credits per day, by key").waitFor()
    expect(await seriesOf()).toEqual(byRequests)
    expect(browser.pageErrors).toEqual([])
  })
})
