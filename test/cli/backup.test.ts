/**
 * `modelgate backup` and `modelgate restore` (issue 31, item 2). A `cp` of the store while the
 * gateway served restored a store with no keys and an old balance (the WAL was not copied). Here
 * a gateway (a child process) is charged continuously while the backup runs; the backup restored
 * to a new store holds every key and the exact balance of the moment it was made; the blocks and
 * reservations the old gateway held then are returned by the next start, and the ledger still
 * sums to the balance. Also what a backup and a restore refuse.
 */
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Migrator from "effect/sql/Migrator"
import { execFile, spawnSync } from "node:child_process"
import { randomBytes } from "node:crypto"
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { promisify } from "node:util"
import { DatabaseSync } from "node:sqlite"
import { migrationsFor } from "../../src/services/store/migrations.ts"
import { layerSqliteClient } from "../../src/services/store/sqlite-client.ts"
import { KNOWN_SCHEMA_VERSION } from "../../src/services/store/sqlite-backup.ts"
import { createPostgresDatabase } from "../support/databases.ts"
import { Client } from "../support/pg-admin.ts"
import { startFakeOpenAI } from "../support/fake-openai.ts"
import { ADMIN_TOKEN, startGateway, testConfig } from "../support/gateway.ts"
import { runCli, serveInProcess, spawnGateway, tempDir, writeConfig } from "../support/process.ts"
import { adminCall, chat, chatRequest, ledger, newKey, waitFor } from "../limits/support.ts"

const UPSTREAM_KEY = `sk-upstream-${randomBytes(12).toString("hex")}`
const PRICE = 3
const INITIAL = 1_000_000
const LEASE_SECONDS = 1

const modeOf = (path: string) => (statSync(path).mode & 0o777).toString(8)

/** Reads a store file directly (the test's own connection, closed before it returns). */
const readStore = <A>(path: string, f: (db: DatabaseSync) => A): A => {
  const db = new DatabaseSync(path, { timeout: 5000 })
  try {
    return f(db)
  } finally {
    db.close()
  }
}
const all = (db: DatabaseSync, sql: string) => db.prepare(sql).all() as Array<Record<string, any>>
const one = (db: DatabaseSync, sql: string) => db.prepare(sql).get() as Record<string, any>

