/**
 * Key management shared by the admin API and the CLI: create, list, update, rotate, revoke,
 * delete. Every change clears this process's key cache at once; other replicas notice through
 * the store's key-change counter (KeyCache).
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as Struct from "effect/Struct"
import { periodKey, resetsAt } from "../../domain/budget-periods.ts"
import { NotFound, ValidationFailed } from "../../domain/errors.ts"
import { budgetLimits, BudgetInput } from "../../domain/budget-input.ts"
import { fromMicros } from "../../domain/money.ts"
import type { ApiKeyRecord, BudgetLimits } from "../../domain/records.ts"
import { CreditsRepo } from "../store/CreditsRepo.ts"
import { KeyCache } from "../auth/KeyCache.ts"
import { type KeyListQuery, type KeyPage, KeysRepo } from "../store/KeysRepo.ts"
import { TeamsRepo } from "../store/TeamsRepo.ts"
import { DEFAULT_WORKSPACE } from "../store/rows.ts"
import { MCP_SERVER_NAME, TokensPerMinute } from "../config/schema.ts"
import { generateKey, hashKey, keyHint, newKeyId } from "./key-material.ts"

const PositiveInt = Schema.Int.check(Schema.isGreaterThan(0))
const IsoInstant = Schema.String.check(
  Schema.makeFilter((s: string) => !Number.isNaN(Date.parse(s)) && /^\d{4}-\d{2}-\d{2}T/.test(s), {
    expected: "an ISO-8601 timestamp such as 2027-01-31T00:00:00Z"
  })
)

const mutableFields = {
  name: Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(200)),
  is_active: Schema.Boolean,
  allowed_models: Schema.NullOr(Schema.Array(Schema.NonEmptyString)),
  tools_enabled: Schema.Boolean,
  /** Upstream MCP servers by name (issue 37); checked against the configured ones by the admin API. */
  mcp_servers: Schema.Array(Schema.String.check(Schema.isPattern(MCP_SERVER_NAME, { message: "expected a server name: [a-z0-9_-]{1,32}" })))
    .check(Schema.isMaxLength(64)),
  budget: Schema.NullOr(BudgetInput),
  limits: Schema.NullOr(Schema.Struct({
    requests_per_minute: Schema.optional(PositiveInt),
    concurrent_streams: Schema.optional(PositiveInt),
    tokens_per_minute: Schema.optional(TokensPerMinute)
  })),
  expires_at: Schema.NullOr(IsoInstant),
  /** The key's team (issue 33); null takes it out of its team. */
  team_id: Schema.NullOr(Schema.String.check(Schema.isPattern(/^team_[0-9a-f]{16}$/, { message: "expected a team id such as team_0123456789abcdef" })))
}

/** PATCH: any of the mutable fields. */
export const UpdateKeyInput = Schema.Struct(mutableFields).mapFields(Struct.map(Schema.optional))
export type UpdateKeyInput = typeof UpdateKeyInput.Type

/** POST: a name is required, and connection grants may come with the key. */
export const CreateKeyInput = UpdateKeyInput.mapFields(Struct.assign({
  name: mutableFields.name,
  connections: Schema.optional(Schema.Array(Schema.Struct({
    connection_id: PositiveInt,
    role: Schema.Literals(["read", "edit"])
  })))
}))
export type CreateKeyInput = typeof CreateKeyInput.Type

export const RotateKeyInput = Schema.Struct({
  grace_seconds: Schema.optional(Schema.Int.check(Schema.isBetween({ minimum: 0, maximum: 7 * 24 * 3600 })))
})
export type RotateKeyInput = typeof RotateKeyInput.Type

/** What the admin API and the CLI show of a key: never the hash, the full key only on create/rotate. */
export interface KeyView {
  readonly id: string
  readonly name: string
  readonly key_hint: string
  readonly is_active: boolean
  readonly allowed_models: ReadonlyArray<string> | null
  readonly tools_enabled: boolean
  readonly mcp_servers: ReadonlyArray<string>
  readonly budget: KeyBudgetView | null
  readonly limits: ApiKeyRecord["limits"]
  readonly expires_at: string | null
  readonly created_at: string
  readonly updated_at: string
  readonly last_used_at: string | null
  readonly team_id: string | null
}

