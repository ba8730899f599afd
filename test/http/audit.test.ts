/** One audit record per request, of every kind, queryable through the admin API, never holding secrets. */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { join } from "node:path"
import { DatabaseSync } from "node:sqlite"
import { auditFor, startGateway, type TestGateway } from "../support/gateway.ts"
import { rawExchange } from "../support/http.ts"
import { spawnGateway, tempDir, writeConfig } from "../support/process.ts"

describe("audit trail", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway()
  })
  afterAll(() => gw.close())

  const idOf = (response: Response) => response.headers.get("x-request-id")!

  it("records successes and every kind of rejection, with key id but never the key or the body", async () => {
    const { key, id } = await gw.createKey()
    const ok = await fetch(`${gw.url}/v1/models`, { headers: { "x-api-key": key } })
    const unauthorized = await fetch(`${gw.url}/v1/models`, { headers: { "x-api-key": "sk-mg-" + "0".repeat(32) } })
    const notFound = await fetch(`${gw.url}/v1/missing`)
    const tooLarge = await gw.admin("POST", "/api-keys", "x".repeat(1_048_577))
    const secretBody = await gw.admin("POST", "/api-keys", { name: "very-secret-name-xyz" })
    const expectations: Array<[Response, Record<string, unknown>]> = [
      [ok, { status: 200, error: null, key_id: id, endpoint: "/v1/models", method: "GET" }],
      [unauthorized, { status: 401, error: "unauthorized", key_id: null }],
      [notFound, { status: 404, error: "not_found", endpoint: "/v1/missing" }],
      [tooLarge, { status: 413, error: "request_too_large", endpoint: "/api-keys" }],
      [secretBody, { status: 201, endpoint: "/api-keys" }]
    ]
    for (const [response, expected] of expectations) {
      const records = await auditFor(gw, idOf(response))
      expect(records).toHaveLength(1)
      expect(records[0]).toMatchObject(expected)
      expect(records[0]!.client_addr).toMatch(/127\.0\.0\.1/)
      expect(records[0]!.duration_ms).toBeGreaterThanOrEqual(0)
    }
    const everything = JSON.stringify(await Effect.runPromise(gw.store.audit.queryAudit({ limit: 1000 })))
    expect(everything).not.toContain(key)
    // The body itself is never kept; an admin action's record keeps what it changed (issue 26:
    // "who changed what"), so the new key's name is there as its `after`, and only there.
    const created = (await auditFor(gw, idOf(secretBody)))[0]!
    expect(created.details).toMatchObject({ target: { kind: "api_key" }, after: { name: "very-secret-name-xyz" } })
    expect(everything.split("very-secret-name-xyz")).toHaveLength(2)
  })

  it("records requests Node refuses before routing (oversized headers)", async () => {
    const reply = await rawExchange(Number(new URL(gw.url).port), `GET / HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(20_000)}\r\n\r\n`)
    const requestId = /x-request-id: (req_[0-9a-f]+)/.exec(reply)![1]!
    const records = await auditFor(gw, requestId)
    expect(records).toMatchObject([{ status: 431, error: "headers_too_large" }])
  })

  it("is queryable with filters and cursor paging, and exportable as JSON Lines", async () => {
    const { key, id } = await gw.createKey()
    for (let i = 0; i < 7; i++) await fetch(`${gw.url}/v1/models`, { headers: { "x-api-key": key } })
    const first: any = await (await gw.admin("GET", `/audit?key_id=${id}&limit=3`)).json()
    expect(first.data).toHaveLength(3)
    expect(first.data.every((r: { key_id: string }) => r.key_id === id)).toBe(true)
    const second: any = await (await gw.admin("GET", `/audit?key_id=${id}&limit=3&cursor=${first.next_cursor}`)).json()
    const third: any = await (await gw.admin("GET", `/audit?key_id=${id}&limit=3&cursor=${second.next_cursor}`)).json()
    expect(third.data).toHaveLength(1)
    expect(third.next_cursor).toBeNull()
    const ids = [...first.data, ...second.data, ...third.data].map((r: { request_id: string }) => r.request_id)
    expect(new Set(ids).size).toBe(7)

    const failures: any = await (await gw.admin("GET", "/audit?status=404&limit=1000")).json()
    expect(failures.data.length).toBeGreaterThan(0)
    expect(failures.data.every((r: { status: number }) => r.status === 404)).toBe(true)

    const future: any = await (await gw.admin("GET", `/audit?since=${encodeURIComponent("2999-01-01T00:00:00Z")}`)).json()
    expect(future.data).toEqual([])

    const jsonl = await gw.admin("GET", `/audit?key_id=${id}&format=jsonl&limit=100`)
    expect(jsonl.headers.get("content-type")).toContain("application/x-ndjson")
    const lines = (await jsonl.text()).trim().split("\n").map((l) => JSON.parse(l))
    expect(lines).toHaveLength(7)

    const bad = await gw.admin("GET", "/audit?since=yesterday")
    expect(bad.status).toBe(400)
    const unknown = await gw.admin("GET", "/audit?colour=red")
    expect(unknown.status).toBe(400)
  })
})

describe("audit on shutdown", () => {
  it("writes records buffered just before SIGTERM to the store before the process exits", async () => {
    const dir = tempDir()
    const dbPath = join(dir, "store.db")
    // A flush interval far longer than the test: only the shutdown flush can write these records.
    const config = writeConfig(dir, { store: `sqlite:${dbPath}`, audit: { flush_interval_ms: 600_000, batch_size: 100_000 } })
    const gateway = await spawnGateway(config)
    const ids: Array<string> = []
    for (let i = 0; i < 25; i++) {
      const response = await fetch(`${gateway.url}/healthz`)
      ids.push(response.headers.get("x-request-id")!)
    }
    const code = await gateway.stop("SIGTERM")
    expect(code === 0 || code === null).toBe(true)
    const db = new DatabaseSync(dbPath)
    const rows = db.prepare("SELECT request_id FROM audit_log").all() as Array<{ request_id: string }>
    db.close()
    const stored = new Set(rows.map((r) => r.request_id))
    expect(ids.filter((id) => !stored.has(id)), gateway.output()).toEqual([])
  })
})
