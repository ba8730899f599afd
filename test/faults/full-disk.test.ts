/**
 * A spool on a full file system (issue 35 items 4 and 5, and the "not covered" case of records
 * spooled before such a stop), on a private Postgres and a small tmpfs as the data directory:
 *
 * 1. A replica stops while the store is down: its audit records are spooled (the disk has room).
 * 2. The next start takes that spool but cannot write it (the audit table is locked), serves
 *    three requests, the store dies, the disk fills, and it stops: it exits 1 (its own three
 *    records are lost), its log names the cause (`ENOSPC`) and the path (before: `UnknownError:
 *    An error occurred in Effect.try`), and no `.tmp` file is left; the spool it took stays.
 * 3. With room again and the store back, the start after it writes every record of step 1 once,
 *    and removes the `.tmp` a killed process left behind.
 *
 * Mounting a tmpfs needs root (CAP_SYS_ADMIN); elsewhere the file is skipped.
 */
import { PgClient } from "@effect/sql-pg"
import { Deferred, Effect, Layer, Redacted } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { execFileSync, spawnSync } from "node:child_process"
import { randomBytes } from "node:crypto"
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startFakeOpenAI, type FakeUpstream } from "../support/fake-openai.ts"
import { ADMIN_TOKEN } from "../support/gateway.ts"
import { Client } from "../support/pg-admin.ts"
import { serveInProcess, spawnGateway, tempDir, writeConfig } from "../support/process.ts"
import { canRunPostgres, startPostgres, type Throwaway } from "../support/throwaway.ts"
import { chat, newKey, waitFor } from "../limits/support.ts"

const UPSTREAM_KEY = `sk-upstream-${randomBytes(12).toString("hex")}`

/** A 1 MiB tmpfs of the test's own, or undefined where mounting is not allowed. */
const mountTmpfs = (): string | undefined => {
  if (process.platform !== "linux" || process.getuid?.() !== 0) return undefined
  const dir = mkdtempSync(join(tmpdir(), "modelgate-full-"))
  try {
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", dir], { stdio: "ignore" })
    return dir
  } catch {
    rmSync(dir, { recursive: true, force: true })
    return undefined
  }
}

const disk = canRunPostgres ? mountTmpfs() : undefined

let pg: Throwaway
let fake: FakeUpstream

beforeAll(async () => {
  if (disk === undefined) return
  ;[pg, fake] = await Promise.all([startPostgres(), startFakeOpenAI({ apiKey: UPSTREAM_KEY })])
}, 60_000)

afterAll(async () => {
  await fake?.close()
  await pg?.destroy()
  if (disk !== undefined) {
    spawnSync("umount", [disk])
    rmSync(disk, { recursive: true, force: true })
  }
})

const configIn = (dir: string, dataDir: string) =>
  writeConfig(dir, {
    server: { data_dir: dataDir },
    store: pg.url,
    admin: { token: ADMIN_TOKEN },
    // Records stay buffered until the stop.
    audit: { flush_interval_ms: 600_000, batch_size: 100_000 },
    log: { level: "info" },
    providers: [{ name: "fake", kind: "openai", base_url: fake.url, api_key: UPSTREAM_KEY }],
    models: [{ alias: "free", id: "gpt-4o-mini-2024-07-18", provider: "fake" }]
  })

/** Holds an exclusive lock on audit_log until the store dies: audit writes wait. */
const lockAuditTable = async (url: string) => {
  const locked = Effect.runSync(Deferred.make<void>())
  Effect.gen(function*() {
    const sql = yield* SqlClient
    yield* sql.withTransaction(Effect.gen(function*() {
      yield* sql`LOCK TABLE audit_log IN ACCESS EXCLUSIVE MODE`
      yield* Deferred.succeed(locked, undefined)
      yield* Effect.never
    }))
  }).pipe(Effect.provide(PgClient.layer({ url: Redacted.make(url), maxConnections: 1 }).pipe(Layer.fresh)), Effect.runPromise).catch(() => {})
  await Effect.runPromise(Deferred.await(locked))
}

const temporaries = (dir: string) => readdirSync(dir).filter((f) => f.endsWith(".tmp"))

describe.skipIf(disk === undefined)("a spool on a full disk", () => {
  it("is named with its cause and path, leaves no .tmp, and the records spooled before it are written by the next start", async () => {
    const dir = disk!
    // 1. Spooled with room on the disk.
    const first = await spawnGateway(configIn(tempDir("modelgate-first-"), dir))
    const { key } = await newKey(first.url)
    const answered: Array<string> = []
    for (let i = 0; i < 5; i++) {
      const reply = await chat(first.url, key, { model: "free" })
      expect(reply.status).toBe(200)
      answered.push(reply.requestId)
    }
    await pg.kill()
    expect(await first.stop("SIGTERM")).toBe(0)
    expect(readdirSync(dir).filter((f) => f.startsWith("audit-spool."))).toHaveLength(1)

    // 2. Taken by the next start, which cannot write it, then stopped on a full disk.
    await pg.start()
    await lockAuditTable(pg.url)
    const second = await spawnGateway(configIn(tempDir("modelgate-second-"), dir))
    await waitFor("the spool taken back", () => /took back \d+ spooled records/.test(second.output()), 10_000)
    for (let i = 0; i < 3; i++) expect((await chat(second.url, key, { model: "free" })).status).toBe(200)
    await pg.kill()
    try {
      writeFileSync(join(dir, "filler"), Buffer.alloc(2 * 1024 * 1024))
    } catch (error) {
      expect((error as NodeJS.ErrnoException).code).toBe("ENOSPC")
    }
    // Its own records have nowhere to go: lost, and the exit says so.
    expect(await second.stop("SIGTERM")).toBe(1)
    const said = second.output()
    expect(said).toMatch(/could not spool \d+ records to .*: 3 records lost \(6 stay in the spool files this start took\)/)
    expect(said).toContain("ENOSPC")
    expect(said).toContain(join(dir, "audit-spool."))
    expect(said).not.toContain("An error occurred in Effect.try")
    expect(temporaries(dir)).toEqual([])

    // 3. Room again, the store back; a temporary of a killed process is there too.
    rmSync(join(dir, "filler"))
    const dead = spawnSync(process.execPath, ["-e", ""]).pid!
    const orphan = join(dir, `audit-spool.${dead}-0badc0de.jsonl.tmp`)
    writeFileSync(orphan, "{\"half\n")
    await pg.start()
    const db = new Client(pg.url)
    const third = await serveInProcess(["--config", configIn(tempDir("modelgate-third-"), dir), "serve", "--port", "0"])
    try {
      await waitFor("every record spooled before the full disk written", async () => {
        const rows = await db.query<{ request_id: string }>("SELECT request_id FROM audit_log")
        const stored = new Set(rows.map((r) => r.request_id))
        return answered.every((id) => stored.has(id))
      }, 15_000)
      const [dupes] = await db.query<{ n: string }>(
        "SELECT COUNT(*) AS n FROM (SELECT request_id FROM audit_log GROUP BY request_id HAVING COUNT(*) > 1) d"
      )
      expect(Number(dupes!.n)).toBe(0)
      expect(existsSync(orphan)).toBe(false)
      expect(temporaries(dir)).toEqual([])
    } finally {
      await third.stop()
    }
  }, 120_000)
})
