/**
 * Leases judged by one clock (issue 21, item 2). Two replicas share a private Postgres and hold
 * open charges (streams whose provider stalls): one in this process (serveInProcess), one a child
 * process whose clock runs two minutes ahead (and is killed at the end). Before the fix the fast one refunded the other's charges as
 * `replica_lost` on its first sweep, and after a store stall longer than the lease the two live
 * replicas refunded each other's. Now leases are written and compared by the store's clock, and
 * a sweeper sweeps only after a whole lease of reaching the store itself: neither refunds the
 * other. A replica that really dies is still refunded by the live one.
 */
import { execFileSync } from "node:child_process"
import { randomBytes } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Client } from "../support/pg-admin.ts"
import { startFakeOpenAI, type FakeUpstream } from "../support/fake-openai.ts"
import { ADMIN_TOKEN } from "../support/gateway.ts"
import { type GatewayProcess, serveInProcess, type ServeInProcess, spawnGateway, tempDir, writeConfig } from "../support/process.ts"
import { canRunPostgres, startPostgres, type Throwaway } from "../support/throwaway.ts"
import { expectOpen, newKey, openStream, sleep, waitFor } from "../limits/support.ts"

const UPSTREAM_KEY = `sk-upstream-${randomBytes(12).toString("hex")}`
const PRICE = 5
const LEASE_SECONDS = 2
/** Only Date.now: what the gateway read its lease times from. */
const AHEAD = "--import=data:text/javascript,const%20n=Date.now;Date.now=()=>n()+120000"

let pg: Throwaway
let fake: FakeUpstream
let normal: ServeInProcess
let ahead: GatewayProcess

