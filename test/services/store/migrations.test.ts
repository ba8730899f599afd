/**
 * Upgrades (issue 31): the whole migration list run from every earlier schema version, on SQLite
 * and Postgres, over rows written at that version, as earlier releases recorded them (with
 * effect/sql's Migrator, which they used). Two processes starting together on a SQLite store of the
 * previous release, and the refusal of a store newer than this release. The large-table
 * upgrades (the Postgres audit trail an operator hit, the SQLite ledger migration 18 rebuilds) are
 * migrations-large.test.ts (a file of its own: it starts first and runs beside these).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, ManagedRuntime } from "effect"
import { DatabaseSync } from "node:sqlite"
import { CreditsRepo } from "../../../src/services/store/CreditsRepo.ts"
import { KeysRepo } from "../../../src/services/store/KeysRepo.ts"
import { ResponsesRepo } from "../../../src/services/store/ResponsesRepo.ts"
import { StoreLayer } from "../../../src/services/store/StoreLayer.ts"
import { runCli, runCliProcess, writeConfig } from "../../support/process.ts"
import { count, type Dialect, ids, migrateAsEarlierRelease, NOW, type TestStore, useMigrationStores } from "./migration-stores.ts"

const { tempDir, sqliteStore, makeStore } = useMigrationStores()

const KEY_HASH = "a".repeat(64)

/**
 * Rows an earlier release wrote at schema `version`, one or more in every table that existed
 * then. Before migration 7 the audit trail held duplicates: a refunded request's two records
 * (serving + `replica_lost`), a record written twice, and a lone `replica_lost`.
 */
