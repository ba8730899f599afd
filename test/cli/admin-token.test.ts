/**
 * `modelgate serve` with the embedded default (loopback, no admin token) prints a one-time admin
 * token so the admin app can be opened at once; a configured token is never replaced. Each
 * gateway runs in this process: the same `serve` command line and output, without a child Node.
 */
import { describe, expect, it } from "vitest"
import { runCli, serveInProcess, tempDir, writeConfig } from "../support/process.ts"

const signIn = (url: string, token: string) =>
  fetch(`${url}/app/session`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ token }) })

describe("modelgate serve and the admin token", () => {
  it("prints a one-time admin token on loopback when none is configured, and it signs in", async () => {
    const config = writeConfig(tempDir(), { store: "sqlite::memory:" })
    const gw = await serveInProcess(["--config", config, "serve", "--port", "0"])
    try {
      await expect.poll(() => /one-time admin token[^\n]*: ([\w-]{32})\n/.exec(gw.output())?.[1], { timeout: 5000 }).toBeDefined()
      const token = /one-time admin token[^\n]*: ([\w-]{32})\n/.exec(gw.output())![1]!
      expect(gw.output()).toContain(`admin app: ${gw.url}/app`)
      expect((await signIn(gw.url, token)).status).toBe(201)
      expect((await fetch(`${gw.url}/workspace`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(200)
    } finally {
      await gw.stop()
    }
  }, 60_000)

  it("behind trust_proxy mints no one-time token: the proxy makes the admin API reachable from afar (issue 22)", async () => {
    const config = writeConfig(tempDir(), { store: "sqlite::memory:", server: { host: "127.0.0.1", port: 0, trust_proxy: true } })
    const gw = await serveInProcess(["--config", config, "serve", "--port", "0"])
    try {
      expect(gw.output()).not.toContain("one-time")
      const refused = await fetch(`${gw.url}/workspace`, { headers: { "x-forwarded-proto": "https", authorization: "Bearer anything-at-all" } })
      expect(refused.status).toBe(401)
      expect(((await refused.json()) as { message: string }).message).toContain("admin API is disabled")
    } finally {
      await gw.stop()
    }
  }, 60_000)

  it("keeps a configured token and prints none", async () => {
    const config = writeConfig(tempDir(), { store: "sqlite::memory:", admin: { token: "configured-admin-token" } })
    const gw = await serveInProcess(["--config", config, "serve", "--port", "0"])
    try {
      expect(gw.output()).not.toContain("one-time")
      expect((await signIn(gw.url, "configured-admin-token")).status).toBe(201)
    } finally {
      await gw.stop()
    }
  }, 60_000)

  it("refuses to start with the README's example token or a short one, naming admin.token and how to make one", async () => {
    for (const [token, said] of [
      ["a-long-random-admin-token", `admin.token: "a-long-random-admin-token" is a placeholder from an example; set a real secret (e.g. openssl rand -hex 32)`],
      ["short-token", "admin.token: expected at least 16 characters of random text (make one with: openssl rand -hex 32)"]
    ] as const) {
      const config = writeConfig(tempDir(), { store: "sqlite::memory:", admin: { token } })
      const result = await runCli(["--config", config, "serve", "--port", "0"])
      expect(result.code, token).toBe(1)
      expect(result.stderr, token).toContain(said)
    }
  })
})
