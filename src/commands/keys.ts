/**
 * `modelgate keys ...`: key operations against the configured store, the same code path as the
 * admin API. Loaded by command-line.ts only when a keys command runs: the store, not the server.
 */
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { coreLayer } from "../core.ts"
import { ValidationFailed } from "../domain/errors.ts"
import { decodeStrict } from "../domain/validation.ts"
import type { GatewayConfig } from "../services/config/schema.ts"
import { ApiKeys, CreateKeyInput, RotateKeyInput, toKeyView, UpdateKeyInput } from "../services/keys/ApiKeys.ts"
import { Teams } from "../services/teams/Teams.ts"
import { printJson } from "./print.ts"

/** The flag that gave each field of the admin API's body, so the CLI's error names what was typed. */
const FLAG_OF: Readonly<Record<string, string>> = {
  name: "--name",
  allowed_models: "--models",
  tools_enabled: "--tools",
  mcp_servers: "--mcp-servers",
  budget: "--budget",
  limits: "--tokens-per-minute",
  "budget.max_requests": "--budget",
  "budget.max_credits": "--budget-credits",
  "budget.period": "--budget-period",
  expires_at: "--expires",
  grace_seconds: "--grace-seconds",
  team_id: "--team"
}

/**
 * The CLI's input goes through the admin API's own schemas (CreateKeyInput, RotateKeyInput), so
 * `--expires tomorrow` or `--budget -3` is refused exactly as `POST /api-keys` refuses them,
 * naming the flag and the field (issue 26.2).
 */
const validated = <S extends Parameters<typeof decodeStrict>[0]>(schema: S, input: unknown) =>
  decodeStrict(schema)(input).pipe(
    Effect.mapError((error) => {
      const field = typeof error.details?.field === "string" ? error.details.field : ""
      const flag = FLAG_OF[field.split(".").slice(0, 2).join(".")] ?? FLAG_OF[field.split(".")[0] ?? ""]
      return flag === undefined ? error : new ValidationFailed({ message: `${flag}: ${error.message}`, details: error.details })
    })
  )

const withKeys = <A, E>(config: GatewayConfig, f: (keys: ApiKeys["Service"]) => Effect.Effect<A, E>) =>
  Effect.flatMap(ApiKeys, f).pipe(Effect.provide(coreLayer(config)))

/**
 * `--team`: a team's id or name, as its id; `--team ""` is no team (null). Looked up in the store
 * only when a name is given: an id is checked by the key service, as for the admin API.
 */
const teamOf = (config: GatewayConfig, team: Option.Option<string>) =>
  Option.match(team, {
    onNone: () => Effect.succeed(undefined),
    onSome: (value) =>
      value.trim() === ""
        ? Effect.succeed(null)
        : Effect.promise(() => import("./teams.ts")).pipe(
          Effect.flatMap(({ resolveTeam }) => Effect.flatMap(Teams, (teams) => resolveTeam(teams, value.trim()))),
          Effect.provide(coreLayer(config))
        )
  })

export interface CreateKeyFlags {
  readonly name: string
  readonly models: Option.Option<string>
  readonly tools: boolean
  readonly mcpServers: Option.Option<string>
  readonly budget: Option.Option<number>
  /** Absent in older callers: no limit of the key's own. */
  readonly tokensPerMinute?: Option.Option<number> | undefined
  readonly budgetCredits: Option.Option<string>
  readonly budgetPeriod: Option.Option<string>
  readonly expires: Option.Option<string>
  readonly team: Option.Option<string>
}

export interface BudgetFlags {
  readonly budget: Option.Option<number>
  readonly budgetCredits: Option.Option<string>
  readonly budgetPeriod: Option.Option<string>
}

/** `--budget N --budget-credits X --budget-period P` as the admin API's `budget` (checked by its schema); null when none is given. */
const budgetOf = ({ budget, budgetCredits, budgetPeriod }: BudgetFlags) =>
  Option.isNone(budget) && Option.isNone(budgetCredits) && Option.isNone(budgetPeriod)
    ? null
    : {
      ...Option.match(budget, { onNone: () => ({}), onSome: (max_requests) => ({ max_requests }) }),
      ...Option.match(budgetCredits, { onNone: () => ({}), onSome: (text) => ({ max_credits: /^\d+(\.\d+)?$/.test(text) ? Number(text) : text }) }),
      ...Option.match(budgetPeriod, { onNone: () => ({}), onSome: (period) => ({ period }) })
    }

