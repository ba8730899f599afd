/**
 * The README's code runs as printed (issue 26.1): every TypeScript/JavaScript block, and every
 * shell block that calls the gateway (`127.0.0.1:8080`), is run against a gateway on the embedded
 * default (only its store moved to a temporary directory and an admin token set for `$ADMIN`).
 * The README's placeholders are filled in the way a reader would: `sk-mg-...` with a key made for
 * the run, `key_...` with its id, `http://127.0.0.1:8080` with the gateway's address, `npx
 * modelgate` with this checkout's CLI on the same config; curl gets `--fail-with-body`, so an
 * error status fails the block. A block that needs what this machine does not have (a vendor's
 * account, Claude Code, a database to connect to) carries the marker
 * `<!-- snippet: skip, <reason> -->` on the line before it, and is listed as skipped.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { spawnSync } from "node:child_process"
import { randomBytes } from "node:crypto"
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { delimiter, dirname, join } from "node:path"
import { childEnv, type GatewayProcess, NODE, ROOT, spawnGateway, tempDir, writeConfig } from "../support/process.ts"

interface Snippet {
  readonly line: number
  readonly lang: string
  readonly code: string
  readonly skip: string | undefined
}

const RUNNABLE_CODE = new Set(["ts", "typescript", "js", "javascript"])
const SHELL = new Set(["sh", "bash", "shell"])

/** Fenced blocks, with the marker on the line before each (indented blocks in lists included). */
export const snippetsOf = (markdown: string): ReadonlyArray<Snippet> => {
  const lines = markdown.split("\n")
  const out: Array<Snippet> = []
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)```(\w+)\s*$/.exec(lines[i]!)
    if (open === null) continue
    const indent = open[1]!.length
    let end = i + 1
    while (end < lines.length && !/^\s*```\s*$/.test(lines[end]!)) end++
    const marker = /<!--\s*snippet:\s*skip,?\s*(.*?)\s*-->/.exec(lines[i - 1] ?? "")
    out.push({
      line: i + 1,
      lang: open[2]!,
      code: lines.slice(i + 1, end).map((line) => line.slice(Math.min(indent, line.length - line.trimStart().length))).join("\n"),
      skip: marker === null ? undefined : marker[1] || "marked"
    })
    i = end
  }
  return out
}

const snippets = snippetsOf(readFileSync(join(ROOT, "README.md"), "utf8")).filter((s) =>
  RUNNABLE_CODE.has(s.lang) || (SHELL.has(s.lang) && s.code.includes("127.0.0.1:8080"))
)
// Inside the checkout, so imports find its node_modules (the SDKs are dev dependencies); not under
// node_modules, where Node does not strip types. Git ignores it. A folder of this process's own:
// two suites run in one checkout at once (npm run test:stress) must not delete each other's files.
const SCRATCH = join(ROOT, ".readme-snippets", `${process.pid}-${randomBytes(4).toString("hex")}`)

describe("README snippets run as printed on the embedded default", () => {
  let gateway: GatewayProcess
  let configPath: string
  let key: { key: string; id: string }
  const ADMIN = "readme-snippets-admin-3f9c1d2e8a7b"

  beforeAll(async () => {
    const dir = tempDir()
    configPath = writeConfig(dir, {
      store: `sqlite:${join(dir, "store.db")}`,
      admin: { token: ADMIN },
      // The README's connection 1 (its YAML block), so its POST /connections gets id 2 as it says and
      // the grants of the block after it find both: neither connects (a connection's pool opens on
      // its first statement).
      connections: [{ id: 1, name: "analytics", dialect: "postgres", default_schema: "public", url: "postgres://modelgate_edit:x@db.invalid:5432/app" }],
      // The README's MCP server `github` (its YAML block), where nothing answers: a key naming it
      // (POST /api-keys with mcp_servers) is made without the server being reached.
      mcp: { servers: [{ name: "github", url: "http://127.0.0.1:9/mcp" }] }
    })
    gateway = await spawnGateway(configPath)
    const created = await fetch(`${gateway.url}/api-keys`, {
      method: "POST",
      headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
      body: JSON.stringify({ name: "readme" })
    })
    key = await created.json() as { key: string; id: string }
    mkdirSync(SCRATCH, { recursive: true })
  }, 90_000)

  afterAll(async () => {
    await gateway?.stop()
    rmSync(SCRATCH, { recursive: true, force: true })
  })

  const filled = (code: string) =>
    code
      .replaceAll("http://127.0.0.1:8080", gateway.url)
      .replaceAll("sk-mg-...", key.key)
      .replaceAll("key_...", key.id)

  /**
   * Why each skipped block cannot run on a test machine (issue 39.6: a skip counts only for a
   * reason that holds). A new marker with another reason fails here until it is added with its
   * why, or the block is made to run.
   */
  const SKIP_REASONS: Record<string, string> = {
    "installs and starts the gateway itself": "npm ci would reinstall this checkout's node_modules under the running suite",
    "needs Claude Code": "the claude CLI is not a dependency, and its call needs Anthropic's servers behind the gateway",
    "downloads the MCP Inspector and needs a database": "@modelcontextprotocol/inspector is not a dependency (npx -y downloads it), and sql_run needs the README's orders table",
    "needs a bastion and a database": "its POST /connections/3/test reaches bastion.example.com, whose host key the printed answer is about"
  }

  it("skips only blocks whose reason holds on a test machine", () => {
    const reasons = snippets.flatMap((s) => (s.skip === undefined ? [] : [s.skip]))
    for (const reason of reasons) expect(Object.keys(SKIP_REASONS), `README marker "snippet: skip, ${reason}"`).toContain(reason)
  })

  it("finds the blocks and the markers (the extraction itself is checked)", () => {
    expect(snippets.filter((s) => RUNNABLE_CODE.has(s.lang)).length).toBeGreaterThanOrEqual(3)
    expect(snippets.filter((s) => SHELL.has(s.lang) && s.skip === undefined).length).toBeGreaterThanOrEqual(2)
    expect(snippets.some((s) => s.skip === "needs Claude Code")).toBe(true)
  })

  for (const snippet of snippets) {
    const name = `README.md line ${snippet.line} (${snippet.lang}): ${snippet.code.split("\n")[0]!.slice(0, 70)}`
    if (snippet.skip !== undefined) {
      it.skip(`${name} [${snippet.skip}]`, () => {})
      continue
    }
    it(name, { timeout: 90_000 }, () => {
      const env = childEnv({ ADMIN, MODELGATE_CONFIG: configPath, PATH: [dirname(NODE), process.env.PATH ?? ""].join(delimiter) })
      const result = RUNNABLE_CODE.has(snippet.lang)
        ? (() => {
          const file = join(SCRATCH, `line-${snippet.line}.mts`)
          writeFileSync(file, filled(snippet.code))
          return spawnSync(NODE, [file], { cwd: ROOT, env, encoding: "utf8", timeout: 80_000 })
        })()
        : spawnSync("bash", ["-euo", "pipefail", "-c", filled(snippet.code)
          .replaceAll("npx modelgate", `${JSON.stringify(NODE)} ${JSON.stringify(join(ROOT, "bin/modelgate.js"))}`)
          .replace(/\bcurl /g, "curl --fail-with-body ")], { cwd: ROOT, env, encoding: "utf8", timeout: 80_000 })
      expect(result.status, `exit ${result.status}\nstdout:\n${result.stdout}\nstderr:\n${result.stderr}`).toBe(0)
    })
  }
})
