/**
 * What a process loads (issue 14): a store command loads the store and nothing of the server, and
 * `serve` loads a feature's libraries when a deployment uses the feature, not before. Checked on
 * real child processes through a module-recording hook (test/support/loaded-modules.ts).
 */
import { describe, expect, it } from "vitest"
import { spawn } from "node:child_process"
import { mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { join, resolve } from "node:path"
import { NODE, ROOT, runCliProcess, spawnGateway, tempDir, writeConfig } from "../support/process.ts"

const HOOK = resolve(import.meta.dirname, "../support/loaded-modules.ts")

/** A child environment that records its modules into a fresh file; `loaded()` reads the list so far. */
const recording = (dir: string, name: string) => {
  const file = join(dir, `${name}.modules`)
  writeFileSync(file, "")
  return {
    env: { NODE_OPTIONS: `--import=${HOOK}`, TEST_LOADED_MODULES_FILE: file },
    loaded: () => readFileSync(file, "utf8").split("\n").filter((url) => url !== "")
  }
}

/** The packages and src files among module URLs (`undici`, `@effect/sql-pg`, `src/http/app.ts`). */
const packagesOf = (urls: ReadonlyArray<string>) =>
  new Set(urls.flatMap((url) => {
    const match = /\/node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url)
    return match === null ? [] : [match[1]!]
  }))
const srcFilesOf = (urls: ReadonlyArray<string>) =>
  urls.filter((url) => url.startsWith(`file://${ROOT}/src/`)).map((url) => url.slice(`file://${ROOT}/`.length))

/** Libraries only some deployments use: each is loaded by the feature that needs it. */
const OPTIONAL = [
  "@modelcontextprotocol/server",
  "zod",
  "mysql2",
  "ssh2",
  "@effect/sql-pg",
  "libpg-query",
  "node-sql-parser",
  "redis",
  "gpt-tokenizer",
  "@smithy/signature-v4",
  "@smithy/core",
  // Identity providers: API-token verification (auth.oidc) and the admin sign-in (admin.oidc).
  "jose",
  "openid-client",
  "oauth4webapi"
]

describe("what a process loads", () => {
  it("a store command loads the config and the store, not the server", async () => {
    const dir = tempDir()
    const config = writeConfig(dir, { store: `sqlite:${join(dir, "store.db")}` })
    const modules = recording(dir, "keys-list")
    const listed = await runCliProcess(["--config", config, "keys", "list"], modules.env, "src/main.ts")
    expect(listed).toMatchObject({ code: 0, stdout: "[]\n" })

    const src = srcFilesOf(modules.loaded())
    expect(src).toEqual(expect.arrayContaining(["src/commands/keys.ts", "src/services/store/StoreLayer.ts"]))
    expect(src.filter((file) => file === "src/gateway.ts" || file.startsWith("src/http/") || file.startsWith("src/pipelines/"))).toEqual([])
    const packages = packagesOf(modules.loaded())
    expect([...packages].filter((name) => [...OPTIONAL, "undici", "prom-client"].includes(name))).toEqual([])
    // The index of effect loads every module of the library; the CLI imports its modules one by one.
    expect(modules.loaded().filter((url) => url.endsWith("/node_modules/effect/dist/index.js"))).toEqual([])
  })

  it("serve on SQLite loads no SQL driver, parser, Redis client, tokenizer or MCP SDK until a request needs one", async () => {
    const dir = tempDir()
    const config = writeConfig(dir, { store: `sqlite:${join(dir, "store.db")}`, admin: { token: "loading-test-admin-token" } })
    const modules = recording(dir, "serve")
    const gateway = await spawnGateway(config, modules.env, "src/main.ts")
    try {
      expect([...packagesOf(modules.loaded())].filter((name) => OPTIONAL.includes(name))).toEqual([])
      // Of undici, only the Agent, request and errors (services/providers/undici.ts): not its index,
      // which loads fetch, WebSocket and the rest.
      expect(modules.loaded().filter((url) => /\/node_modules\/undici\/(index\.js|lib\/web\/)/.test(url))).toEqual([])

      const created = await fetch(`${gateway.url}/api-keys`, {
        method: "POST",
        headers: { authorization: "Bearer loading-test-admin-token", "content-type": "application/json" },
        body: JSON.stringify({ name: "mcp", tools_enabled: true })
      })
      const { key } = (await created.json()) as { key: string }
      const initialize = await fetch(`${gateway.url}/v1/mcp`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json", accept: "application/json, text/event-stream" },
        body: JSON.stringify({
          jsonrpc: "2.0",
          id: 1,
          method: "initialize",
          params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "loading-test", version: "1" } }
        })
      })
      expect(initialize.status).toBe(200)
      expect(((await initialize.json()) as { result: { protocolVersion: string } }).result.protocolVersion).toBe("2025-06-18")
      // The first MCP request loaded the SDK; nothing else optional came with it.
      expect([...packagesOf(modules.loaded())].filter((name) => OPTIONAL.includes(name)).sort()).toEqual(["@modelcontextprotocol/server", "zod"])
    } finally {
      await gateway.stop()
    }
  })

  it("the modelgate command, its compile cache warm, never loads Node's TypeScript stripper", async () => {
    // Its own cache directory (the default one under TMPDIR), enabled by bin/modelgate.js itself.
    const dir = tempDir()
    const tmp = join(dir, "tmp")
    mkdirSync(tmp)
    const builtins = join(dir, "builtins")
    const { NODE_COMPILE_CACHE: _cache, NODE_DISABLE_COMPILE_CACHE: _disabled, ...inherited } = process.env
    const run = () =>
      new Promise<ReadonlyArray<string>>((resolvePromise, reject) => {
        const child = spawn(NODE, ["bin/modelgate.js", "--help"], {
          cwd: ROOT,
          env: {
            ...inherited,
            TMPDIR: tmp,
            NODE_OPTIONS: `--import=${resolve(import.meta.dirname, "../support/builtins-at-exit.mjs")}`,
            TEST_BUILTINS_FILE: builtins
          },
          stdio: "ignore"
        })
        child.once("error", reject)
        child.once("exit", (code) => code === 0 ? resolvePromise(readFileSync(builtins, "utf8").split("\n")) : reject(new Error(`exit ${code}`)))
      })
    // The first run fills the cache (and compiles: it loads the stripper); a later one only reads it.
    await run()
    const warm = await run()
    expect(warm).toContain("NativeModule internal/modules/typescript")
    expect(warm.filter((name) => name.includes("amaro"))).toEqual([])
  })
})
