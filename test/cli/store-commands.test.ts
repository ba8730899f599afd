/**
 * Issue 31.5, the CLI's gaps: `modelgate credits` (and `credits balance`) prints the pool,
 * `credits ledger [--limit N]` its recent rows, `connections add` adds a connection as
 * `POST /connections` does (sealed with secrets.key, the next free id unless `--id`), and a word
 * that names no command is an error: one line naming it plus the usage on stderr, exit 1 (the
 * CLI's status for every usage mistake), `--help` or not.
 */
import { join } from "node:path"
import { DatabaseSync } from "node:sqlite"
import { describe, expect, it } from "vitest"
import { openWith, SEALED_PREFIX } from "../../src/services/store/secrets.ts"
import { runCli, tempDir, writeConfig } from "../support/process.ts"

const SECRETS_KEY = "cli-secrets-key-0123456789abcdef"

const setup = () => {
  const dir = tempDir()
  const store = join(dir, "store.db")
  const config = writeConfig(dir, { store: `sqlite:${store}`, workspace: { credits: 1000 }, secrets: { key: SECRETS_KEY } })
  return { store, config }
}

describe("modelgate credits", () => {
  it("prints the balance with no subcommand or `balance`, and the ledger newest first", async () => {
    const { config } = setup()
    for (const args of [["credits"], ["credits", "balance"]]) {
      const shown = await runCli(["--config", config, ...args])
      expect(shown.code, shown.stderr).toBe(0)
      expect(JSON.parse(shown.stdout)).toMatchObject({ id: "ws_default", credits: 1000 })
    }
    expect((await runCli(["--config", config, "credits", "add", "250", "--note", "invoice 42"])).code).toBe(0)
    expect(JSON.parse((await runCli(["--config", config, "credits"])).stdout)).toMatchObject({ credits: 1250 })

    const ledger = await runCli(["--config", config, "credits", "ledger"])
    expect(ledger.code, ledger.stderr).toBe(0)
    expect((JSON.parse(ledger.stdout) as Array<Record<string, unknown>>).map((row) => [row.kind, row.amount, row.balance_after, row.note])).toEqual([
      ["topup", 250, 1250, "invoice 42"],
      ["initial", 1000, 1000, "initial pool"]
    ])
    const one = await runCli(["--config", config, "credits", "ledger", "--limit", "1"])
    expect(JSON.parse(one.stdout)).toHaveLength(1)
    for (const limit of ["0", "1001"]) {
      const refused = await runCli(["--config", config, "credits", "ledger", "--limit", limit])
      expect(refused.code).toBe(1)
      expect(refused.stderr).toContain("--limit: expected a number from 1 to 1000")
    }
  })
})

describe("modelgate connections add", () => {
  it("adds a connection as POST /connections does: validated, sealed at rest, the next free id unless --id", async () => {
    const { store, config } = setup()
    const added = await runCli([
      "--config", config, "connections", "add", "--name", "shop", "--dialect", "postgres",
      "--url", "postgres://edit:edit-secret-pw@db:5432/shop", "--read-url", "postgres://read:read-secret-pw@db:5432/shop",
      "--default-schema", "public"
    ])
    expect(added.code, added.stderr).toBe(0)
    expect(JSON.parse(added.stdout)).toEqual({
      id: 1, name: "shop", dialect: "postgres", url: "postgres://edit:***@db:5432/shop", read_url: "postgres://read:***@db:5432/shop",
      default_schema: "public", source: "admin", environment: "development", ssh: null
    })
    const chosen = await runCli(["--config", config, "connections", "add", "--id", "7", "--name", "b", "--dialect", "mysql", "--url", "mysql://u:pw@db/b"])
    expect(JSON.parse(chosen.stdout)).toMatchObject({ id: 7, read_url: null, default_schema: null })
    const next = await runCli(["--config", config, "connections", "add", "--name", "c", "--dialect", "mysql", "--url", "mysql://u:pw@db/c"])
    expect(JSON.parse(next.stdout)).toMatchObject({ id: 8 })

    const db = new DatabaseSync(store)
    try {
      const row = db.prepare("SELECT url, read_url FROM connections WHERE id = 1").get() as { url: string; read_url: string }
      expect(row.url.startsWith(SEALED_PREFIX)).toBe(true)
      expect(openWith(row.url, SECRETS_KEY)).toBe("postgres://edit:edit-secret-pw@db:5432/shop")
      expect(openWith(row.read_url, SECRETS_KEY)).toBe("postgres://read:read-secret-pw@db:5432/shop")
    } finally {
      db.close()
    }

    const refusals: Array<[Array<string>, string]> = [
      [["--name", "x", "--dialect", "oracle", "--url", "postgres://u@h/d"], "dialect"],
      [["--name", "x", "--dialect", "postgres", "--url", "http://h/d"], "url"],
      [["--id", "7", "--name", "x", "--dialect", "postgres", "--url", "postgres://u@h/d"], "connection id 7 is already in use"]
    ]
    for (const [args, said] of refusals) {
      const result = await runCli(["--config", config, "connections", "add", ...args])
      expect(result.code, args.join(" ")).toBe(1)
      expect(result.stderr).toContain(said)
    }
    // A required flag left out: the parser's error and the command's usage, on stderr.
    const missing = await runCli(["--config", config, "connections", "add", "--name", "x"])
    expect(missing.code).toBe(1)
    expect(missing.stdout).toBe("")
    expect(missing.stderr).toContain("--dialect")
    expect(missing.stderr).toContain("USAGE")
  })
})

describe("a word that names no command", () => {
  it("is an error naming it, with the usage on stderr and exit 1, with or without --help", async () => {
    const { config } = setup()
    const cases: Array<[Array<string>, string, string]> = [
      [["frob"], "frob", "modelgate"],
      [["credits", "frob"], "frob", "modelgate credits"],
      [["credits", "5"], "5", "modelgate credits"],
      [["keys", "frob", "--help"], "frob", "modelgate keys"],
      [["frob", "--help"], "frob", "modelgate"],
      [["help", "frob"], "frob", "modelgate"],
      [["--config", config, "help", "connections", "frob"], "frob", "modelgate connections"]
    ]
    for (const [args, word, parent] of cases) {
      const result = await runCli(args)
      expect(result.code, args.join(" ")).toBe(1)
      expect(result.stdout, args.join(" ")).toBe("")
      expect(result.stderr.split("\n")[0], args.join(" ")).toBe(
        `modelgate: unknown command "${word}" for "${parent}" (one of: ${
          parent === "modelgate" ? "serve, keys, teams, credits, connections, backup, restore, config"
          : parent === "modelgate credits" ? "balance, ledger, add"
          : parent === "modelgate keys" ? "create, list, update, rotate, revoke, delete"
          : "list, add, update, delete"
        })`
      )
      expect(result.stderr, args.join(" ")).toContain("USAGE")
    }
    // Help asked for is not an error: stdout, exit 0 (flags before `help` included).
    const help = await runCli(["--config", config, "help", "credits"])
    expect(help.code).toBe(0)
    expect(help.stdout).toContain("ledger")
    expect(help.stderr).toBe("")
  })
})
