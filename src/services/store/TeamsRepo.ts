/**
 * Teams (issue 33): the rows behind the admin API's teams, and what authentication reads with a
 * key (KeysRepo.findKeyByHash joins a key's team). Every change bumps the key-change counter, so
 * the key caches of every replica, which hold each key with its team, drop what they hold.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { SqlClient } from "effect/sql/SqlClient"
import type { BudgetLimits, BudgetPeriod, TeamRecord, TeamScope } from "../../domain/records.ts"
import { bumpKeyVersion, decodeRows, keysetPage, likeLiteral, Num, NullableJson, NullableNum, NullableString } from "./rows.ts"
import { storeOp, type StoreError } from "./StoreError.ts"

export type TeamPatch = Partial<Pick<TeamRecord, "name" | "allowed_models" | "budget" | "limits">>

/** Where a page of teams starts: after this team in the list's order (newest first). */
export interface TeamPosition {
  readonly created_at: string
  readonly id: string
}

export interface TeamListQuery {
  readonly limit: number
  readonly after?: TeamPosition | undefined
  /** Case-insensitive substring of the name, matched literally. */
  readonly name?: string | undefined
}

export interface TeamPage {
  readonly items: ReadonlyArray<TeamRecord>
  readonly next: TeamPosition | undefined
}

/** The outcome of a deletion: gone, not there, or refused because keys are still in the team. */
export type TeamDeletion = { readonly _tag: "Deleted" } | { readonly _tag: "Missing" } | { readonly _tag: "HasKeys"; readonly keys: number }

const Period = Schema.NullOr(Schema.Literals(["day", "week", "month"]))

/** The team's columns, under the names a `teams` row has; with a prefix when joined to a key. */
const teamFields = {
  allowed_models: NullableJson(Schema.Array(Schema.String)),
  max_requests: NullableNum,
  max_credits_micros: NullableNum,
  period: Period,
  requests_per_minute: NullableNum,
  concurrent_streams: NullableNum,
  tokens_per_minute: NullableNum
}

const TeamRow = Schema.Struct({
  id: Schema.String,
  name: Schema.String,
  ...teamFields,
  created_at: Schema.String,
  updated_at: Schema.String
})

type TeamColumns = {
  readonly allowed_models: ReadonlyArray<string> | null
  readonly max_requests: number | null
  readonly max_credits_micros: number | null
  readonly period: BudgetPeriod | null
  readonly requests_per_minute: number | null
  readonly concurrent_streams: number | null
  readonly tokens_per_minute: number | null
}

const defined = <A extends Record<string, unknown>>(fields: A): A => {
  const out: Record<string, unknown> = {}
  for (const [name, value] of Object.entries(fields)) if (value !== null && value !== undefined) out[name] = value
  return out as A
}

/** The scope a team puts on its keys' requests, from its columns. */
export const teamScopeOf = (id: string, name: string, row: TeamColumns): TeamScope => {
  const budget: BudgetLimits = defined({
    max_requests: row.max_requests ?? undefined,
    max_credits_micros: row.max_credits_micros ?? undefined,
    period: row.period ?? undefined
  })
  const limits = defined({
    requests_per_minute: row.requests_per_minute ?? undefined,
    concurrent_streams: row.concurrent_streams ?? undefined,
    tokens_per_minute: row.tokens_per_minute ?? undefined
  })
  return {
    id,
    name,
    allowed_models: row.allowed_models,
    budget: budget.max_requests === undefined && budget.max_credits_micros === undefined ? null : budget,
    limits: Object.keys(limits).length === 0 ? null : limits
  }
}

const toTeam = (row: typeof TeamRow.Type): TeamRecord => ({
  ...teamScopeOf(row.id, row.name, row),
  created_at: row.created_at,
  updated_at: row.updated_at
})

/** A team's columns as the join in KeysRepo.findKeyByHash names them (`team_<column>`). */
export const TeamJoinRow = Schema.Struct({
  team_name: NullableString,
  team_allowed_models: teamFields.allowed_models,
  team_max_requests: NullableNum,
  team_max_credits_micros: NullableNum,
  team_period: Period,
  team_requests_per_minute: NullableNum,
  team_concurrent_streams: NullableNum,
  team_tokens_per_minute: NullableNum
})

