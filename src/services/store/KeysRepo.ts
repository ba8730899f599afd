/** API keys: the rows behind every key lookup, and the change counter replicas' key caches poll. */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { SqlClient } from "effect/sql/SqlClient"
import type { ApiKeyRecord, BudgetLimits } from "../../domain/records.ts"
import { bumpKeyVersion, decodeRows, Flag, keysetPage, likeLiteral, Num, NullableJson, NullableNum, NullableString } from "./rows.ts"
import { storeOp, type StoreError } from "./StoreError.ts"
import { TEAM_JOIN_COLUMNS, TeamJoinRow, teamOfJoin } from "./TeamsRepo.ts"

export type KeyPatch = Partial<
  Pick<
    ApiKeyRecord,
    | "name"
    | "is_active"
    | "allowed_models"
    | "tools_enabled"
    | "mcp_servers"
    | "budget"
    | "limits"
    | "expires_at"
    | "key_hash"
    | "key_hint"
    | "previous_key_hash"
    | "previous_key_expires_at"
    | "budget_used"
    | "team_id"
  >
>

/** Where a page of keys starts: after this key in the list's order (newest first). */
export interface KeyPosition {
  readonly created_at: string
  readonly id: string
}

/**
 * A page of the key list (issue 31): newest first, by (created_at, id), which is unique and never
 * changes, so following the pages visits every key once even while keys are added or changed.
 */
export interface KeyListQuery {
  readonly limit: number
  readonly after?: KeyPosition | undefined
  /** Case-insensitive substring of the name, matched literally. */
  readonly name?: string | undefined
  /** As a request would find the key now: inactive (revoked), else expired, else active. */
  readonly status?: "active" | "inactive" | "expired" | undefined
  /** Keys whose `allowed_models` holds this entry as written (a name or a pattern). */
  readonly model?: string | undefined
  readonly last_used_before?: string | undefined
  readonly last_used_after?: string | undefined
  /** Keys in this team (issue 33). */
  readonly team_id?: string | undefined
  /** The ISO instant `status` is judged at. */
  readonly now: string
}

export interface KeyPage {
  readonly items: ReadonlyArray<ApiKeyRecord>
  /** Where the next page starts; undefined on the last page. */
  readonly next: KeyPosition | undefined
}

const Limits = Schema.Struct({
  requests_per_minute: Schema.optionalKey(Schema.Number),
  concurrent_streams: Schema.optionalKey(Schema.Number),
  tokens_per_minute: Schema.optionalKey(Schema.Number)
})

/** An `api_keys` row as both stores return it. */
const KeyRow = Schema.Struct({
  id: Schema.String,
  workspace_id: Schema.String,
  name: Schema.String,
  key_hash: Schema.String,
  key_hint: Schema.String,
  is_active: Flag,
  allowed_models: NullableJson(Schema.Array(Schema.String)),
  tools_enabled: Flag,
  /** NULL (every key older than migration 12) is no server. */
  mcp_servers: NullableJson(Schema.Array(Schema.String)),
  budget_max_requests: NullableNum,
  budget_used: Num,
  /** Micro-credits (migration 13); NULL: no maximum in credits. */
  budget_max_credits: Schema.optionalKey(NullableNum),
  budget_period: Schema.optionalKey(NullableString),
  limits: NullableJson(Limits),
  expires_at: NullableString,
  created_at: Schema.String,
  updated_at: Schema.String,
  last_used_at: NullableString,
  previous_key_hash: NullableString,
  previous_key_expires_at: NullableString,
  /** NULL (every key older than migration 14, and keys in no team) is no team. */
  team_id: Schema.optionalKey(NullableString)
})

const toKey = ({ budget_max_credits, budget_max_requests, budget_period, mcp_servers, team_id, ...row }: typeof KeyRow.Type): ApiKeyRecord => ({
  ...row,
  team_id: team_id ?? null,
  mcp_servers: mcp_servers ?? [],
  budget: toBudget(budget_max_requests, budget_max_credits ?? null, budget_period ?? null)
})

/** A key's budget from its columns: none when neither maximum is set. */
const toBudget = (maxRequests: number | null, maxCredits: number | null, period: string | null): BudgetLimits | null =>
  maxRequests === null && maxCredits === null
    ? null
    : {
      ...(maxRequests === null ? {} : { max_requests: maxRequests }),
      ...(maxCredits === null ? {} : { max_credits_micros: maxCredits }),
      ...(period === "day" || period === "week" || period === "month" ? { period } : {})
    }

const budgetColumns = (budget: BudgetLimits | null) => ({
  budget_max_requests: budget?.max_requests ?? null,
  budget_max_credits: budget?.max_credits_micros ?? null,
  budget_period: budget?.period ?? null
})

