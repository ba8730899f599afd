/**
 * The Store: workspaces, keys and the audit trail, behind one interface with two layers
 * (SQLite for the embedded default, Postgres for replicas). Queries are written once against
 * effect/sql; only the migrations differ per dialect.
 */
import { PgClient } from "@effect/sql-pg"
import { Context, Effect, Layer, Option, Redacted } from "effect"
import * as Migrator from "effect/sql/Migrator"
import { SqlClient } from "effect/sql/SqlClient"
import { classifySqliteError, isSqlError, SqlError } from "effect/sql/SqlError"
import type {
  ApiKeyRecord,
  ConnectionRecord,
  ConnectionRole,
  GrantRecord,
  McpSessionRecord,
  SqlHistoryItem,
  AuditPage,
  AuditQuery,
  AuditRecord,
  CreditMovement,
  LedgerEntry,
  LedgerKind,
  Reservation,
  WorkspaceRecord
} from "../../domain/records.ts"
import { migrationsFor } from "./migrations.ts"
import { layerSqliteClient, SqliteDatabase } from "./sqlite-client.ts"

export const DEFAULT_WORKSPACE = "ws_default"

/** Reasons that mean the store cannot be reached or does not answer in time (not a bug in a query). */
const OUTAGE_REASONS = new Set(["ConnectionError", "AuthenticationError", "StatementTimeoutError", "LockTimeoutError"])

/** True for a store error that is an outage: the answer is 503 dependency_unavailable, not 500. */
export const isStoreOutage = (u: unknown): u is SqlError => isSqlError(u) && OUTAGE_REASONS.has(u.reason._tag)

export type KeyPatch = Partial<
  Pick<
    ApiKeyRecord,
    | "name"
    | "is_active"
    | "allowed_models"
    | "tools_enabled"
    | "budget"
    | "limits"
    | "expires_at"
    | "key_hash"
    | "key_hint"
    | "previous_key_hash"
    | "previous_key_expires_at"
    | "budget_used"
  >
>

export type AdmitResult =
  | { readonly _tag: "Admitted"; readonly balance: number | undefined }
  | { readonly _tag: "BudgetExhausted" }
  | { readonly _tag: "Insufficient"; readonly available: number }

/** What usage rows are grouped by: the UTC day (`YYYY-MM-DD`), the key, the model. */
export type UsageDimension = "day" | "key" | "model"

/**
 * The most credits the pool may hold: the largest integer a JavaScript number (and so every
 * JSON client) reads exactly. Both stores' columns are 64-bit, so this is the tighter bound.
 */
export const MAX_POOL_CREDITS = Number.MAX_SAFE_INTEGER

export interface ReservationOwner {
  readonly owner: string
  readonly method: string | null
  readonly endpoint: string | null
}

export interface UsageRow {
  readonly day?: string
  readonly key_id?: string | null
  readonly model?: string | null
  readonly requests: number
  readonly errors: number
  readonly prompt_tokens: number
  readonly completion_tokens: number
  readonly credits: number
}