const rowsAt = (version: number): ReadonlyArray<string> => {
  if (version < 1) return []
  // Releases from schema 13 on write micro-credits.
  const m = version >= 13 ? 1_000_000 : 1
  const audit = (requestId: string, status: number, error: string | null, credits: number) =>
    `INSERT INTO audit_log (request_id, ts, key_id, method, endpoint, status, error, model, credits, duration_ms, stream)
     VALUES ('${requestId}', '${NOW}', 'key_1', 'POST', '/v1/chat/completions', ${status}, ${error === null ? "NULL" : `'${error}'`}, 'echo', ${credits * m}, 1.5, 0)`
  const rows = [
    `INSERT INTO workspaces (id, name, credits, created_at) VALUES ('ws_default', 'default', ${977 * m}, '${NOW}')`,
    `INSERT INTO api_keys (id, workspace_id, name, key_hash, key_hint, is_active, allowed_models, tools_enabled, budget_max_requests, budget_used, created_at, updated_at)
     VALUES ('key_1', 'ws_default', 'kept', '${KEY_HASH}', 'sk-mg-aaaa...aaaa', 1, '["echo"]', 1, 10, 3, '${NOW}', '${NOW}')`,
    audit("req_pair", 200, null, 5),
    audit("req_plain", 200, null, 1),
    ...(version < 7
      ? [audit("req_pair", 503, "replica_lost", 0), audit("req_twice", 200, null, 2), audit("req_twice", 200, null, 2), audit("req_lost", 503, "replica_lost", 0)]
      : [audit("req_twice", 200, null, 2), audit("req_lost", 503, "replica_lost", 0)])
  ]
  if (version >= 2) {
    rows.push(`INSERT INTO credit_ledger (ts, workspace_id, kind, amount, balance_after, actor, note) VALUES ('${NOW}', 'ws_default', 'initial', ${1000 * m}, ${1000 * m}, 'config', 'initial pool')`)
    rows.push(`INSERT INTO credit_ledger (ts, workspace_id, kind, amount, balance_after, actor, key_id, request_id, model) VALUES ('${NOW}', 'ws_default', 'charge', ${-23 * m}, ${977 * m}, 'key_1', 'key_1', 'req_pair', 'echo')`)
  }
  if (version >= 3) {
    rows.push(`INSERT INTO connections (id, name, dialect, url, created_at) VALUES (1, 'analytics', 'postgres', 'postgres://reader@db/analytics', '${NOW}')`)
    rows.push(`INSERT INTO key_grants (key_id, connection_id, role, granted_at) VALUES ('key_1', 1, 'read', '${NOW}')`)
    rows.push(`INSERT INTO sql_history (ts, key_id, connection_id, statement, duration_ms, kind, row_count) VALUES ('${NOW}', 'key_1', 1, 'SELECT 1', 1.2, 'rows', 1)`)
  }
  if (version >= 4) {
    rows.push(`INSERT INTO replicas (id, lease_until, started_at) VALUES ('rep_old', 1, '${NOW}')`)
    // A request in flight when the replica stopped: its reservation (with the budgets it counted against from 13 on).
    rows.push(version >= 13
      ? `INSERT INTO credit_reservations (request_id, owner, amount, key_id, model, method, endpoint, created_at, budgets)
         VALUES ('req_open', 'rep_old', ${5 * m}, 'key_1', 'echo', 'POST', '/v1/chat/completions', '${NOW}', '[["key_1",""]]')`
      : `INSERT INTO credit_reservations (request_id, owner, amount, key_id, model, method, endpoint, created_at)
         VALUES ('req_open', 'rep_old', ${5 * m}, 'key_1', 'echo', 'POST', '/v1/chat/completions', '${NOW}')`)
  }
  if (version >= 5) {
    rows.push(`INSERT INTO identity_subjects (id, issuer, subject, budget_used, first_seen_at, last_seen_at) VALUES ('sub_1', 'https://idp', 'alice', 2, '${NOW}', '${NOW}')`)
  }
  if (version >= 15) {
    rows.push(`INSERT INTO audit_log (request_id, ts, key_id, method, endpoint, status, error, model, credits, prompt_tokens, completion_tokens, cache_read_tokens, cache_write_tokens, end_user, team_id, duration_ms, stream)
     VALUES ('req_spend', '${NOW}', 'key_1', 'POST', '/v1/messages', 200, NULL, 'echo', 3000000, 120, 7, 100, 10, 'user-42', 'team_1', 1.5, 0)`)
  }
  if (version >= 13) {
    rows.push(`INSERT INTO budget_usage (holder, period_start, requests, credits) VALUES ('team_1', 'month:2026-11-01', 4, 2500000)`)
    // What migration 13 carries over from the request counters, a release from 13 on writes itself.
    rows.push(`INSERT INTO budget_usage (holder, period_start, requests, credits) VALUES ('key_1', '', 3, 0)`)
    rows.push(`INSERT INTO budget_usage (holder, period_start, requests, credits) VALUES ('sub_1', '', 2, 0)`)
  }
  if (version >= 9) {
    rows.push(`INSERT INTO stored_responses (id, owner, model, response, input_items, bytes, created_at, expires_at) VALUES ('resp_1', 'key_1', 'echo', '{}', '[]', 4, '${NOW}', '2099-01-01T00:00:00.000Z')`)
    // Its item, written with the response's times as every release does.
    rows.push(`INSERT INTO stored_response_items (owner, item_id, response_id, item, created_at, expires_at) VALUES ('key_1', 'msg_1', 'resp_1', '{"id":"msg_1"}', '${NOW}', '2099-01-01T00:00:00.000Z')`)
  }
  if (version >= 16) {
    rows.push(`INSERT INTO alerts (kind, target, period_start, threshold, period, used_micros, limit_micros, crossed_at, state, attempts, delivered_at)
     VALUES ('key_budget', 'key_1', '2026-11-01T00:00:00.000Z', '0.8', 'month', 8000000, 10000000, '${NOW}', 'delivered', 1, '${NOW}')`)
  }
  if (version >= 14) {
    rows.push(`INSERT INTO teams (id, name, allowed_models, max_credits_micros, period, requests_per_minute, created_at, updated_at)
     VALUES ('team_1', 'platform', '["echo"]', 200500000, 'month', 30, '${NOW}', '${NOW}')`)
    rows.push(`UPDATE api_keys SET team_id = 'team_1' WHERE id = 'key_1'`)
  }
  return rows
}

