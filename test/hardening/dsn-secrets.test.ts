/**
 * Issue 22, finding 6 (secrets at rest): with `secrets.key`, connection DSNs added through the
 * admin API are stored sealed (the password is not in the database file), read back as given,
 * and a key rotation (new key, old one in `previous_keys`) seals them again under the new key.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { DatabaseSync } from "node:sqlite"
import { afterAll, describe, expect, it } from "vitest"
import { openWith, SEALED_PREFIX } from "../../src/services/store/secrets.ts"
import { ADMIN_TOKEN, startGateway, testConfig } from "../support/gateway.ts"
import { runCli, writeConfig } from "../support/process.ts"

const root = mkdtempSync(join(tmpdir(), "mg-secrets-"))
afterAll(() => rmSync(root, { recursive: true, force: true }))

const OLD_KEY = "old-secret-key-0123456789abcdef"
const NEW_KEY = "new-secret-key-0123456789abcdef"
const PASSWORD = "hunter2-very-secret-pw"
const file = join(root, "data", "modelgate.db")
const storedUrls = () => {
  const db = new DatabaseSync(file)
  try {
    return db.prepare("SELECT url, read_url FROM connections").all() as Array<{ url: string; read_url: string | null }>
  } finally {
    db.close()
  }
}

describe("DSNs at rest", () => {
  it("are sealed with secrets.key, served as given, and sealed again on rotation", async () => {
    const gw = await startGateway(testConfig({ store: `sqlite:${file}`, secrets: { key: OLD_KEY } }))
    try {
      const created = await gw.admin("POST", "/connections", {
        id: 1, name: "db", dialect: "postgres",
        url: `postgres://app:${PASSWORD}@127.0.0.1:5432/app`,
        read_url: `postgres://reader:${PASSWORD}@127.0.0.1:5432/app`
      })
      expect(created.status).toBe(201)
      // A changed DSN (a rotated password) is sealed as well, not stored as given until the next start.
      const patched = await gw.admin("PATCH", "/connections/1", { url: `postgres://app:${PASSWORD}@127.0.0.1:5432/app2` })
      expect(patched.status).toBe(200)
      expect(storedUrls()[0]!.url.startsWith(SEALED_PREFIX)).toBe(true)
      expect(readFileSync(file).includes(PASSWORD)).toBe(false)
      await gw.admin("PATCH", "/connections/1", { url: `postgres://app:${PASSWORD}@127.0.0.1:5432/app` })
    } finally {
      await gw.close()
    }
    const [row] = storedUrls()
    expect(row!.url.startsWith(SEALED_PREFIX)).toBe(true)
    expect(row!.read_url!.startsWith(SEALED_PREFIX)).toBe(true)
    expect(readFileSync(file).includes(PASSWORD)).toBe(false)
    expect(openWith(row!.url, OLD_KEY)).toBe(`postgres://app:${PASSWORD}@127.0.0.1:5432/app`)

    // Rotation: the new key, the old one as previous; rows are sealed again under the new key.
    const rotated = await startGateway(testConfig({ store: `sqlite:${file}`, secrets: { key: NEW_KEY, previous_keys: [OLD_KEY] } }))
    try {
      const list = await rotated.admin("GET", "/connections")
      expect(list.status).toBe(200)
      expect(((await list.json()) as { data: Array<{ id: number }> }).data.map((c) => c.id)).toEqual([1])
    } finally {
      await rotated.close()
    }
    const [after] = storedUrls()
    expect(openWith(after!.url, NEW_KEY)).toBe(`postgres://app:${PASSWORD}@127.0.0.1:5432/app`)
    expect(openWith(after!.read_url!, NEW_KEY)).toBe(`postgres://reader:${PASSWORD}@127.0.0.1:5432/app`)
    expect(openWith(after!.url, OLD_KEY)).toBeUndefined()
  })

  it("without secrets.key, a store holding sealed DSNs is refused at start, naming the setting", async () => {
    const dir = join(root, "no-key")
    const store = join(dir, "modelgate.db")
    const gw = await startGateway(testConfig({ store: `sqlite:${store}`, secrets: { key: OLD_KEY } }))
    try {
      const created = await gw.admin("POST", "/connections", { id: 7, name: "db", dialect: "postgres", url: `postgres://app:${PASSWORD}@127.0.0.1:5432/app` })
      expect(created.status).toBe(201)
    } finally {
      await gw.close()
    }
    // The same store, the key forgotten: start fails (not a 500 when the connection is used).
    await expect(startGateway(testConfig({ store: `sqlite:${store}` }))).rejects.toThrow(/no secrets\.key is configured/)
    const config = writeConfig(dir, { store: `sqlite:${store}`, admin: { token: ADMIN_TOKEN }, log: { level: "none" } })
    const served = await runCli(["--config", config, "serve", "--port", "0"])
    expect(served.code).toBe(1)
    expect(served.stderr).toMatch(/^modelgate: the store holds sealed connection DSNs \(connection 7\) and no secrets\.key is configured: set secrets\.key \(or MODELGATE_SECRETS_KEY\)/)
    expect(served.stderr).not.toContain(PASSWORD)
    // The key kept as a previous one only (sealing turned off) still opens them: that starts.
    const previous = await startGateway(testConfig({ store: `sqlite:${store}`, secrets: { previous_keys: [OLD_KEY] } }))
    try {
      expect((await previous.admin("GET", "/connections")).status).toBe(200)
    } finally {
      await previous.close()
    }
  })
})
