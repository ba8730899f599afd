/**
 * A replica killed in the middle of a fallback chain (issue 35 item 1): the requested model's
 * deployment fails, the fallback (another price, so reserved under `<request id>.1`) streams and
 * hangs, and the replica is SIGKILLed. The survivor refunds the fallback's charge once the lease
 * lapses and records it as `replica_lost` under the request id the client was given (before: under
 * `<request id>.1`, and the client's id had no record at all). The doomed replica is a child
 * process; the survivor runs in this process.
 */
import { randomBytes } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { AuditRecord } from "../../src/domain/records.ts"
import { createPostgresDatabase, type TempDatabase } from "../support/databases.ts"
import { startFakeOpenAI, type FakeUpstream } from "../support/fake-openai.ts"
import { ADMIN_TOKEN } from "../support/gateway.ts"
import { type GatewayProcess, serveInProcess, type ServeInProcess, spawnGateway, tempDir, writeConfig } from "../support/process.ts"
import { adminCall, expectOpen, ledger, newKey, openStream, waitFor } from "../limits/support.ts"

const UPSTREAM_KEY = `sk-upstream-${randomBytes(12).toString("hex")}`
const PRICE = 5
const FALLBACK_PRICE = 3
const LEASE_SECONDS = 2

let db: TempDatabase
let failing: FakeUpstream
let backup: FakeUpstream
let doomed: GatewayProcess
let survivor: ServeInProcess

beforeAll(async () => {
  ;[db, failing, backup] = await Promise.all([
    createPostgresDatabase("mg_lost_fallback"),
    startFakeOpenAI({ apiKey: UPSTREAM_KEY }),
    startFakeOpenAI({ apiKey: UPSTREAM_KEY })
  ])
  failing.setDefault(() => ({ kind: "error", status: 500 }))
  backup.setDefault(() => ({ kind: "stall_after", chunks: 1 }))
  const config = (name: string) => {
    const dir = tempDir(`modelgate-${name}-`)
    return writeConfig(dir, {
      server: { data_dir: dir },
      store: db.url,
      admin: { token: ADMIN_TOKEN },
      workspace: { credits: 1000 },
      credits: { reservation_lease_seconds: LEASE_SECONDS },
      audit: { flush_interval_ms: 50 },
      routing: { retries: 0, backoff_ms: 1 },
      log: { level: "info" },
      providers: [
        { name: "failing", kind: "openai", base_url: failing.url, api_key: UPSTREAM_KEY },
        { name: "backup", kind: "openai", base_url: backup.url, api_key: UPSTREAM_KEY }
      ],
      models: [
        { alias: "main", id: "gpt-4o-2024-08-06", provider: "failing", credits: PRICE, fallbacks: ["spare"] },
        { alias: "spare", id: "gpt-4o-mini-2024-07-18", provider: "backup", credits: FALLBACK_PRICE }
      ]
    })
  }
  ;[doomed, survivor] = await Promise.all([
    spawnGateway(config("doomed")),
    serveInProcess(["--config", config("survivor"), "serve", "--port", "0"])
  ])
}, 60_000)

afterAll(async () => {
  await doomed?.stop("SIGKILL")
  await survivor?.stop()
  await failing?.close()
  await backup?.close()
  await db?.drop()
})

describe("a replica killed in the middle of a fallback chain", () => {
  it("leaves one replica_lost record under the request id the client was given, and the charge refunded", async () => {
    const { key } = await newKey(survivor.url)
    const balanceOf = async () => (await adminCall(survivor.url, "GET", "/workspace")).body.credits as number
    const before = await balanceOf()

    const stream = expectOpen(await openStream(doomed.url, key, { model: "main" }))
    const id = stream.requestId
    expect(id).toMatch(/^req_[0-9a-f]+$/)
    expect(failing.requests.length).toBe(1)
    // Charged at the fallback's price, under `<id>.1`.
    await waitFor("the fallback's charge", async () => (await balanceOf()) === before - FALLBACK_PRICE)

    await doomed.stop("SIGKILL")
    await waitFor("the survivor to refund it", async () => (await balanceOf()) === before, LEASE_SECONDS * 1000 * 2 + 4000)
    const refunds = (await ledger(survivor.url)).filter((r) => r.kind === "refund" && r.note?.startsWith("replica_lost"))
    expect(refunds.map((r) => r.request_id)).toEqual([`${id}.1`])

    await waitFor("the replica_lost record", async () => {
      const audit = await adminCall(survivor.url, "GET", "/audit?limit=1000")
      return (audit.body.data as Array<AuditRecord>).some((r) => r.error === "replica_lost")
    }, 5000)
    const audit = (await adminCall(survivor.url, "GET", "/audit?limit=1000")).body.data as Array<AuditRecord>
    const mine = audit.filter((r) => r.request_id === id || r.request_id.startsWith(`${id}.`))
    expect(mine).toHaveLength(1)
    expect(mine[0]).toMatchObject({ request_id: id, error: "replica_lost", status: 503, credits: 0 })
    expect(mine[0]!.details).toMatchObject({ reservation: `${id}.1`, refunded_credits: FALLBACK_PRICE })
  }, 30_000)
})
