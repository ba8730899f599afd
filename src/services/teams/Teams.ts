/**
 * Team management shared by the admin API and the CLI (issue 33): create, list, show, update,
 * delete. A team groups keys under one model list, one budget and shared limits; a request of a
 * key in a team must fit both. Every change clears this process's key cache (which holds each
 * key with its team); other replicas notice through the store's key-change counter (KeyCache).
 */
import { randomBytes } from "node:crypto"
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import * as Struct from "effect/Struct"
import { periodKey } from "../../domain/budget-periods.ts"
import { budgetView, type KeyBudgetView } from "../../domain/budget-view.ts"
import { Conflict, NotFound, ValidationFailed } from "../../domain/errors.ts"
import { fromMicros, MAX_CREDITS, toMicros } from "../../domain/money.ts"
import type { BudgetLimits, TeamRecord } from "../../domain/records.ts"
import { KeyCache } from "../auth/KeyCache.ts"
import { MAX_PER_MINUTE } from "../limits/gcra.ts"
import { CreditsRepo } from "../store/CreditsRepo.ts"
import { type TeamListQuery, type TeamPage, type TeamPatch, TeamsRepo } from "../store/TeamsRepo.ts"

export const TEAM_ID = /^team_[0-9a-f]{16}$/

export const newTeamId = (): string => `team_${randomBytes(8).toString("hex")}`

const PositiveInt = (maximum: number) => Schema.Int.check(Schema.isBetween({ minimum: 1, maximum }))

/** What an admin writes: `max_credits` in credits (a decimal of at most six fractional digits). */
export const TeamBudgetInput = Schema.Struct({
  max_requests: Schema.optional(PositiveInt(Number.MAX_SAFE_INTEGER)),
  max_credits: Schema.optional(Schema.Number.check(Schema.isBetween({ minimum: 0, maximum: MAX_CREDITS, exclusiveMinimum: true }))),
  period: Schema.optional(Schema.Literals(["day", "week", "month"]))
})
export type TeamBudgetInput = typeof TeamBudgetInput.Type

export const TeamLimitsInput = Schema.Struct({
  requests_per_minute: Schema.optional(PositiveInt(MAX_PER_MINUTE)),
  concurrent_streams: Schema.optional(PositiveInt(100_000)),
  tokens_per_minute: Schema.optional(PositiveInt(Number.MAX_SAFE_INTEGER))
})

const mutableFields = {
  name: Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(200)),
  allowed_models: Schema.NullOr(
    Schema.Array(Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(200))).check(Schema.isMaxLength(1000))
  ),
  budget: Schema.NullOr(TeamBudgetInput),
  limits: Schema.NullOr(TeamLimitsInput)
}

/** PATCH /teams/:id: any of the mutable fields; `null` removes a list, a budget or the limits. */
export const UpdateTeamInput = Schema.Struct(mutableFields).mapFields(Struct.map(Schema.optional))
export type UpdateTeamInput = typeof UpdateTeamInput.Type

/** POST /teams: a name is required. */
export const CreateTeamInput = UpdateTeamInput.mapFields(Struct.assign({ name: mutableFields.name }))
export type CreateTeamInput = typeof CreateTeamInput.Type

/** What the admin API and the CLI show of a team. Budget amounts in credits. */
export interface TeamView {
  readonly id: string
  readonly name: string
  readonly allowed_models: ReadonlyArray<string> | null
  /** Its limits and what the team's keys used of it in the current period. */
  readonly budget: KeyBudgetView | null
  readonly limits: TeamRecord["limits"]
  /** How many keys are in the team. */
  readonly key_count: number
  readonly created_at: string
  readonly updated_at: string
}

/** What a team's keys used of its budget in the current period (budget_usage, held under the team id). */
export interface TeamUsage {
  readonly requests: number
  readonly credits: number
}