const decodeKeys = decodeRows(KeyRow)
/** A key with its team's columns (authentication's lookup): the key cache holds both, so a request reads neither. */
const KeyWithTeamRow = Schema.Struct({ ...KeyRow.fields, ...TeamJoinRow.fields })
const decodeKeysWithTeam = decodeRows(KeyWithTeamRow)
const toKeyWithTeam = (row: typeof KeyWithTeamRow.Type): ApiKeyRecord => {
  const { team_name, team_allowed_models, team_max_requests, team_max_credits_micros, team_period, team_requests_per_minute, team_concurrent_streams, team_tokens_per_minute, ...key } = row
  const record = toKey(key)
  return {
    ...record,
    team: teamOfJoin(record.team_id ?? null, {
      team_name,
      team_allowed_models,
      team_max_requests,
      team_max_credits_micros,
      team_period,
      team_requests_per_minute,
      team_concurrent_streams,
      team_tokens_per_minute
    })
  }
}
const decodeVersion = decodeRows(Schema.Struct({ version: Num }))

const keyColumns = (patch: KeyPatch): Record<string, unknown> => {
  const out: Record<string, unknown> = {}
  if (patch.name !== undefined) out.name = patch.name
  if (patch.is_active !== undefined) out.is_active = patch.is_active ? 1 : 0
  if (patch.allowed_models !== undefined) out.allowed_models = patch.allowed_models === null ? null : JSON.stringify(patch.allowed_models)
  if (patch.tools_enabled !== undefined) out.tools_enabled = patch.tools_enabled ? 1 : 0
  if (patch.mcp_servers !== undefined) out.mcp_servers = patch.mcp_servers.length === 0 ? null : JSON.stringify(patch.mcp_servers)
  if (patch.budget !== undefined) Object.assign(out, budgetColumns(patch.budget))
  if (patch.budget_used !== undefined) out.budget_used = patch.budget_used
  if (patch.limits !== undefined) out.limits = patch.limits === null ? null : JSON.stringify(patch.limits)
  if (patch.expires_at !== undefined) out.expires_at = patch.expires_at
  if (patch.key_hash !== undefined) out.key_hash = patch.key_hash
  if (patch.key_hint !== undefined) out.key_hint = patch.key_hint
  if (patch.previous_key_hash !== undefined) out.previous_key_hash = patch.previous_key_hash
  if (patch.previous_key_expires_at !== undefined) out.previous_key_expires_at = patch.previous_key_expires_at
  if (patch.team_id !== undefined) out.team_id = patch.team_id
  return out
}