export { budgetView, type KeyBudgetView } from "../../domain/budget-view.ts"
import { budgetView, type KeyBudgetView } from "../../domain/budget-view.ts"

/** `record` with its budget usage as `withUsage` read it at `nowMs` (the caller's clock). */
export const toKeyView = (record: ApiKeyRecord, nowMs: number = Date.now()): KeyView => ({
  id: record.id,
  name: record.name,
  key_hint: record.key_hint,
  is_active: record.is_active,
  allowed_models: record.allowed_models,
  tools_enabled: record.tools_enabled,
  mcp_servers: record.mcp_servers,
  budget: record.budget === null ? null : budgetView(record.budget, record.budget_used, record.budget_used_credits ?? 0, nowMs),
  limits: record.limits,
  expires_at: record.expires_at,
  created_at: record.created_at,
  updated_at: record.updated_at,
  last_used_at: record.last_used_at,
  team_id: record.team_id ?? null
})

const notFound = (id: string) => new NotFound({ message: `no API key with id ${id}` })

export class ApiKeys extends Context.Service<ApiKeys, {
  /** Fails with 400 when `team_id` names no team. */
  readonly create: (input: Omit<CreateKeyInput, "connections">) => Effect.Effect<{ readonly record: ApiKeyRecord; readonly key: string }, ValidationFailed>
  /** Every key: the CLI's listing. The admin API pages instead (`page`). */
  readonly list: Effect.Effect<ReadonlyArray<ApiKeyRecord>>
  /** One page of keys, newest first; `status` is judged at the clock's now. */
  readonly page: (query: Omit<KeyListQuery, "now">) => Effect.Effect<KeyPage>
  readonly get: (id: string) => Effect.Effect<ApiKeyRecord, NotFound>
  readonly update: (id: string, input: UpdateKeyInput) => Effect.Effect<ApiKeyRecord, NotFound | ValidationFailed>
  readonly rotate: (id: string, input: RotateKeyInput) => Effect.Effect<{ readonly record: ApiKeyRecord; readonly key: string }, NotFound>
  readonly revoke: (id: string) => Effect.Effect<ApiKeyRecord, NotFound>
  readonly resetBudget: (id: string) => Effect.Effect<ApiKeyRecord, NotFound>
  readonly remove: (id: string) => Effect.Effect<void, NotFound>
}>()("modelgate/ApiKeys") {
  static readonly layer = Layer.effect(
    ApiKeys,
    Effect.gen(function*() {
      const store = yield* KeysRepo
      const credits = yield* CreditsRepo
      const cache = yield* KeyCache
      const teams = yield* TeamsRepo

      // A key names an existing team (the store's foreign key holds it to that under races too).
      const checkTeam = (teamId: string | null | undefined) =>
        teamId === undefined || teamId === null
          ? Effect.void
          : Effect.flatMap(Effect.orDie(teams.findTeam(teamId)), (team) =>
            team === undefined
              ? Effect.fail(new ValidationFailed({ message: `team_id: no team with id ${teamId}`, details: { field: "team_id" } }))
              : Effect.void)

      const changed = <A, E>(effect: Effect.Effect<A, E>) => Effect.tap(effect, () => cache.invalidate)

      /** Each key's budget usage in its current period, by the clock (budget_usage, issue 33). */
      const withUsage = <R extends ApiKeyRecord>(records: ReadonlyArray<R>) =>
        Effect.gen(function*() {
          const nowMs = yield* Clock.currentTimeMillis
          const budgeted = records.filter((r) => r.budget !== null)
          if (budgeted.length === 0) return records
          const rows = budgeted.map((r) => [r.id, periodKey(r.budget!.period, nowMs)] as const)
          const usage = yield* Effect.orDie(credits.budgetUsage(rows))
          return records.map((r) => {
            if (r.budget === null) return r
            const used = usage.get(`${r.id} ${periodKey(r.budget.period, nowMs)}`)
            return { ...r, budget_used: used?.requests ?? 0, budget_used_credits: used?.credits ?? 0 }
          })
        })
      const oneWithUsage = (record: ApiKeyRecord) => Effect.map(withUsage([record]), (rows) => rows[0]!)

      const found = (id: string) => (record: ApiKeyRecord | undefined) =>
        record === undefined ? Effect.fail(notFound(id)) : Effect.succeed(record)

      const create = Effect.fn("ApiKeys.create")(function*(input: Omit<CreateKeyInput, "connections">) {
        yield* checkTeam(input.team_id)
        const key = generateKey()
        const now = new Date(yield* Clock.currentTimeMillis).toISOString()
        const record: ApiKeyRecord = {
          id: newKeyId(),
          workspace_id: DEFAULT_WORKSPACE,
          name: input.name,
          key_hash: hashKey(key),
          key_hint: keyHint(key),
          is_active: input.is_active ?? true,
          allowed_models: input.allowed_models ?? null,
          tools_enabled: input.tools_enabled ?? false,
          mcp_servers: input.mcp_servers ?? [],
          budget: input.budget === undefined || input.budget === null ? null : budgetLimits(input.budget),
          budget_used: 0,
          budget_used_credits: 0,
          limits: input.limits ?? null,
          expires_at: input.expires_at ?? null,
          created_at: now,
          updated_at: now,
          last_used_at: null,
          previous_key_hash: null,
          previous_key_expires_at: null,
          team_id: input.team_id ?? null
        }
        yield* store.insertKey(record).pipe(Effect.catch(teamGone(record.team_id)))
        yield* cache.invalidate
        return { record, key }
      })

      // A team deleted on another replica between the check and the write fails the write on the
      // foreign key: the same 400 as a team found missing.
      const teamGone = (teamId: string | null | undefined) => (error: unknown): Effect.Effect<never, ValidationFailed> =>
        Effect.andThen(checkTeam(teamId), Effect.die(error))

      const update = (id: string, input: UpdateKeyInput) =>
        Effect.andThen(
          checkTeam(input.team_id),
          changed(
            store.updateKey(id, {
              ...input,
              budget: input.budget === undefined ? undefined : input.budget === null ? null : budgetLimits(input.budget)
            }).pipe(Effect.catch(teamGone(input.team_id)), Effect.flatMap(found(id)))
          ).pipe(Effect.flatMap(oneWithUsage))
        )

      const rotate = Effect.fn("ApiKeys.rotate")(function*(id: string, input: RotateKeyInput) {
        const current = yield* store.findKeyById(id).pipe(Effect.orDie, Effect.flatMap(found(id)))
        const key = generateKey()
        const grace = input.grace_seconds ?? 0
        const now = yield* Clock.currentTimeMillis
        const record = yield* changed(
          store.updateKey(id, {
            key_hash: hashKey(key),
            key_hint: keyHint(key),
            previous_key_hash: grace > 0 ? current.key_hash : null,
            previous_key_expires_at: grace > 0 ? new Date(now + grace * 1000).toISOString() : null
          }).pipe(Effect.orDie, Effect.flatMap(found(id)))
        )
        return { record, key }
      })

      return ApiKeys.of({
        create,
        list: Effect.flatMap(Effect.orDie(store.listKeys), withUsage),
        page: Effect.fn("ApiKeys.page")(function*(query: Omit<KeyListQuery, "now">) {
          const now = new Date(yield* Clock.currentTimeMillis).toISOString()
          const page = yield* Effect.orDie(store.pageKeys({ ...query, now }))
          return { ...page, items: yield* withUsage(page.items) }
        }),
        get: (id) => store.findKeyById(id).pipe(Effect.orDie, Effect.flatMap(found(id)), Effect.flatMap(oneWithUsage)),
        update,
        rotate,
        revoke: (id) => changed(store.updateKey(id, { is_active: false }).pipe(Effect.orDie, Effect.flatMap(found(id)))).pipe(Effect.flatMap(oneWithUsage)),
        // Every period's usage goes: the budget starts over from nothing.
        resetBudget: (id) =>
          changed(
            Effect.orDie(credits.resetBudget(id)).pipe(
              Effect.andThen(store.updateKey(id, { budget_used: 0 }).pipe(Effect.orDie, Effect.flatMap(found(id))))
            )
          ).pipe(Effect.flatMap(oneWithUsage)),
        remove: (id) =>
          changed(store.deleteKey(id).pipe(Effect.orDie, Effect.flatMap((deleted) => (deleted ? Effect.void : Effect.fail(notFound(id))))))
      })
    })
  )
}
