/**
 * Config reload (issue 26): SIGHUP and `POST /admin/reload` put new models and providers in
 * place in the running process; a change that needs a restart is refused by name and changes
 * nothing; a file that no longer loads changes nothing.
 */
import { describe, expect, it } from "@effect/vitest"
import { writeFileSync } from "node:fs"
import { join } from "node:path"
import { stringify } from "yaml"
import { spawnGateway, tempDir, writeConfig } from "../support/process.ts"

const TOKEN = "reload-test-admin-token-0123456789"

const base = (dir: string, models: Array<Record<string, unknown>>, extra: Record<string, unknown> = {}) => ({
  server: { host: "127.0.0.1", port: 0 },
  store: `sqlite:${join(dir, "store.db")}`,
  admin: { token: TOKEN },
  providers: [{ name: "echo", kind: "echo" }],
  models,
  ...extra
})

describe("config reload", () => {
  it("SIGHUP reloads models: without a restart; refusals name what needs one", { timeout: 90_000 }, async () => {
    const dir = tempDir()
    const path = writeConfig(dir, base(dir, [{ id: "echo", provider: "echo" }]))
    const gateway = await spawnGateway(path)
    try {
      const admin = (method: string, route: string, body?: unknown) =>
        fetch(`${gateway.url}${route}`, {
          method,
          headers: { authorization: `Bearer ${TOKEN}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
          body: body === undefined ? undefined : JSON.stringify(body)
        })
      const { key } = await (await admin("POST", "/api-keys", { name: "reload" })).json() as { key: string }
      const names = async () =>
        ((await (await fetch(`${gateway.url}/v1/models`, { headers: { "x-api-key": key } })).json()) as { data: Array<{ id: string }> }).data
          .map((m) => m.id)
      const chat = (model: string) =>
        fetch(`${gateway.url}/v1/chat/completions`, {
          method: "POST",
          headers: { "x-api-key": key, "content-type": "application/json" },
          body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }] })
        })
      expect(await names()).toEqual(["echo"])
      expect((await chat("echo-two")).status).toBe(404)

      writeFileSync(path, stringify(base(dir, [{ id: "echo", provider: "echo" }, { id: "echo-two", alias: "second", provider: "echo" }])))
      gateway.child.kill("SIGHUP")
      const deadline = Date.now() + 20_000
      while (!(await names()).includes("second") && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100))
      expect(await names()).toContain("second")
      expect((await chat("second")).status).toBe(200)
      // The process is the same one: it neither ended nor restarted.
      expect(gateway.child.exitCode).toBeNull()
      expect(gateway.output()).toMatch(/config reloaded: models/)

      // A setting that needs a restart: refused by name, and the models in the same file are not applied.
      writeFileSync(path, stringify(base(dir, [{ id: "echo", provider: "echo" }], { server: { host: "localhost", port: 0 }, store: "sqlite::memory:" })))
      const refused = await admin("POST", "/admin/reload")
      expect(refused.status, await refused.clone().text()).toBe(409)
      const body = await refused.json() as { error: string; message: string; details: { restart_required: Array<string> } }
      expect(body.error).toBe("conflict")
      expect(body.details.restart_required).toEqual(expect.arrayContaining(["server.host", "store"]))
      expect(body.message).toContain("server.host")
      expect(await names()).toContain("second")

      // A file that no longer loads: 422, nothing changed.
      writeFileSync(path, "models: [ {id: 7")
      const broken = await admin("POST", "/admin/reload")
      expect(broken.status).toBe(422)
      expect(await names()).toContain("second")

      // Back to one model through the admin API, audited.
      writeFileSync(path, stringify(base(dir, [{ id: "echo", provider: "echo" }])))
      const applied = await admin("POST", "/admin/reload")
      expect(applied.status).toBe(200)
      expect(await applied.json()).toMatchObject({ reloaded: true, changed: ["models"] })
      expect(await names()).toEqual(["echo"])
      const audit = await (await admin("GET", "/audit?target_kind=config")).json() as { data: Array<{ status: number; details: unknown }> }
      expect(audit.data[0]).toMatchObject({ status: 200, details: { target: { kind: "config", id: "reload" }, after: { changed: ["models"] } } })

      // Without the admin token: 401.
      expect((await fetch(`${gateway.url}/admin/reload`, { method: "POST" })).status).toBe(401)
    } finally {
      await gateway.stop()
    }
  })
})