/** What a release's queries depend on: tables, columns (type, nullability, default) and indexes. */
const schemaOf = async (store: TestStore, dialect: Dialect) => {
  const rows = dialect === "sqlite"
    ? await store.query(
      `SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' AND name <> 'modelgate_migrations' ORDER BY type, name`
    )
    : [
      ...await store.query(
        `SELECT table_name, column_name, data_type, is_nullable, column_default FROM information_schema.columns
         WHERE table_schema = 'public' AND table_name <> 'modelgate_migrations' ORDER BY table_name, column_name`
      ),
      ...await store.query(`SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY tablename, indexname`)
    ]
  return JSON.stringify(rows)
}


for (const dialect of ["sqlite", "postgres"] as const) {
  describe(`store upgrades on ${dialect}`, () => {
    it("migrates from every earlier schema version to the same schema a new store gets, keeping every row", { timeout: 120_000 }, async () => {
      const fresh = await makeStore(dialect, "mg_mig_fresh")
      await Effect.runPromise(Effect.scoped(Layer.build(StoreLayer.fromUrl(fresh.url))))
      const expected = await schemaOf(fresh, dialect)

      // Postgres: one database, its schema emptied for each version (a database created and
      // dropped per version cost about half a second each, several at load); SQLite: a file each.
      const pgStore = dialect === "postgres" ? await makeStore(dialect, "mg_mig_versions") : undefined
      const storeAt = async (version: number) => {
        if (pgStore === undefined) return makeStore(dialect, `mg_mig_${version}`)
        await pgStore.query("DROP SCHEMA public CASCADE")
        await pgStore.query("CREATE SCHEMA public")
        return pgStore
      }
      for (const version of [0, ...ids(dialect).slice(0, -1)]) {
        const store = await storeAt(version)
        if (version > 0) await migrateAsEarlierRelease(store, dialect, version)
        for (const row of rowsAt(version)) await store.query(row)

        const runtime = ManagedRuntime.make(StoreLayer.fromUrl(store.url))
        try {
          await runtime.runPromise(Effect.void) // builds the layer: migrates
          const at = `from version ${version}`
          expect(await schemaOf(store, dialect), at).toBe(expected)
          const recorded = await store.query(`SELECT migration_id FROM modelgate_migrations ORDER BY migration_id`)
          expect(recorded.map((r) => Number(r.migration_id)), at).toEqual(ids(dialect))
          if (version === 0) continue

          // What the release reads through its own repositories.
          const { key, workspace } = await runtime.runPromise(Effect.gen(function*() {
            const key = yield* (yield* KeysRepo).findKeyByHash(KEY_HASH)
            const workspace = yield* (yield* CreditsRepo).getWorkspace
            return { key, workspace }
          }))

          expect(key, at).toMatchObject({ id: "key_1", name: "kept", allowed_models: ["echo"], tools_enabled: true, budget_used: 3 })
          // Micro-credits from migration 13 on: the same 977 credits.
          expect(workspace.credits, at).toBe(977 * 1_000_000)
          const micros = (credits: number) => credits * 1_000_000
          // A key keeps its team (issue 33), read with the key; keys from before teams have none.
          expect(key?.team ?? null, at).toEqual(version >= 14
            ? { id: "team_1", name: "platform", allowed_models: ["echo"], budget: { max_credits_micros: 200500000, period: "month" }, limits: { requests_per_minute: 30 } }
            : null)
          // One record per request: a refund merged into its serving record, a repeat dropped.
          const audit = await store.query(`SELECT request_id, status, error, credits FROM audit_log ORDER BY request_id`)
          expect(audit.map((r) => [r.request_id, Number(r.status), r.error, Number(r.credits)]), at).toEqual([
            ["req_lost", 503, "replica_lost", 0],
            ["req_pair", 200, version < 7 ? "replica_lost" : null, version < 7 ? 0 : micros(5)],
            ["req_plain", 200, null, micros(1)],
            ...(version >= 15 ? [["req_spend", 200, null, micros(3)]] : []),
            ["req_twice", 200, null, micros(2)]
          ])
          // The ledger in micros, still summing to the balance; budgets counted so far kept as never-resetting usage.
          const ledgerSum = await store.query(`SELECT SUM(amount) AS n FROM credit_ledger`)
          expect(Number(ledgerSum[0]!.n), at).toBe(version >= 2 ? micros(977) : micros(977))
          const usage = await store.query(`SELECT holder, period_start, requests, credits FROM budget_usage ORDER BY holder`)
          expect(usage.map((r) => [r.holder, r.period_start, Number(r.requests), Number(r.credits)]), at).toEqual([
            ["key_1", "", 3, 0],
            ...(version >= 5 ? [["sub_1", "", 2, 0]] : []),
            ...(version >= 13 ? [["team_1", "month:2026-11-01", 4, 2500000]] : [])
          ])
          if (version >= 15) {
            const [spend] = await store.query(`SELECT cache_read_tokens, cache_write_tokens, end_user, team_id FROM audit_log WHERE request_id = 'req_spend'`)
            expect([Number(spend!.cache_read_tokens), Number(spend!.cache_write_tokens), spend!.end_user, spend!.team_id], at).toEqual([100, 10, "user-42", "team_1"])
          }
          // The ledger: the initial pool (written by migration 2 from the workspace when it came later) plus what was charged.
          expect(await count(store, "credit_ledger"), at).toBe(version >= 2 ? 2 : 1)
          if (version >= 2) {
            // Ledger rows keep their seq and values (migration 18 rebuilds the SQLite table), read as the release reads them.
            const { byRequest, all } = await runtime.runPromise(Effect.gen(function*() {
              const credits = yield* CreditsRepo
              return { byRequest: yield* credits.ledger({ limit: 10, request_id: "req_pair" }), all: yield* credits.ledger({ limit: 10 }) }
            }))
            expect(all.map((e) => [e.seq, e.kind, e.amount, e.balance_after, e.request_id]), at).toEqual([
              [2, "charge", -micros(23), micros(977), "req_pair"],
              [1, "initial", micros(1000), micros(1000), null]
            ])
            expect(byRequest.map((e) => e.seq), at).toEqual([2])
            // New rows follow the old ones; a request is still charged once, its other rows are not limited.
            await store.query(`INSERT INTO credit_ledger (ts, workspace_id, kind, amount, balance_after, actor, key_id, request_id, model)
              VALUES ('${NOW}', 'ws_default', 'refund', 1, ${micros(977) + 1}, 'key_1', 'key_1', 'req_pair', 'echo')`)
            await expect(
              store.query(`INSERT INTO credit_ledger (ts, workspace_id, kind, amount, balance_after, actor, key_id, request_id, model)
                VALUES ('${NOW}', 'ws_default', 'charge', -1, ${micros(977)}, 'key_1', 'key_1', 'req_pair', 'echo')`),
              at
            ).rejects.toThrow()
            const after = await runtime.runPromise(Effect.flatMap(CreditsRepo, (credits) => credits.ledger({ limit: 10, request_id: "req_pair" })))
            expect(after.map((e) => [e.seq, e.kind]), at).toEqual([[3, "refund"], [2, "charge"]])
          }
          if (version >= 4) {
            // The reservation of a request in flight survives, and is found as its dead replica's.
            const orphaned = await runtime.runPromise(Effect.flatMap(CreditsRepo, (credits) => credits.orphanedReservations("rep_new", 10)))
            expect(orphaned, at).toEqual([{
              request_id: "req_open", owner: "rep_old", amount: micros(5), key_id: "key_1", model: "echo", method: "POST",
              endpoint: "/v1/chat/completions", created_at: NOW
            }])
            const [budgets] = await store.query(`SELECT budgets FROM credit_reservations WHERE request_id = 'req_open'`)
            expect(budgets!.budgets, at).toBe(version >= 13 ? `[["key_1",""]]` : null)
          }
          if (version >= 9) {
            // A stored response of the earlier release is found with its item, and deleting it
            // deletes the item (found through its expiry since migration 20).
            const { found, removed } = await runtime.runPromise(Effect.gen(function*() {
              const responses = yield* ResponsesRepo
              const found = yield* responses.findItems("key_1", ["msg_1"])
              return { found, removed: yield* responses.remove("resp_1", "key_1") }
            }))
            expect(found.map((item) => [item.item_id, item.response_id, item.item]), at).toEqual([["msg_1", "resp_1", `{"id":"msg_1"}`]])
            expect(removed, at).toBe(true)
            expect(await count(store, "stored_response_items"), at).toBe(0)
          }
          expect(await count(store, "connections"), at).toBe(version >= 3 ? 1 : 0)
          expect(await count(store, "sql_history"), at).toBe(version >= 3 ? 1 : 0)
          expect(await count(store, "replicas"), at).toBe(version >= 4 ? 1 : 0)
          expect(await count(store, "identity_subjects"), at).toBe(version >= 5 ? 1 : 0)
        } finally {
          await runtime.dispose()
        }
      }
    })

    it("refuses to convert a balance past what micro-credits hold exactly, naming it, and changes nothing", { timeout: 60_000 }, async () => {
      const store = await makeStore(dialect, "mg_mig_too_rich")
      await migrateAsEarlierRelease(store, dialect, 12)
      await store.query(`INSERT INTO workspaces (id, name, credits, created_at) VALUES ('ws_default', 'default', 9007199255, '${NOW}')`)
      const runtime = ManagedRuntime.make(StoreLayer.fromUrl(store.url))
      try {
        const failure = await runtime.runPromise(Effect.void).then(() => undefined, (error: unknown) => String(error))
        expect(failure).toContain("workspaces.credits holds 9007199255 credits, more than the 9007199254")
      } finally {
        await runtime.dispose()
      }
      expect(Number((await store.query(`SELECT credits FROM workspaces`))[0]!.credits)).toBe(9007199255)
      const recorded = await store.query(`SELECT migration_id FROM modelgate_migrations ORDER BY migration_id`)
      expect(recorded.map((r) => Number(r.migration_id))).not.toContain(13)
    })

    it("refuses a store whose schema is newer than this release, naming both versions, and changes nothing", { timeout: 60_000 }, async () => {
      const store = await makeStore(dialect, "mg_mig_newer")
      await Effect.runPromise(Effect.scoped(Layer.build(StoreLayer.fromUrl(store.url))))
      const known = ids(dialect).at(-1)!
      await store.query(`INSERT INTO modelgate_migrations (migration_id, name) VALUES (${known + 3}, 'from_a_later_release')`)
      const before = await schemaOf(store, dialect)

      const dir = tempDir()
      const config = writeConfig(dir, { store: store.url })
      const refused = await runCli(["--config", config, "keys", "list"])
      expect(refused.code).toBe(1)
      expect(refused.stderr).toContain(`the store's schema is version ${known + 3} (${known + 3}_from_a_later_release), newer than this release knows (version ${known})`)
      expect(refused.stderr).toContain(`README "Upgrading"`)
      expect(await schemaOf(store, dialect)).toBe(before)
    })
  })
}

