/**
 * Issue 22, finding 6 (file modes): the data directory is created 700 and the SQLite database,
 * its WAL and shared-memory files and the spool files are 600, whatever the umask (they were
 * 755 and 644 under umask 022). A database file left 644 by an older version is tightened.
 */
import { chmodSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, describe, expect, it } from "vitest"
import { writeSpool } from "../../src/services/durability/spool.ts"
import { startGateway, testConfig } from "../support/gateway.ts"

const root = mkdtempSync(join(tmpdir(), "mg-modes-"))
const modeOf = (path: string) => statSync(path).mode & 0o777

afterAll(() => rmSync(root, { recursive: true, force: true }))

describe("private data files", () => {
  it("a new SQLite store: directory 700, database, WAL and shm 600 under umask 022", async () => {
    const previous = process.umask(0o022)
    try {
      const dir = join(root, "fresh", "data")
      const gw = await startGateway(testConfig({ store: `sqlite:${join(dir, "modelgate.db")}` }))
      try {
        await gw.createKey()
        expect(modeOf(join(root, "fresh"))).toBe(0o700)
        expect(modeOf(dir)).toBe(0o700)
        for (const file of ["modelgate.db", "modelgate.db-wal", "modelgate.db-shm"]) {
          expect({ file, mode: modeOf(join(dir, file)).toString(8) }).toEqual({ file, mode: "600" })
        }
      } finally {
        await gw.close()
      }
    } finally {
      process.umask(previous)
    }
  })

  it("an existing world-readable database is tightened to 600", async () => {
    const dir = join(root, "old")
    const gw0 = await startGateway(testConfig({ store: `sqlite:${join(dir, "modelgate.db")}` }))
    await gw0.close()
    chmodSync(join(dir, "modelgate.db"), 0o644)
    const gw = await startGateway(testConfig({ store: `sqlite:${join(dir, "modelgate.db")}` }))
    try {
      expect(modeOf(join(dir, "modelgate.db"))).toBe(0o600)
    } finally {
      await gw.close()
    }
  })

  it("spool files are 600 (new and appended), their directory 700, even with umask 0", () => {
    const previous = process.umask(0)
    try {
      const path = join(root, "spooldir", "audit.spool")
      writeSpool(path, [{ a: 1 }])
      expect(modeOf(path)).toBe(0o600)
      expect(modeOf(join(root, "spooldir"))).toBe(0o700)
      const older = join(root, "spooldir", "credits.spool")
      writeFileSync(older, "{}\n", { mode: 0o644 })
      chmodSync(older, 0o644)
      writeSpool(older, [{ b: 2 }])
      expect(modeOf(older)).toBe(0o600)
    } finally {
      process.umask(previous)
    }
  })
})
