/**
 * Headless Chromium for the admin app's browser suites: Debian's Chromium driven by
 * playwright-core (a browser download does not work on these machines; .ci/run installs the
 * package). The flags keep it off the network: without them it tries Google's hosts at every start.
 */
import { execFileSync } from "node:child_process"
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { type BrowserContext, chromium, type Page } from "playwright-core"
import { APP_DIST } from "../../src/http/routes/app.ts"

export const CHROMIUM = "/usr/bin/chromium"
export const HAS_CHROMIUM = existsSync(CHROMIUM)
export const SHOTS = join(import.meta.dirname, "../../test-results/app")

const FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync"
]

const ROOT = join(import.meta.dirname, "../..")

/** The admin app built (npm ci's `prepare` builds it; a checkout without it builds it here), and a folder for screenshots. */
export const prepareApp = () => {
  if (!existsSync(join(APP_DIST, "index.html"))) {
    execFileSync(join(ROOT, "node_modules/.bin/vite"), ["build", "--config", "app/vite.config.ts"], { cwd: ROOT, stdio: "inherit" })
  }
  mkdirSync(SHOTS, { recursive: true })
}

export interface TestBrowser {
  readonly context: BrowserContext
  readonly page: Page
  /** Script errors and 5xx answers seen by the page: a suite ends by expecting none. */
  readonly pageErrors: Array<string>
  readonly close: () => Promise<void>
}

/** A fresh profile, one page, and a record of what went wrong on it. */
export const openBrowser = async (options: {
  readonly timeoutMs: number
  readonly context?: Parameters<typeof chromium.launchPersistentContext>[1]
}): Promise<TestBrowser> => {
  const userDataDir = mkdtempSync(join(tmpdir(), "mg-chromium-"))
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: FLAGS,
    viewport: { width: 1280, height: 800 },
    ...options.context
  })
  const page = context.pages()[0] ?? await context.newPage()
  page.setDefaultTimeout(options.timeoutMs)
  const pageErrors: Array<string> = []
  page.on("pageerror", (error) => pageErrors.push(error.message))
  // Refusals a test provokes are expected; anything 5xx or a script error is not.
  page.on("response", (response) => {
    if (response.status() >= 500) pageErrors.push(`${response.status()} ${response.url()}`)
  })
  return {
    context,
    page,
    pageErrors,
    close: async () => {
      await context.close()
      rmSync(userDataDir, { recursive: true, force: true })
    }
  }
}
