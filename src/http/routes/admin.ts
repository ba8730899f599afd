/**
 * The admin API (docs/decisions.md section 3): key management, workspace credits and the audit trail,
 * guarded by the operator's bearer token. Same envelope as every other route.
 */
import { McpUpstreams } from "../../services/mcp/McpUpstreams.ts"
import { Clock, Effect, Schema } from "effect"
import { DecimalCredits } from "../../domain/budget-input.ts"
import { fromMicros, toMicros } from "../../domain/money.ts"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import { HttpServerResponse } from "effect/http"
import { NotFound, ValidationFailed } from "../../domain/errors.ts"
import { ModelCatalog } from "../../services/catalog/ModelCatalog.ts"
import { usageReport } from "./usage-report.ts"
import { testConnection } from "./connection-test.ts"
import { modelsRouting } from "./admin-models.ts"
import { auditChange, auditTarget } from "./admin-audit.ts"
import type { AdminAuth } from "./admin-auth.ts"
import { Audit } from "../../services/audit/Audit.ts"
import { ApiKeys, CreateKeyInput, RotateKeyInput, toKeyView, UpdateKeyInput } from "../../services/keys/ApiKeys.ts"
import { ConnectionChange, ConnectionInput, Connections, toConnectionView } from "../../services/sql/Connections.ts"
import { KeyCache } from "../../services/auth/KeyCache.ts"
import { type ApiKeyRecord, type ConnectionRecord, TRAFFIC_KINDS, type TrafficKind } from "../../domain/records.ts"
import { AuditRepo } from "../../services/store/AuditRepo.ts"
import { CreditsRepo } from "../../services/store/CreditsRepo.ts"
import { Credits } from "../../services/credits/Credits.ts"
import { CurrentRequest, RequestBody } from "../../pipelines/request.ts"
import { json } from "../../pipelines/respond.ts"
import { route } from "../router.ts"
import { decodeStrict } from "../../domain/validation.ts"
import { decodeCursor, encodeCursor, pageLimit } from "./paging.ts"
import { keysetPage } from "../../services/store/rows.ts"

export interface AdminOptions {
  readonly auth: AdminAuth
}

/** The admin API's query and body schemas: the handlers decode with them and GET /openapi.json describes them. */
export const AuditQuery = Schema.Struct({
  key_id: Schema.optional(Schema.String),
  status: Schema.optional(Schema.FiniteFromString),
  error: Schema.optional(Schema.String),
  endpoint: Schema.optional(Schema.String),
  since: Schema.optional(Schema.String),
  until: Schema.optional(Schema.String),
  cursor: Schema.optional(Schema.FiniteFromString),
  limit: Schema.optional(Schema.FiniteFromString),
  format: Schema.optional(Schema.Literals(["json", "jsonl"])),
  include: Schema.optional(Schema.String),
  exclude: Schema.optional(Schema.String),
  writes_only: Schema.optional(Schema.Literals(["true", "false"])),
  target_kind: Schema.optional(Schema.String.check(Schema.isMaxLength(50))),
  target_id: Schema.optional(Schema.String.check(Schema.isMaxLength(200)))
})

/** GET /api-keys: a page of keys and the filters, all combined with AND (paging.ts, KeysRepo.pageKeys). */
export const KeysQuery = Schema.Struct({
  limit: Schema.optional(Schema.String),
  cursor: Schema.optional(Schema.String),
  name: Schema.optional(Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(200))),
  status: Schema.optional(Schema.Literals(["active", "inactive", "expired"])),
  model: Schema.optional(Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(200))),
  last_used_before: Schema.optional(Schema.String.check(Schema.isMaxLength(40))),
  last_used_after: Schema.optional(Schema.String.check(Schema.isMaxLength(40))),
  team_id: Schema.optional(Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(64)))
})

/** GET /connections: a page at a time by id (paging.ts). */
export const ConnectionsQuery = Schema.Struct({ limit: Schema.optional(Schema.String), cursor: Schema.optional(Schema.String) })

export { UsageQuery } from "./usage-report.ts"

