/**
 * SQLite writes a batch of audit records on its raw connection, one prepared statement per record
 * (issue 38); while another fiber's SqlClient transaction holds the connection, through the client
 * in one statement (as Postgres always does). Both must write the same rows, and merge a
 * `replica_lost` record with its served one the same way, in either order.
 */
import { Effect, Layer, ManagedRuntime } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { AuditRecord } from "../../../src/domain/records.ts"
import { AuditRepo } from "../../../src/services/store/AuditRepo.ts"
import { layerSqliteClient } from "../../../src/services/store/sqlite-client.ts"
import { StoreLayer } from "../../../src/services/store/StoreLayer.ts"

const record = (i: number, extra: Partial<AuditRecord> = {}): AuditRecord => ({
  request_id: `req_${i}`,
  ts: new Date(Date.UTC(2026, 10, 28, 0, 0, i)).toISOString(),
  key_id: "key_t",
  method: "POST",
  endpoint: "/v1/chat/completions",
  status: 200,
  error: null,
  model: "m",
  provider: "p",
  tool: null,
  connection_id: null,
  credits: 1,
  prompt_tokens: 3,
  completion_tokens: 4,
  cache_read_tokens: 2,
  end_user: "alice",
  team_id: "team_a",
  duration_ms: 1.5,
  stream: true,
  client_addr: "127.0.0.1",
  details: { n: i },
  ...extra
})
const served = (i: number) => record(i)
const lost = (i: number) => record(i, { status: 503, error: "replica_lost", credits: 0, prompt_tokens: null, completion_tokens: null, details: { refunded: i } })

describe("audit batches on SQLite: the raw connection and the SqlClient write alike", () => {
  let dir: string
  let runtime: ManagedRuntime.ManagedRuntime<AuditRepo | SqlClient, unknown>
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "modelgate-audit-insert-"))
    const file = join(dir, "store.db")
    // Migrated by the store layer, then opened as the repository and a client over one connection.
    await Effect.runPromise(Effect.scoped(Layer.build(StoreLayer.fromUrl(`sqlite:${file}`))))
    runtime = ManagedRuntime.make(AuditRepo.layer.pipe(Layer.provideMerge(layerSqliteClient(file))))
  })
  afterAll(async () => {
    await runtime?.dispose()
    rmSync(dir, { recursive: true, force: true })
  })

  it("writes each record once, a refund merged with its served record in either order, through either path", async () => {
    const rows = await runtime.runPromise(Effect.gen(function*() {
      const audit = yield* AuditRepo
      const sql = yield* SqlClient
      const inTransaction = (records: ReadonlyArray<AuditRecord>) => sql.withTransaction(audit.appendAudit(records))
      yield* audit.appendAudit([served(0), served(1), lost(2)])
      yield* inTransaction([served(3), lost(4), served(5)])
      // The other record of each request, through the other path; and the same record again.
      yield* audit.appendAudit([lost(0), served(2), served(1)])
      yield* inTransaction([lost(3), served(4), served(5)])
      return (yield* audit.queryAudit({ limit: 100, key_id: "key_t" })).items
    }))
    expect(rows.map((r) => [r.request_id, r.status, r.error, r.credits, r.prompt_tokens, r.details])).toEqual([
      ["req_5", 200, null, 1, 3, { n: 5 }],
      ["req_4", 200, "replica_lost", 0, 3, { n: 4 }],
      ["req_3", 200, "replica_lost", 0, 3, { n: 3 }],
      ["req_2", 200, "replica_lost", 0, 3, { n: 2 }],
      ["req_1", 200, null, 1, 3, { n: 1 }],
      ["req_0", 200, "replica_lost", 0, 3, { n: 0 }]
    ])
    expect(rows[0]).toMatchObject({
      stream: true, duration_ms: 1.5, cache_read_tokens: 2, cache_write_tokens: null, end_user: "alice", team_id: "team_a", client_addr: "127.0.0.1"
    })
  })
})
