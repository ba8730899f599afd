/**
 * Headless Chromium for the admin app's browser suites: Debian's Chromium driven by
 * playwright-core (a browser download does not work on these machines; .ci/run installs the
 * package). The flags keep it off the network: without them it tries Google's hosts at every start.
 */
import { execFileSync } from "node:child_process"
import { existsSync, mkdirSync } from "node:fs"
import { join } from "node:path"
import { type Browser, type BrowserContext, chromium, type Page } from "playwright-core"
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

/**
 * One Chromium per worker process, started by the first suite that asks: files run one after
 * another in a worker without a fresh module graph (vitest.config.ts), so the next browser suite
 * there takes the same browser. A launch is about 1 s of a loaded machine (0.3 s of CPU); a
 * context is 0.05 s (the sign-in refusal of oidc-signin.e2e took 5.8 s on a fresh persistent
 * profile, 0.7 s in a context). Idle between browser suites, it costs memory, not CPU; Playwright
 * kills it when the worker exits (and Chromium quits when its pipe closes).
 */
let shared: Promise<Browser> | undefined
const sharedBrowser = (): Promise<Browser> => {
  if (shared !== undefined) return shared
  const launched = chromium.launch({ executablePath: CHROMIUM, headless: true, args: FLAGS })
  shared = launched
  // A browser that failed to start or went away is launched anew by the next suite.
  const forget = () => {
    if (shared === launched) shared = undefined
  }
  launched.then((browser) => browser.on("disconnected", forget), forget)
  return launched
}

/**
 * A fresh context (its own cookies, storage and permissions: what a fresh profile gave), one page,
 * and a record of what went wrong on it.
 */
export const openBrowser = async (options: {
  readonly timeoutMs: number
  readonly context?: Parameters<Browser["newContext"]>[0]
}): Promise<TestBrowser> => {
  const context = await (await sharedBrowser()).newContext({
    viewport: { width: 1280, height: 800 },
    ...options.context
  })
  const page = await context.newPage()
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
    close: () => context.close()
  }
}