export class KeysRepo extends Context.Service<KeysRepo, {
  readonly insertKey: (key: ApiKeyRecord) => Effect.Effect<void, StoreError>
  /** Many keys in one transaction (an import; tests that need tens of thousands). */
  readonly insertKeys: (keys: ReadonlyArray<ApiKeyRecord>) => Effect.Effect<void, StoreError>
  /** The key with this hash, current or (during a rotation's grace) previous, with its team (`team`). */
  readonly findKeyByHash: (hash: string) => Effect.Effect<ApiKeyRecord | undefined, StoreError>
  readonly findKeyById: (id: string) => Effect.Effect<ApiKeyRecord | undefined, StoreError>
  readonly listKeys: Effect.Effect<ReadonlyArray<ApiKeyRecord>, StoreError>
  readonly pageKeys: (query: KeyListQuery) => Effect.Effect<KeyPage, StoreError>
  readonly updateKey: (id: string, patch: KeyPatch) => Effect.Effect<ApiKeyRecord | undefined, StoreError>
  readonly deleteKey: (id: string) => Effect.Effect<boolean, StoreError>
  /** Monotonic counter bumped by every key change, so caches on every replica can notice. */
  readonly keyChangeVersion: Effect.Effect<number, StoreError>
  readonly touchKeys: (lastUsed: ReadonlyMap<string, string>) => Effect.Effect<void, StoreError>
}>()("modelgate/KeysRepo") {
  static readonly layer = Layer.effect(
    KeysRepo,
    Effect.gen(function*() {
      const sql = yield* SqlClient
      const bump = bumpKeyVersion(sql)
      const first = (rows: ReadonlyArray<typeof KeyRow.Type>) => (rows[0] === undefined ? undefined : toKey(rows[0]))
      const keyRow = (key: ApiKeyRecord): Record<string, unknown> => ({
        id: key.id,
        workspace_id: key.workspace_id,
        name: key.name,
        key_hash: key.key_hash,
        key_hint: key.key_hint,
        is_active: key.is_active ? 1 : 0,
        allowed_models: key.allowed_models === null ? null : JSON.stringify(key.allowed_models),
        tools_enabled: key.tools_enabled ? 1 : 0,
        mcp_servers: key.mcp_servers.length === 0 ? null : JSON.stringify(key.mcp_servers),
        ...budgetColumns(key.budget),
        budget_used: 0,
        limits: key.limits === null ? null : JSON.stringify(key.limits),
        expires_at: key.expires_at,
        created_at: key.created_at,
        updated_at: key.updated_at,
        last_used_at: key.last_used_at,
        previous_key_hash: key.previous_key_hash,
        previous_key_expires_at: key.previous_key_expires_at,
        team_id: key.team_id ?? null
      })
      return KeysRepo.of({
        insertKey: (key) =>
          sql.withTransaction(sql`INSERT INTO api_keys ${sql.insert(keyRow(key))}`.pipe(Effect.andThen(bump))).pipe(
            Effect.asVoid,
            storeOp("KeysRepo.insertKey")
          ),
        insertKeys: (keys) =>
          keys.length === 0
            ? Effect.void
            : sql.withTransaction(Effect.gen(function*() {
              // 500 rows of 18 columns a statement stays under both stores' limits on bound parameters.
              for (let from = 0; from < keys.length; from += 500) {
                const rows = keys.slice(from, from + 500).map(keyRow)
                yield* sql`INSERT INTO api_keys ${sql.insert(rows as [Record<string, unknown>, ...Array<Record<string, unknown>>])}`
              }
              yield* bump
            })).pipe(storeOp("KeysRepo.insertKeys")),
        findKeyByHash: (hash) =>
          sql`SELECT api_keys.*, ${sql.literal(TEAM_JOIN_COLUMNS)} FROM api_keys LEFT JOIN teams ON teams.id = api_keys.team_id
              WHERE api_keys.key_hash = ${hash} OR api_keys.previous_key_hash = ${hash}`.pipe(
            decodeKeysWithTeam,
            Effect.map((rows) => (rows[0] === undefined ? undefined : toKeyWithTeam(rows[0]))),
            storeOp("KeysRepo.findKeyByHash")
          ),
        findKeyById: (id) =>
          sql`SELECT * FROM api_keys WHERE id = ${id}`.pipe(decodeKeys, Effect.map(first), storeOp("KeysRepo.findKeyById")),
        listKeys: sql`SELECT * FROM api_keys ORDER BY created_at, id`.pipe(
          decodeKeys,
          Effect.map((rows) => rows.map(toKey)),
          storeOp("KeysRepo.listKeys")
        ),
        pageKeys: (query) => {
          // expires_at is compared as text, which orders ISO-8601 UTC instants correctly (the admin
          // API and the CLI write them so); one the auth check cannot parse never expires there
          // either, and sorts after any date here.
          const expired = sql`(expires_at IS NOT NULL AND expires_at <= ${query.now})`
          const conditions = [
            query.after !== undefined ? sql`(created_at, id) < (${query.after.created_at}, ${query.after.id})` : undefined,
            query.name !== undefined ? sql`LOWER(name) LIKE ${`%${likeLiteral(query.name.toLowerCase())}%`} ESCAPE '\\'` : undefined,
            query.status === "inactive" ? sql`is_active = 0` : undefined,
            query.status === "expired" ? sql`is_active = 1 AND ${expired}` : undefined,
            query.status === "active" ? sql`is_active = 1 AND NOT ${expired}` : undefined,
            // allowed_models is the JSON text of an array of strings: the entry with its quotes is one whole element.
            query.model !== undefined ? sql`allowed_models LIKE ${`%${likeLiteral(JSON.stringify(query.model))}%`} ESCAPE '\\'` : undefined,
            query.last_used_before !== undefined ? sql`last_used_at < ${query.last_used_before}` : undefined,
            query.last_used_after !== undefined ? sql`last_used_at >= ${query.last_used_after}` : undefined,
            query.team_id !== undefined ? sql`team_id = ${query.team_id}` : undefined
          ].filter((c) => c !== undefined)
          return sql`SELECT * FROM api_keys WHERE ${sql.and(conditions)} ORDER BY created_at DESC, id DESC LIMIT ${query.limit + 1}`.pipe(
            decodeKeys,
            Effect.map((rows): KeyPage => {
              const { items, last } = keysetPage(rows.map(toKey), query.limit)
              return { items, next: last === undefined ? undefined : { created_at: last.created_at, id: last.id } }
            }),
            storeOp("KeysRepo.pageKeys")
          )
        },
        updateKey: (id, patch) =>
          sql.withTransaction(
            Effect.gen(function*() {
              const columns = { ...keyColumns(patch), updated_at: new Date().toISOString() }
              const rows = yield* decodeKeys(sql`UPDATE api_keys SET ${sql.update(columns)} WHERE id = ${id} RETURNING *`)
              if (rows.length === 0) return undefined
              yield* bump
              return toKey(rows[0]!)
            })
          ).pipe(storeOp("KeysRepo.updateKey")),
        deleteKey: (id) =>
          sql.withTransaction(
            Effect.gen(function*() {
              const rows = yield* sql`DELETE FROM api_keys WHERE id = ${id} RETURNING id`
              if (rows.length === 0) return false
              yield* bump
              return true
            })
          ).pipe(storeOp("KeysRepo.deleteKey")),
        keyChangeVersion: sql`SELECT version FROM key_changes WHERE id = 1`.pipe(
          decodeVersion,
          Effect.map((rows) => rows[0]?.version ?? 0),
          storeOp("KeysRepo.keyChangeVersion")
        ),
        touchKeys: (lastUsed) =>
          lastUsed.size === 0
            ? Effect.void
            : sql.withTransaction(
              Effect.forEach(lastUsed, ([id, ts]) => sql`UPDATE api_keys SET last_used_at = ${ts} WHERE id = ${id}`, { discard: true })
            ).pipe(storeOp("KeysRepo.touchKeys"))
      })
    })
  )
}
