/**
 * Issue 31.5: with `log.format: json` every line `modelgate serve` writes is one JSON object, not
 * only the logger's: the notice that a SQLite store is being created, the one-time admin token,
 * a failed reload's YAML error (SIGHUP with a broken file), and a failure that stops it.
 */
import { readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { describe, expect, it } from "vitest"
import { runCli, spawnGateway, tempDir, writeConfig } from "../support/process.ts"

const parsedLines = (output: string) =>
  output.split("\n").filter((line) => line.trim() !== "").map((line) => {
    try {
      return JSON.parse(line) as Record<string, unknown>
    } catch {
      throw new Error(`not a JSON line: ${line}`)
    }
  })

const until = async (done: () => boolean, what: string) => {
  const deadline = Date.now() + 10_000
  while (!done()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 25))
  }
}

describe("log.format: json", () => {
  it("makes every line serve writes JSON: the first-start notices, a failed reload, a failed start", async () => {
    const dir = tempDir("modelgate-json-")
    // No admin token on loopback: the one-time token line; a store file that does not exist yet: the notice.
    const configPath = writeConfig(dir, { store: `sqlite:${join(dir, "modelgate.db")}`, log: { level: "info", format: "json" } })
    const gw = await spawnGateway(configPath)
    try {
      await until(() => gw.output().includes("one_time_admin_token"), "the one-time token line")
      writeFileSync(configPath, readFileSync(configPath, "utf8") + "\nmodels: [unclosed\n")
      gw.child.kill("SIGHUP")
      await until(() => gw.output().includes("does not load"), "the failed reload's line")
      expect((await fetch(`${gw.url}/healthz`)).status).toBe(200)

      // A second serve on the same port fails to start: its one line is JSON too (with the file fixed).
      writeFileSync(configPath, readFileSync(configPath, "utf8").replace("\nmodels: [unclosed\n", "\n"))
      const port = new URL(gw.url).port
      const refused = await runCli(["--config", configPath, "serve", "--port", port])
      expect(refused.code).toBe(1)
      const [failure, ...rest] = parsedLines(refused.stderr)
      expect(rest).toEqual([])
      expect(failure).toMatchObject({ level: "ERROR", message: expect.stringMatching(/^cannot listen on .*already in use/) })
      expect(refused.stdout).toBe("")
    } finally {
      expect(await gw.stop()).toBe(0)
    }
    const lines = parsedLines(gw.output())
    for (const line of lines) {
      expect(Number.isNaN(Date.parse(String(line.time)))).toBe(false)
      expect(["DEBUG", "INFO", "WARN", "ERROR"]).toContain(line.level)
      expect(typeof line.message).toBe("string")
    }
    expect(lines.find((line) => String(line.message).includes("creating a new SQLite store"))).toMatchObject({ level: "INFO" })
    const token = lines.find((line) => "one_time_admin_token" in line)!
    expect(token.one_time_admin_token).toMatch(/^[\w-]{32}$/)
    expect(token.admin_app).toBe(`${gw.url}/app`)
    expect(lines.find((line) => String(line.message).includes("does not load"))).toMatchObject({
      level: "WARN",
      message: expect.stringContaining("not valid YAML")
    })
    expect(lines.some((line) => line.message === "request" && line.route === "/healthz")).toBe(true)
  }, 60_000)
})
