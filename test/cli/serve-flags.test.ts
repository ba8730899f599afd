/**
 * `modelgate serve` (bin/modelgate.js) runs Node with the settings of bin/serve-flags.ts, chosen
 * for memory (README, Memory and start-up), and steps aside when the operator chose heap
 * settings; an environment variable the operator set wins over serve's default for it. Read from
 * the serving process itself (Linux /proc), which is the same process id that was spawned.
 */
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { describe, expect, it } from "vitest"
import { SERVE_ENV, SERVE_NODE_FLAGS } from "../../bin/serve-flags.ts"
import { spawnGateway, tempDir, writeConfig } from "../support/process.ts"

const argvOf = (pid: number) => readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0")
const envOf = (pid: number) => readFileSync(`/proc/${pid}/environ`, "utf8").split("\0")

// The child inherits this environment (test/support/process.ts): a MALLOC_ARENA_MAX of the
// runner's own would be the operator's choice there.
describe.runIf(process.platform === "linux" && process.env.MALLOC_ARENA_MAX === undefined)("modelgate serve's Node settings", () => {
  const serve = async (env: Record<string, string>, check: (pid: number) => void) => {
    const dir = tempDir()
    const config = writeConfig(dir, { store: `sqlite:${join(dir, "store.db")}` })
    const gateway = await spawnGateway(config, { NODE_OPTIONS: "", ...env }, "bin/modelgate.js")
    try {
      expect((await fetch(`${gateway.url}/healthz`)).status).toBe(200)
      check(gateway.child.pid!)
    } finally {
      await gateway.stop()
    }
  }

  it("serves with serve-flags.ts's flags and environment by default", async () => {
    await serve({}, (pid) => {
      expect(argvOf(pid)).toEqual(expect.arrayContaining([...SERVE_NODE_FLAGS]))
      expect(envOf(pid)).toEqual(expect.arrayContaining(Object.entries(SERVE_ENV).map(([name, value]) => `${name}=${value}`)))
    })
  })

  it("leaves the flags to an operator who chose heap settings, and keeps the operator's variables", async () => {
    await serve({ NODE_OPTIONS: "--max-semi-space-size=16" }, (pid) => {
      expect(argvOf(pid).filter((arg) => SERVE_NODE_FLAGS.includes(arg))).toEqual([])
    })
    await serve({ MALLOC_ARENA_MAX: "4" }, (pid) => {
      expect(argvOf(pid)).toEqual(expect.arrayContaining([...SERVE_NODE_FLAGS]))
      expect(envOf(pid)).toContain("MALLOC_ARENA_MAX=4")
    })
  })
})
