/**
 * A replica killed with SIGKILL while it holds charges (issue 13, decisions section 10): two
 * replicas share a Postgres store; the first holds open streams and a request still waiting for
 * its provider, all charged, and is killed. The survivor refunds each of them once the dead
 * replica's lease lapses, records each with the slug `replica_lost`, and the ledger sums to the
 * balance. Keys are created through the survivor, so nothing else moves credits meanwhile. The
 * doomed replica is a child process; the survivor runs in this process.
 */
import { randomBytes } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { AuditRecord } from "../../src/domain/records.ts"
import { createPostgresDatabase, type TempDatabase } from "../support/databases.ts"
import { startFakeOpenAI, type FakeUpstream } from "../support/fake-openai.ts"
import { ADMIN_TOKEN } from "../support/gateway.ts"
import { type GatewayProcess, serveInProcess, type ServeInProcess, spawnGateway, tempDir, writeConfig } from "../support/process.ts"
import { adminCall, chatRequest, expectOpen, ledger, newKey, openStream, waitFor } from "../limits/support.ts"

const UPSTREAM_KEY = `sk-upstream-${randomBytes(12).toString("hex")}`
const PRICE = 5
const LEASE_SECONDS = 2

let db: TempDatabase
let fake: FakeUpstream
let doomed: GatewayProcess
let survivor: ServeInProcess

beforeAll(async () => {
  db = await createPostgresDatabase("mg_replica_lost")
  fake = await startFakeOpenAI({ apiKey: UPSTREAM_KEY })
  // Every call streams one frame and then hangs (or, not streaming, never answers): the doomed
  // replica is killed while it holds them.
  fake.setDefault(() => ({ kind: "stall_after", chunks: 1 }))
  const config = (name: string) => {
    const dir = tempDir(`modelgate-${name}-`)
    return writeConfig(dir, {
      server: { data_dir: dir },
      store: db.url,
      admin: { token: ADMIN_TOKEN },
      workspace: { credits: 1000 },
      credits: { reservation_lease_seconds: LEASE_SECONDS },
      audit: { flush_interval_ms: 50 },
      log: { level: "info" },
      providers: [{ name: "fake", kind: "openai", base_url: fake.url, api_key: UPSTREAM_KEY }],
      models: [{ alias: "paid", id: "gpt-4o-mini-2024-07-18", provider: "fake", credits: PRICE }]
    })
  }
  // Only the doomed one must be a process of its own (it is killed); the survivor runs in this one.
  ;[doomed, survivor] = await Promise.all([
    spawnGateway(config("doomed")),
    serveInProcess(["--config", config("survivor"), "serve", "--port", "0"])
  ])
}, 60_000)

afterAll(async () => {
  await doomed?.stop("SIGKILL")
  await survivor?.stop()
  await fake?.close()
  await db?.drop()
})

describe("a replica killed while it holds charges", () => {
  it("has its open streams and unanswered requests refunded by a live replica within the lease, audited as replica_lost", async () => {
    const { key } = await newKey(survivor.url)
    const balanceOf = async () => (await adminCall(survivor.url, "GET", "/workspace")).body.credits as number
    const before = await balanceOf()

    const streams = await Promise.all(Array.from({ length: 3 }, () => openStream(doomed.url, key, { model: "paid" })))
    const ids = streams.map((s) => expectOpen(s).requestId)
    // One more, not streamed: charged, at the provider, never answered.
    const waiting = chatRequest(doomed.url, key, { model: "paid" }).catch(() => undefined)
    await waitFor("the fourth request at the provider", () => fake.requests.length === 4)
    expect(await balanceOf()).toBe(before - 4 * PRICE)

    const killedAt = Date.now()
    await doomed.stop("SIGKILL")
    await waiting
    // Lease, plus one sweep interval (lease/3), plus slack for a loaded machine.
    await waitFor("the survivor to refund all four", async () => (await balanceOf()) === before, (LEASE_SECONDS * 1000) * 2 + 4000)
    // Within the lease and one sweep interval after the kill (and never before the last renewal lapsed).
    expect(Date.now() - killedAt).toBeLessThan(LEASE_SECONDS * 1000 * 4 / 3 + 3000)

    const rows = await ledger(survivor.url)
    expect(rows.reduce((sum, r) => sum + r.amount, 0)).toBe(await balanceOf())
    const refunds = rows.filter((r) => r.kind === "refund")
    expect(refunds).toHaveLength(4)
    expect(refunds.every((r) => r.note?.startsWith("replica_lost"))).toBe(true)
    for (const id of ids) expect(refunds.some((r) => r.request_id === id)).toBe(true)

    // One record per request, by the survivor, with the slug and nothing charged.
    await waitFor("the replica_lost records", async () => {
      const audit = await adminCall(survivor.url, "GET", "/audit?limit=1000")
      return (audit.body.data as Array<AuditRecord>).filter((r) => r.error === "replica_lost").length === 4
    }, 3000)
    const audit = (await adminCall(survivor.url, "GET", "/audit?limit=1000")).body.data as Array<AuditRecord>
    const lost = audit.filter((r) => r.error === "replica_lost")
    for (const id of ids) expect(lost.filter((r) => r.request_id === id)).toHaveLength(1)
    expect(lost.every((r) => r.credits === 0 && r.status === 503)).toBe(true)
  }, 30_000)
})
