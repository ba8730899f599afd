/**
 * The keys page in Chromium with 50,000 keys in the store (issue 31, item 7): it shows one page
 * of rows, not all of them, soon after it opens; a search by name finds one key; the status
 * filter and Next/Previous walk the list by the admin API's cursor.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { join } from "node:path"
import type { Page } from "playwright-core"
import { bulkKey, insertBulkKeys } from "../support/bulk-keys.ts"
import { HAS_CHROMIUM, openBrowser, prepareApp, SHOTS, type TestBrowser } from "../support/browser.ts"
import { ADMIN_TOKEN, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

const COUNT = 50_000
/** The page size of the keys list (app/src/keys.tsx KEYS_PAGE_SIZE). */
const PAGE = 50
const NEEDLE = { i: 31_337, name: "Needle in the haystack" }

describe.skipIf(!HAS_CHROMIUM)("keys page with 50,000 keys in Chromium", () => {
  let gw: TestGateway
  let browser: TestBrowser
  let page: Page

  beforeAll(async () => {
    prepareApp()
    gw = await startGateway(testConfig())
    await insertBulkKeys(gw, COUNT, (i) => (i === NEEDLE.i ? NEEDLE.name : undefined))
    browser = await openBrowser({ timeoutMs: 10_000 })
    page = browser.page
  }, 120_000)

  afterAll(async () => {
    await browser?.close()
    await gw?.close()
  })

  const rows = () => page.locator("tr[data-key-id]")
  const rowIds = () => rows().evaluateAll((trs) => trs.map((tr) => tr.getAttribute("data-key-id")))
  /** Keys i, i-1, ...: the list is newest first, and a higher i is never older. */
  const idsFrom = (top: number, count: number) => Array.from({ length: count }, (_, n) => bulkKey(top - n).id)

  it("opens on the first page of rows, not all 50,000", async () => {
    await page.goto(`${gw.url}/app#/keys`)
    await page.getByLabel("Admin token").fill(ADMIN_TOKEN)
    // What the page fetched, not how long it took (a clock bound fails on a busy machine): the
    // list came a page at a time. Before pages, all 3,001 keys came in one answer.
    const listed: Array<number> = []
    const onResponse = async (response: { url: () => string; json: () => Promise<any> }) => {
      if (!new URL(response.url()).pathname.endsWith("/api-keys")) return
      listed.push(((await response.json()) as { data: Array<unknown> }).data.length)
    }
    page.on("response", onResponse)
    await page.getByRole("button", { name: "Sign in" }).click()
    await page.locator(`tr[data-key-id='${bulkKey(COUNT - 1).id}']`).waitFor()
    expect(await rows().count()).toBe(PAGE)
    expect(await rowIds()).toEqual(idsFrom(COUNT - 1, PAGE))
    await expect.poll(() => listed.length).toBeGreaterThan(0)
    page.off("response", onResponse)
    expect(Math.max(...listed)).toBe(PAGE)
    await page.screenshot({ path: join(SHOTS, "key-list-50k.png") })
  })

  it("pages forward and back by cursor, one page of rows at a time", async () => {
    await page.getByRole("button", { name: "Next" }).click()
    await page.locator(`tr[data-key-id='${bulkKey(COUNT - 1 - PAGE).id}']`).waitFor()
    expect(await rowIds()).toEqual(idsFrom(COUNT - 1 - PAGE, PAGE))
    await page.getByText("Page 2").waitFor()
    await page.getByRole("button", { name: "Next" }).click()
    await page.locator(`tr[data-key-id='${bulkKey(COUNT - 1 - 2 * PAGE).id}']`).waitFor()
    expect(await rows().count()).toBe(PAGE)
    await page.getByRole("button", { name: "Previous" }).click()
    await page.locator(`tr[data-key-id='${bulkKey(COUNT - 1 - PAGE).id}']`).waitFor()
    expect(await rowIds()).toEqual(idsFrom(COUNT - 1 - PAGE, PAGE))
  })

  it("finds one key by a piece of its name, and filters by status", async () => {
    await page.getByLabel("Name contains").fill("needle IN")
    await page.locator(`tr[data-key-id='${bulkKey(NEEDLE.i).id}']`).waitFor()
    await page.waitForFunction((n) => document.querySelectorAll("tr[data-key-id]").length === n, 1)
    expect(await rowIds()).toEqual([bulkKey(NEEDLE.i).id])
    // A new search starts at the first page, with nothing after it.
    await expect.poll(() => page.getByRole("navigation", { name: "Pages of keys" }).count()).toBe(0)

    await page.getByLabel("Name contains").fill("")
    await page.getByLabel("Status").selectOption("inactive")
    // Every tenth key is revoked: the newest of them is key 49,990.
    await page.locator(`tr[data-key-id='${bulkKey(49_990).id}']`).waitFor()
    await page.waitForFunction(() => document.querySelectorAll("tr[data-key-id]").length === 50)
    expect(await rowIds()).toEqual(Array.from({ length: PAGE }, (_, n) => bulkKey(49_990 - 10 * n).id))
    await page.getByLabel("Name contains").fill("no such key")
    await page.getByText("No keys match.").waitFor()
    expect(browser.pageErrors).toEqual([])
  })
})

// Runs inside the page (waitForFunction); the test program itself has no DOM types.
declare const document: any