/** The select list of that join: the team's columns under their `team_` names. */
export const TEAM_JOIN_COLUMNS = [
  "name",
  "allowed_models",
  "max_requests",
  "max_credits_micros",
  "period",
  "requests_per_minute",
  "concurrent_streams",
  "tokens_per_minute"
].map((column) => `teams.${column} AS team_${column}`).join(", ")

/** The team a joined key row carries, or null (no team_id, or no such team). */
export const teamOfJoin = (teamId: string | null, row: typeof TeamJoinRow.Type): TeamScope | null =>
  teamId === null || row.team_name === null
    ? null
    : teamScopeOf(teamId, row.team_name, {
      allowed_models: row.team_allowed_models,
      max_requests: row.team_max_requests,
      max_credits_micros: row.team_max_credits_micros,
      period: row.team_period,
      requests_per_minute: row.team_requests_per_minute,
      concurrent_streams: row.team_concurrent_streams,
      tokens_per_minute: row.team_tokens_per_minute
    })

const teamColumns = (patch: TeamPatch): Record<string, unknown> => {
  const out: Record<string, unknown> = {}
  if (patch.name !== undefined) out.name = patch.name
  if (patch.allowed_models !== undefined) out.allowed_models = patch.allowed_models === null ? null : JSON.stringify(patch.allowed_models)
  if (patch.budget !== undefined) {
    out.max_requests = patch.budget?.max_requests ?? null
    out.max_credits_micros = patch.budget?.max_credits_micros ?? null
    out.period = patch.budget?.period ?? null
  }
  if (patch.limits !== undefined) {
    out.requests_per_minute = patch.limits?.requests_per_minute ?? null
    out.concurrent_streams = patch.limits?.concurrent_streams ?? null
    out.tokens_per_minute = patch.limits?.tokens_per_minute ?? null
  }
  return out
}

const decodeTeams = decodeRows(TeamRow)
const decodeCounts = decodeRows(Schema.Struct({ team_id: Schema.String, n: Num }))
const decodeCount = decodeRows(Schema.Struct({ n: Num }))

