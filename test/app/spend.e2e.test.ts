/**
 * The Spend page in Chromium (issue 33): spend per day by team, key, model and end user, the top
 * spenders, money when `credits.currency` is set, and the report as a CSV download.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { Page } from "playwright-core"
import { join } from "node:path"
import { HAS_CHROMIUM, openBrowser, prepareApp, SHOTS, type TestBrowser } from "../support/browser.ts"
import { ADMIN_TOKEN, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

const chat = (gw: TestGateway, key: string, model: string, user: string) =>
  fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, user, messages: [{ role: "user", content: "one two three" }] })
  })

describe.skipIf(!HAS_CHROMIUM)("Spend page in Chromium", () => {
  let gw: TestGateway
  let browser: TestBrowser
  let page: Page

  beforeAll(async () => {
    prepareApp()
    gw = await startGateway(testConfig({
      workspace: { credits: 1000 },
      credits: { currency: { code: "USD", per_credit: "0.5" } },
      models: [
        { alias: "paid", id: "echo-paid", provider: "echo", credits: 2 },
        { alias: "cheap", id: "echo-cheap", provider: "echo", credits: 1 }
      ]
    }))
    const a = await gw.createKey({ name: "alpha" })
    const b = await gw.createKey({ name: "beta" })
    for (let i = 0; i < 3; i++) expect((await chat(gw, a.key, "cheap", "ann")).status).toBe(200)
    for (let i = 0; i < 2; i++) expect((await chat(gw, b.key, "paid", "=cmd|' /C calc'!A0")).status).toBe(200)
    browser = await openBrowser({ timeoutMs: 8000 })
    page = browser.page
  }, 60_000)

  afterAll(async () => {
    await browser?.close()
    await gw?.close()
  })

  it("charts spend by team, key, model and end user, ranks the top spenders in money, and downloads the CSV", async () => {
    await page.goto(`${gw.url}/app#/spend`)
    await page.getByLabel("Admin token").fill(ADMIN_TOKEN)
    await page.getByRole("button", { name: "Sign in" }).click()
    await page.getByRole("heading", { level: 1, name: "Spend" }).waitFor()
    await page.getByText("Spend in USD at 0.5 per credit").waitFor()

    const figures = page.locator("figure.chart")
    await expect.poll(() => figures.count()).toBe(4)
    expect(await figures.nth(1).getAttribute("data-series")).toBe("beta;alpha")
    expect(await figures.nth(2).getAttribute("data-series")).toBe("paid;cheap")

    // beta: 2 requests at 2 credits = 4 credits = $2.00; alpha: 3 at 1 = 3 credits = $1.50.
    const byKey = page.getByRole("table", { name: "Top spenders by key" })
    await byKey.locator("tr", { hasText: "beta" }).waitFor()
    const rowOf = (name: string) => byKey.locator("tr", { hasText: name })
    expect(await rowOf("beta").locator("td[data-label='Credits']").textContent()).toBe("4")
    expect(await rowOf("beta").locator("td[data-label='Cost']").textContent()).toContain("2.00")
    expect(await rowOf("alpha").locator("td[data-label='Cost']").textContent()).toContain("1.50")
    const firstKey = await byKey.locator("tbody tr").first().locator("th").textContent()
    expect(firstKey).toBe("beta")

    const byUser = page.getByRole("table", { name: "Top spenders by end user" })
    await byUser.locator("tr", { hasText: "ann" }).waitFor()
    expect(await byUser.locator("tr", { hasText: "ann" }).locator("td[data-label='Requests']").textContent()).toBe("3")
    const byTeam = page.getByRole("table", { name: "Top spenders by team" })
    expect(await byTeam.locator("tbody tr").first().locator("th").textContent()).toBe("no team")

    await page.screenshot({ path: join(SHOTS, "spend.png"), fullPage: true })

    // The CSV link serves the same report, with the session cookie, as a file.
    const href = await page.getByRole("link", { name: "Download CSV" }).getAttribute("href")
    const csv = await page.evaluate(async (url) => {
      const response = await fetch(url!, { credentials: "same-origin" })
      return { status: response.status, type: response.headers.get("content-type"), text: await response.text() }
    }, href)
    expect(csv.status).toBe(200)
    expect(csv.type).toContain("text/csv")
    expect(csv.text.split("\r\n")[0]).toBe("day,team_id,key_id,model,end_user,requests,errors,credits,input_tokens,output_tokens,cache_read_tokens,cache_write_tokens,cost,currency")
    // An end user a spreadsheet would run as a command stays text.
    expect(csv.text).toContain(`,'=cmd|' /C calc'!A0,`)
    expect(csv.text).not.toContain(`,=cmd`)
    expect(browser.pageErrors).toEqual([])
  })
})
