/**
 * A graceful stop while the store is down loses nothing (issue 13, decisions section 10): the
 * gateway's own Postgres is killed under a running replica that has audit records buffered and
 * paid requests in flight; the replica answers what it can, is stopped with SIGTERM, and spools
 * what the store refused (audit records and credit settlements) to its data directory. Postgres
 * comes back, the replica starts again, and writes them: every answered request has exactly one
 * audit record, every charge is settled, and the ledger sums to the balance.
 */
import { readdirSync } from "node:fs"
import { randomBytes } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Client } from "../support/pg-admin.ts"
import { startFakeOpenAI, type FakeUpstream } from "../support/fake-openai.ts"
import { ADMIN_TOKEN } from "../support/gateway.ts"
import { serveInProcess, spawnGateway, tempDir, writeConfig } from "../support/process.ts"
import { canRunPostgres, startPostgres, type Throwaway } from "../support/throwaway.ts"
import { chat, newKey, waitFor } from "../limits/support.ts"

const spools = (dir: string, stem: string) => readdirSync(dir).filter((f) => f.startsWith(`${stem}.`) && f.endsWith(".jsonl"))

const UPSTREAM_KEY = `sk-upstream-${randomBytes(12).toString("hex")}`
const PRICE = 3

let pg: Throwaway
let fake: FakeUpstream

beforeAll(async () => {
  ;[pg, fake] = await Promise.all([startPostgres(), startFakeOpenAI({ apiKey: UPSTREAM_KEY })])
}, 60_000)

afterAll(async () => {
  await fake?.close()
  await pg?.destroy()
})

describe.skipIf(!canRunPostgres)("SIGTERM while the store is down", () => {
  it("spools the audit records and credit movements the store refused, and the next start writes them all", async () => {
    const dir = tempDir("modelgate-stop-")
    const config = writeConfig(dir, {
      server: { data_dir: dir },
      store: pg.url,
      admin: { token: ADMIN_TOKEN },
      workspace: { credits: 1000 },
      // Long enough that only the outage handling and the stop write anything after the warm-up.
      audit: { flush_interval_ms: 600_000, batch_size: 100_000 },
      log: { level: "info" },
      providers: [{ name: "fake", kind: "openai", base_url: fake.url, api_key: UPSTREAM_KEY }],
      models: [{ alias: "paid", id: "gpt-4o-mini-2024-07-18", provider: "fake", credits: PRICE }]
    })
    const first = await spawnGateway(config)
    const { key } = await newKey(first.url)
    const answered: Array<string> = []
    const track = (reply: { requestId: string }) => void answered.push(reply.requestId)

    // Before the outage: served, charged, settled; their records still in the buffer.
    for (let i = 0; i < 10; i++) {
      const reply = await chat(first.url, key, { model: "paid" })
      expect(reply.status).toBe(200)
      track(reply)
    }
    // In flight when the store goes: the provider answers 1.5 s later, when nothing can be written.
    fake.setDefault(() => ({ kind: "delay", ms: 1500, then: { kind: "text", text: "late but fine" } }))
    const inFlight = Array.from({ length: 8 }, () => chat(first.url, key, { model: "paid" }))
    await waitFor("8 requests at the provider", () => fake.requests.length === 18)
    await pg.kill()
    for (const reply of await Promise.all(inFlight)) {
      expect(reply.status).toBe(200)
      track(reply)
    }
    // During the outage: what needs no store is still answered (and audited).
    for (let i = 0; i < 20; i++) {
      const reply = await fetch(`${first.url}/healthz`)
      expect(reply.status).toBe(200)
      answered.push(reply.headers.get("x-request-id")!)
    }

    expect(await first.stop("SIGTERM")).toBe(0)
    expect(first.output()).toMatch(/records spooled/)
    expect(first.output()).toMatch(/movements spooled/)
    // One spool file of this process's own per kind (issue 21: processes sharing a data_dir never write the same file).
    expect(spools(dir, "audit-spool")).toHaveLength(1)
    expect(spools(dir, "credit-outbox")).toHaveLength(1)

    await pg.start()
    // The next start only has to find and write the spools: it runs in this process.
    const second = await serveInProcess(["--config", config, "serve", "--port", "0"])
    try {
      const db = new Client(pg.url)
      await waitFor("every answered request audited", async () => {
        const rows = await db.query<{ request_id: string }>("SELECT request_id FROM audit_log")
        const stored = new Set(rows.map((r) => r.request_id))
        return answered.every((id) => stored.has(id))
      }, 10_000)
      const records = await db.query<{ request_id: string; credits: string }>("SELECT request_id, credits FROM audit_log")
      for (const id of answered) expect(records.filter((r) => r.request_id === id)).toHaveLength(1)
      // The spools were taken: a third start would not write them again.
      await waitFor("the spools deleted once written", () => spools(dir, "audit-spool").length + spools(dir, "credit-outbox").length === 0)

      // Every charge kept (all 18 were served), none left open, and the books agree.
      await waitFor("no open reservation", async () => (await db.query("SELECT 1 FROM credit_reservations")).length === 0)
      const [ws] = await db.query<{ credits: string }>("SELECT credits FROM workspaces")
      const [sum] = await db.query<{ total: string }>("SELECT SUM(amount) AS total FROM credit_ledger")
      // The store holds micro-credits (issue 33).
      expect(Number(ws!.credits)).toBe((1000 - 18 * PRICE) * 1_000_000)
      expect(Number(sum!.total)).toBe(Number(ws!.credits))
      const charged = records.filter((r) => answered.includes(r.request_id)).reduce((s, r) => s + Number(r.credits), 0)
      expect(charged).toBe(18 * PRICE * 1_000_000)
    } finally {
      await second.stop()
    }
  }, 45_000)
})
