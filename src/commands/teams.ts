/**
 * `modelgate teams ...` (issue 33): teams in the configured store, through the service and the
 * input schemas of the admin API's `/teams`, so the CLI accepts and refuses exactly what the admin
 * API does. Loaded by command-line.ts only when a teams command runs.
 */
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { coreLayer } from "../core.ts"
import { ValidationFailed } from "../domain/errors.ts"
import { decodeStrict } from "../domain/validation.ts"
import type { GatewayConfig } from "../services/config/schema.ts"
import { CreateTeamInput, TEAM_ID, Teams, toTeamView, UpdateTeamInput } from "../services/teams/Teams.ts"
import { printJson } from "./print.ts"
import { Refused } from "./refused.ts"

/** The flag that gave each field of the admin API's body, so an error names what was typed. */
const FLAG_OF: Readonly<Record<string, string>> = {
  name: "--name",
  allowed_models: "--models",
  "budget.max_requests": "--budget-requests",
  "budget.max_credits": "--budget-credits",
  "budget.period": "--period",
  budget: "--budget-requests or --budget-credits",
  "limits.requests_per_minute": "--rpm",
  "limits.concurrent_streams": "--streams",
  "limits.tokens_per_minute": "--tpm"
}

const flagged = (error: ValidationFailed) => {
  const field = typeof error.details?.field === "string" ? error.details.field : ""
  const flag = FLAG_OF[field]
  return flag === undefined ? error : new ValidationFailed({ message: `${flag}: ${error.message.replace(/^[\w.]+: /, "")}`, details: error.details })
}

/** Every refusal the admin API would answer 4xx (400, 404, 409): one line on stderr, exit status 1. */
const refused = <A, R>(effect: Effect.Effect<A, { readonly _tag: string; readonly message: string }, R>) =>
  Effect.catch(effect, (error) => Effect.fail(new Refused({ message: error._tag === "ValidationFailed" ? flagged(error as ValidationFailed).message : error.message })))

const withTeams = <A, E>(config: GatewayConfig, f: (teams: Teams["Service"]) => Effect.Effect<A, E>) =>
  Effect.flatMap(Teams, f).pipe(Effect.provide(coreLayer(config)))

/** A team named by its id or its name (the CLI's `--team`), as its id. */
export const resolveTeam = (teams: Teams["Service"], idOrName: string) =>
  Effect.gen(function*() {
    if (TEAM_ID.test(idOrName)) return idOrName
    const found = (yield* teams.list).find((team) => team.name === idOrName)
    if (found === undefined) return yield* new ValidationFailed({ message: `--team: no team with id or name "${idOrName}"`, details: { field: "team_id" } })
    return found.id
  })

export interface TeamFlags {
  readonly name: Option.Option<string>
  readonly models: Option.Option<string>
  readonly budgetRequests: Option.Option<number>
  readonly budgetCredits: Option.Option<string>
  readonly period: Option.Option<string>
  readonly rpm: Option.Option<number>
  readonly streams: Option.Option<number>
  readonly tpm: Option.Option<number>
  readonly clearBudget?: boolean | undefined
  readonly clearLimits?: boolean | undefined
}

/** The admin API's body from the flags: only what was given (an update changes only that). */
const bodyOf = (flags: TeamFlags): Record<string, unknown> => {
  const body: Record<string, unknown> = {}
  Option.map(flags.name, (name) => (body.name = name))
  // `--models ""`: no list of its own (the keys' lists alone decide).
  Option.map(flags.models, (models) => (body.allowed_models = models.trim() === "" ? null : models.split(",").map((m) => m.trim()).filter(Boolean)))
  const budget: Record<string, unknown> = {}
  Option.map(flags.budgetRequests, (n) => (budget.max_requests = n))
  Option.map(flags.budgetCredits, (credits) => (budget.max_credits = /^\s*$/.test(credits) ? Number.NaN : Number(credits)))
  Option.map(flags.period, (period) => (budget.period = period))
  if (Object.keys(budget).length > 0) body.budget = budget
  else if (flags.clearBudget === true) body.budget = null
  const limits: Record<string, unknown> = {}
  Option.map(flags.rpm, (n) => (limits.requests_per_minute = n))
  Option.map(flags.streams, (n) => (limits.concurrent_streams = n))
  Option.map(flags.tpm, (n) => (limits.tokens_per_minute = n))
  if (Object.keys(limits).length > 0) body.limits = limits
  else if (flags.clearLimits === true) body.limits = null
  return body
}

const show = (teams: Teams["Service"], id: string) =>
  Effect.flatMap(teams.get(id), (team) => Effect.map(teams.views([team]), (views) => views[0]!))

export const createTeam = (config: GatewayConfig, flags: TeamFlags) =>
  Effect.gen(function*() {
    const input = yield* decodeStrict(CreateTeamInput)(bodyOf(flags))
    const team = yield* withTeams(config, (teams) => teams.create(input))
    yield* printJson(toTeamView(team, 0))
  }).pipe(refused)

export const listTeams = (config: GatewayConfig) =>
  withTeams(config, (teams) =>
    Effect.flatMap(teams.list, (list) =>
      teams.views(list))).pipe(
      Effect.flatMap(printJson),
      refused
    )

export const showTeam = (config: GatewayConfig, id: string) => withTeams(config, (teams) => show(teams, id)).pipe(Effect.flatMap(printJson), refused)

export const updateTeam = (config: GatewayConfig, id: string, flags: TeamFlags) =>
  Effect.gen(function*() {
    const input = yield* decodeStrict(UpdateTeamInput)(bodyOf(flags))
    if (Object.keys(input).length === 0) return yield* new Refused({ message: "nothing to update: give at least one flag" })
    const team = yield* withTeams(config, (teams) => Effect.andThen(teams.update(id, input), show(teams, id)))
    yield* printJson(team)
  }).pipe(refused)

export const deleteTeam = (config: GatewayConfig, id: string) =>
  withTeams(config, (teams) => teams.remove(id)).pipe(Effect.andThen(Console.log(`deleted ${id}`)), refused)