describe("modelgate backup and restore: a SQLite store while it serves", () => {
  it("backs up while requests are charged; the restored store holds every key and the exact balance", { timeout: 120_000 }, async () => {
    const fake = await startFakeOpenAI({ apiKey: UPSTREAM_KEY, recordRequests: true })
    // "hold" is charged and never answered: a reservation certainly open when the backup is made.
    fake.setDefault((body) =>
      JSON.stringify(body?.messages ?? "").includes("hold") ? { kind: "hang" } : { kind: "text", text: "ok" }
    )
    const configOf = (dir: string, store: string) =>
      writeConfig(dir, {
        server: { data_dir: dir },
        store: `sqlite:${store}`,
        admin: { token: ADMIN_TOKEN },
        workspace: { credits: INITIAL },
        credits: { reservation_lease_seconds: LEASE_SECONDS },
        log: { level: "info" },
        providers: [{ name: "fake", kind: "openai", base_url: fake.url, api_key: UPSTREAM_KEY }],
        models: [{ alias: "paid", id: "gpt-4o-mini-2024-07-18", provider: "fake", credits: PRICE }]
      })
    const dir = tempDir("modelgate-backup-")
    const store = join(dir, "modelgate.db")
    const config = configOf(dir, store)
    const gateway = await spawnGateway(config)
    const held = new AbortController()
    let charging = true
    try {
      const keys = await Promise.all(Array.from({ length: 5 }, () => newKey(gateway.url)))
      const holding = chatRequest(gateway.url, keys[0]!.key, { model: "paid", messages: [{ role: "user", content: "hold" }] }, held.signal)
        .catch(() => undefined)
      await waitFor("the held request at the provider", () => fake.requests.some((r) => r.rawBody.includes("hold")), 10_000)

      // Paid requests, four at a time, until told to stop: every request id the gateway answered.
      const answered: Array<{ status: number; requestId: string }> = []
      const workers = Array.from({ length: 4 }, async (_, w) => {
        for (let i = w; charging; i += 4) {
          const reply = await chat(gateway.url, keys[i % keys.length]!.key, { model: "paid" }).catch(() => undefined)
          // A failed call (the gateway gone after a failed assertion) ends the worker; the status check below reports it.
          answered.push({ status: reply?.status ?? 0, requestId: reply?.requestId ?? "" })
          if (reply === undefined) break
        }
      })
      await waitFor("30 paid requests", () => answered.length >= 30, 20_000)
      // The held request's charge is in the store, held open as a reservation.
      await waitFor("the held request's reservation", () => readStore(store, (db) => one(db, "SELECT COUNT(*) AS n FROM credit_reservations").n >= 1), 10_000)

      const backupFile = join(dir, "backup.db")
      const atBackup = answered.length
      const made = await runCli(["--config", config, "backup", backupFile])
      expect(made.code, made.stderr).toBe(0)
      await waitFor("20 more paid requests after the backup", () => answered.length >= atBackup + 20, 20_000)
      charging = false
      await Promise.all(workers)
      expect(answered.filter((a) => a.status !== 200)).toEqual([])

      // What the backup says it holds is what its snapshot holds: consistent, with the old replica's blocks and reservations.
      const report = JSON.parse(made.stdout)
      expect(report).toMatchObject({ backup: backupFile, store, schema_version: KNOWN_SCHEMA_VERSION, keys: 5 })
      expect(report.credits).toBe(report.ledger_sum)
      expect(report.credits).toBeLessThan(INITIAL)
      expect(report.open_reservations).toBeGreaterThanOrEqual(1)
      expect(report.leased).toBeGreaterThan(0)
      expect(modeOf(backupFile)).toBe("600")
      // One file, nothing left beside it (no WAL to lose, no temporary name).
      expect(readdirSync(dir).filter((f) => f.startsWith("backup.db") || f.startsWith(".backup.db"))).toEqual(["backup.db"])

      // A restore onto the store the gateway is serving on is refused, and changes nothing.
      const busy = await runCli(["--config", config, "restore", backupFile])
      expect(busy.code).toBe(1)
      expect(busy.stderr).toContain("is in use")
      expect(readdirSync(dir).filter((f) => f.includes("before-restore"))).toEqual([])
      expect((await adminCall(gateway.url, "GET", "/workspace")).status).toBe(200)

      // Restored to a new store of its own.
      const dir2 = tempDir("modelgate-restored-")
      const restoredStore = join(dir2, "modelgate.db")
      const config2 = configOf(dir2, restoredStore)
      const restored = await runCli(["--config", config2, "restore", backupFile])
      expect(restored.code, restored.stderr).toBe(0)
      expect(JSON.parse(restored.stdout)).toMatchObject({ restored: restoredStore, kept_aside: null, keys: 5, credits: report.credits })
      expect(modeOf(restoredStore)).toBe("600")

      // The balance at backup time, exactly: the initial pool less every charge in the snapshot, plus its refunds.
      const sent = new Set([...answered.map((a) => a.requestId)])
      // The store holds micro-credits (issue 33): read in credits.
      const c = (micros: unknown) => Number(micros) / 1_000_000
      const snapshot = readStore(restoredStore, (db) => ({
        charges: all(db, "SELECT request_id, amount FROM credit_ledger WHERE kind = 'charge'").map((r): Record<string, any> => ({ ...r, amount: c(r.amount) })),
        refunds: c(one(db, "SELECT COALESCE(SUM(amount), 0) AS n FROM credit_ledger WHERE kind = 'refund'").n),
        reservations: all(db, "SELECT request_id, amount FROM credit_reservations").map((r): Record<string, any> => ({ ...r, amount: c(r.amount) })),
        blocks: c(one(db, "SELECT COALESCE(SUM(remaining), 0) AS n FROM credit_blocks").n),
        workspace: Object.fromEntries(Object.entries(one(db, "SELECT credits, leased FROM workspaces")).map(([k, v]) => [k, c(v)]))
      }))
      expect(snapshot.workspace.credits).toBe(report.credits)
      expect(snapshot.workspace.credits).toBe(INITIAL - PRICE * snapshot.charges.length + snapshot.refunds)
      expect(snapshot.charges.every((c) => c.amount === -PRICE)).toBe(true)
      // Every charge is of a request that was sent (the held one included), each charged once.
      const held1 = snapshot.reservations.map((r) => r.request_id)
      for (const charge of snapshot.charges) expect(sent.has(charge.request_id) || held1.includes(charge.request_id)).toBe(true)
      expect(new Set(snapshot.charges.map((c) => c.request_id)).size).toBe(snapshot.charges.length)
      expect(snapshot.workspace.leased).toBe(snapshot.blocks)
      expect(snapshot.workspace.leased).toBe(report.leased)
      const reserved = snapshot.reservations.reduce((sum, r) => sum + Number(r.amount), 0)

      // The restored store's gateway runs in this process: only what it serves is tested here, not
      // its process (a child Node cost about a second of CPU to start).
      const gateway2 = await serveInProcess(["--config", config2, "serve", "--port", "0"])
      try {
        // Every key authenticates on the restored store.
        for (const { key } of keys) {
          const models = await fetch(`${gateway2.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } })
          expect(models.status).toBe(200)
        }
        // The old replica is gone: after a lease, its reservations are refunded (never charged
        // twice, never lost) and its blocks returned; the ledger sums to the balance.
        const balanceOf = async () => (await adminCall(gateway2.url, "GET", "/workspace")).body.credits as number
        await waitFor("the old replica's reservations refunded", async () => (await balanceOf()) === report.credits + reserved, LEASE_SECONDS * 1000 * 3 + 10_000)
        await waitFor("the old replica's blocks returned", () =>
          readStore(restoredStore, (db) => one(db, "SELECT leased FROM workspaces").leased === 0 && one(db, "SELECT COUNT(*) AS n FROM credit_blocks").n === 0), 10_000)
        const rows = await ledger(gateway2.url)
        const balance = await balanceOf()
        expect(rows.reduce((sum, r) => sum + r.amount, 0)).toBe(balance)
        expect(balance).toBe(report.credits + reserved)
        expect(readStore(restoredStore, (db) => one(db, "SELECT COUNT(*) AS n FROM credit_reservations").n)).toBe(0)
        // A paid request on the restored store is charged from it.
        expect((await chat(gateway2.url, keys[1]!.key, { model: "paid" })).status).toBe(200)
        await waitFor("the charge", async () => (await balanceOf()) === balance - PRICE, 5000)
      } finally {
        await gateway2.stop()
      }
      held.abort()
      await holding
    } finally {
      charging = false
      held.abort()
      await gateway.stop("SIGKILL")
      await fake.close()
    }
  })
})

describe("modelgate backup and restore: what they refuse", () => {
  /** A store with one key, made by the CLI; its config. */
  const storeWithKey = async () => {
    const dir = tempDir("modelgate-backup-refusals-")
    const config = writeConfig(dir, { store: `sqlite:${join(dir, "store.db")}` })
    const created = await runCli(["--config", config, "keys", "create", "--name", "kept"])
    expect(created.code, created.stderr).toBe(0)
    return { dir, config, store: join(dir, "store.db"), key: JSON.parse(created.stdout) }
  }

  it("never overwrites a file without --force, and never leaves a half file", async () => {
    const { config, dir } = await storeWithKey()
    const target = join(dir, "existing.db")
    writeFileSync(target, "not to be lost")
    const refused = await runCli(["--config", config, "backup", target])
    expect(refused.code).toBe(1)
    expect(refused.stderr).toContain("exists: choose another name, or --force to replace it")
    expect(readFileSync(target, "utf8")).toBe("not to be lost")

    const forced = await runCli(["--config", config, "backup", target, "--force"])
    expect(forced.code, forced.stderr).toBe(0)
    expect(JSON.parse(forced.stdout)).toMatchObject({ keys: 1, schema_version: KNOWN_SCHEMA_VERSION })
    expect(modeOf(target)).toBe("600")

    const nowhere = await runCli(["--config", config, "backup", join(dir, "missing", "b.db")])
    expect(nowhere.code).toBe(1)
    expect(nowhere.stderr).toContain("does not exist")
    expect(existsSync(join(dir, "missing"))).toBe(false)
    // No temporary file left behind by any of them.
    expect(readdirSync(dir).filter((f) => f.startsWith("."))).toEqual([])
  })

  it("backs up nothing from a store that does not exist, and does not create one", async () => {
    const dir = tempDir("modelgate-backup-none-")
    const config = writeConfig(dir, { store: `sqlite:${join(dir, "store.db")}` })
    const result = await runCli(["--config", config, "backup", join(dir, "b.db")])
    expect(result.code).toBe(1)
    expect(result.stderr).toContain("no store at")
    expect(readdirSync(dir)).toEqual(["modelgate.yaml"])
  })

  it("refuses a file that is not a modelgate store, and one whose schema is newer than this release", async () => {
    const { config, dir, store } = await storeWithKey()
    const before = readFileSync(store)
    const text = join(dir, "notes.txt")
    writeFileSync(text, "hello, this is not a database at all".repeat(20))
    const notDb = await runCli(["--config", config, "restore", text])
    expect(notDb.code).toBe(1)
    expect(notDb.stderr).toContain("is not a modelgate store")

    const other = join(dir, "other.db")
    readStore(other, (db) => db.exec("CREATE TABLE t (a)"))
    const notOurs = await runCli(["--config", config, "restore", other])
    expect(notOurs.code).toBe(1)
    expect(notOurs.stderr).toContain("is not a modelgate store: it has no modelgate_migrations table")

    const newer = join(dir, "newer.db")
    expect((await runCli(["--config", config, "backup", newer])).code).toBe(0)
    readStore(newer, (db) => db.prepare("INSERT INTO modelgate_migrations (migration_id, name) VALUES (?, 'from_the_future')").run(KNOWN_SCHEMA_VERSION + 1))
    const future = await runCli(["--config", config, "restore", newer])
    expect(future.code).toBe(1)
    expect(future.stderr).toContain(`has schema version ${KNOWN_SCHEMA_VERSION + 1}, newer than this release knows (${KNOWN_SCHEMA_VERSION})`)

    // None of them touched the store, or left anything beside it.
    expect(readFileSync(store).equals(before)).toBe(true)
    expect(readdirSync(dir).filter((f) => f.includes("before-restore") || f.startsWith("."))).toEqual([])
  })

  it("restores over a stopped store, keeping the old one aside with its WAL folded in", async () => {
    const { config, dir, store, key } = await storeWithKey()
    const backupFile = join(dir, "one-key.db")
    expect((await runCli(["--config", config, "backup", backupFile])).code).toBe(0)
    // A second key after the backup: in the store kept aside, not in the restored one.
    const later = JSON.parse((await runCli(["--config", config, "keys", "create", "--name", "later"])).stdout)
    // A process that wrote to the store and died (SIGKILL) before SQLite folded its WAL into the file.
    const crash = `const { DatabaseSync } = require("node:sqlite"); const db = new DatabaseSync(${JSON.stringify(store)});
      db.exec("PRAGMA wal_autocheckpoint = 0; UPDATE api_keys SET name = 'renamed-then-crashed' WHERE name = 'later'");
      process.kill(process.pid, "SIGKILL")`
    spawnSync(process.execPath, ["-e", crash])
    expect(statSync(`${store}-wal`).size).toBeGreaterThan(0)
    const restored = await runCli(["--config", config, "restore", backupFile])
    expect(restored.code, restored.stderr).toBe(0)
    const aside = JSON.parse(restored.stdout).kept_aside as string
    expect(aside).toMatch(/store\.db\.before-restore-\d{4}-\d\d-\d\dT[\d-]+Z$/)
    // The old store's WAL is folded into the file kept aside (nothing of it beside either file).
    for (const file of [`${store}-wal`, `${store}-shm`, `${aside}-wal`]) expect(existsSync(file)).toBe(false)
    expect(readStore(aside, (db) => all(db, "SELECT id, name FROM api_keys ORDER BY name"))).toEqual([
      { id: key.id, name: "kept" },
      { id: later.id, name: "renamed-then-crashed" }
    ])
    const listed = JSON.parse((await runCli(["--config", config, "keys", "list"])).stdout) as Array<{ id: string }>
    expect(listed.map((k) => k.id)).toEqual([key.id])
  })

  it("restores over a store that no longer opens, keeping the damaged file aside", async () => {
    const { config, dir, store, key } = await storeWithKey()
    const backupFile = join(dir, "good.db")
    expect((await runCli(["--config", config, "backup", backupFile])).code).toBe(0)
    writeFileSync(store, "this store was overwritten by mistake ".repeat(200))
    expect((await runCli(["--config", config, "keys", "list"])).code).toBe(1)
    const restored = await runCli(["--config", config, "restore", backupFile])
    expect(restored.code, restored.stderr).toBe(0)
    expect(readFileSync(JSON.parse(restored.stdout).kept_aside, "utf8")).toContain("overwritten by mistake")
    const listed = JSON.parse((await runCli(["--config", config, "keys", "list"])).stdout) as Array<{ id: string }>
    expect(listed.map((k) => k.id)).toEqual([key.id])
  })

  it("restores a backup of an older schema; the next start migrates it", async () => {
    const dir = tempDir("modelgate-backup-old-")
    const old = join(dir, "old.db")
    // A store as the first release left it: the first migration only (no ledger yet).
    const early = Object.fromEntries(Object.entries(migrationsFor("sqlite")).slice(0, 1))
    await Effect.runPromise(
      Effect.scoped(Layer.build(Layer.effectDiscard(Migrator.make({})({ loader: Migrator.fromRecord(early), table: "modelgate_migrations" })).pipe(
        Layer.provide(layerSqliteClient(old))
      )))
    )
    readStore(old, (db) => {
      db.prepare("INSERT INTO workspaces (id, name, credits, created_at) VALUES ('ws_default', 'default', 70, '2025-01-01T00:00:00Z')").run()
      db.exec("PRAGMA journal_mode = DELETE")
    })
    const config = writeConfig(dir, { store: `sqlite:${join(dir, "store.db")}` })
    const restored = await runCli(["--config", config, "restore", old])
    expect(restored.code, restored.stderr).toBe(0)
    expect(JSON.parse(restored.stdout)).toMatchObject({ schema_version: 1, credits: 70, kept_aside: null })
    expect(restored.stderr).toContain(`the next start migrates it to ${KNOWN_SCHEMA_VERSION}`)
    // Any start opens it through the migrations: a key can be created, the balance is the backup's.
    expect((await runCli(["--config", config, "keys", "create", "--name", "after"])).code).toBe(0)
    readStore(join(dir, "store.db"), (db) => {
      expect(one(db, "SELECT MAX(migration_id) AS n FROM modelgate_migrations").n).toBe(KNOWN_SCHEMA_VERSION)
      // In micro-credits since migration 13 (issue 33): the same 70 credits.
      expect(one(db, "SELECT credits FROM workspaces").credits).toBe(70_000_000)
      // The ledger migration opened the ledger with the balance the store had.
      expect(one(db, "SELECT SUM(amount) AS n FROM credit_ledger").n).toBe(70_000_000)
    })
  })

  it("for a Postgres store, prints the pg_dump and pg_restore recipes (password hidden) and exits 1", async () => {
    const dir = tempDir("modelgate-backup-pg-")
    const config = writeConfig(dir, { store: "postgres://app:s3cret-pw@db.example:5432/modelgate" })
    const dump = await runCli(["--config", config, "backup", "gw.dump"])
    expect(dump.code).toBe(1)
    expect(dump.stderr).toContain("pg_dump --format=custom --file=gw.dump 'postgres://app:***@db.example:5432/modelgate'")
    const restore = await runCli(["--config", config, "restore", "gw.dump"])
    expect(restore.code).toBe(1)
    expect(restore.stderr).toContain("pg_restore --no-owner")
    for (const output of [dump.stderr, restore.stderr, dump.stdout, restore.stdout]) expect(output).not.toContain("s3cret-pw")
  })
})

const hasPgTools = ["pg_dump", "pg_restore"].every((tool) => spawnSync(tool, ["--version"]).status === 0)

describe.runIf(hasPgTools)("a Postgres store: the README's pg_dump and pg_restore recipe", () => {
  it("a dump taken while requests are charged restores to a database with every key and a balance the ledger sums to", { timeout: 90_000 }, async () => {
    const run = promisify(execFile)
    const fake = await startFakeOpenAI({ apiKey: UPSTREAM_KEY })
    const source = await createPostgresDatabase("mg_backup_src")
    const target = await createPostgresDatabase("mg_backup_dst")
    const dir = tempDir("modelgate-pgdump-")
    const configFor = (store: string) =>
      testConfig({
        store,
        workspace: { credits: INITIAL },
        credits: { reservation_lease_seconds: LEASE_SECONDS },
        providers: [{ name: "fake", kind: "openai", base_url: fake.url, api_key: UPSTREAM_KEY }],
        models: [{ alias: "paid", id: "gpt-4o-mini-2024-07-18", provider: "fake", credits: PRICE }]
      })
    const gateway = await startGateway(configFor(source.url))
    let charging = true
    try {
      const keys = await Promise.all(Array.from({ length: 3 }, () => gateway.createKey()))
      let answered = 0
      const worker = (async () => {
        for (let i = 0; charging; i++) {
          const reply = await chat(gateway.url, keys[i % keys.length]!.key, { model: "paid" }).catch(() => undefined)
          if (reply?.status !== 200) break
          answered++
        }
      })()
      await waitFor("10 paid requests", () => answered >= 10, 20_000)
      const dump = join(dir, "modelgate.dump")
      // As printed in the README, while the gateway serves.
      await run("pg_dump", ["--format=custom", `--file=${dump}`, source.url])
      charging = false
      await worker
      await run("pg_restore", ["--no-owner", "--single-transaction", "--exit-on-error", `--dbname=${target.url}`, dump])

      const restored = await startGateway(configFor(target.url))
      try {
        for (const { key } of keys) {
          expect((await fetch(`${restored.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).status).toBe(200)
        }
        const balanceOf = async () => (await adminCall(restored.url, "GET", "/workspace")).body.credits as number
        // The dumped gateway's blocks and reservations are settled by this one once their lease lapsed.
        const db = new Client(target.url)
        const state = async () =>
          (await db.query<{ leased: string; blocks: string; open: string }>(`SELECT (SELECT leased FROM workspaces) AS leased,
            (SELECT COUNT(*) FROM credit_blocks) AS blocks, (SELECT COUNT(*) FROM credit_reservations) AS open`))[0]!
        // The dump holds the dumped gateway's block (it was charging), maybe reservations too.
        expect(Number((await state()).leased)).toBeGreaterThan(0)
        await waitFor("the dumped replica's blocks returned and reservations refunded", async () => {
          const now = await state()
          return Number(now.leased) === 0 && Number(now.blocks) === 0 && Number(now.open) === 0
        }, LEASE_SECONDS * 1000 * 3 + 10_000)
        const rows = await ledger(restored.url)
        expect(rows.reduce((sum, r) => sum + r.amount, 0)).toBe(await balanceOf())
        const charges = rows.filter((r) => r.kind === "charge").length
        const refunds = rows.filter((r) => r.kind === "refund").reduce((sum, r) => sum + r.amount, 0)
        expect(charges).toBeGreaterThanOrEqual(1)
        expect(await balanceOf()).toBe(INITIAL - PRICE * charges + refunds)
      } finally {
        await restored.close()
      }
    } finally {
      charging = false
      await gateway.close()
      await fake.close()
      await source.drop()
      await target.drop()
    }
  })
})
