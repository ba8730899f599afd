/**
 * Spools that cannot be lost (issue 21, item 4), on a private Postgres:
 *
 * - Two replicas sharing one data_dir are stopped together while the store is down: each spools
 *   to a file of its own, so nothing is overwritten (before, the file held half their records).
 * - The next start is SIGKILLed while it replays them (the audit table is locked, so its writes
 *   wait): the spools it took stay on disk, and the start after it writes every record once.
 * - A stop with the store down and a data_dir that cannot be written exits 1 and says how many
 *   records it could not keep (before: a log line and exit 0).
 */
import { PgClient } from "@effect/sql-pg"
import { Deferred, Effect, Layer, Redacted } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { randomBytes } from "node:crypto"
import { readdirSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Client } from "../support/pg-admin.ts"
import { startFakeOpenAI, type FakeUpstream } from "../support/fake-openai.ts"
import { ADMIN_TOKEN } from "../support/gateway.ts"
import { serveInProcess, spawnGateway, tempDir, writeConfig } from "../support/process.ts"
import { canRunPostgres, startPostgres, type Throwaway } from "../support/throwaway.ts"
import { chat, newKey, waitFor } from "../limits/support.ts"

const UPSTREAM_KEY = `sk-upstream-${randomBytes(12).toString("hex")}`

let pg: Throwaway
let fake: FakeUpstream

beforeAll(async () => {
  if (!canRunPostgres) return
  ;[pg, fake] = await Promise.all([startPostgres(), startFakeOpenAI({ apiKey: UPSTREAM_KEY })])
}, 60_000)

afterAll(async () => {
  await fake?.close()
  await pg?.destroy()
})

const spools = (dir: string) => readdirSync(dir).filter((f) => f.startsWith("audit-spool.") && f.endsWith(".jsonl"))

const configIn = (dir: string, dataDir: string) =>
  writeConfig(dir, {
    server: { data_dir: dataDir },
    store: pg.url,
    admin: { token: ADMIN_TOKEN },
    workspace: { credits: 10_000 },
    // Records stay buffered until the stop.
    audit: { flush_interval_ms: 600_000, batch_size: 100_000 },
    log: { level: "info" },
    providers: [{ name: "fake", kind: "openai", base_url: fake.url, api_key: UPSTREAM_KEY }],
    models: [{ alias: "free", id: "gpt-4o-mini-2024-07-18", provider: "fake" }]
  })

/** Holds an exclusive lock on audit_log until `release`: audit writes wait (then time out and retry). */
const lockAuditTable = async (url: string) => {
  const locked = Effect.runSync(Deferred.make<void>())
  const release = Effect.runSync(Deferred.make<void>())
  const done = Effect.gen(function*() {
    const sql = yield* SqlClient
    yield* sql.withTransaction(Effect.gen(function*() {
      yield* sql`LOCK TABLE audit_log IN ACCESS EXCLUSIVE MODE`
      yield* Deferred.succeed(locked, undefined)
      yield* Deferred.await(release)
    }))
  }).pipe(Effect.provide(PgClient.layer({ url: Redacted.make(url), maxConnections: 1 }).pipe(Layer.fresh)), Effect.runPromise)
  await Effect.runPromise(Deferred.await(locked))
  return async () => {
    Effect.runSync(Deferred.succeed(release, undefined))
    await done
  }
}

describe.skipIf(!canRunPostgres)("spools", () => {
  it("two replicas in one data_dir lose nothing, and a start killed mid-replay leaves the spools to the next", async () => {
    const dir = tempDir("modelgate-shared-")
    const [a, b] = await Promise.all([spawnGateway(configIn(tempDir("modelgate-a-"), dir)), spawnGateway(configIn(tempDir("modelgate-b-"), dir))])
    const { key } = await newKey(a.url)
    const answered: Array<string> = []
    for (let i = 0; i < 40; i++) {
      const reply = await chat(i % 2 === 0 ? a.url : b.url, key, { model: "free" })
      expect(reply.status).toBe(200)
      answered.push(reply.requestId)
    }
    await pg.kill()
    const [codeA, codeB] = await Promise.all([a.stop("SIGTERM"), b.stop("SIGTERM")])
    expect([codeA, codeB]).toEqual([0, 0])
    expect(spools(dir)).toHaveLength(2)

    await pg.start()
    const db = new Client(pg.url)
    const release = await lockAuditTable(pg.url)
    const killed = await spawnGateway(configIn(tempDir("modelgate-c-"), dir))
    await waitFor("the spools taken back", () => /took back \d+ spooled records/.test(killed.output()), 10_000)
    await killed.stop("SIGKILL")
    await release()
    // Its claims are still on disk (renamed, not deleted).
    expect(spools(dir).length).toBeGreaterThan(0)

    // The next start only has to take the spools and write them: it runs in this process.
    const next = await serveInProcess(["--config", configIn(tempDir("modelgate-d-"), dir), "serve", "--port", "0"])
    try {
      await waitFor("every answered request audited", async () => {
        const rows = await db.query<{ request_id: string }>("SELECT request_id FROM audit_log")
        const stored = new Set(rows.map((r) => r.request_id))
        return answered.every((id) => stored.has(id))
      }, 15_000)
      const [dupes] = await db.query<{ n: string }>(
        "SELECT COUNT(*) AS n FROM (SELECT request_id FROM audit_log GROUP BY request_id HAVING COUNT(*) > 1) d"
      )
      expect(Number(dupes!.n)).toBe(0)
      await waitFor("the spools deleted once written", () => spools(dir).length === 0)
    } finally {
      await next.stop()
    }
  }, 120_000)

  it("a stop that could keep its records nowhere exits 1 and says how many", async () => {
    const dir = tempDir("modelgate-nowhere-")
    // A data_dir under a regular file: not writable, whoever runs the test (root included).
    const file = join(dir, "not-a-directory")
    writeFileSync(file, "")
    const gateway = await spawnGateway(configIn(dir, join(file, "data")))
    const { key } = await newKey(gateway.url)
    for (let i = 0; i < 5; i++) expect((await chat(gateway.url, key, { model: "free" })).status).toBe(200)
    await pg.kill()
    try {
      expect(await gateway.stop("SIGTERM")).toBe(1)
      // The admin call and the five chats at least.
      const said = /stopped without keeping (\d+) records/.exec(gateway.output())
      expect(said).not.toBeNull()
      expect(Number(said![1])).toBeGreaterThanOrEqual(6)
    } finally {
      await pg.start()
    }
  }, 60_000)
})