export interface StoreShape {
  readonly dialect: "sqlite" | "postgres"
  readonly ensureWorkspace: (initialCredits: number) => Effect.Effect<WorkspaceRecord, SqlError>
  readonly getWorkspace: Effect.Effect<WorkspaceRecord, SqlError>
  readonly insertKey: (key: ApiKeyRecord) => Effect.Effect<void, SqlError>
  readonly findKeyByHash: (hash: string) => Effect.Effect<ApiKeyRecord | undefined, SqlError>
  readonly findKeyById: (id: string) => Effect.Effect<ApiKeyRecord | undefined, SqlError>
  readonly listKeys: Effect.Effect<ReadonlyArray<ApiKeyRecord>, SqlError>
  readonly updateKey: (id: string, patch: KeyPatch) => Effect.Effect<ApiKeyRecord | undefined, SqlError>
  readonly deleteKey: (id: string) => Effect.Effect<boolean, SqlError>
  /** Monotonic counter bumped by every key change, so caches on every replica can notice. */
  readonly keyChangeVersion: Effect.Effect<number, SqlError>
  readonly touchKeys: (lastUsed: ReadonlyMap<string, string>) => Effect.Effect<void, SqlError>
  /**
   * The paid part of admitting a request, in one transaction (one statement on Postgres, so one
   * commit on the hot path): count it against the key's budget when `budget` is set, then charge
   * `charge.amount` credits with its ledger row. A used-up budget charges nothing; a pool that
   * cannot pay leaves the budget counted (the request was admitted that far) and reports the
   * balance it found. With `reservation`, a charge (which must carry its request id) is also
   * held open in the same transaction, owned by that replica, until `settleReservation` or
   * `refundReservation` ends it.
   */
  readonly admitPaid: (input: {
    readonly keyId: string
    readonly budget: boolean
    readonly charge: CreditMovement | undefined
    readonly reservation?: ReservationOwner | undefined
  }) => Effect.Effect<AdmitResult, SqlError>
  /** The request ended and keeps its charge: the reservation goes. Idempotent; false when none was open. */
  readonly settleReservation: (requestId: string) => Effect.Effect<boolean, SqlError>
  /**
   * The request ended and gets its charge back, in one transaction with its ledger row. Idempotent:
   * only the first call for a request id (whoever makes it) refunds; the rest return undefined.
   */
  readonly refundReservation: (requestId: string, actor: string, note: string) => Effect.Effect<Reservation | undefined, SqlError>
  /** Writes this replica's lease (epoch ms); reservations it owns are safe from others until then. */
  readonly renewReplica: (id: string, leaseUntil: number) => Effect.Effect<void, SqlError>
  readonly removeReplica: (id: string) => Effect.Effect<void, SqlError>
  /** Open reservations whose owner is not `self` and has no lease valid at `now` (epoch ms). */
  readonly orphanedReservations: (self: string, now: number, limit: number) => Effect.Effect<ReadonlyArray<Reservation>, SqlError>
  /**
   * Gives credits back (refund of a failed call) or adds them (top-up), with its ledger row;
   * undefined, and nothing changed, when the pool would pass MAX_POOL_CREDITS.
   */
  readonly addCredits: (
    kind: Extract<LedgerKind, "refund" | "topup">,
    movement: CreditMovement
  ) => Effect.Effect<number | undefined, SqlError>
  readonly ledger: (query: {
    readonly before_seq?: number | undefined
    readonly limit: number
    readonly request_id?: string | undefined
    readonly key_id?: string | undefined
    readonly kind?: LedgerKind | undefined
  }) => Effect.Effect<ReadonlyArray<LedgerEntry>, SqlError>
  readonly listConnections: Effect.Effect<ReadonlyArray<ConnectionRecord>, SqlError>
  /** Inserts a connection; false when the id is taken. */
  readonly insertConnection: (connection: Omit<ConnectionRecord, "source">) => Effect.Effect<boolean, SqlError>
  readonly grantsOf: (keyId: string) => Effect.Effect<ReadonlyArray<GrantRecord>, SqlError>
  readonly putGrant: (keyId: string, connectionId: number, role: ConnectionRole) => Effect.Effect<void, SqlError>
  readonly deleteGrant: (keyId: string, connectionId: number) => Effect.Effect<boolean, SqlError>
  readonly insertSession: (session: McpSessionRecord) => Effect.Effect<void, SqlError>
  /**
   * The live session with this id owned by this key, its expiry slid forward to `expiresAt` in
   * the same statement (sliding TTL); undefined when unknown, expired or another key's, in which
   * case nothing was changed: ownership is part of the match, so another key cannot keep a
   * session alive.
   */
  readonly touchSession: (id: string, keyId: string, now: string, expiresAt: string) => Effect.Effect<McpSessionRecord | undefined, SqlError>
  /** Deletes the session if this key owns it. */
  readonly deleteSession: (id: string, keyId: string) => Effect.Effect<void, SqlError>
  readonly deleteExpiredSessions: (now: string) => Effect.Effect<void, SqlError>
  readonly appendSqlHistory: (item: SqlHistoryItem & { readonly key_id: string; readonly connection_id: number }) => Effect.Effect<void, SqlError>
  readonly sqlHistory: (keyId: string, connectionId: number, limit: number) => Effect.Effect<ReadonlyArray<SqlHistoryItem>, SqlError>
  readonly appendAudit: (records: ReadonlyArray<AuditRecord>) => Effect.Effect<void, SqlError>
  /** Requests, failures, tokens and credits per key and model over a window, from the audit trail. */
  /** Totals from the audit trail, one row per combination of `group_by` (default key and model). */
  readonly usage: (query: {
    readonly since?: string | undefined
    readonly until?: string | undefined
    readonly key_id?: string | undefined
    readonly group_by?: ReadonlyArray<UsageDimension> | undefined
  }) => Effect.Effect<ReadonlyArray<UsageRow>, SqlError>
  readonly queryAudit: (query: AuditQuery) => Effect.Effect<AuditPage, SqlError>
}

const parseJson = <A>(text: unknown): A | null => (typeof text === "string" ? (JSON.parse(text) as A) : null)
const num = (value: unknown): number => (typeof value === "number" ? value : Number(value))
const optNum = (value: unknown): number | null => (value === null || value === undefined ? null : Number(value))