beforeAll(async () => {
  if (!canRunPostgres) return
  ;[pg, fake] = await Promise.all([startPostgres(), startFakeOpenAI({ apiKey: UPSTREAM_KEY })])
  fake.setDefault(() => ({ kind: "stall_after", chunks: 1 }))
  const config = (name: string) => {
    const dir = tempDir(`modelgate-${name}-`)
    return writeConfig(dir, {
      // Its streams stall for good: a stop need not wait out the grace (15 s by default) for them.
      server: { data_dir: dir, shutdown_grace_seconds: 0 },
      store: pg.url,
      admin: { token: ADMIN_TOKEN },
      workspace: { credits: 1000 },
      credits: { reservation_lease_seconds: LEASE_SECONDS },
      audit: { flush_interval_ms: 50 },
      log: { level: "info" },
      providers: [{ name: "fake", kind: "openai", base_url: fake.url, api_key: UPSTREAM_KEY }],
      models: [{ alias: "paid", id: "gpt-4o-mini-2024-07-18", provider: "fake", credits: PRICE }]
    })
  }
  ;[normal, ahead] = await Promise.all([
    serveInProcess(["--config", config("normal"), "serve", "--port", "0"]),
    spawnGateway(config("ahead"), { NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ""} ${AHEAD}`.trim() })
  ])
}, 60_000)

afterAll(async () => {
  pg?.thaw()
  await normal?.stop()
  await ahead?.stop("SIGKILL")
  await fake?.close()
  await pg?.destroy()
})

/**
 * Waits until both replicas have swept for real, told by the store: each renews its lease
 * (`replicas.lease_until` moves on) and then sweeps, every third of a lease, and sweeps only
 * after a whole lease of renewals that reached the store. Five renewals of each seen from now on
 * span more than a lease of contact, and the fifth follows a sweep made after it.
 */
const sweptByBoth = async (db: Client, what: string) => {
  const seen = new Map<string, Set<string>>()
  const renewedEnough = () => [...seen.values()].filter((values) => values.size >= 6).length
  try {
    await waitFor(what, async () => {
      for (const row of await db.query<{ id: string; lease_until: string }>("SELECT id, lease_until FROM replicas")) {
        const values = seen.get(row.id) ?? new Set<string>()
        values.add(String(row.lease_until))
        seen.set(row.id, values)
      }
      // The first value of each is its lease as found, not a renewal.
      return renewedEnough() >= 2
    }, 60_000, 50)
  } catch (error) {
    const counts = [...seen].map(([id, values]) => `${names.get(id) ?? id}: ${values.size - 1} renewals`).join(", ")
    throw new Error(`${(error as Error).message} (seen: ${counts || "no replica row"}; ${await sessions(db)}; ${complaints()})`)
  }
}

/** The last warnings and errors each replica logged (a lease loop that failed says so now). */
const complaints = () =>
  [["in-process replica", normal.output()], ["replica ahead", ahead.output()]]
    .map(([name, output]) => `${name} logged: ${output!.split("\n").filter((line) => /warn|error/i.test(line)).slice(-6).join(" / ") || "no warning"}`)
    .join("; ")

/** Which replica is which, from the owners of the reservations each opened. */
const names = new Map<string, string>()

/** What a replica that stopped renewing was doing: the gateways' sessions, and any backend left stopped. */
const sessions = async (db: Client): Promise<string> => {
  const rows = await db.query<{ pid: number; state: string; wait: string; query: string }>(
    `SELECT pid, state, coalesce(wait_event, '') AS wait, left(query, 60) AS query FROM pg_stat_activity
     WHERE application_name = 'modelgate' ORDER BY pid`
  )
  let stopped = ""
  try {
    stopped = execFileSync("ps", ["-o", "pid=,stat=", "-p", rows.map((r) => r.pid).join(",") || "1"], { encoding: "utf8" })
      .split("\n").filter((line) => /\sT/.test(line)).join(" ")
  } catch {
    // ps found none of them
  }
  return `sessions: ${rows.map((r) => `${r.pid} ${r.state}${r.wait ? `/${r.wait}` : ""} ${r.query}`).join(" | ")}; stopped backends: ${stopped || "none"}`
}

describe.skipIf(!canRunPostgres)("leases by the store's clock", () => {
  it("a replica whose clock is ahead, and a store stall longer than the lease, refund nothing of a live replica", async () => {
    const db = new Client(pg.url)
    const refunds = async () => (await db.query("SELECT request_id FROM credit_ledger WHERE kind = 'refund'")).length
    const { key } = await newKey(normal.url)
    const onNormal = await Promise.all(Array.from({ length: 2 }, () => openStream(normal.url, key, { model: "paid" })))
    const onAhead = await Promise.all(Array.from({ length: 2 }, () => openStream(ahead.url, key, { model: "paid" })))
    for (const s of [...onNormal, ...onAhead]) expectOpen(s)
    await waitFor("four open reservations", async () => (await db.query("SELECT 1 FROM credit_reservations")).length === 4)
    for (const [stream, name] of [[onNormal[0]!, "in-process replica"], [onAhead[0]!, "replica ahead"]] as const) {
      const [row] = await db.query<{ owner: string }>("SELECT owner FROM credit_reservations WHERE request_id = $1 OR request_id LIKE $1 || '.%'", [stream.requestId])
      if (row !== undefined) names.set(row.owner, name)
    }

    // Sweeps of both, proven by the store, not waited for by a clock: nobody is refunded.
    await sweptByBoth(db, "sweeps of both replicas")
    expect(await refunds()).toBe(0)

    // The store stalls for twice the lease (the fault's length, a sleep): every lease lapses
    // meanwhile; after it, both replicas renew and sweep again, and nobody sweeps the other.
    pg.freeze()
    await sleep(LEASE_SECONDS * 1000 * 2)
    pg.thaw()
    await sweptByBoth(db, "sweeps of both replicas after the stall")
    expect(await refunds()).toBe(0)
    expect((await db.query("SELECT 1 FROM credit_reservations")).length).toBe(4)

    // A replica that really dies is refunded by the live one, once its lease lapsed by the store's clock.
    await ahead.stop("SIGKILL")
    await waitFor("the live replica to refund the dead one's two charges", async () => (await refunds()) === 2, LEASE_SECONDS * 1000 * 3 + 5000)
    const lost = await db.query<{ owner: string }>("SELECT note FROM credit_ledger WHERE kind = 'refund' AND note LIKE 'replica_lost%'")
    expect(lost).toHaveLength(2)
    const [ws] = await db.query<{ credits: string }>("SELECT credits FROM workspaces")
    const [sum] = await db.query<{ total: string }>("SELECT SUM(amount) AS total FROM credit_ledger")
    expect(Number(sum!.total)).toBe(Number(ws!.credits))
    // The store holds micro-credits (issue 33).
    expect(Number(ws!.credits)).toBe((1000 - 2 * PRICE) * 1_000_000)
  }, 90_000)
})
