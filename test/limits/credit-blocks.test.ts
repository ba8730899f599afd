/**
 * Credit blocks across three replicas (issue 14, docs/decisions.md section 10): three
 * `modelgate serve` replicas on one Postgres store, each admitting paid requests from a block of
 * the pool it leased. What a client and the operator see must be what one process with one pool
 * would show: exactly as many paid requests served as the pool pays for, whichever replicas they
 * reach; a 402 only when the pool truly cannot pay (never because another replica holds the rest
 * in its block); refunds; and the unspent rest of a block back in the pool when its replica stops
 * or is killed. The pool is topped up to a known amount at the start of each test. The three run
 * in this process (each its own command line, layers, pools and replica id; they share only the
 * store); the replicas that stop or are killed are real child processes.
 */
import { randomBytes } from "node:crypto"
import { rmSync } from "node:fs"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createPostgresDatabase, type TempDatabase } from "../support/databases.ts"
import { startFakeOpenAI, type FakeUpstream } from "../support/fake-openai.ts"
import { Client } from "../support/pg-admin.ts"
import { serveInProcess, type ServeInProcess, spawnGateway, tempDir, writeConfig } from "../support/process.ts"
import {
  adminCall,
  ADMIN_TOKEN,
  balance,
  burst,
  chat,
  count,
  expectError,
  expectLedgerExplains,
  ledger,
  ledgerOf,
  newKey,
  summary,
  waitFor
} from "./support.ts"

const UPSTREAM_KEY = `sk-upstream-${randomBytes(12).toString("hex")}`
const POOL = 60
const LEASE_SECONDS = 2

let fake: FakeUpstream
let db: TempDatabase
let pg: Client
let dir: string
let configPath: string
const replicas: Array<ServeInProcess> = []
let key: string

/** The i-th request goes to replica i mod 3. */
const spread = (i: number) => replicas[i % 3]!.url

/**
 * Brings the pool to exactly `target`, whatever the test before left (so one failure does not
 * fail every test after it): once the replicas settled what they served (no reservation open),
 * it tops up what is missing, or spends the surplus on paid requests (one credit each).
 */
const topUpTo = async (target: number) => {
  await waitFor("every served request settled", async () => (await pg.query("SELECT 1 FROM credit_reservations")).length === 0)
  const now = await balance(replicas[0]!.url)
  if (target > now) {
    const reply = await adminCall(replicas[0]!.url, "POST", "/workspace/credits", { credits: target - now, note: "credit-blocks test" })
    expect(reply.status, reply.text).toBe(200)
  }
  for (let surplus = now - target; surplus > 0; surplus--) {
    const spent = await chat(replicas[0]!.url, key, { model: "paid" })
    expect(spent.status, spent.text).toBe(200)
  }
  // A block leased for the surplus goes back when idle: the tests start from an empty hand.
  if (now > target) await waitFor("the surplus's block returned", async () => (await blocks()).leased === 0)
  expect(await balance(replicas[1]!.url)).toBe(target)
}

/** What the blocks hold, as the store sees it: the workspace's leased credits and the blocks with credits left. */
const blocks = async () => {
  const [ws] = await pg.query<{ credits: string; leased: string }>("SELECT credits, leased FROM workspaces")
  const rows = await pg.query<{ owner: string; remaining: string }>("SELECT owner, remaining FROM credit_blocks WHERE remaining > 0")
  // The store holds micro-credits (issue 33): in credits, as the rest of this file counts.
  const credits = (micros: string) => Number(micros) / 1_000_000
  return { credits: credits(ws!.credits), leased: credits(ws!.leased), blocks: rows.map((r) => ({ owner: r.owner, remaining: credits(r.remaining) })) }
}

beforeAll(async () => {
  ;[fake, db] = await Promise.all([startFakeOpenAI({ apiKey: UPSTREAM_KEY }), createPostgresDatabase("mg_blocks")])
  pg = new Client(db.url)
  dir = tempDir("modelgate-blocks-")
  configPath = writeConfig(dir, {
    server: { host: "127.0.0.1" },
    store: db.url,
    admin: { token: ADMIN_TOKEN },
    workspace: { credits: POOL },
    limits: { requests_per_minute: 100_000, concurrent_streams: 5 },
    credits: { reservation_lease_seconds: LEASE_SECONDS, block_size: 20 },
    // Issue 39: these tests count what bursts over three replicas (in one process) are charged;
    // on a loaded machine a group commit, or a call waiting for the workspace row behind the
    // others' commits, can pass the defaults' 2 s, which answered some requests 503 (a miscount,
    // not what is tested). A frozen store's bounds are test/faults' (partition, credits-outage).
    store_timeouts: { commit_ms: 60_000, call_ms: 60_000, lock_ms: 30_000, statement_ms: 30_000 },
    audit: { flush_interval_ms: 50 },
    providers: [
      { name: "echo", kind: "echo" },
      { name: "fake", kind: "openai", base_url: fake.url, api_key: UPSTREAM_KEY }
    ],
    models: [
      { alias: "paid", id: "echo-paid", provider: "echo", credits: 1 },
      { alias: "upstream", id: "gpt-4o-mini-2024-07-18", provider: "fake", credits: 2 }
    ]
  })
  replicas.push(...await Promise.all(Array.from({ length: 3 }, () => serveInProcess(["--config", configPath, "serve", "--port", "0"]))))
  key = (await newKey(replicas[0]!.url)).key
}, 120_000)