const rowToKey = (row: Record<string, unknown>): ApiKeyRecord => ({
  id: String(row.id),
  workspace_id: String(row.workspace_id),
  name: String(row.name),
  key_hash: String(row.key_hash),
  key_hint: String(row.key_hint),
  is_active: num(row.is_active) === 1,
  allowed_models: parseJson<Array<string>>(row.allowed_models),
  tools_enabled: num(row.tools_enabled) === 1,
  budget: row.budget_max_requests === null || row.budget_max_requests === undefined
    ? null
    : { max_requests: num(row.budget_max_requests) },
  budget_used: num(row.budget_used),
  limits: parseJson(row.limits),
  expires_at: (row.expires_at as string | null) ?? null,
  created_at: String(row.created_at),
  updated_at: String(row.updated_at),
  last_used_at: (row.last_used_at as string | null) ?? null,
  previous_key_hash: (row.previous_key_hash as string | null) ?? null,
  previous_key_expires_at: (row.previous_key_expires_at as string | null) ?? null
})

const rowToAudit = (row: Record<string, unknown>): AuditRecord & { seq: number } => ({
  seq: num(row.seq),
  request_id: String(row.request_id),
  ts: String(row.ts),
  key_id: (row.key_id as string | null) ?? null,
  method: String(row.method),
  endpoint: String(row.endpoint),
  status: num(row.status),
  error: (row.error as string | null) ?? null,
  model: (row.model as string | null) ?? null,
  provider: (row.provider as string | null) ?? null,
  tool: (row.tool as string | null) ?? null,
  connection_id: optNum(row.connection_id),
  credits: num(row.credits),
  prompt_tokens: optNum(row.prompt_tokens),
  completion_tokens: optNum(row.completion_tokens),
  duration_ms: num(row.duration_ms),
  stream: num(row.stream) === 1,
  client_addr: (row.client_addr as string | null) ?? null,
  details: parseJson(row.details)
})

const rowToLedger = (row: Record<string, unknown>): LedgerEntry => ({
  seq: num(row.seq),
  ts: String(row.ts),
  kind: String(row.kind) as LedgerKind,
  amount: num(row.amount),
  balance_after: num(row.balance_after),
  actor: String(row.actor),
  key_id: (row.key_id as string | null) ?? null,
  request_id: (row.request_id as string | null) ?? null,
  model: (row.model as string | null) ?? null,
  note: (row.note as string | null) ?? null
})

const rowToReservation = (row: Record<string, unknown>): Reservation => ({
  request_id: String(row.request_id),
  owner: String(row.owner),
  amount: num(row.amount),
  key_id: (row.key_id as string | null) ?? null,
  model: (row.model as string | null) ?? null,
  method: (row.method as string | null) ?? null,
  endpoint: (row.endpoint as string | null) ?? null,
  created_at: String(row.created_at)
})

const keyColumns = (patch: KeyPatch): Record<string, unknown> => {
  const out: Record<string, unknown> = {}
  if (patch.name !== undefined) out.name = patch.name
  if (patch.is_active !== undefined) out.is_active = patch.is_active ? 1 : 0
  if (patch.allowed_models !== undefined) out.allowed_models = patch.allowed_models === null ? null : JSON.stringify(patch.allowed_models)
  if (patch.tools_enabled !== undefined) out.tools_enabled = patch.tools_enabled ? 1 : 0
  if (patch.budget !== undefined) out.budget_max_requests = patch.budget === null ? null : patch.budget.max_requests
  if (patch.budget_used !== undefined) out.budget_used = patch.budget_used
  if (patch.limits !== undefined) out.limits = patch.limits === null ? null : JSON.stringify(patch.limits)
  if (patch.expires_at !== undefined) out.expires_at = patch.expires_at
  if (patch.key_hash !== undefined) out.key_hash = patch.key_hash
  if (patch.key_hint !== undefined) out.key_hint = patch.key_hint
  if (patch.previous_key_hash !== undefined) out.previous_key_hash = patch.previous_key_hash
  if (patch.previous_key_expires_at !== undefined) out.previous_key_expires_at = patch.previous_key_expires_at
  return out
}