export const toTeamView = (team: TeamRecord, keyCount: number, usage: TeamUsage | undefined = undefined, nowMs: number = Date.now()): TeamView => ({
  id: team.id,
  name: team.name,
  allowed_models: team.allowed_models,
  budget: team.budget === null ? null : budgetView(team.budget, usage?.requests ?? 0, usage?.credits ?? 0, nowMs),
  limits: team.limits,
  key_count: keyCount,
  created_at: team.created_at,
  updated_at: team.updated_at
})

/** A budget as written -> as kept (micros), or the field it is wrong at. */
export const budgetOf = (input: TeamBudgetInput | null | undefined): Effect.Effect<BudgetLimits | null | undefined, ValidationFailed> => {
  if (input === undefined || input === null) return Effect.succeed(input)
  if (input.max_requests === undefined && input.max_credits === undefined) {
    return Effect.fail(new ValidationFailed({ message: "budget: set max_requests, max_credits or both", details: { field: "budget" } }))
  }
  let micros: number | undefined
  if (input.max_credits !== undefined) {
    micros = toMicros(input.max_credits)
    if (micros === undefined || micros === 0) {
      return Effect.fail(new ValidationFailed({
        message: "budget.max_credits: expected a positive number of credits with at most six fractional digits",
        details: { field: "budget.max_credits" }
      }))
    }
  }
  const budget: { -readonly [K in keyof BudgetLimits]: BudgetLimits[K] } = {}
  if (input.max_requests !== undefined) budget.max_requests = input.max_requests
  if (micros !== undefined) budget.max_credits_micros = micros
  if (input.period !== undefined) budget.period = input.period
  return Effect.succeed(budget)
}

/** Limits as written -> as kept: an empty object is no limits. */
const limitsOf = (input: UpdateTeamInput["limits"]): TeamRecord["limits"] | undefined => {
  if (input === undefined || input === null) return input
  const out: { requests_per_minute?: number; concurrent_streams?: number; tokens_per_minute?: number } = {}
  if (input.requests_per_minute !== undefined) out.requests_per_minute = input.requests_per_minute
  if (input.concurrent_streams !== undefined) out.concurrent_streams = input.concurrent_streams
  if (input.tokens_per_minute !== undefined) out.tokens_per_minute = input.tokens_per_minute
  return Object.keys(out).length === 0 ? null : out
}

const notFound = (id: string) => new NotFound({ message: `no team with id ${id.slice(0, 64)}` })
const nameTaken = (name: string) => new Conflict({ message: `a team named "${name}" already exists`, details: { field: "name" } })

