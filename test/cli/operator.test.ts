/**
 * The CLI as an operator meets it (issue 26): the admin API's validation on `keys`, `config
 * check` opening nothing, `help`, `--log-level`, and start-up failures as one line without a stack.
 */
import { describe, expect, it } from "@effect/vitest"
import { existsSync, mkdirSync, writeFileSync } from "node:fs"
import { createServer } from "node:net"
import { join } from "node:path"
import { runCli, serveInProcess, tempDir, writeConfig } from "../support/process.ts"
import { waitFor } from "../support/wait.ts"

/** No line of a stack trace (`    at fn (file:...)`) in the output. */
const expectNoStack = (text: string) => expect(text).not.toMatch(/^\s+at /m)

describe("modelgate keys: the admin API's validation", () => {
  it("refuses what POST /api-keys refuses, naming the flag and the field, and stores nothing", async () => {
    const dir = tempDir()
    const config = writeConfig(dir, { store: `sqlite:${join(dir, "store.db")}` })
    const expires = await runCli(["--config", config, "keys", "create", "--name", "x", "--expires", "tomorrow"])
    expect(expires.code).toBe(1)
    expect(expires.stderr).toContain("--expires: expires_at: expected an ISO-8601 timestamp")
    const budget = await runCli(["--config", config, "keys", "create", "--name", "x", "--budget", "-3"])
    expect(budget.code).toBe(1)
    expect(budget.stderr).toContain("--budget: budget.max_requests: expected a value greater than 0")
    const grace = await runCli(["--config", config, "keys", "rotate", "key_x", "--grace-seconds", "-1"])
    expect(grace.code).toBe(1)
    expect(grace.stderr).toContain("--grace-seconds: grace_seconds:")
    for (const result of [expires, budget, grace]) expectNoStack(result.stderr)
    // Refused before the store was opened: no key, not even a store file.
    expect(existsSync(join(dir, "store.db"))).toBe(false)
    const good = await runCli(["--config", config, "keys", "create", "--name", "x", "--expires", "2099-01-31T00:00:00Z", "--budget", "3"])
    expect(good.code).toBe(0)
    expect(JSON.parse(good.stdout)).toMatchObject({ expires_at: "2099-01-31T00:00:00Z", budget: { max_requests: 3 } })
  })
})

describe("modelgate config check", () => {
  it("exits 0 for a valid file and 1 naming the field for a bad one, opening and creating nothing", async () => {
    const dir = tempDir()
    const store = join(dir, "sub", "store.db")
    mkdirSync(join(dir, "sub"))
    const good = writeConfig(dir, { store: `sqlite:${store}`, admin: { token: "a-real-admin-token-3f9c1d2e" } })
    const ok = await runCli(["config", "check", "--config", good])
    expect(ok).toMatchObject({ code: 0 })
    expect(ok.stdout).toContain(`${good}: valid`)
    expect(existsSync(store)).toBe(false)

    const cases: Array<[Record<string, unknown>, string]> = [
      [{ server: { port: 70000 } }, "server.port"],
      [{ admin: { token: "CHANGE_ME-long-random" } }, "admin.token"],
      [{ store: `sqlite:${join(dir, "typo", "store.db")}` }, "store: the directory"],
      [{ server: { tls: { cert: "missing-cert.pem", key: "missing-key.pem" } } }, `server.tls.cert: cannot read ${join(dir, "missing-cert.pem")}`]
    ]
    for (const [body, field] of cases) {
      const file = join(dir, "bad.yaml")
      writeFileSync(file, JSON.stringify(body))
      const bad = await runCli(["--config", file, "config", "check"])
      expect(bad.code).toBe(1)
      expect(bad.stderr).toContain(field)
      expectNoStack(bad.stderr)
    }
    expect(existsSync(join(dir, "typo"))).toBe(false)
  })
})

