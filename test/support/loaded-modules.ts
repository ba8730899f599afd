/**
 * Loaded with `--import` into a child Node by the tests that check what a process loads: appends
 * the URL of every module it loads, as it loads it, to the file named by
 * TEST_LOADED_MODULES_FILE, so a test can read the list at any moment of the child's life.
 */
import { appendFileSync } from "node:fs"
import { registerHooks } from "node:module"

const file = process.env.TEST_LOADED_MODULES_FILE
if (file !== undefined) {
  registerHooks({
    load(url, context, nextLoad) {
      appendFileSync(file, `${url}\n`)
      return nextLoad(url, context)
    }
  })
}