export const makeStore = (dialect: "sqlite" | "postgres") =>
  Effect.gen(function*() {
    const sql = yield* SqlClient
    const sqlite = Option.getOrUndefined(yield* Effect.serviceOption(SqliteDatabase))
    if (dialect === "sqlite" && sqlite === undefined) {
      return yield* Effect.die(new Error("the SQLite store needs the raw connection that layerSqliteClient provides"))
    }
    yield* Migrator.make({})({ loader: Migrator.fromRecord(migrationsFor(dialect)), table: "modelgate_migrations" })

    const bumpKeyVersion = sql`UPDATE key_changes SET version = version + 1 WHERE id = 1`

    const getWorkspace = Effect.map(
      sql<Record<string, unknown>>`SELECT id, name, credits, created_at FROM workspaces WHERE id = ${DEFAULT_WORKSPACE}`,
      (rows) => {
        const row = rows[0]!
        return { id: String(row.id), name: String(row.name), credits: num(row.credits), created_at: String(row.created_at) }
      }
    )

    const writeLedger = (kind: LedgerKind, signedAmount: number, balance: number, movement: CreditMovement) =>
      sql`INSERT INTO credit_ledger ${
        sql.insert({
          ts: new Date().toISOString(),
          workspace_id: DEFAULT_WORKSPACE,
          kind,
          amount: signedAmount,
          balance_after: balance,
          actor: movement.actor,
          key_id: movement.key_id ?? null,
          request_id: movement.request_id ?? null,
          model: movement.model ?? null,
          note: movement.note ?? null
        })
      }`

    const store: StoreShape = {
      dialect,
      ensureWorkspace: (initialCredits) =>
        sql.withTransaction(
          Effect.gen(function*() {
            const inserted = yield* sql`INSERT INTO workspaces (id, name, credits, created_at)
              VALUES (${DEFAULT_WORKSPACE}, ${"default"}, ${initialCredits}, ${new Date().toISOString()})
              ON CONFLICT (id) DO NOTHING RETURNING id`
            // The first start opens the ledger, so its rows always add up to the balance.
            if (inserted.length > 0) yield* writeLedger("initial", initialCredits, initialCredits, { amount: initialCredits, actor: "config", note: "initial pool" })
            return yield* getWorkspace
          })
        ),
      getWorkspace,
      insertKey: (key) =>
        sql.withTransaction(
          sql`INSERT INTO api_keys ${
            sql.insert({
              id: key.id,
              workspace_id: key.workspace_id,
              name: key.name,
              key_hash: key.key_hash,
              key_hint: key.key_hint,
              is_active: key.is_active ? 1 : 0,
              allowed_models: key.allowed_models === null ? null : JSON.stringify(key.allowed_models),
              tools_enabled: key.tools_enabled ? 1 : 0,
              budget_max_requests: key.budget?.max_requests ?? null,
              budget_used: key.budget_used,
              limits: key.limits === null ? null : JSON.stringify(key.limits),
              expires_at: key.expires_at,
              created_at: key.created_at,
              updated_at: key.updated_at,
              last_used_at: key.last_used_at,
              previous_key_hash: key.previous_key_hash,
              previous_key_expires_at: key.previous_key_expires_at
            })
          }`.pipe(Effect.andThen(bumpKeyVersion))
        ).pipe(Effect.asVoid),
      findKeyByHash: (hash) =>
        Effect.map(
          sql<Record<string, unknown>>`SELECT * FROM api_keys WHERE key_hash = ${hash} OR previous_key_hash = ${hash}`,
          (rows) => (rows[0] ? rowToKey(rows[0]) : undefined)
        ),
      findKeyById: (id) =>
        Effect.map(sql<Record<string, unknown>>`SELECT * FROM api_keys WHERE id = ${id}`, (rows) =>
          rows[0] ? rowToKey(rows[0]) : undefined),
      listKeys: Effect.map(sql<Record<string, unknown>>`SELECT * FROM api_keys ORDER BY created_at, id`, (rows) => rows.map(rowToKey)),
      updateKey: (id, patch) =>
        sql.withTransaction(
          Effect.gen(function*() {
            const columns = { ...keyColumns(patch), updated_at: new Date().toISOString() }
            const rows = yield* sql<Record<string, unknown>>`UPDATE api_keys SET ${sql.update(columns)} WHERE id = ${id} RETURNING *`
            if (rows.length === 0) return undefined
            yield* bumpKeyVersion
            return rowToKey(rows[0]!)
          })
        ),
      deleteKey: (id) =>
        sql.withTransaction(
          Effect.gen(function*() {
            const rows = yield* sql`DELETE FROM api_keys WHERE id = ${id} RETURNING id`
            if (rows.length === 0) return false
            yield* bumpKeyVersion
            return true
          })
        ),
      keyChangeVersion: Effect.map(sql<{ version: unknown }>`SELECT version FROM key_changes WHERE id = 1`, (rows) => num(rows[0]?.version ?? 0)),
      touchKeys: (lastUsed) =>
        lastUsed.size === 0
          ? Effect.void
          : sql.withTransaction(
            Effect.forEach(lastUsed, ([id, ts]) => sql`UPDATE api_keys SET last_used_at = ${ts} WHERE id = ${id}`, { discard: true })
          ),
      admitPaid: ({ keyId, budget, charge, reservation }) => {
        const amount = charge?.amount ?? 0
        const availableNow = Effect.map(getWorkspace, (w) => ({ _tag: "Insufficient" as const, available: w.credits }))
        if (dialect === "postgres") {
          const ts = new Date().toISOString()
          return Effect.flatMap(
            sql<{ budget_ok: unknown; balance: unknown }>`
              WITH b AS (
                UPDATE api_keys SET budget_used = budget_used + 1
                WHERE ${budget} AND id = ${keyId} AND budget_max_requests IS NOT NULL AND budget_used < budget_max_requests
                RETURNING 1 AS ok
              ), c AS (
                UPDATE workspaces SET credits = credits - ${amount}
                WHERE ${amount} > 0 AND id = ${DEFAULT_WORKSPACE} AND credits >= ${amount}
                  AND (NOT ${budget} OR EXISTS (SELECT 1 FROM b))
                RETURNING credits
              ), l AS (
                INSERT INTO credit_ledger (ts, workspace_id, kind, amount, balance_after, actor, key_id, request_id, model, note)
                SELECT ${ts}, ${DEFAULT_WORKSPACE}, 'charge', ${-amount}, credits, ${charge?.actor ?? keyId},
                       ${charge?.key_id ?? null}, ${charge?.request_id ?? null}, ${charge?.model ?? null}, ${charge?.note ?? null}
                FROM c RETURNING seq
              ), r AS (
                INSERT INTO credit_reservations (request_id, owner, amount, key_id, model, method, endpoint, created_at)
                SELECT ${charge?.request_id ?? null}, ${reservation?.owner ?? ""}, ${amount}, ${charge?.key_id ?? null},
                       ${charge?.model ?? null}, ${reservation?.method ?? null}, ${reservation?.endpoint ?? null}, ${ts}
                FROM c WHERE ${reservation !== undefined && charge?.request_id != null}
                RETURNING 1
              )
              -- l and r run although nothing reads them: data-modifying CTEs always execute, exactly once.
              SELECT EXISTS (SELECT 1 FROM b) AS budget_ok, (SELECT credits FROM c) AS balance`,
            (rows): Effect.Effect<AdmitResult, SqlError> => {
              const row = rows[0]!
              if (budget && row.budget_ok !== true) return Effect.succeed({ _tag: "BudgetExhausted" as const })
              if (amount <= 0) return Effect.succeed({ _tag: "Admitted" as const, balance: undefined })
              // Only a refusal pays a second read: the statement's own snapshot may predate the
              // commits it waited for, so it cannot say what the pool holds now.
              return row.balance === null || row.balance === undefined
                ? availableNow
                : Effect.succeed({ _tag: "Admitted" as const, balance: num(row.balance) })
            }
          )
        }
        // SQLite: the three statements on the raw connection as one synchronous transaction,
        // without the SqlClient's per-statement machinery (two thirds of the cost of the hot path
        // of every paid request). Holding the client's connection lease meanwhile means no
        // SqlClient transaction can be open across an await while it runs.
        return Effect.scoped(Effect.andThen(sql.reserve, admitPaidSqlite(sqlite!, { keyId, budget, charge, reservation })))
      },
      addCredits: (kind, movement) =>
        sql.withTransaction(
          Effect.gen(function*() {
            // The pool stays within what every layer reads exactly: a larger sum changes nothing.
            const rows = yield* sql<{ credits: unknown }>`UPDATE workspaces SET credits = credits + ${movement.amount}
              WHERE id = ${DEFAULT_WORKSPACE} AND credits <= ${MAX_POOL_CREDITS - movement.amount} RETURNING credits`
            if (rows.length === 0) return undefined
            const balance = num(rows[0]!.credits)
            yield* writeLedger(kind, movement.amount, balance, movement)
            return balance
          })
        ),
      settleReservation: (requestId) =>
        Effect.map(sql`DELETE FROM credit_reservations WHERE request_id = ${requestId} RETURNING request_id`, (rows) => rows.length > 0),
      refundReservation: (requestId, actor, note) =>
        sql.withTransaction(
          Effect.gen(function*() {
            // The delete decides who refunds: concurrent callers (the owner's outbox, sweepers on
            // other replicas) serialise on the row, and only the one that removed it goes on.
            const rows = yield* sql<Record<string, unknown>>`DELETE FROM credit_reservations WHERE request_id = ${requestId} RETURNING *`
            if (rows.length === 0) return undefined
            const reservation = rowToReservation(rows[0]!)
            const updated = yield* sql<{ credits: unknown }>`UPDATE workspaces SET credits = credits + ${reservation.amount}
              WHERE id = ${DEFAULT_WORKSPACE} RETURNING credits`
            yield* writeLedger("refund", reservation.amount, num(updated[0]!.credits), {
              amount: reservation.amount,
              actor,
              key_id: reservation.key_id,
              request_id: reservation.request_id,
              model: reservation.model,
              note
            })
            return reservation
          })
        ),
      renewReplica: (id, leaseUntil) =>
        sql`INSERT INTO replicas (id, lease_until, started_at) VALUES (${id}, ${leaseUntil}, ${new Date().toISOString()})
            ON CONFLICT (id) DO UPDATE SET lease_until = excluded.lease_until`.pipe(Effect.asVoid),
      removeReplica: (id) => sql`DELETE FROM replicas WHERE id = ${id}`.pipe(Effect.asVoid),
      orphanedReservations: (self, now, limit) =>
        Effect.map(
          sql<Record<string, unknown>>`SELECT r.* FROM credit_reservations r LEFT JOIN replicas p ON p.id = r.owner
            WHERE r.owner <> ${self} AND (p.id IS NULL OR p.lease_until < ${now})
            ORDER BY r.created_at LIMIT ${limit}`,
          (rows) => rows.map(rowToReservation)
        ),
      ledger: (query) =>
        Effect.map(
          sql<Record<string, unknown>>`SELECT * FROM credit_ledger WHERE ${
            sql.and([
              query.before_seq !== undefined ? sql`seq < ${query.before_seq}` : undefined,
              query.request_id !== undefined ? sql`request_id = ${query.request_id}` : undefined,
              query.key_id !== undefined ? sql`key_id = ${query.key_id}` : undefined,
              query.kind !== undefined ? sql`kind = ${query.kind}` : undefined
            ].filter((c) => c !== undefined))
          } ORDER BY seq DESC LIMIT ${query.limit}`,
          (rows) => rows.map(rowToLedger)
        ),
      listConnections: Effect.map(
        sql<Record<string, unknown>>`SELECT * FROM connections ORDER BY id`,
        (rows) => rows.map((row): ConnectionRecord => ({
          id: num(row.id),
          name: String(row.name),
          dialect: String(row.dialect) as ConnectionRecord["dialect"],
          url: String(row.url),
          read_url: (row.read_url as string | null) ?? null,
          default_schema: (row.default_schema as string | null) ?? null,
          source: "admin"
        }))
      ),
      insertConnection: (c) =>
        Effect.map(
          sql`INSERT INTO connections (id, name, dialect, url, read_url, default_schema, created_at)
              VALUES (${c.id}, ${c.name}, ${c.dialect}, ${c.url}, ${c.read_url}, ${c.default_schema}, ${new Date().toISOString()})
              ON CONFLICT (id) DO NOTHING RETURNING id`,
          (rows) => rows.length > 0
        ),
      grantsOf: (keyId) =>
        Effect.map(sql<Record<string, unknown>>`SELECT * FROM key_grants WHERE key_id = ${keyId} ORDER BY connection_id`, (rows) =>
          rows.map((row): GrantRecord => ({
            key_id: String(row.key_id),
            connection_id: num(row.connection_id),
            role: String(row.role) as ConnectionRole,
            granted_at: String(row.granted_at)
          }))),
      putGrant: (keyId, connectionId, role) =>
        sql.withTransaction(
          sql`INSERT INTO key_grants (key_id, connection_id, role, granted_at)
              VALUES (${keyId}, ${connectionId}, ${role}, ${new Date().toISOString()})
              ON CONFLICT (key_id, connection_id) DO UPDATE SET role = excluded.role`.pipe(Effect.andThen(bumpKeyVersion))
        ).pipe(Effect.asVoid),
      deleteGrant: (keyId, connectionId) =>
        sql.withTransaction(
          Effect.gen(function*() {
            const rows = yield* sql`DELETE FROM key_grants WHERE key_id = ${keyId} AND connection_id = ${connectionId} RETURNING key_id`
            if (rows.length > 0) yield* bumpKeyVersion
            return rows.length > 0
          })
        ),
      insertSession: (session) => sql`INSERT INTO mcp_sessions ${sql.insert({ ...session })}`.pipe(Effect.asVoid),
      touchSession: (id, keyId, now, expiresAt) =>
        Effect.map(
          sql<Record<string, unknown>>`UPDATE mcp_sessions SET expires_at = ${expiresAt}
            WHERE id = ${id} AND key_id = ${keyId} AND expires_at > ${now} RETURNING *`,
          (rows) =>
            rows[0] === undefined ? undefined : {
              id: String(rows[0].id),
              key_id: String(rows[0].key_id),
              protocol_version: String(rows[0].protocol_version),
              created_at: String(rows[0].created_at),
              expires_at: String(rows[0].expires_at)
            }
        ),
      deleteSession: (id, keyId) => sql`DELETE FROM mcp_sessions WHERE id = ${id} AND key_id = ${keyId}`.pipe(Effect.asVoid),
      deleteExpiredSessions: (now) => sql`DELETE FROM mcp_sessions WHERE expires_at <= ${now}`.pipe(Effect.asVoid),
      appendSqlHistory: (item) => sql`INSERT INTO sql_history ${sql.insert({ ...item })}`.pipe(Effect.asVoid),
      sqlHistory: (keyId, connectionId, limit) =>
        Effect.map(
          sql<Record<string, unknown>>`SELECT ts, statement, duration_ms, kind, row_count FROM sql_history
            WHERE key_id = ${keyId} AND connection_id = ${connectionId} ORDER BY seq DESC LIMIT ${limit}`,
          (rows) => rows.map((row): SqlHistoryItem => ({
            ts: String(row.ts),
            statement: String(row.statement),
            duration_ms: num(row.duration_ms),
            kind: String(row.kind) as SqlHistoryItem["kind"],
            row_count: num(row.row_count)
          }))
        ),
      appendAudit: (records) =>
        records.length === 0
          ? Effect.void
          : sql`INSERT INTO audit_log ${
            sql.insert(records.map((r): Record<string, unknown> => ({
              request_id: r.request_id,
              ts: r.ts,
              key_id: r.key_id,
              method: r.method,
              endpoint: r.endpoint,
              status: r.status,
              error: r.error,
              model: r.model,
              provider: r.provider,
              tool: r.tool,
              connection_id: r.connection_id,
              credits: r.credits,
              prompt_tokens: r.prompt_tokens,
              completion_tokens: r.completion_tokens,
              duration_ms: r.duration_ms,
              stream: r.stream ? 1 : 0,
              client_addr: r.client_addr,
              details: r.details === null ? null : JSON.stringify(r.details)
            })) as unknown as readonly [Record<string, unknown>, ...Array<Record<string, unknown>>])
          }`.pipe(Effect.asVoid),
      usage: (query) => {
        // Column expressions come from this fixed table only, never from the caller's text.
        const dimensions = { day: "substr(ts, 1, 10)", key: "key_id", model: "model" } as const
        const names = { day: "day", key: "key_id", model: "model" } as const
        const groups = (["day", "key", "model"] as const).filter((d) => (query.group_by ?? ["key", "model"]).includes(d))
        const selected = groups.map((d) => `${dimensions[d]} AS ${names[d]}`)
        const grouped = groups.map((d) => dimensions[d]).join(", ")
        return Effect.map(
          sql<Record<string, unknown>>`SELECT ${sql.literal(selected.length > 0 ? selected.join(", ") + "," : "")} COUNT(*) AS requests,
              SUM(CASE WHEN status >= 400 OR error IS NOT NULL THEN 1 ELSE 0 END) AS errors,
              COALESCE(SUM(prompt_tokens), 0) AS prompt_tokens, COALESCE(SUM(completion_tokens), 0) AS completion_tokens,
              COALESCE(SUM(credits), 0) AS credits
            FROM audit_log WHERE ${
            sql.and([
              query.since !== undefined ? sql`ts >= ${query.since}` : undefined,
              query.until !== undefined ? sql`ts < ${query.until}` : undefined,
              query.key_id !== undefined ? sql`key_id = ${query.key_id}` : undefined
            ].filter((c) => c !== undefined))
          } ${sql.literal(groups.length > 0 ? `GROUP BY ${grouped} ORDER BY ${grouped}` : "")}`,
          (rows) => rows.map((row): UsageRow => ({
            ...(groups.includes("day") ? { day: String(row.day) } : {}),
            ...(groups.includes("key") ? { key_id: (row.key_id as string | null) ?? null } : {}),
            ...(groups.includes("model") ? { model: (row.model as string | null) ?? null } : {}),
            requests: num(row.requests),
            errors: num(row.errors),
            prompt_tokens: num(row.prompt_tokens),
            completion_tokens: num(row.completion_tokens),
            credits: num(row.credits)
          }))
        )
      },
      queryAudit: (query) =>
        Effect.gen(function*() {
          const conditions = [
            query.key_id !== undefined ? sql`key_id = ${query.key_id}` : undefined,
            query.status !== undefined ? sql`status = ${query.status}` : undefined,
            query.error !== undefined ? sql`error = ${query.error}` : undefined,
            query.endpoint !== undefined ? sql`endpoint = ${query.endpoint}` : undefined,
            query.since !== undefined ? sql`ts >= ${query.since}` : undefined,
            query.until !== undefined ? sql`ts < ${query.until}` : undefined,
            query.before_seq !== undefined ? sql`seq < ${query.before_seq}` : undefined
          ].filter((c) => c !== undefined)
          const rows = yield* sql<Record<string, unknown>>`SELECT * FROM audit_log WHERE ${
            sql.and(conditions)
          } ORDER BY seq DESC LIMIT ${query.limit + 1}`
          const items = rows.slice(0, query.limit).map(rowToAudit)
          return { items, next_seq: rows.length > query.limit ? items[items.length - 1]!.seq : null }
        })
    }
    return store
  })