describe("modelgate help and --log-level", () => {
  it("`help` and `help keys` print the help and exit 0; the help names every wire format", async () => {
    const help = await runCli(["help"])
    expect(help.code).toBe(0)
    expect(help.stdout).toContain("SUBCOMMANDS")
    expect(help.stdout).toMatch(/Chat Completions and Responses, Anthropic Messages, embeddings and MCP/)
    expect(help.stdout).not.toContain("three wire formats")
    const keys = await runCli(["help", "keys"])
    expect(keys.code).toBe(0)
    expect(keys.stdout).toContain("rotate")
  })

  it("--log-level error leaves out the request lines that log.level info writes", { timeout: 90_000 }, async () => {
    const dir = tempDir()
    const config = writeConfig(dir, { store: `sqlite:${join(dir, "store.db")}`, log: { level: "info", format: "json" } })
    // The listening line is info too; the gateway is found through the one-time token line instead
    // (a JSON line like every other with log.format json: the app's address in `admin_app`).
    const quiet = await serveInProcess(["--config", config, "--log-level", "error", "serve", "--port", "0"], {}, /"admin_app":"(http:\/\/[^"]+)\/app"/)
    try {
      expect((await fetch(`${quiet.url}/healthz`)).status).toBe(200)
    } finally {
      await quiet.stop()
    }
    // Read once the stop is over (a state, not a pause): the drain waited for the request, whose
    // line is written as it ends, so a line it would have written is there by now. The loud run
    // below writes it for the same request.
    expect(quiet.output()).toContain(`"admin_app":`)
    expect(quiet.output()).not.toContain(`"message":"request"`)
    const loud = await serveInProcess(["--config", config, "serve", "--port", "0"])
    try {
      expect((await fetch(`${loud.url}/healthz`)).status).toBe(200)
      await waitFor("the request line", () => loud.output().includes(`"message":"request"`))
      // The stop's drain (what SIGTERM runs: the command interrupted, its finalizers) says what it does.
    } finally {
      await loud.stop()
    }
    expect(loud.output()).toContain("shutting down: no new connections")
    expect(loud.output()).toContain("drained: every request finished")
  })
})

describe("start-up failures are one line without a stack", () => {
  it("an address in use", { timeout: 60_000 }, async () => {
    const blocker = createServer()
    await new Promise<void>((r) => blocker.listen(0, "127.0.0.1", r))
    const port = (blocker.address() as { port: number }).port
    try {
      const dir = tempDir()
      const config = writeConfig(dir, { store: `sqlite:${join(dir, "store.db")}` })
      const result = await runCli(["--config", config, "serve", "--port", String(port)])
      expect(result.code).toBe(1)
      expect(result.stderr).toContain(`modelgate: cannot listen on 127.0.0.1:${port}: it is already in use`)
      expectNoStack(result.stderr)
    } finally {
      blocker.close()
    }
  })

  it("a Postgres database that does not exist", { timeout: 60_000 }, async () => {
    const dir = tempDir()
    const config = writeConfig(dir, { store: "postgres://postgres:secret-pw@127.0.0.1:5432/modelgate_missing_db_26" })
    const result = await runCli(["--config", config, "serve", "--port", "0"])
    expect(result.code).toBe(1)
    expect(result.stderr).toContain(`database "modelgate_missing_db_26" does not exist`)
    expect(result.stderr).not.toContain("secret-pw")
    expect(result.stderr.trim().split("\n")).toHaveLength(1)
    expectNoStack(result.stderr)
  })

  it("a TLS file that is missing, named by its field and path relative to the config file", async () => {
    const dir = tempDir()
    const config = writeConfig(dir, { store: `sqlite:${join(dir, "store.db")}`, server: { tls: { cert: "cert.pem", key: "key.pem" } } })
    const result = await runCli(["--config", config, "serve", "--port", "0"])
    expect(result.code).toBe(1)
    expect(result.stderr).toContain(`server.tls.cert: cannot read ${join(dir, "cert.pem")}`)
    expectNoStack(result.stderr)
  })

  it("a mistyped SQLite directory is an error, not a new empty store", async () => {
    const dir = tempDir()
    const config = writeConfig(dir, { store: "sqlite:dta/modelgate.db" })
    const result = await runCli(["--config", config, "keys", "list"])
    expect(result.code).toBe(1)
    expect(result.stderr).toContain(`store: the directory ${join(dir, "dta")} does not exist`)
    expect(existsSync(join(dir, "dta"))).toBe(false)
    // A missing file in an existing directory is a new store, and the command says so.
    mkdirSync(join(dir, "dta"))
    const created = await runCli(["--config", config, "keys", "list"])
    expect(created.code).toBe(0)
    expect(created.stderr).toContain(`creating a new SQLite store`)
    expect(existsSync(join(dir, "dta", "modelgate.db"))).toBe(true)
  })
})


