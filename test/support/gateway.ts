/**
 * Starts the real gateway in this process on an ephemeral port, from a config written the way
 * an operator writes it (YAML-shaped object + MODELGATE_* env), and hands back its URL and the
 * services behind it for asserting database state.
 */
import { Context, Effect, Exit, Layer, Result, Scope } from "effect"
import { HttpServer } from "effect/http"
import { gatewayLayer, type GatewayOverrides } from "../../src/gateway.ts"
import { resolveConfig } from "../../src/services/config/load.ts"
import type { GatewayConfig } from "../../src/services/config/schema.ts"
import { Audit } from "../../src/services/audit/Audit.ts"
import { ApiKeys } from "../../src/services/keys/ApiKeys.ts"
import { Credits } from "../../src/services/credits/Credits.ts"
import { AuditRepo } from "../../src/services/store/AuditRepo.ts"
import { ConnectionsRepo } from "../../src/services/store/ConnectionsRepo.ts"
import { CreditsRepo } from "../../src/services/store/CreditsRepo.ts"
import { KeysRepo } from "../../src/services/store/KeysRepo.ts"
import { McpSessionsRepo } from "../../src/services/store/McpSessionsRepo.ts"
import { SqlHistoryRepo } from "../../src/services/store/SqlHistoryRepo.ts"
import { SubjectsRepo } from "../../src/services/store/SubjectsRepo.ts"
import { stringify } from "yaml"
import { sleep, WAIT_MS } from "./wait.ts"

export const ADMIN_TOKEN = "test-admin-token-0123456789"

export interface TestGateway {
  readonly url: string
  readonly config: GatewayConfig
  /** The store's repositories, the same instances the gateway's services use. */
  readonly store: {
    readonly keys: KeysRepo["Service"]
    readonly credits: CreditsRepo["Service"]
    readonly audit: AuditRepo["Service"]
    readonly connections: ConnectionsRepo["Service"]
    readonly mcpSessions: McpSessionsRepo["Service"]
    readonly sqlHistory: SqlHistoryRepo["Service"]
    readonly subjects: SubjectsRepo["Service"]
  }
  readonly audit: Audit["Service"]
  readonly credits: Credits["Service"]
  /** Creates a key through the same service the admin API uses; returns the full key and its id. */
  readonly createKey: (input?: Partial<Parameters<ApiKeys["Service"]["create"]>[0]>) => Promise<{ key: string; id: string }>
  readonly admin: (method: string, path: string, body?: unknown, headers?: Record<string, string>) => Promise<Response>
  readonly close: () => Promise<void>
}

export const testConfig = (overrides: Record<string, unknown> = {}, env: Record<string, string> = {}): GatewayConfig => {
  const base = {
    server: { host: "127.0.0.1", port: 0 },
    store: "sqlite::memory:",
    // On a Postgres store: two suites at once (npm run test:stress) on the machine's Postgres,
    // 100 connections, ran out of them with every gateway at the default 20.
    store_pool_size: 8,
    admin: { token: ADMIN_TOKEN },
    audit: { flush_interval_ms: 50 },
    log: { level: "none" },
    ...overrides
  }
  const result = resolveConfig({ fileText: stringify(base), env })
  if (Result.isFailure(result)) throw new Error(result.failure.message)
  return result.success
}

export const startGateway = async (
  config: GatewayConfig = testConfig(),
  overrides: GatewayOverrides = {}
): Promise<TestGateway> => {
  const scope = Effect.runSync(Scope.make())
  const layer = gatewayLayer(config, overrides) as Layer.Layer<any, any, never>
  const context = await Effect.runPromise(Layer.buildWithScope(layer, scope)) as Context.Context<any>
  const server = Context.get(context, HttpServer.HttpServer)
  const address = server.address as unknown as { port: number }
  const url = `http://127.0.0.1:${address.port}`
  const store = {
    keys: Context.get(context, KeysRepo),
    credits: Context.get(context, CreditsRepo),
    audit: Context.get(context, AuditRepo),
    connections: Context.get(context, ConnectionsRepo),
    mcpSessions: Context.get(context, McpSessionsRepo),
    sqlHistory: Context.get(context, SqlHistoryRepo),
    subjects: Context.get(context, SubjectsRepo)
  }
  const audit = Context.get(context, Audit)
  const keys = Context.get(context, ApiKeys)
  return {
    url,
    config,
    store,
    audit,
    credits: Context.get(context, Credits),
    createKey: async (input = {}) => {
      const created = await Effect.runPromise(keys.create({ name: "test", ...input }))
      return { key: created.key, id: created.record.id }
    },
    admin: (method, path, body, headers = {}) =>
      fetch(url + path, {
        method,
        headers: {
          authorization: `Bearer ${ADMIN_TOKEN}`,
          ...(body === undefined ? {} : { "content-type": "application/json" }),
          ...headers
        },
        body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body)
      }),
    close: () => Effect.runPromise(Scope.close(scope, Exit.void))
  }
}

/** The audit records of one request, after making sure the buffer reached the store. */
export const auditFor = async (gateway: TestGateway, requestId: string) => {
  await Effect.runPromise(gateway.audit.flush)
  const page = await Effect.runPromise(gateway.store.audit.queryAudit({ limit: 1000 }))
  return page.items.filter((r) => r.request_id === requestId)
}

/**
 * The audit records of one request once it has one (a stream's is written when the stream ends,
 * after the client read its last byte): polled, the buffer flushed each time. At the deadline it
 * returns what is there (none), for the test's own assertion to say what is missing. `keyId`
 * narrows the read to that key's records, for a gateway with more than a page of them.
 */
export const awaitAuditOf = async (gateway: TestGateway, requestId: string, keyId?: string, ms = WAIT_MS) => {
  const deadline = Date.now() + ms
  for (;;) {
    await Effect.runPromise(gateway.audit.flush)
    const page = await Effect.runPromise(gateway.store.audit.queryAudit({ limit: 1000, ...(keyId === undefined ? {} : { key_id: keyId }) }))
    const records = page.items.filter((r) => r.request_id === requestId)
    if (records.length > 0 || Date.now() > deadline) return records
    await sleep(20)
  }
}

/** A key's audit records, oldest first, once there are at least `count` (or what is there at the deadline). */
export const awaitKeyAudit = async (gateway: TestGateway, keyId: string, count: number, ms = WAIT_MS) => {
  const deadline = Date.now() + ms
  for (;;) {
    await Effect.runPromise(gateway.audit.flush)
    const page = await Effect.runPromise(gateway.store.audit.queryAudit({ key_id: keyId, limit: 1000 }))
    if (page.items.length >= count || Date.now() > deadline) return [...page.items].reverse()
    await sleep(20)
  }
}