afterAll(async () => {
  await Promise.all(replicas.map((r) => r.stop()))
  await fake?.close()
  await db?.drop()
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true })
})

describe("credit blocks across three replicas", () => {
  // First: it needs the untouched initial pool.
  it(`a pool of ${POOL}, a model costing 1, 150 concurrent requests over three replicas: exactly ${POOL} served`, async () => {
    expect(await balance(replicas[0]!.url)).toBe(POOL)
    const replies = await burst(150, spread, key, { model: "paid" })
    const served = replies.filter((r) => r.status === 200)
    expect(served, summary(replies)).toHaveLength(POOL)
    expect(count(replies, 402), summary(replies)).toBe(150 - POOL)
    for (const reply of replies.filter((r) => r.status === 402)) {
      expectError(reply, 402, "insufficient_credits")
      // Refused only once nothing was left anywhere: no replica held credits in a block.
      expect(reply.body.details).toEqual({ model: "paid", required_credits: 1, available_credits: 0 })
    }
    for (const replica of replicas) expect(await balance(replica.url)).toBe(0)
    const rows = await ledger(replicas[2]!.url)
    expectLedgerExplains(rows, 0)
    const charges = rows.filter((r) => r.kind === "charge")
    expect(new Set(charges.map((r) => r.request_id))).toEqual(new Set(served.map((r) => r.requestId)))
    // Every block spent.
    expect(await blocks()).toEqual({ credits: 0, leased: 0, blocks: [] })
  }, 60_000)

  it("no false 402 near empty: credits held in the others' blocks are handed back to the replica that needs them", async () => {
    await topUpTo(30)
    // Each replica leases a block and spends a little of it.
    for (let i = 0; i < 6; i++) expect((await chat(spread(i), key, { model: "paid" })).status).toBe(200)
    const held = await blocks()
    expect(held.blocks.length).toBeGreaterThanOrEqual(1)
    // Everything that is left, and more, asked of one replica only, at once.
    const replies = await burst(40, () => replicas[2]!.url, key, { model: "paid" })
    expect(count(replies, 200), summary(replies)).toBe(24)
    expect(count(replies, 402), summary(replies)).toBe(16)
    for (const reply of replies.filter((r) => r.status === 402)) expect(reply.body.details.available_credits).toBe(0)
    expect(await balance(replicas[0]!.url)).toBe(0)
    expectLedgerExplains(await ledger(replicas[1]!.url), 0)
  }, 60_000)

  it("a provider failure is refunded against the block: the ledger has the charge and the refund", async () => {
    await topUpTo(10)
    fake.enqueue({ kind: "error", status: 500 })
    const failed = await chat(replicas[1]!.url, key, { model: "upstream" })
    expectError(failed, 502, "provider_error")
    expect((await ledgerOf(replicas[0]!.url, failed.requestId)).map((r) => [r.kind, r.amount])).toEqual([["charge", -2], ["refund", 2]])
    expect(await balance(replicas[0]!.url)).toBe(10)
    // The refunded credits can be spent again, to the last one, on any replica.
    const replies = await burst(15, spread, key, { model: "paid" })
    expect(count(replies, 200), summary(replies)).toBe(10)
    expect(await balance(replicas[2]!.url)).toBe(0)
    expectLedgerExplains(await ledger(replicas[2]!.url), 0)
  }, 60_000)

  it("a graceful stop gives the unspent rest of the replica's block back at once", async () => {
    await topUpTo(40)
    const leaving = await spawnGateway(configPath)
    try {
      expect((await chat(leaving.url, key, { model: "paid" })).status).toBe(200)
      const before = await blocks()
      expect(before.leased).toBeGreaterThan(0)
      expect(await leaving.stop("SIGTERM")).toBe(0)
      // Well within its lease (nothing waited for a sweep): no block is left but the others' (none here).
      expect(await blocks()).toEqual({ credits: 39, leased: 0, blocks: [] })
    } finally {
      await leaving.stop("SIGKILL")
    }
    const replies = await burst(45, spread, key, { model: "paid" })
    expect(count(replies, 200), summary(replies)).toBe(39)
    expectLedgerExplains(await ledger(replicas[0]!.url), 0)
  }, 90_000)

  it("a replica killed holding a block: the sweep returns its unspent rest, and the ledger still sums", async () => {
    await topUpTo(40)
    const doomed = await spawnGateway(configPath)
    expect((await chat(doomed.url, key, { model: "paid" })).status).toBe(200)
    const held = await blocks()
    expect(held.leased).toBeGreaterThan(0)
    // Its settlement landed (a settlement still in memory at the kill would be refunded, replica_lost).
    await waitFor("the request settled", async () => (await pg.query("SELECT 1 FROM credit_reservations")).length === 0)
    await doomed.stop("SIGKILL")
    // The survivors' own blocks go back when idle; the dead one's once its lease lapsed and a sweep ran.
    await waitFor("the dead replica's block returned", async () => (await blocks()).blocks.length === 0, LEASE_SECONDS * 1000 * 3 + 5000)
    expect(await blocks()).toEqual({ credits: 39, leased: 0, blocks: [] })
    // Its one served request stays charged; the rest is spendable to the last credit.
    const replies = await burst(45, spread, key, { model: "paid" })
    expect(count(replies, 200), summary(replies)).toBe(39)
    expect(await balance(replicas[1]!.url)).toBe(0)
    expectLedgerExplains(await ledger(replicas[1]!.url), 0)
  }, 90_000)
})