export const TopUp = Schema.Struct({
  /** Credits to add: a decimal of at most six fractional digits (issue 33). */
  credits: DecimalCredits.check(Schema.makeFilter((n: number) => n > 0, { expected: "more than 0 credits" })),
  note: Schema.optional(Schema.String.check(Schema.isMaxLength(500)))
})

export const LedgerQuery = Schema.Struct({
  cursor: Schema.optional(Schema.FiniteFromString),
  limit: Schema.optional(Schema.FiniteFromString),
  request_id: Schema.optional(Schema.String),
  key_id: Schema.optional(Schema.String),
  kind: Schema.optional(Schema.Literals(["initial", "charge", "refund", "topup"]))
})

export const ApproveToolsInput = Schema.Struct({
  tools: Schema.optional(Schema.Array(Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(128))).check(Schema.isMaxLength(1000)))
})
export const GrantInput = Schema.Struct({ role: Schema.Literals(["read", "edit"]) })

export const adminRoutes = (options: AdminOptions) => {
  const requireAdmin = options.auth.requireAdmin

  const idParam = Effect.map(CurrentRequest, (state) => state.params.id ?? "")

  const body = <S extends Schema.Top & { readonly DecodingServices: never }>(schema: S, optional = false) =>
    Effect.gen(function*() {
      const request = yield* HttpServerRequest
      const hasBody = request.headers["content-length"] !== undefined && request.headers["content-length"] !== "0" ||
        request.headers["transfer-encoding"] !== undefined
      const raw = optional && !hasBody ? {} : yield* (yield* RequestBody).jsonObject
      return yield* decodeStrict(schema)(raw)
    })

  const admin = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.andThen(requireAdmin, effect)


  /** `include=admin,app` / `exclude=app,health`: a comma-separated list of traffic kinds. */
  const kindsParam = (name: string, value: string | undefined) => {
    if (value === undefined) return Effect.succeed(undefined)
    const parts = value.split(",").map((p) => p.trim()).filter((p) => p !== "")
    const bad = parts.find((p) => !(TRAFFIC_KINDS as ReadonlyArray<string>).includes(p))
    return bad !== undefined
      ? Effect.fail(new ValidationFailed({
        message: `${name}: expected a comma-separated list of ${TRAFFIC_KINDS.join(", ")}; got "${bad.slice(0, 50)}"`,
        details: { field: name }
      }))
      : Effect.succeed(parts as ReadonlyArray<TrafficKind>)
  }


  const isoParam = (name: string, value: string | undefined) =>
    value === undefined
      ? Effect.succeed(undefined)
      : Number.isNaN(Date.parse(value))
      ? Effect.fail(new ValidationFailed({ message: `${name}: expected an ISO-8601 timestamp`, details: { field: name } }))
      : Effect.succeed(new Date(value).toISOString())



  /**
   * A connection as its audit record shows it: the redacted view, plus a marker when only the
   * credentials of a URL changed (the redacted URLs are then equal, and the change would vanish).
   */
  const connectionAudit = (before: ConnectionRecord | undefined, after: ConnectionRecord | undefined) => {
    const view = (c: ConnectionRecord | undefined) => c === undefined ? undefined : { ...toConnectionView(c) } as Record<string, unknown>
    const was = view(before)
    const now = view(after)
    if (before !== undefined && after !== undefined && was !== undefined && now !== undefined) {
      for (const field of ["url", "read_url"] as const) {
        if (before[field] !== after[field] && was[field] === now[field]) {
          was[`${field}_credentials`] = "previous"
          now[`${field}_credentials`] = "changed"
        }
      }
      // A new SSH key or password shows as "***" both times: say that it changed, never what to.
      if (JSON.stringify(before.ssh) !== JSON.stringify(after.ssh) && JSON.stringify(was.ssh) === JSON.stringify(now.ssh)) {
        was.ssh_credentials = "previous"
        now.ssh_credentials = "changed"
      }
    }
    return { target: { kind: "connection" as const, id: String((after ?? before)!.id) }, before: was, after: now }
  }

  const connectionIdParam = Effect.gen(function*() {
    const raw = (yield* CurrentRequest).params.connection_id ?? ""
    const id = Number(raw)
    if (!/^\d+$/.test(raw) || !Number.isSafeInteger(id)) {
      return yield* new ValidationFailed({ message: "connection_id: expected a positive integer", details: { field: "connection_id" } })
    }
    return id
  })

  const keyTarget = (id: string) => ({ kind: "api_key" as const, id })

  /** A change to one key, audited: the target first (so a refusal still names it), then what changed. */
  const keyChange = <E>(id: string, change: (keys: ApiKeys["Service"]) => Effect.Effect<ApiKeyRecord, E>) =>
    Effect.gen(function*() {
      yield* auditTarget(keyTarget(id))
      const keys = yield* ApiKeys
      const before = toKeyView(yield* keys.get(id), yield* Clock.currentTimeMillis)
      const after = toKeyView(yield* change(keys), yield* Clock.currentTimeMillis)
      yield* auditChange({ target: keyTarget(id), before, after })
      return after
    })

  /** `mcp_servers` names configured servers only: a typo must not look like a grant. */
  const checkMcpServers = (names: ReadonlyArray<string> | undefined) =>
    Effect.gen(function*() {
      if (names === undefined) return
      const known = (yield* McpUpstreams).names
      const index = names.findIndex((name) => !known.includes(name))
      if (index < 0) return
      return yield* new ValidationFailed({
        message: `mcp_servers.${index}: no MCP server named "${names[index]}" in mcp.servers${known.length === 0 ? " (none is configured)" : `; configured: ${known.join(", ")}`}`,
        details: { field: `mcp_servers.${index}` }
      })
    })

  /** A key as the admin API shows it: the record plus its connection grants. */
  const keyWithGrants = (record: ApiKeyRecord) =>
    Effect.map(Effect.flatMap(Connections, (c) => Effect.zip(c.grantsOf(record.id), Clock.currentTimeMillis)), ([grants, nowMs]) => ({
      ...toKeyView(record, nowMs),
      connections: grants.map((g) => ({ connection_id: g.connection_id, role: g.role }))
    }))

  return [
    route("GET", "/connections", admin(Effect.gen(function*() {
      const request = yield* HttpServerRequest
      const params = yield* decodeStrict(ConnectionsQuery)(Object.fromEntries(new URL(request.url, "http://local").searchParams))
      const limit = yield* pageLimit(params.limit)
      // Ordered by id, a number, which is the cursor as the audit trail's seq is its own.
      const after = params.cursor === undefined ? undefined : /^\d{1,15}$/.test(params.cursor) ? Number(params.cursor) : Number.NaN
      if (Number.isNaN(after)) {
        return yield* new ValidationFailed({ message: "cursor: expected the next_cursor of a previous page", details: { field: "cursor" } })
      }
      // The config's connections and the stored ones are one list, held in memory (connections are
      // few): paged here, after the merge, so both kinds page alike.
      const list = [...(yield* (yield* Connections).list)].sort((a, b) => a.id - b.id)
      const { items, last } = keysetPage(after === undefined ? list : list.filter((c) => c.id > after), limit)
      return json({ data: items.map(toConnectionView), next_cursor: last === undefined ? null : String(last.id) })
    }))),
    route("POST", "/connections/:connection_id/test", admin(Effect.gen(function*() {
      const id = yield* connectionIdParam
      const connection = yield* (yield* Connections).get(id)
      if (connection === undefined) return yield* new NotFound({ message: `no connection with id ${id}` })
      return json({ connection_id: id, results: yield* testConnection(connection) })
    }))),
    route("GET", "/models", admin(Effect.gen(function*() {
      const catalog = yield* ModelCatalog
      return json({
        data: catalog.models.map((m) => ({ name: m.alias ?? m.id, id: m.id, alias: m.alias ?? null, provider: m.provider, credits: m.credits }))
      })
    }))),
    // Upstream MCP servers behind /v1/mcp (issue 37), as this replica last saw each; never a credential.
    route("GET", "/mcp/servers", admin(Effect.gen(function*() {
      const status = yield* (yield* McpUpstreams).status
      return json({ data: status })
    }))),
    // Approves the current definitions of a server's withheld tools (all, or `tools`), which become their pins.
    route("POST", "/mcp/servers/:name/approve", admin(Effect.gen(function*() {
      const name = (yield* CurrentRequest).params.name ?? ""
      const upstreams = yield* McpUpstreams
      if (!upstreams.names.includes(name)) return yield* new NotFound({ message: `no MCP server named "${name.slice(0, 64)}" in mcp.servers` })
      yield* auditTarget({ kind: "mcp_server", id: name })
      const input = yield* body(ApproveToolsInput, true)
      const approved = yield* upstreams.approve(name, input.tools)
      yield* auditChange({ target: { kind: "mcp_server", id: name }, after: { approved: approved.map((t) => t.tool) } })
      return json({ server: name, approved })
    }))),
    // Routing state per model and deployment (issue 31): admin-models.ts.
    route("GET", "/models/routing", admin(modelsRouting)),
    route("POST", "/connections", admin(Effect.gen(function*() {
      const input = yield* body(ConnectionInput)
      const created = yield* (yield* Connections).create({
        id: input.id,
        name: input.name,
        dialect: input.dialect,
        url: input.url,
        read_url: input.read_url ?? null,
        default_schema: input.default_schema ?? null,
        environment: input.environment ?? "development",
        ssh: input.ssh ?? null
      })
      yield* auditChange(connectionAudit(undefined, created))
      return json(toConnectionView(created), 201)
    }))),
    route("PATCH", "/connections/:connection_id", admin(Effect.gen(function*() {
      const id = yield* connectionIdParam
      yield* auditTarget({ kind: "connection", id: String(id) })
      const input = yield* body(ConnectionChange)
      if (Object.keys(input).length === 0) {
        return yield* new ValidationFailed({ message: "nothing to update: send at least one field" })
      }
      const { before, after } = yield* (yield* Connections).update(id, input)
      yield* auditChange(connectionAudit(before, after))
      return json(toConnectionView(after))
    }))),
    route("DELETE", "/connections/:connection_id", admin(Effect.gen(function*() {
      const id = yield* connectionIdParam
      yield* auditTarget({ kind: "connection", id: String(id) })
      const before = yield* (yield* Connections).remove(id)
      // Keys that held grants on it: their cached grants are stale now.
      yield* (yield* KeyCache).invalidate
      yield* auditChange(connectionAudit(before, undefined))
      return HttpServerResponse.empty({ status: 204 })
    }))),
    route("PUT", "/api-keys/:id/connections/:connection_id", admin(Effect.gen(function*() {
      const record = yield* (yield* ApiKeys).get(yield* idParam)
      const connectionId = yield* connectionIdParam
      const input = yield* body(GrantInput)
      const target = { kind: "key_grant" as const, id: `${record.id}/${connectionId}` }
      yield* auditTarget(target)
      const before = (yield* (yield* Connections).grantsOf(record.id)).find((g) => g.connection_id === connectionId)
      const grant = yield* (yield* Connections).grant(record.id, connectionId, input.role)
      yield* (yield* KeyCache).invalidate
      yield* auditChange({
        target,
        before: before === undefined ? undefined : { key_id: record.id, connection_id: connectionId, role: before.role },
        after: { key_id: record.id, connection_id: connectionId, role: grant.role }
      })
      return json({ connection_id: grant.connection_id, role: grant.role, granted_at: grant.granted_at })
    }))),
    route("DELETE", "/api-keys/:id/connections/:connection_id", admin(Effect.gen(function*() {
      const record = yield* (yield* ApiKeys).get(yield* idParam)
      const connectionId = yield* connectionIdParam
      const target = { kind: "key_grant" as const, id: `${record.id}/${connectionId}` }
      yield* auditTarget(target)
      const before = (yield* (yield* Connections).grantsOf(record.id)).find((g) => g.connection_id === connectionId)
      yield* (yield* Connections).revoke(record.id, connectionId)
      yield* (yield* KeyCache).invalidate
      yield* auditChange({ target, before: before === undefined ? undefined : { key_id: record.id, connection_id: connectionId, role: before.role } })
      return HttpServerResponse.empty({ status: 204 })
    }))),
    route("POST", "/api-keys", admin(Effect.gen(function*() {
      const input = yield* body(CreateKeyInput)
      yield* checkMcpServers(input.mcp_servers)
      const { connections, ...fields } = input
      const connectionsService = yield* Connections
      // Check every grant before the key exists, so a bad grant never leaves a half-made key.
      for (const [i, grant] of (connections ?? []).entries()) {
        if ((yield* connectionsService.get(grant.connection_id)) === undefined) {
          return yield* new ValidationFailed({
            message: `connections.${i}.connection_id: no connection with id ${grant.connection_id}`,
            details: { field: `connections.${i}.connection_id` }
          })
        }
      }
      const { key, record } = yield* (yield* ApiKeys).create(fields)
      for (const grant of connections ?? []) yield* connectionsService.grant(record.id, grant.connection_id, grant.role).pipe(Effect.orDie)
      const view = yield* keyWithGrants(record)
      yield* auditChange({ target: keyTarget(record.id), after: view })
      return json({ ...view, key }, 201)
    }))),
    route("GET", "/api-keys", admin(Effect.gen(function*() {
      const request = yield* HttpServerRequest
      const params = yield* decodeStrict(KeysQuery)(Object.fromEntries(new URL(request.url, "http://local").searchParams))
      const limit = yield* pageLimit(params.limit)
      const after = yield* decodeCursor(params.cursor, 2)
      const page = yield* (yield* ApiKeys).page({
        limit,
        after: after === undefined ? undefined : { created_at: after[0]!, id: after[1]! },
        name: params.name,
        status: params.status,
        model: params.model,
        last_used_before: yield* isoParam("last_used_before", params.last_used_before),
        last_used_after: yield* isoParam("last_used_after", params.last_used_after),
        team_id: params.team_id
      })
      // One query for the grants of the whole page, not one per key.
      const grants = yield* (yield* Connections).grantsOfKeys(page.items.map((k) => k.id))
      const nowMs = yield* Clock.currentTimeMillis
      return json({
        data: page.items.map((record) => ({
          ...toKeyView(record, nowMs),
          connections: (grants.get(record.id) ?? []).map((g) => ({ connection_id: g.connection_id, role: g.role }))
        })),
        next_cursor: page.next === undefined ? null : encodeCursor([page.next.created_at, page.next.id])
      })
    }))),
    route("GET", "/api-keys/:id", admin(Effect.gen(function*() {
      return json(yield* keyWithGrants(yield* (yield* ApiKeys).get(yield* idParam)))
    }))),
    route("PATCH", "/api-keys/:id", admin(Effect.gen(function*() {
      const id = yield* idParam
      const input = yield* body(UpdateKeyInput)
      if (Object.keys(input).length === 0) {
        return yield* new ValidationFailed({ message: "nothing to update: send at least one field" })
      }
      yield* checkMcpServers(input.mcp_servers)
      return json(yield* keyChange(id, (keys) => keys.update(id, input)))
    }))),
    route("POST", "/api-keys/:id/rotate", admin(Effect.gen(function*() {
      const id = yield* idParam
      const input = yield* body(RotateKeyInput, true)
      let key = ""
      const view = yield* keyChange(id, (keys) => Effect.map(keys.rotate(id, input), (rotated) => {
        key = rotated.key
        return rotated.record
      }))
      return json({ ...view, key })
    }))),
    route("POST", "/api-keys/:id/revoke", admin(Effect.gen(function*() {
      const id = yield* idParam
      return json(yield* keyChange(id, (keys) => keys.revoke(id)))
    }))),
    route("POST", "/api-keys/:id/budget/reset", admin(Effect.gen(function*() {
      const id = yield* idParam
      return json(yield* keyChange(id, (keys) => keys.resetBudget(id)))
    }))),
    route("DELETE", "/api-keys/:id", admin(Effect.gen(function*() {
      const id = yield* idParam
      yield* auditTarget(keyTarget(id))
      const keys = yield* ApiKeys
      const before = yield* keyWithGrants(yield* keys.get(id))
      yield* keys.remove(id)
      yield* auditChange({ target: keyTarget(id), before })
      return HttpServerResponse.empty({ status: 204 })
    }))),
    route("GET", "/workspace", admin(Effect.gen(function*() {
      const workspace = yield* Effect.orDie((yield* CreditsRepo).getWorkspace)
      return json({ ...workspace, credits: fromMicros(workspace.credits) })
    }))),
    route("POST", "/workspace/credits", Effect.flatMap(requireAdmin, (acting) => Effect.gen(function*() {
      const input = yield* body(TopUp)
      // The ledger says which identity-provider admin added credits; the admin token names no one.
      const actor = acting === undefined ? "admin" : `admin:${acting.subject}`
      const before = yield* Effect.orDie((yield* CreditsRepo).getWorkspace)
      yield* auditTarget({ kind: "workspace", id: before.id })
      const amount = toMicros(input.credits)!
      const balance = yield* (yield* Credits).topup({ amount, actor, note: input.note ?? null })
      const workspace = yield* Effect.orDie((yield* CreditsRepo).getWorkspace)
      // Other replicas' charges move the balance too: before/after are the pool around this top-up as this replica saw it.
      yield* auditChange({
        target: { kind: "workspace", id: workspace.id },
        before: { credits: fromMicros(balance - amount) },
        after: { credits: fromMicros(balance), added: input.credits, ...(input.note === undefined ? {} : { note: input.note }) }
      })
      return json({ ...workspace, credits: fromMicros(balance) })
    }))),
    route("GET", "/workspace/ledger", admin(Effect.gen(function*() {
      const request = yield* HttpServerRequest
      const url = new URL(request.url, "http://local")
      const params = yield* decodeStrict(LedgerQuery)(Object.fromEntries(url.searchParams))
      const limit = Math.min(Math.max(Math.trunc(params.limit ?? 100), 1), 1000)
      const items = yield* Effect.orDie((yield* CreditsRepo).ledger({
        before_seq: params.cursor,
        limit,
        request_id: params.request_id,
        key_id: params.key_id,
        kind: params.kind
      }))
      return json({
        data: items.map((item) => ({ ...item, amount: fromMicros(item.amount), balance_after: fromMicros(item.balance_after) })),
        next_cursor: items.length === limit ? String(items[items.length - 1]!.seq) : null
      })
    }))),
    // Spend reports (issue 33): usage-report.ts.
    route("GET", "/usage", admin(usageReport)),
    route("GET", "/audit", admin(Effect.gen(function*() {
      const request = yield* HttpServerRequest
      const url = new URL(request.url, "http://local")
      const params = yield* decodeStrict(AuditQuery)(Object.fromEntries(url.searchParams))
      const limit = Math.min(Math.max(Math.trunc(params.limit ?? 100), 1), 1000)
      const since = yield* isoParam("since", params.since)
      const until = yield* isoParam("until", params.until)
      const include = yield* kindsParam("include", params.include)
      const exclude = yield* kindsParam("exclude", params.exclude)
      // Records still in the write buffer belong in the answer: an operator reads what happened, not what was flushed.
      yield* (yield* Audit).flush
      const page = yield* Effect.orDie((yield* AuditRepo).queryAudit({
        key_id: params.key_id,
        status: params.status,
        error: params.error,
        endpoint: params.endpoint,
        since,
        until,
        before_seq: params.cursor,
        limit,
        include,
        exclude,
        writes_only: params.writes_only === "true",
        target_kind: params.target_kind,
        target_id: params.target_id
      }))
      const next_cursor = page.next_seq === null ? null : String(page.next_seq)
      const items = page.items.map((item) => ({ ...item, credits: fromMicros(item.credits) }))
      if (params.format === "jsonl") {
        const lines = items.map((item) => JSON.stringify(item)).join("\n")
        return HttpServerResponse.text(lines.length > 0 ? lines + "\n" : "", {
          contentType: "application/x-ndjson",
          headers: next_cursor === null ? {} : { "x-next-cursor": next_cursor }
        })
      }
      return json({ data: items, next_cursor })
    })))
  ]
}
