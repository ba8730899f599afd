/**
 * The server bundle (scripts/build-server.ts) is the program `modelgate` runs after `npm ci`:
 * built here into a directory of its own, it must serve what the sources serve, name the same
 * files (the admin app, the changelog, package.json's version, the workers), and leave the
 * optional libraries unloaded until a request needs them. bin/server-bundle.ts runs it only while
 * it matches the sources it was built from.
 */
import { spawnSync } from "node:child_process"
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, symlinkSync, utimesSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { beforeAll, describe, expect, it } from "vitest"
import { publishBuild, readManifest, serverEntryFile, sourcesFingerprint } from "../../bin/server-bundle.ts"
import { childEnv, NODE, ROOT, spawnGateway, tempDir, writeConfig } from "../support/process.ts"

const ADMIN = "server-bundle-test-admin-token"

describe("the server bundle", () => {
  let out: string
  beforeAll(() => {
    // Beside a node_modules, as dist/server is: the libraries left to Node resolve from there.
    const dir = tempDir()
    symlinkSync(join(ROOT, "node_modules"), join(dir, "node_modules"), "dir")
    out = join(dir, "server")
    const built = spawnSync(NODE, ["scripts/build-server.ts", "--out", out], { cwd: ROOT, env: childEnv(), encoding: "utf8" })
    expect(built.stderr).toBe("")
    expect(built.status).toBe(0)
  }, 60_000)

  it("names, from its own directory, every file the sources name relative to themselves", () => {
    const named = readdirSync(out)
      .filter((file) => file.endsWith(".js"))
      .flatMap((file) =>
        [...readFileSync(join(out, file), "utf8").matchAll(/new URL\((["'`])([^"'`]+)\1,\s*import\.meta\.url\)/g)].map((match) =>
          fileURLToPath(new URL(match[2]!, `file://${out}/${file}`))
        )
      )
    // The admin app, the changelog, package.json, and the two workers' sources.
    expect(named.map((path) => path.slice(ROOT.length + 1)).sort()).toEqual(
      ["CHANGELOG.md", "app/dist/", "package.json", "src/services/sql/guard/worker.ts", "src/services/tokens/tokenizer-worker.ts"].sort()
    )
    for (const path of named) expect(existsSync(path), path).toBe(true)
  })

  it("serves a chat completion, the admin app, the changelog and the version, and loads no optional library at rest nor Node's own fetch", async () => {
    const dir = tempDir()
    const config = writeConfig(dir, { store: `sqlite:${join(dir, "store.db")}`, admin: { token: ADMIN } })
    const modules = join(dir, "serve.modules")
    writeFileSync(modules, "")
    const builtins = join(dir, "serve.builtins")
    const gateway = await spawnGateway(
      config,
      {
        NODE_OPTIONS: `--import=${join(ROOT, "test/support/loaded-modules.ts")} --import=${join(ROOT, "test/support/builtins-at-exit.mjs")}`,
        TEST_LOADED_MODULES_FILE: modules,
        TEST_BUILTINS_FILE: builtins
      },
      join(out, "main.js")
    )
    try {
      const loaded = readFileSync(modules, "utf8").split("\n").filter((url) => url !== "")
      // Nothing of src/ (the bundle holds it), and of node_modules only what serve needs at rest.
      expect(loaded.filter((url) => url.startsWith(`file://${ROOT}/src/`))).toEqual([])
      const packages = new Set(loaded.flatMap((url) => /\/node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url)?.[1] ?? []))
      expect([...packages].filter((name) => ["mysql2", "ssh2", "libpg-query", "node-sql-parser", "redis", "gpt-tokenizer", "@smithy/core"].includes(name))).toEqual([])

      const created = await fetch(`${gateway.url}/api-keys`, {
        method: "POST",
        headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
        body: JSON.stringify({ name: "bundle" })
      })
      expect(created.status).toBe(201)
      const { key } = (await created.json()) as { key: string }
      const chat = await fetch(`${gateway.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "echo", messages: [{ role: "user", content: "from the bundle" }] })
      })
      expect(chat.status).toBe(200)
      expect(((await chat.json()) as { choices: Array<{ message: { content: string } }> }).choices[0]!.message.content).toContain("from the bundle")

      const refused = await fetch(`${gateway.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: "{"
      })
      expect(refused.status).toBe(400)
      expect(await refused.json()).toMatchObject({ status: 400, error: "validation_failed" })

      const app = await fetch(`${gateway.url}/app/`)
      expect(app.status).toBe(200)
      expect(await app.text()).toContain("<html")
      const changelog = await fetch(`${gateway.url}/changelog`)
      expect(changelog.status).toBe(200)
      const version = (JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { version: string }).version
      expect(await changelog.text()).toContain("Unreleased")
      const ready = await fetch(`${gateway.url}/readyz`)
      expect(await ready.json()).toMatchObject({ status: "ready", version })
    } finally {
      expect(await gateway.stop()).toBe(0)
    }
    // Node's own bundled undici (its fetch and WebSocket, 10 MiB and more resident) stays unloaded:
    // the ES-module view of node:http would load it (src/http/server.ts requires node:http instead).
    expect(readFileSync(builtins, "utf8").split("\n").filter((name) => name.includes("deps/undici"))).toEqual([])
  })
})

describe("which code modelgate runs", () => {
  /** A tree with a src/, the inputs, and a build recorded as made from them. */
  const tree = () => {
    const root = tempDir()
    mkdirSync(join(root, "src", "http"), { recursive: true })
    mkdirSync(join(root, "scripts"))
    for (const file of ["src/main.ts", "src/http/app.ts", "package.json", "package-lock.json", "scripts/build-server.ts"]) writeFileSync(join(root, file), "// v1\n")
    build(root, "b1")
    publishBuild({ fingerprint: sourcesFingerprint(root), entry: "b1/main.js" }, join(root, "dist", "server"))
    return root
  }
  const build = (root: string, name: string) => {
    mkdirSync(join(root, "dist", "server", name), { recursive: true })
    writeFileSync(join(root, "dist", "server", name, "main.js"), "")
  }
  const bundle = (root: string, name = "b1") => join(root, "dist", "server", name, "main.js")
  const sources = (root: string) => join(root, "src", "main.ts")

  it("runs the current build when it was made from the sources as they are", () => {
    const root = tree()
    expect(serverEntryFile({}, root)).toBe(bundle(root))
  })

  it("runs the sources once a file under src/ changes, is added or is removed, or the lockfile changes", () => {
    const edited = tree()
    utimesSync(join(edited, "src/http/app.ts"), new Date(), new Date(Date.now() + 5_000))
    expect(serverEntryFile({}, edited)).toBe(sources(edited))

    const added = tree()
    writeFileSync(join(added, "src/http/new.ts"), "")
    expect(serverEntryFile({}, added)).toBe(sources(added))

    const removed = tree()
    rmSync(join(removed, "src/http/app.ts"))
    expect(serverEntryFile({}, removed)).toBe(sources(removed))

    const lock = tree()
    writeFileSync(join(lock, "package-lock.json"), "// v2, longer\n")
    expect(serverEntryFile({}, lock)).toBe(sources(lock))
  })

  it("runs the sources without a build, with a manifest that is not one or names a build that is gone, or when told to", () => {
    const none = tree()
    rmSync(join(none, "dist"), { recursive: true })
    expect(serverEntryFile({}, none)).toBe(sources(none))
    const torn = tree()
    writeFileSync(join(torn, "dist", "server", "current.json"), "{\"fingerprint\":")
    expect(serverEntryFile({}, torn)).toBe(sources(torn))
    const outside = tree()
    writeFileSync(join(outside, "dist", "server", "current.json"), JSON.stringify({ fingerprint: sourcesFingerprint(outside), entry: "../../src/main.js" }))
    expect(serverEntryFile({}, outside)).toBe(sources(outside))
    const deleted = tree()
    rmSync(join(deleted, "dist", "server", "b1"), { recursive: true })
    expect(serverEntryFile({}, deleted)).toBe(sources(deleted))
    const told = tree()
    expect(serverEntryFile({ MODELGATE_FROM_SOURCE: "1" }, told)).toBe(sources(told))
  })

  it("keeps the build it replaces (a running process loads its lazy files from it) and deletes the older ones", () => {
    const root = tree()
    const dir = join(root, "dist", "server")
    build(root, "b2")
    publishBuild({ fingerprint: sourcesFingerprint(root), entry: "b2/main.js" }, dir)
    expect(serverEntryFile({}, root)).toBe(bundle(root, "b2"))
    build(root, "b3")
    publishBuild({ fingerprint: sourcesFingerprint(root), entry: "b3/main.js" }, dir)
    expect(readdirSync(dir).sort()).toEqual(["b2", "b3", "current.json"])
    expect(readManifest(dir)).toEqual({ fingerprint: sourcesFingerprint(root), entry: "b3/main.js" })
  })
})