describe("two processes starting together on one SQLite store of the previous release", () => {
  it("one migrates, the other waits for it; both start", { timeout: 120_000 }, async () => {
    const store = sqliteStore()
    await migrateAsEarlierRelease(store, "sqlite", 6)
    const db = new DatabaseSync(store.url.slice("sqlite:".length))
    db.exec(`WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 200000)
      INSERT INTO audit_log (request_id, ts, key_id, method, endpoint, status, error, model, credits, duration_ms, stream)
      SELECT 'req_' || (n % 150000), '${NOW}', 'key_1', 'POST', '/v1/chat/completions', 200, NULL, 'echo', 1, 1.5, 0 FROM g`)
    db.close()
    const config = writeConfig(tempDir(), { store: store.url })
    const both = await Promise.all([runCliProcess(["--config", config, "keys", "list"]), runCliProcess(["--config", config, "keys", "list"])])
    for (const run of both) {
      expect(run.code, run.stderr).toBe(0)
      expect(JSON.parse(run.stdout)).toEqual([])
    }
    // Exactly one of them migrated (its progress on stderr, never mixed into the command's output).
    expect(both.filter((run) => run.stderr.includes("store: migrating the schema from version 6"))).toHaveLength(1)
    const recorded = await store.query(`SELECT migration_id FROM modelgate_migrations ORDER BY migration_id`)
    expect(recorded.map((r) => Number(r.migration_id))).toEqual(ids("sqlite"))
    expect(await count(store, "audit_log")).toBe(150_000)
  })
})
