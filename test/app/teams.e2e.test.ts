/**
 * The Teams page in Chromium (issue 33): create a team with a budget in credits and shared
 * limits, an API error shown next to its field, a key put in the team from the key form (and
 * what the key may then use), the key count, the refusal to delete a team with keys, edit, and
 * delete once the key has left.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { join } from "node:path"
import type { Page } from "playwright-core"
import { HAS_CHROMIUM, openBrowser, prepareApp, SHOTS, type TestBrowser } from "../support/browser.ts"
import { ADMIN_TOKEN, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

// Evaluated in the page, where these exist.
declare const document: any, getComputedStyle: any

describe.skipIf(!HAS_CHROMIUM)("teams page in Chromium", () => {
  let gw: TestGateway
  let browser: TestBrowser
  let page: Page
  let teamId = ""
  let key = ""

  beforeAll(async () => {
    prepareApp()
    gw = await startGateway(testConfig({
      providers: [{ name: "echo", kind: "echo" }],
      models: [
        { alias: "free", id: "echo-free", provider: "echo", credits: 0 },
        { alias: "other", id: "echo-other", provider: "echo", credits: 0 }
      ]
    }))
    browser = await openBrowser({ timeoutMs: 8000 })
    page = browser.page
  }, 60_000)

  afterAll(async () => {
    await browser?.close()
    await gw?.close()
  })

  const shot = (name: string) => page.screenshot({ path: join(SHOTS, `teams-${name}.png`), fullPage: true })
  const teamRow = () => page.locator(`tr[data-team-id='${teamId}']`)
  const chat = (model: string) =>
    fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
      body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }] })
    })

  it("signs in and opens an empty Teams page from the navigation", async () => {
    await page.goto(`${gw.url}/app#/keys`)
    await page.getByLabel("Admin token").fill(ADMIN_TOKEN)
    await page.getByRole("button", { name: "Sign in" }).click()
    await page.getByRole("heading", { level: 1, name: "API keys" }).waitFor()
    await page.getByRole("navigation", { name: "Sections" }).getByRole("link", { name: "Teams" }).click()
    await page.getByRole("heading", { level: 1, name: "Teams" }).waitFor()
    await page.getByText("No teams yet").waitFor()
  })

  it("shows an API error next to the field it names, then creates the team", async () => {
    await page.getByRole("button", { name: "Create team" }).click()
    const dialog = page.getByRole("dialog", { name: "Create a team" })
    await dialog.getByLabel("Name").fill("platform")
    await dialog.getByLabel("Credits").fill("0.0000001")
    await dialog.getByRole("button", { name: "Create team" }).click()
    const error = dialog.locator(".field.has-error", { has: page.getByLabel("Credits") }).locator(".field-error")
    await error.waitFor()
    expect(await error.textContent()).toContain("six fractional digits")

    await dialog.getByLabel("Credits").fill("250.5")
    await dialog.getByLabel("Period").selectOption("month")
    await dialog.getByLabel("Allowed models").fill("free")
    await dialog.getByLabel("Requests per minute").fill("30")
    await dialog.getByLabel("Concurrent streams").fill("2")
    await shot("01-create-form")
    await dialog.getByRole("button", { name: "Create team" }).click()
    await page.getByRole("status").getByText("Created “platform”.").waitFor()
    const created = (await (await gw.admin("GET", "/teams")).json() as any).data[0]
    teamId = created.id
    expect(created).toMatchObject({
      name: "platform",
      budget: { max_credits: 250.5, max_requests: null, period: "month" },
      limits: { requests_per_minute: 30, concurrent_streams: 2 },
      allowed_models: ["free"]
    })
    await teamRow().waitFor()
    // The budget as bars of what its keys used this period: none yet.
    expect(await teamRow().textContent()).toContain("0 / 250.5 credits")
    expect(await teamRow().textContent()).toContain("per month")
    expect(await teamRow().locator("[data-label='Keys']").textContent()).toBe("0")
  })

  it("puts a key in the team from the key form; the team's models then narrow the key's", async () => {
    await page.getByRole("link", { name: "API keys" }).click()
    await page.getByRole("heading", { level: 1, name: "API keys" }).waitFor()
    await page.getByRole("button", { name: "Create key" }).click()
    const dialog = page.getByRole("dialog", { name: "Create an API key" })
    await dialog.getByLabel("Name").fill("dev")
    await dialog.getByLabel("Team").selectOption({ label: "platform" })
    await dialog.getByRole("button", { name: "Create key" }).click()
    const shown = page.getByRole("dialog", { name: "Key created" })
    key = await shown.getByLabel("Key for “dev”").inputValue()
    await shown.getByRole("button", { name: "I have copied it" }).click()
    await page.locator("tr[data-key-id]", { hasText: "team platform" }).waitFor()
    expect((await chat("free")).status).toBe(200)
    expect((await chat("other")).status).toBe(403)

    await page.getByRole("link", { name: "Teams" }).click()
    await teamRow().waitFor()
    expect(await teamRow().locator("[data-label='Keys']").textContent()).toBe("1")
    await shot("02-list")
  })

  it("fits a phone's width: no sideways scroll, no label over an empty cell", async () => {
    await page.setViewportSize({ width: 375, height: 812 })
    await page.waitForLoadState("networkidle")
    expect(await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth)).toBeLessThanOrEqual(0)
    const emptyLabels = await page.evaluate(() =>
      [...document.querySelectorAll("table.cards td[data-label]")]
        .filter((td: any) => getComputedStyle(td).display !== "none" && td.textContent.trim() === "")
        .map((td: any) => td.dataset.label)
    )
    expect(emptyLabels).toEqual([])
    await shot("03-phone")
    await page.setViewportSize({ width: 1280, height: 800 })
  })

  it("refuses to delete a team with keys, with the API's message; edits the team", async () => {
    await page.getByRole("button", { name: "Delete platform" }).click()
    const dialog = page.getByRole("dialog", { name: "Delete “platform”?" })
    await dialog.getByRole("button", { name: "Delete team" }).click()
    await dialog.getByRole("alert").waitFor()
    expect(await dialog.getByRole("alert").textContent()).toContain("still has 1 key")
    await dialog.getByRole("button", { name: "Cancel" }).click()

    await page.getByRole("button", { name: "Edit platform" }).click()
    const edit = page.getByRole("dialog", { name: "Edit “platform”" })
    expect(await edit.getByLabel("Credits").inputValue()).toBe("250.5")
    await edit.getByLabel("Allowed models").fill("")
    await edit.getByRole("button", { name: "Save changes" }).click()
    await page.getByRole("status").getByText("Saved “platform”.").waitFor()
    // The list is read again after the save: wait for the row to show it, not for the message.
    await teamRow().locator("[data-label='Models']", { hasText: /^all$/ }).waitFor()
    expect((await chat("other")).status).toBe(200)
  })

  it("deletes the team once its key has left it", async () => {
    await page.getByRole("link", { name: "API keys" }).click()
    await page.getByRole("button", { name: "Edit dev" }).click()
    const dialog = page.getByRole("dialog", { name: "Edit “dev”" })
    expect(await dialog.getByLabel("Team").inputValue()).toBe(teamId)
    await dialog.getByLabel("Team").selectOption({ label: "No team" })
    await dialog.getByRole("button", { name: "Save changes" }).click()
    await page.getByRole("status").getByText("Saved “dev”.").waitFor()

    await page.getByRole("link", { name: "Teams" }).click()
    await page.getByRole("button", { name: "Delete platform" }).click()
    await page.getByRole("dialog", { name: "Delete “platform”?" }).getByRole("button", { name: "Delete team" }).click()
    await page.getByRole("status").getByText("Deleted “platform”.").waitFor()
    await page.getByText("No teams yet").waitFor()
    expect((await gw.admin("GET", `/teams/${teamId}`)).status).toBe(404)
    expect(browser.pageErrors).toEqual([])
  })
})
