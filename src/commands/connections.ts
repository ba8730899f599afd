/**
 * `modelgate connections ...`: the SQL tools' database connections in the configured store, for
 * an operator without the admin API (a rotated DSN password, a connection gone). The same
 * service and the same input schema as `PATCH`/`DELETE /connections/:id`, so the CLI accepts
 * exactly what the admin API accepts. Loaded by command-line.ts only when a connections command runs.
 */
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { coreLayer } from "../core.ts"
import { decodeStrict } from "../domain/validation.ts"
import type { GatewayConfig } from "../services/config/schema.ts"
import { ConnectionChange, ConnectionInput, Connections, toConnectionView } from "../services/sql/Connections.ts"
import { printJson } from "./print.ts"
import { Refused } from "./refused.ts"

const withConnections = <A, E>(config: GatewayConfig, f: (connections: Connections["Service"]) => Effect.Effect<A, E>) =>
  Effect.flatMap(Connections, f).pipe(Effect.provide(Connections.layer(config.connections).pipe(Layer.provideMerge(coreLayer(config)))))

/** A refusal the admin API would answer 4xx: one line on stderr, exit status 1. */
const refused = <A, R>(effect: Effect.Effect<A, { readonly _tag: string; readonly message: string }, R>) =>
  Effect.catch(effect, (error) => Effect.fail(new Refused({ message: error.message })))

export const listConnections = (config: GatewayConfig) =>
  withConnections(config, (connections) => connections.list).pipe(
    Effect.flatMap((list) => printJson(list.map(toConnectionView))),
    refused
  )

export interface AddConnectionFlags {
  readonly id: Option.Option<number>
  readonly name: string
  readonly dialect: string
  readonly url: string
  readonly readUrl: Option.Option<string>
  readonly defaultSchema: Option.Option<string>
  readonly environment: Option.Option<string>
  readonly ssh: Option.Option<string>
}

/**
 * `connections add`: the body `POST /connections` takes, through its schema and service, so the
 * DSN is stored as the admin API stores it (sealed with secrets.key when one is set) and an id
 * left out is the next free one.
 */
export const addConnection = (config: GatewayConfig, flags: AddConnectionFlags) =>
  Effect.gen(function*() {
    const fields: Record<string, unknown> = { name: flags.name, dialect: flags.dialect, url: flags.url }
    Option.map(flags.id, (id) => (fields.id = id))
    Option.map(flags.readUrl, (url) => (fields.read_url = url))
    Option.map(flags.defaultSchema, (schema) => (fields.default_schema = schema))
    Option.map(flags.environment, (environment) => (fields.environment = environment))
    if (Option.isSome(flags.ssh)) fields.ssh = yield* sshJson(flags.ssh.value)
    const input = yield* decodeStrict(ConnectionInput)(fields)
    const created = yield* withConnections(config, (connections) =>
      connections.create({
        id: input.id,
        name: input.name,
        dialect: input.dialect,
        url: input.url,
        read_url: input.read_url ?? null,
        default_schema: input.default_schema ?? null,
        environment: input.environment ?? "development",
        ssh: input.ssh ?? null
      }))
    yield* printJson(toConnectionView(created))
  }).pipe(refused)

export interface UpdateConnectionFlags {
  readonly name: Option.Option<string>
  readonly dialect: Option.Option<string>
  readonly url: Option.Option<string>
  readonly readUrl: Option.Option<string>
  readonly defaultSchema: Option.Option<string>
  readonly environment: Option.Option<string>
  readonly ssh: Option.Option<string>
}

/** `--ssh` takes the tunnel as the admin API does, as JSON; it is decoded by the same schema after. */
const sshJson = (text: string) =>
  Effect.try({
    try: () => JSON.parse(text) as unknown,
    catch: () => new Refused({ message: "--ssh: expected a JSON object, e.g. {\"host\":\"bastion\",\"user\":\"tunnel\",...}" })
  })

/** `--read-url ""` and `--default-schema ""` clear the field (the admin API's `null`). */
const clearable = (value: Option.Option<string>) => Option.map(value, (v) => (v === "" ? null : v))

export const updateConnection = (config: GatewayConfig, id: number, flags: UpdateConnectionFlags) =>
  Effect.gen(function*() {
    const fields: Record<string, unknown> = {}
    const put = (name: string, value: Option.Option<unknown>) => Option.map(value, (v) => (fields[name] = v))
    put("name", flags.name)
    put("dialect", flags.dialect)
    put("url", flags.url)
    put("read_url", clearable(flags.readUrl))
    put("default_schema", clearable(flags.defaultSchema))
    put("environment", flags.environment)
    if (Option.isSome(flags.ssh)) fields.ssh = flags.ssh.value === "" ? null : yield* sshJson(flags.ssh.value)
    if (Object.keys(fields).length === 0) {
      return yield* new Refused({ message: "nothing to update: give at least one of --name, --dialect, --url, --read-url, --default-schema, --environment, --ssh" })
    }
    const change = yield* decodeStrict(ConnectionChange)(fields)
    const { after } = yield* withConnections(config, (connections) => connections.update(id, change))
    yield* printJson(toConnectionView(after))
  }).pipe(refused)

export const deleteConnection = (config: GatewayConfig, id: number) =>
  withConnections(config, (connections) => connections.remove(id)).pipe(
    Effect.andThen(Console.log(`deleted connection ${id}`)),
    refused
  )
