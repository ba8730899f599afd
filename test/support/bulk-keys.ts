/**
 * Tens of thousands of API keys written straight into a gateway's store (issue 31): one
 * transaction of multi-row inserts (KeysRepo.insertKeys), a second or two, where the admin API
 * would take minutes. The keys follow a fixed pattern, so a test can compute which of them a
 * filter should find.
 */
import { Duration, Effect } from "effect"
import type { ApiKeyRecord } from "../../src/domain/records.ts"
import { StoreDeadline } from "../../src/services/store/StoreError.ts"
import type { TestGateway } from "./gateway.ts"

export const BULK_BASE = Date.parse("2026-01-01T00:00:00.000Z")

/**
 * Key `i`: created `floor(i / 3)` seconds after BULK_BASE (three keys share each instant, so
 * the list's order leans on the id too), every tenth revoked, every tenth from the second one
 * expired, every seventh limited to `gpt-x` and the one after to `gpt-x-mini`, every fifth last
 * used `i` seconds after BULK_BASE.
 */
export const bulkKey = (i: number): ApiKeyRecord => {
  const created = new Date(BULK_BASE + Math.floor(i / 3) * 1000).toISOString()
  return {
    id: `key_${i.toString(16).padStart(16, "0")}`,
    workspace_id: "ws_default",
    name: `bulk-${String(i).padStart(5, "0")}`,
    // Unique like a real key's hash; nothing authenticates with these.
    key_hash: `bulk-hash-${i}`,
    key_hint: "sk-mg-bulk...0000",
    is_active: i % 10 !== 0,
    allowed_models: i % 7 === 0 ? ["gpt-x"] : i % 7 === 1 ? ["gpt-x-mini"] : null,
    tools_enabled: false,
    mcp_servers: [],
    budget: null,
    budget_used: 0,
    limits: null,
    expires_at: i % 10 === 1 ? "2020-01-01T00:00:00.000Z" : i % 10 === 2 ? "2099-01-01T00:00:00.000Z" : null,
    created_at: created,
    updated_at: created,
    last_used_at: i % 5 === 0 ? new Date(BULK_BASE + i * 1000).toISOString() : null,
    previous_key_hash: null,
    previous_key_expires_at: null
  }
}

/** Inserts keys 0 .. count-1 (`bulkKey`), `rename` giving some of them other names. */
export const insertBulkKeys = (gw: TestGateway, count: number, rename: (i: number) => string | undefined = () => undefined) => {
  const keys: Array<ApiKeyRecord> = []
  for (let i = 0; i < count; i++) {
    const key = bulkKey(i)
    keys.push({ ...key, name: rename(i) ?? key.name })
  }
  // A seed, not a request: the store call's deadline (6 s by default, issue 21's outage bound)
  // is not what is tested, and 50,000 keys took longer than that on a machine at load 25.
  return Effect.runPromise(gw.store.keys.insertKeys(keys).pipe(Effect.provideService(StoreDeadline, Duration.minutes(5))))
}