export const createKey = (config: GatewayConfig, { name, models, tools, mcpServers, tokensPerMinute, expires, team, ...flags }: CreateKeyFlags) =>
  Effect.gen(function*() {
    const servers = Option.match(mcpServers, { onNone: () => [], onSome: (m) => m.split(",").map((s) => s.trim()).filter(Boolean) })
    // Configured servers only, as the admin API insists: a typo must not look like a grant.
    const unknown = servers.find((server) => !config.mcp.servers.some((s) => s.name === server))
    if (unknown !== undefined) {
      return yield* new ValidationFailed({
        message: `--mcp-servers: no MCP server named "${unknown}" in mcp.servers`,
        details: { field: "mcp_servers" }
      })
    }
    const { connections: _none, ...input } = yield* validated(CreateKeyInput, {
      name,
      allowed_models: Option.match(models, { onNone: () => null, onSome: (m) => m.split(",").map((s) => s.trim()).filter(Boolean) }),
      tools_enabled: tools,
      mcp_servers: servers,
      budget: budgetOf(flags),
      ...(tokensPerMinute === undefined || Option.isNone(tokensPerMinute) ? {} : { limits: { tokens_per_minute: tokensPerMinute.value } }),
      expires_at: Option.getOrNull(expires),
      ...(Option.isSome(team) ? { team_id: yield* teamOf(config, team) } : {})
    })
    const created = yield* withKeys(config, (keys) => keys.create(input))
    yield* printJson({ ...toKeyView(created.record), key: created.key })
    yield* Console.error("Store the key now: it is shown only once.")
  })

export interface UpdateKeyFlags extends BudgetFlags {
  readonly name: Option.Option<string>
  readonly models: Option.Option<string>
  readonly team: Option.Option<string>
  readonly noBudget: boolean
}

/**
 * `keys update <id>`: what PATCH /api-keys/:id changes, for the flags given (`--models ""`: every
 * model; `--team ""`: out of its team; budget flags replace the whole budget, `--no-budget`
 * removes it).
 */
export const updateKey = (config: GatewayConfig, id: string, { name, models, team, noBudget, ...budgetFlags }: UpdateKeyFlags) =>
  Effect.gen(function*() {
    const body: Record<string, unknown> = {}
    Option.map(name, (n) => (body.name = n))
    Option.map(models, (m) => (body.allowed_models = m.trim() === "" ? null : m.split(",").map((s) => s.trim()).filter(Boolean)))
    if (Option.isSome(team)) body.team_id = yield* teamOf(config, team)
    const budget = budgetOf(budgetFlags)
    if (noBudget && budget !== null) {
      return yield* new ValidationFailed({ message: "--no-budget: give either it or budget flags, not both", details: { field: "budget" } })
    }
    if (noBudget) body.budget = null
    else if (budget !== null) body.budget = budget
    const input = yield* validated(UpdateKeyInput, body)
    if (Object.keys(input).length === 0) {
      return yield* new ValidationFailed({
        message: "nothing to update: give --name, --models, --team, --budget, --budget-credits, --budget-period or --no-budget",
        details: { field: "budget" }
      })
    }
    const record = yield* withKeys(config, (keys) => keys.update(id, input))
    yield* printJson(toKeyView(record))
  })

export const listKeys = (config: GatewayConfig) =>
  withKeys(config, (keys) => keys.list).pipe(Effect.flatMap((list) => printJson(list.map((record) => toKeyView(record)))))

export const rotateKey = (config: GatewayConfig, id: string, graceSeconds: number) =>
  validated(RotateKeyInput, { grace_seconds: graceSeconds }).pipe(
    Effect.flatMap((input) => withKeys(config, (keys) => keys.rotate(id, input))),
    Effect.flatMap((rotated) => printJson({ ...toKeyView(rotated.record), key: rotated.key }))
  )

export const revokeKey = (config: GatewayConfig, id: string) =>
  withKeys(config, (keys) => keys.revoke(id)).pipe(Effect.flatMap((record) => printJson(toKeyView(record))))

export const deleteKey = (config: GatewayConfig, id: string) =>
  withKeys(config, (keys) => keys.remove(id)).pipe(Effect.andThen(Console.log(`deleted ${id}`)))