export class Teams extends Context.Service<Teams, {
  readonly create: (input: CreateTeamInput) => Effect.Effect<TeamRecord, ValidationFailed | Conflict>
  /** Every team: the CLI's listing. The admin API pages instead (`page`). */
  readonly list: Effect.Effect<ReadonlyArray<TeamRecord>>
  readonly page: (query: TeamListQuery) => Effect.Effect<TeamPage>
  readonly get: (id: string) => Effect.Effect<TeamRecord, NotFound>
  /** The team, or undefined: for a key's `team_id`, which is checked before the key is written. */
  readonly find: (id: string) => Effect.Effect<TeamRecord | undefined>
  readonly update: (id: string, input: UpdateTeamInput) => Effect.Effect<TeamRecord, NotFound | ValidationFailed | Conflict>
  /** Deletes a team; 409 while keys are in it. */
  readonly remove: (id: string) => Effect.Effect<void, NotFound | Conflict>
  /** How many keys each team has. */
  readonly keyCounts: (ids: ReadonlyArray<string>) => Effect.Effect<ReadonlyMap<string, number>>
  /** The views of these teams: key counts and budget usage in the current period, one query each. */
  readonly views: (teams: ReadonlyArray<TeamRecord>) => Effect.Effect<ReadonlyArray<TeamView>>
}>()("modelgate/Teams") {
  static readonly layer = Layer.effect(
    Teams,
    Effect.gen(function*() {
      const store = yield* TeamsRepo
      const credits = yield* CreditsRepo
      const cache = yield* KeyCache
      const nowIso = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms).toISOString())

      const create = Effect.fn("Teams.create")(function*(input: CreateTeamInput) {
        const budget = yield* budgetOf(input.budget)
        const now = yield* nowIso
        const team: TeamRecord = {
          id: newTeamId(),
          name: input.name,
          allowed_models: input.allowed_models ?? null,
          budget: budget ?? null,
          limits: limitsOf(input.limits) ?? null,
          created_at: now,
          updated_at: now
        }
        // Two replicas creating the same name at once: the unique index refuses the later one,
        // which is the same 409 as a name found taken.
        const inserted = yield* store.insertTeam(team).pipe(
          Effect.catch((error) => Effect.flatMap(Effect.orDie(store.nameTaken(team.name, team.id)), (taken) => (taken ? Effect.succeed(false) : Effect.die(error))))
        )
        if (!inserted) return yield* nameTaken(team.name)
        return team
      })

      const update = Effect.fn("Teams.update")(function*(id: string, input: UpdateTeamInput) {
        const budget = yield* budgetOf(input.budget)
        const patch: TeamPatch = {
          ...(input.name === undefined ? {} : { name: input.name }),
          ...(input.allowed_models === undefined ? {} : { allowed_models: input.allowed_models }),
          ...(budget === undefined ? {} : { budget }),
          ...(input.limits === undefined ? {} : { limits: limitsOf(input.limits) ?? null })
        }
        const updated = yield* store.updateTeam(id, patch, yield* nowIso).pipe(
          Effect.catch((error) =>
            input.name === undefined
              ? Effect.die(error)
              : Effect.flatMap(Effect.orDie(store.nameTaken(input.name, id)), (taken) => (taken ? Effect.succeed("NameTaken" as const) : Effect.die(error))))
        )
        if (updated === undefined) return yield* notFound(id)
        if (updated === "NameTaken") return yield* nameTaken(input.name!)
        yield* cache.invalidate
        return updated
      })

      const remove = Effect.fn("Teams.remove")(function*(id: string) {
        // A key that joined on another replica after the count fails the deletion on the foreign
        // key: counted again, that is the same 409 as keys found in the team.
        const outcome = yield* store.deleteTeam(id).pipe(
          Effect.catch((error) =>
            Effect.flatMap(Effect.orDie(store.memberCounts([id])), (counts) => {
              const keys = counts.get(id) ?? 0
              return keys > 0 ? Effect.succeed({ _tag: "HasKeys", keys } as const) : Effect.die(error)
            }))
        )
        if (outcome._tag === "Missing") return yield* notFound(id)
        if (outcome._tag === "HasKeys") {
          return yield* new Conflict({
            message: `team ${id} still has ${outcome.keys} key${outcome.keys === 1 ? "" : "s"}: move or delete them first`,
            details: { keys: outcome.keys }
          })
        }
        yield* cache.invalidate
      })

      return Teams.of({
        create,
        list: Effect.orDie(store.listTeams),
        page: (query) => Effect.orDie(store.pageTeams(query)),
        get: (id) => Effect.flatMap(Effect.orDie(store.findTeam(id)), (team) => (team === undefined ? Effect.fail(notFound(id)) : Effect.succeed(team))),
        find: (id) => Effect.orDie(store.findTeam(id)),
        update,
        remove,
        keyCounts: (ids) => Effect.orDie(store.memberCounts(ids)),
        views: Effect.fn("Teams.views")(function*(teams: ReadonlyArray<TeamRecord>) {
          const nowMs = yield* Clock.currentTimeMillis
          const counts = yield* Effect.orDie(store.memberCounts(teams.map((t) => t.id)))
          const budgeted = teams.filter((t) => t.budget !== null).map((t) => [t.id, periodKey(t.budget!.period, nowMs)] as const)
          const usage = budgeted.length === 0 ? new Map() : yield* Effect.orDie(credits.budgetUsage(budgeted))
          return teams.map((team) =>
            toTeamView(
              team,
              counts.get(team.id) ?? 0,
              team.budget === null ? undefined : usage.get(`${team.id} ${periodKey(team.budget.period, nowMs)}`),
              nowMs
            )
          )
        })
      })
    })
  )
}