export class TeamsRepo extends Context.Service<TeamsRepo, {
  /** Inserts a team; false when its name is taken. */
  readonly insertTeam: (team: TeamRecord) => Effect.Effect<boolean, StoreError>
  readonly findTeam: (id: string) => Effect.Effect<TeamRecord | undefined, StoreError>
  /** Whether another team than `except` has this name (after a write lost a race on the unique index). */
  readonly nameTaken: (name: string, except: string) => Effect.Effect<boolean, StoreError>
  readonly listTeams: Effect.Effect<ReadonlyArray<TeamRecord>, StoreError>
  /** A page of teams, newest first by (created_at, id), like the key list. */
  readonly pageTeams: (query: TeamListQuery) => Effect.Effect<TeamPage, StoreError>
  /** Changes a team; undefined when there is none, "NameTaken" when the new name is another team's. */
  readonly updateTeam: (id: string, patch: TeamPatch, now: string) => Effect.Effect<TeamRecord | undefined | "NameTaken", StoreError>
  /** Deletes a team that no key is in (checked in the same transaction). */
  readonly deleteTeam: (id: string) => Effect.Effect<TeamDeletion, StoreError>
  /** How many keys each of these teams has (a team without keys is absent). */
  readonly memberCounts: (ids: ReadonlyArray<string>) => Effect.Effect<ReadonlyMap<string, number>, StoreError>
}>()("modelgate/TeamsRepo") {
  static readonly layer = Layer.effect(
    TeamsRepo,
    Effect.gen(function*() {
      const sql = yield* SqlClient
      const bump = bumpKeyVersion(sql)
      const nameTaken = (name: string, except: string) =>
        sql`SELECT COUNT(*) AS n FROM teams WHERE name = ${name} AND id <> ${except}`.pipe(
          decodeCount,
          Effect.map((rows) => (rows[0]?.n ?? 0) > 0)
        )
      return TeamsRepo.of({
        insertTeam: (team) =>
          sql.withTransaction(Effect.gen(function*() {
            // Checked first so the usual case is an answer, not a constraint error; the unique
            // index still decides a race between two replicas (the loser fails as a StoreError).
            if (yield* nameTaken(team.name, team.id)) return false
            yield* sql`INSERT INTO teams ${sql.insert({ id: team.id, ...teamColumns(team), created_at: team.created_at, updated_at: team.updated_at })}`
            return true
          })).pipe(storeOp("TeamsRepo.insertTeam")),
        nameTaken: (name, except) => nameTaken(name, except).pipe(storeOp("TeamsRepo.nameTaken")),
        findTeam: (id) =>
          sql`SELECT * FROM teams WHERE id = ${id}`.pipe(
            decodeTeams,
            Effect.map((rows) => (rows[0] === undefined ? undefined : toTeam(rows[0]))),
            storeOp("TeamsRepo.findTeam")
          ),
        listTeams: sql`SELECT * FROM teams ORDER BY created_at, id`.pipe(
          decodeTeams,
          Effect.map((rows) => rows.map(toTeam)),
          storeOp("TeamsRepo.listTeams")
        ),
        pageTeams: (query) => {
          const conditions = [
            query.after !== undefined ? sql`(created_at, id) < (${query.after.created_at}, ${query.after.id})` : undefined,
            query.name !== undefined ? sql`LOWER(name) LIKE ${`%${likeLiteral(query.name.toLowerCase())}%`} ESCAPE '\\'` : undefined
          ].filter((c) => c !== undefined)
          return sql`SELECT * FROM teams WHERE ${sql.and(conditions)} ORDER BY created_at DESC, id DESC LIMIT ${query.limit + 1}`.pipe(
            decodeTeams,
            Effect.map((rows): TeamPage => {
              const { items, last } = keysetPage(rows.map(toTeam), query.limit)
              return { items, next: last === undefined ? undefined : { created_at: last.created_at, id: last.id } }
            }),
            storeOp("TeamsRepo.pageTeams")
          )
        },
        updateTeam: (id, patch, now) =>
          sql.withTransaction(Effect.gen(function*() {
            if (patch.name !== undefined && (yield* nameTaken(patch.name, id))) return "NameTaken" as const
            const rows = yield* decodeTeams(sql`UPDATE teams SET ${sql.update({ ...teamColumns(patch), updated_at: now })} WHERE id = ${id} RETURNING *`)
            if (rows.length === 0) return undefined
            yield* bump
            return toTeam(rows[0]!)
          })).pipe(storeOp("TeamsRepo.updateTeam")),
        deleteTeam: (id) =>
          sql.withTransaction(Effect.gen(function*() {
            const keys = (yield* decodeCount(sql`SELECT COUNT(*) AS n FROM api_keys WHERE team_id = ${id}`))[0]?.n ?? 0
            if (keys > 0) return { _tag: "HasKeys", keys } as const
            // A key moved into the team after the count, on another replica, makes this fail on
            // the foreign key instead of leaving the key in a team that is gone.
            const rows = yield* sql`DELETE FROM teams WHERE id = ${id} RETURNING id`
            if (rows.length === 0) return { _tag: "Missing" } as const
            yield* bump
            return { _tag: "Deleted" } as const
          })).pipe(storeOp("TeamsRepo.deleteTeam")),
        memberCounts: (ids) =>
          ids.length === 0
            ? Effect.succeed(new Map())
            : sql`SELECT team_id, COUNT(*) AS n FROM api_keys WHERE ${sql.in("team_id", ids)} GROUP BY team_id`.pipe(
              decodeCounts,
              Effect.map((rows) => new Map(rows.map((r) => [r.team_id, r.n]))),
              storeOp("TeamsRepo.memberCounts")
            )
      })
    })
  )
}
