/** The `modelgate` CLI against a real store file, and a key it creates working on a running server. */
import { describe, expect, it } from "@effect/vitest"
import { join } from "node:path"
import { startGateway, testConfig } from "../support/gateway.ts"
import { runCli, runCliProcess, tempDir, writeConfig } from "../support/process.ts"

describe("modelgate keys", () => {
  it("creates, lists, rotates, revokes and deletes keys in the configured store", { timeout: 90_000 }, async () => {
    const dir = tempDir()
    const config = writeConfig(dir, { store: `sqlite:${join(dir, "store.db")}` })
    const created = await runCli(["--config", config, "keys", "create", "--name", "demo", "--models", "echo", "--budget", "5"])
    expect(created.code).toBe(0)
    const key = JSON.parse(created.stdout)
    expect(key.key).toMatch(/^sk-mg-[0-9a-f]{32}$/)
    expect(key).toMatchObject({ name: "demo", allowed_models: ["echo"], budget: { max_requests: 5 } })

    // A gateway of its own on the same store file (in this process: what is tested is the
    // store's change counter between the CLI's connection and the server's, not a process).
    const gateway = await startGateway(testConfig({ store: `sqlite:${join(dir, "store.db")}` }))
    try {
      const ok = await fetch(`${gateway.url}/v1/models`, { headers: { authorization: `Bearer ${key.key}` } })
      expect(ok.status).toBe(200)

      const listed = JSON.parse((await runCli(["--config", config, "keys", "list"])).stdout)
      expect(listed.map((k: { id: string }) => k.id)).toEqual([key.id])
      expect(JSON.stringify(listed)).not.toContain(key.key)

      const rotated = JSON.parse((await runCli(["--config", config, "keys", "rotate", key.id])).stdout)
      expect(rotated.key).not.toBe(key.key)
      // The running server notices the CLI's change through the store's change counter.
      await waitForStatus(gateway.url, key.key, 401)
      expect((await fetch(`${gateway.url}/v1/models`, { headers: { "x-api-key": rotated.key } })).status).toBe(200)

      expect((await runCli(["--config", config, "keys", "revoke", key.id])).code).toBe(0)
      await waitForStatus(gateway.url, rotated.key, 401, "key_inactive")

      const deleted = await runCli(["--config", config, "keys", "delete", key.id])
      expect(deleted.code).toBe(0)
      await waitForStatus(gateway.url, rotated.key, 401, "unauthorized")

      const missing = await runCli(["--config", config, "keys", "delete", key.id])
      expect(missing.code).toBe(1)
      expect(missing.stderr).toContain("no API key")
    } finally {
      await gateway.close()
    }
  })

  it("creates a key that may use upstream MCP servers, naming configured ones only (issue 37)", async () => {
    const dir = tempDir()
    const config = writeConfig(dir, {
      store: `sqlite:${join(dir, "store.db")}`,
      mcp: { servers: [{ name: "docs", url: "http://127.0.0.1:9/mcp" }] }
    })
    const created = await runCli(["--config", config, "keys", "create", "--name", "agent", "--tools", "--mcp-servers", "docs"])
    expect(created.code).toBe(0)
    expect(JSON.parse(created.stdout)).toMatchObject({ tools_enabled: true, mcp_servers: ["docs"] })
    const refused = await runCli(["--config", config, "keys", "create", "--name", "agent", "--mcp-servers", "github"])
    expect(refused.code).toBe(1)
    expect(refused.stderr).toContain('--mcp-servers: no MCP server named "github"')
  })

  it("creates a key with its own tokens per minute (issue 33), refusing nonsense by the flag's name", async () => {
    const dir = tempDir()
    const config = writeConfig(dir, { store: `sqlite:${join(dir, "store.db")}` })
    const created = await runCli(["--config", config, "keys", "create", "--name", "tpm", "--tokens-per-minute", "20000"])
    expect(created.code).toBe(0)
    expect(JSON.parse(created.stdout)).toMatchObject({ name: "tpm", limits: { tokens_per_minute: 20000 } })
    const refused = await runCli(["--config", config, "keys", "create", "--name", "tpm", "--tokens-per-minute", "0"])
    expect(refused.code).toBe(1)
    expect(refused.stderr).toContain("--tokens-per-minute")
  })

  it("tops up the workspace credit pool, and refuses an amount that is not positive", async () => {
    const dir = tempDir()
    const config = writeConfig(dir, { store: `sqlite:${join(dir, "store.db")}`, workspace: { credits: 1000 } })
    const added = await runCli(["--config", config, "credits", "add", "250", "--note", "invoice 42"])
    expect(added.code).toBe(0)
    expect(JSON.parse(added.stdout)).toEqual({ credits: 1250 })
    // Decimals of at most six fractional digits (issue 33).
    const decimal = await runCli(["--config", config, "credits", "add", "0.125"])
    expect(decimal.code, decimal.stderr).toBe(0)
    expect(JSON.parse(decimal.stdout)).toEqual({ credits: 1250.125 })
    for (const amount of ["0", "0.0000001", "1e3", "-5"]) {
      const refused = await runCli(["--config", config, "credits", "add", "--", amount])
      expect(refused.code, amount).toBe(1)
      expect(refused.stderr, amount).toContain("credits must be a positive number with at most 6 fractional digits")
    }
  })

  it("sets a key's budget in requests and credits per period, and removes it (issue 33)", async () => {
    const dir = tempDir()
    const config = writeConfig(dir, { store: `sqlite:${join(dir, "store.db")}` })
    const created = await runCli(["--config", config, "keys", "create", "--name", "dev", "--budget-credits", "200.5", "--budget-period", "month"])
    expect(created.code, created.stderr).toBe(0)
    const key = JSON.parse(created.stdout)
    expect(key.budget).toMatchObject({ max_requests: null, max_credits: 200.5, period: "month", used_credits: 0, remaining_credits: 200.5 })
    const updated = await runCli(["--config", config, "keys", "update", key.id, "--budget", "10", "--budget-period", "day"])
    expect(updated.code, updated.stderr).toBe(0)
    expect(JSON.parse(updated.stdout).budget).toMatchObject({ max_requests: 10, max_credits: null, period: "day" })
    const bad = await runCli(["--config", config, "keys", "update", key.id, "--budget-credits", "1.1234567"])
    expect(bad.code).toBe(1)
    expect(bad.stderr).toContain("--budget-credits")
    const period = await runCli(["--config", config, "keys", "update", key.id, "--budget", "3", "--budget-period", "year"])
    expect(period.code).toBe(1)
    expect(period.stderr).toContain("--budget-period")
    const removed = await runCli(["--config", config, "keys", "update", key.id, "--no-budget"])
    expect(removed.code, removed.stderr).toBe(0)
    expect(JSON.parse(removed.stdout).budget).toBeNull()
    expect((await runCli(["--config", config, "keys", "update", key.id])).code).toBe(1)
  })

  // A real process: main.ts turns the command line's status into the process's exit code.
  it("refuses a bad config with a message naming the field and exit code 1", async () => {
    const dir = tempDir()
    const config = writeConfig(dir, { server: { port: "eighty" } })
    const result = await runCliProcess(["--config", config, "keys", "list"])
    expect(result.code).toBe(1)
    expect(result.stderr).toContain("server.port")
  })
})

const waitForStatus = async (url: string, key: string, status: number, slug?: string) => {
  const deadline = Date.now() + 1500
  let last: { status: number; error?: string } = { status: 0 }
  while (Date.now() < deadline) {
    const response = await fetch(`${url}/v1/models`, { headers: { "x-api-key": key } })
    last = { status: response.status, error: response.status === 200 ? undefined : ((await response.json()) as { error: string }).error }
    if (last.status === status && (slug === undefined || last.error === slug)) return
    await new Promise((r) => setTimeout(r, 50))
  }
  expect(last).toEqual({ status, error: slug ?? last.error })
}