const admitPaidSqlite = (
  raw: SqliteDatabase["Service"],
  input: {
    readonly keyId: string
    readonly budget: boolean
    readonly charge: CreditMovement | undefined
    readonly reservation: ReservationOwner | undefined
  }
): Effect.Effect<AdmitResult, SqlError> =>
  Effect.try({
    try: (): AdmitResult => {
      const { db, prepare } = raw
      db.exec("BEGIN IMMEDIATE")
      try {
        const result = ((): AdmitResult => {
          if (input.budget) {
            const counted = prepare(`UPDATE api_keys SET budget_used = budget_used + 1
              WHERE id = ? AND budget_max_requests IS NOT NULL AND budget_used < budget_max_requests RETURNING budget_used`)
              .all(input.keyId)
            if (counted.length === 0) return { _tag: "BudgetExhausted" }
          }
          const charge = input.charge
          if (charge === undefined || charge.amount <= 0) return { _tag: "Admitted", balance: undefined }
          const rows = prepare("UPDATE workspaces SET credits = credits - ? WHERE id = ? AND credits >= ? RETURNING credits")
            .all(charge.amount, DEFAULT_WORKSPACE, charge.amount) as Array<{ credits: number }>
          if (rows.length === 0) {
            const pool = prepare("SELECT credits FROM workspaces WHERE id = ?").get(DEFAULT_WORKSPACE) as { credits: number }
            return { _tag: "Insufficient", available: Number(pool.credits) }
          }
          const balance = Number(rows[0]!.credits)
          const ts = new Date().toISOString()
          prepare(`INSERT INTO credit_ledger (ts, workspace_id, kind, amount, balance_after, actor, key_id, request_id, model, note)
            VALUES (?, ?, 'charge', ?, ?, ?, ?, ?, ?, ?)`).run(
            ts, DEFAULT_WORKSPACE, -charge.amount, balance, charge.actor,
            charge.key_id ?? null, charge.request_id ?? null, charge.model ?? null, charge.note ?? null
          )
          const reservation = input.reservation
          if (reservation !== undefined && charge.request_id != null) {
            prepare(`INSERT INTO credit_reservations (request_id, owner, amount, key_id, model, method, endpoint, created_at)
              VALUES (?, ?, ?, ?, ?, ?, ?, ?)`).run(
              charge.request_id, reservation.owner, charge.amount, charge.key_id ?? null, charge.model ?? null,
              reservation.method, reservation.endpoint, ts
            )
          }
          return { _tag: "Admitted", balance }
        })()
        db.exec("COMMIT")
        return result
      } catch (error) {
        if (db.isTransaction) db.exec("ROLLBACK")
        throw error
      }
    },
    catch: (cause) => new SqlError({ reason: classifySqliteError(cause, { message: (cause as Error)?.message ?? "SQLite failure", operation: "admitPaid" }) })
  })

export class Store extends Context.Service<Store, StoreShape>()("modelgate/Store") {
  static readonly layerSqlite = (filename: string) =>
    Layer.effect(Store, makeStore("sqlite")).pipe(Layer.provide(layerSqliteClient(filename)))

  static readonly layerPostgres = (url: string) =>
    Layer.effect(Store, makeStore("postgres")).pipe(
      Layer.provide(PgClient.layer({ url: Redacted.make(url), maxConnections: 20, applicationName: "modelgate" }))
    )

  /** `sqlite:<path>` or `postgres://...`, as written in the config's `store` key. */
  static readonly layerFromUrl = (url: string) =>
    url.startsWith("sqlite:") ? Store.layerSqlite(url.slice("sqlite:".length) || ":memory:") : Store.layerPostgres(url)

  /** A private in-memory SQLite store: the real queries, nothing on disk. */
  static readonly layerMemory = Layer.suspend(() => Store.layerSqlite(":memory:"))
}
