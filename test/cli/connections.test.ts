/** `modelgate connections ...` against a real store file: the admin API's validation, the same service. */
import { describe, expect, it } from "@effect/vitest"
import { join } from "node:path"
import { DatabaseSync } from "node:sqlite"
import { runCli, tempDir, writeConfig } from "../support/process.ts"

describe("modelgate connections", () => {
  it("lists, updates and deletes stored connections; refuses bad values and config-file connections", { timeout: 90_000 }, async () => {
    const dir = tempDir()
    const store = join(dir, "store.db")
    const config = writeConfig(dir, {
      store: `sqlite:${store}`,
      connections: [{ id: 1, name: "from-file", dialect: "postgres", url: "postgres://f:filepw@h/db" }]
    })
    // The store exists once any command opened it; a connection added as the admin API would add it.
    expect((await runCli(["--config", config, "connections", "list"])).code).toBe(0)
    const db = new DatabaseSync(store)
    db.prepare("INSERT INTO connections (id, name, dialect, url, read_url, default_schema, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)")
      .run(2, "stored", "postgres", "postgres://u:oldpw@h/db", null, null, new Date().toISOString())

    const listed = await runCli(["--config", config, "connections", "list"])
    expect(listed.code).toBe(0)
    expect(JSON.parse(listed.stdout).map((c: { id: number; source: string }) => [c.id, c.source])).toEqual([[1, "config"], [2, "admin"]])
    expect(listed.stdout).not.toMatch(/filepw|oldpw/)

    const updated = await runCli(["--config", config, "connections", "update", "2", "--url", "postgres://u:newpw@h/db", "--default-schema", "app"])
    expect(updated.code, updated.stderr).toBe(0)
    expect(JSON.parse(updated.stdout)).toMatchObject({ id: 2, default_schema: "app" })
    expect(updated.stdout).not.toContain("newpw")
    expect(db.prepare("SELECT url, default_schema FROM connections WHERE id = 2").get()).toEqual({ url: "postgres://u:newpw@h/db", default_schema: "app" })

    // Issue 36: a tunnel and an environment, as the admin API takes them; the inline password never printed.
    const ssh = { host: "bastion", user: "tunnel", password: "tunnel-secret-pw", host_key_sha256: `SHA256:${"A".repeat(43)}` }
    const tunnelled = await runCli(["--config", config, "connections", "update", "2", "--environment", "production", "--ssh", JSON.stringify(ssh)])
    expect(tunnelled.code, tunnelled.stderr).toBe(0)
    expect(JSON.parse(tunnelled.stdout)).toMatchObject({ id: 2, environment: "production", ssh: { host: "bastion", user: "tunnel", password: "***" } })
    expect(tunnelled.stdout).not.toContain("tunnel-secret-pw")
    expect(db.prepare("SELECT environment FROM connections WHERE id = 2").get()).toEqual({ environment: "production" })
    const direct = await runCli(["--config", config, "connections", "update", "2", "--ssh", ""])
    expect(JSON.parse(direct.stdout)).toMatchObject({ id: 2, ssh: null })

    const refusals: Array<[Array<string>, string]> = [
      [["update", "2", "--ssh", "{not json"], "--ssh"],
      [["update", "2", "--ssh", JSON.stringify({ host: "b", user: "u", password: "p" })], "host_key_sha256"],
      [["update", "2", "--environment", "staging"], "environment"],
      [["update", "2", "--url", "http://x"], "url"],
      [["update", "2", "--dialect", "oracle"], "dialect"],
      [["update", "2"], "nothing to update"],
      [["update", "1", "--name", "x"], "config file"],
      [["update", "9", "--name", "x"], "no connection with id 9"],
      [["delete", "1"], "config file"]
    ]
    for (const [args, said] of refusals) {
      const result = await runCli(["--config", config, "connections", ...args])
      expect(result.code, args.join(" ")).toBe(1)
      expect(result.stderr).toContain(said)
    }

    const deleted = await runCli(["--config", config, "connections", "delete", "2"])
    expect(deleted.code).toBe(0)
    expect(db.prepare("SELECT COUNT(*) AS n FROM connections").get()).toEqual({ n: 0 })
    db.close()
  })
})
