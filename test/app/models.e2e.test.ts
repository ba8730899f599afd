/**
 * The Models page in Chromium (issue 31): every model and route with its price and deployments,
 * a deployment cooling down with the time it ends and its cause, recent errors, and Refresh
 * picking up a deployment that started failing after the page loaded. Screenshots go to
 * test-results/app/.
 */
import { join } from "node:path"
import type { Page } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ProviderError } from "../../src/domain/errors.ts"
import { scriptedProviders } from "../../src/services/providers/scripted.ts"
import type { ChatResponse } from "../../src/wire/openai-chat.ts"
import { HAS_CHROMIUM, openBrowser, prepareApp, SHOTS, type TestBrowser } from "../support/browser.ts"
import { ADMIN_TOKEN, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { chatCompletion } from "../support/chat-answers.ts"

const completion = chatCompletion("ok", { id: "chatcmpl-r", usage: [1, 1] })

const PROVIDERS = ["east", "west", "north", "south"]

describe.skipIf(!HAS_CHROMIUM)("Models page in Chromium", () => {
  /** Providers failing now, with the upstream status they answer. */
  const broken = new Map<string, number>([["east", 429]])
  const scripted = scriptedProviders(PROVIDERS.map((name) => ({ name, kind: "openai" as const })), {
    openai: (call) => {
      const status = broken.get(call.provider)
      return status === undefined
        ? { respond: completion }
        : { fail: new ProviderError({ message: "down", details: { provider: call.provider, upstream_status: status, upstream_error: { message: "down" } } }) }
    }
  })
  let gw: TestGateway
  let browser: TestBrowser
  let page: Page
  let key = ""

  const chat = async (model: string) =>
    (await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }] })
    })).status
  /** Requests to `model` until `provider` was sent one (the router's choice is weighted random). */
  const untilCalled = async (model: string, provider: string) => {
    for (let i = 0; i < 200 && !scripted.calls.some((c) => c.provider === provider); i++) expect(await chat(model)).toBe(200)
    expect(scripted.calls.some((c) => c.provider === provider)).toBe(true)
  }

  beforeAll(async () => {
    prepareApp()
    gw = await startGateway(
      testConfig({
        limits: { requests_per_minute: 100_000 },
        routing: { cooldown_seconds: 120, backoff_ms: 1, allowed_fails: 0 },
        providers: PROVIDERS.map((name) => ({ name, kind: "openai", base_url: "http://scripted.invalid/v1", api_key: "sk-not-for-the-page" })),
        models: [
          { alias: "smart", id: "smart-model", deployments: [{ provider: "east" }, { provider: "west", id: "smart-west" }], credits: 9, max_tokens: 4096, fallbacks: ["cheap"] },
          { alias: "cheap", id: "cheap-model", deployments: [{ provider: "north" }, { provider: "south" }], credits: 1, max_tokens: 1024 },
          { match: "open-*", provider: "south", credits: 2, max_tokens: 512 }
        ]
      }),
      { providers: scripted.layer }
    )
    key = (await gw.createKey()).key
    await untilCalled("smart", "east")
    browser = await openBrowser({ timeoutMs: 8000 })
    page = browser.page
  }, 60_000)

  afterAll(async () => {
    await browser?.close()
    await gw?.close()
  })

  const row = (deployment: string) => page.locator(`tr[data-deployment="${deployment}"]`)

  it("lists the models with price and deployments, and a cooling deployment with its end and cause", async () => {
    await page.goto(`${gw.url}/app#/models`)
    await page.getByLabel("Admin token").fill(ADMIN_TOKEN)
    await page.getByRole("button", { name: "Sign in" }).click()
    await page.getByRole("heading", { level: 1, name: "Models" }).waitFor()
    await page.getByRole("heading", { level: 2, name: "smart" }).waitFor()
    expect(await page.getByRole("heading", { level: 2 }).allTextContents()).toEqual(["smart", "cheap", "Route open-*"])
    const smart = page.getByRole("region", { name: "smart" })
    expect(await smart.locator(".facts").textContent()).toContain("9 credits a request")
    expect(await smart.locator(".facts").textContent()).toContain("cheap")

    const cooling = row("east/smart-model")
    expect(await cooling.locator("td[data-label='Status'] .badge").textContent()).toBe("cooling down")
    const why = (await cooling.locator(".status-why").textContent())!
    expect(why).toMatch(/^until \d{2}:\d{2}:\d{2} because “upstream 429”$/)
    // The time shown is the cooldown's end, in the browser's zone (Chromium runs in the machine's).
    const until = await cooling.locator("time").getAttribute("datetime")
    expect(Date.parse(until!)).toBeGreaterThan(Date.now() + 60_000)
    expect(await cooling.locator("td[data-label='Last 5 min']").textContent()).toContain("upstream 429: 1")
    expect(await row("west/smart-west").locator(".badge").textContent()).toBe("healthy")
    expect(await page.textContent("main")).not.toContain("sk-not-for-the-page")
    expect(await page.getByTestId("routing-source").textContent()).toContain("this replica's")
    await page.screenshot({ path: join(SHOTS, "models-cooling.png"), fullPage: true })
  })

  it("Refresh shows a deployment that started failing after the page loaded", async () => {
    expect(await row("north/cheap-model").locator(".badge").textContent()).toBe("healthy")
    broken.set("north", 503)
    await untilCalled("cheap", "north")
    await page.getByRole("button", { name: "Refresh" }).click()
    await expect.poll(() => row("north/cheap-model").locator(".badge").textContent()).toBe("cooling down")
    expect(await row("north/cheap-model").locator(".status-why").textContent()).toContain("“upstream 503”")
    // A route's deployment appears once a name it matches was served.
    expect(await chat("open-one")).toBe(200)
    await page.getByRole("button", { name: "Refresh" }).click()
    await row("south/open-one").waitFor()
    expect(await row("south/open-one").locator(".badge").textContent()).toBe("healthy")
    await page.setViewportSize({ width: 375, height: 800 })
    await page.screenshot({ path: join(SHOTS, "models-phone.png"), fullPage: true })
    await page.setViewportSize({ width: 1280, height: 800 })
    expect(browser.pageErrors).toEqual([])
  })
})
