/**
 * The `modelgate` command: `serve` runs the gateway, `keys ...` and `credits ...` manage the
 * configured store directly, for operators without the admin API.
 */
import { NodeRuntime, NodeServices } from "@effect/platform-node"
import { Cause, Console, Effect, Exit, Layer, Logger, Option, References, Runtime } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import { randomBytes } from "node:crypto"
import { HttpServer } from "effect/http"
import { loadConfig } from "./cli/load-config.ts"
import { coreLayer, gatewayLayer, loggingLayer } from "./gateway.ts"
import type { GatewayConfig } from "./services/config/schema.ts"
import { ApiKeys, toKeyView } from "./services/keys/ApiKeys.ts"
import { Credits } from "./services/credits/Credits.ts"

const configFlag = Flag.String("config").pipe(
  Flag.withAlias("c"),
  Flag.withDescription("YAML config file (default: $MODELGATE_CONFIG, else the embedded default)"),
  Flag.optional
)

const root = Command.make("modelgate").pipe(
  Command.withSharedFlags({ config: configFlag }),
  Command.withDescription("Self-hostable model gateway: one key, one base URL, three wire formats")
)

const readConfig = (flags?: { host?: string | undefined; port?: number | undefined }) =>
  Effect.gen(function*() {
    const { config } = yield* root
    return yield* loadConfig({ path: Option.getOrUndefined(config), env: process.env, flags })
  })

const isLoopback = (host: string) => host === "localhost" || host === "::1" || host.startsWith("127.")

const serve = Command.make(
  "serve",
  {
    host: Flag.String("host").pipe(Flag.withDescription("Address to bind (overrides server.host)"), Flag.optional),
    port: Flag.Int("port").pipe(Flag.withDescription("Port to bind, 0 for any free port (overrides server.port)"), Flag.optional)
  },
  Effect.fn(function*({ host, port }) {
    const configured = yield* readConfig({ host: Option.getOrUndefined(host), port: Option.getOrUndefined(port) })
    // With no admin token and only this machine able to connect (the embedded default), a
    // one-time token printed here lets `npm ci && npm start` open the admin app at once; it
    // lasts as long as the process. Anywhere else an unset token keeps the admin API disabled.
    const oneTimeToken = configured.admin.token === undefined && isLoopback(configured.server.host)
      ? randomBytes(24).toString("base64url")
      : undefined
    const config = oneTimeToken === undefined ? configured : { ...configured, admin: { ...configured.admin, token: oneTimeToken } }
    const announce = Layer.effectDiscard(
      HttpServer.addressFormattedWith((formatted) => {
        const address = config.server.tls ? formatted.replace("http://", "https://") : formatted
        return Effect.andThen(
          Effect.log(`modelgate listening on ${address}`),
          oneTimeToken === undefined
            ? config.admin.token === undefined ? Effect.void : Effect.log(`admin app: ${address}/app`)
            // Printed whatever the log level: without it the admin app cannot be opened.
            : Console.log(
              `admin app: ${address}/app, sign in with this one-time admin token (valid until the process stops; ` +
                `set admin.token or MODELGATE_ADMIN_TOKEN to choose a lasting one): ${oneTimeToken}`
            )
        )
      })
    )
    return yield* Layer.launch(announce.pipe(Layer.provideMerge(gatewayLayer(config, { env: process.env })))).pipe(
      // The gateway's own layer applies these too; here they also cover the announcement.
      Effect.provide(loggingLayer(config))
    )
  })
).pipe(Command.withDescription("Run the gateway"))

/** Runs a key operation against the configured store, the same code path as the admin API. */
const withKeys = <A, E>(f: (keys: ApiKeys["Service"]) => Effect.Effect<A, E>) =>
  Effect.gen(function*() {
    const config = yield* readConfig()
    return yield* Effect.flatMap(ApiKeys, f).pipe(Effect.provide(coreLayer(config)))
  })

const print = (value: unknown) => Console.log(JSON.stringify(value, null, 2))

const idArgument = Argument.String("id").pipe(Argument.withDescription("Key id (key_...)"))

const keysCreate = Command.make(
  "create",
  {
    name: Flag.String("name").pipe(Flag.withDescription("A name to recognise the key by")),
    models: Flag.String("models").pipe(Flag.withDescription("Comma-separated allowed models (default: all)"), Flag.optional),
    tools: Flag.Boolean("tools").pipe(Flag.withDescription("Allow the MCP SQL tools"), Flag.withDefault(false)),
    budget: Flag.Int("budget").pipe(Flag.withDescription("Maximum number of requests for this key"), Flag.optional),
    expires: Flag.String("expires").pipe(Flag.withDescription("Expiry, ISO-8601"), Flag.optional)
  },
  Effect.fn(function*({ name, models, tools, budget, expires }) {
    const created = yield* withKeys((keys) =>
      keys.create({
        name,
        allowed_models: Option.match(models, { onNone: () => null, onSome: (m) => m.split(",").map((s) => s.trim()).filter(Boolean) }),
        tools_enabled: tools,
        budget: Option.match(budget, { onNone: () => null, onSome: (max_requests) => ({ max_requests }) }),
        expires_at: Option.getOrNull(expires)
      })
    )
    yield* print({ ...toKeyView(created.record), key: created.key })
    yield* Console.error("Store the key now: it is shown only once.")
  })
).pipe(Command.withDescription("Create an API key and print it (the only time the full key is shown)"))

const keysList = Command.make("list", {}, () =>
  withKeys((keys) => keys.list).pipe(Effect.flatMap((list) => print(list.map(toKeyView))))).pipe(
    Command.withDescription("List API keys")
  )

const keysRotate = Command.make(
  "rotate",
  {
    id: idArgument,
    grace: Flag.Int("grace-seconds").pipe(Flag.withDescription("Keep the old key working this long"), Flag.withDefault(0))
  },
  Effect.fn(function*({ id, grace }) {
    const rotated = yield* withKeys((keys) => keys.rotate(id, { grace_seconds: grace }))
    yield* print({ ...toKeyView(rotated.record), key: rotated.key })
  })
).pipe(Command.withDescription("Replace a key's secret; prints the new key"))

const keysRevoke = Command.make("revoke", { id: idArgument }, ({ id }) =>
  withKeys((keys) => keys.revoke(id)).pipe(Effect.flatMap((record) => print(toKeyView(record))))).pipe(
    Command.withDescription("Deactivate a key (it then gets 401 key_inactive)")
  )

const keysDelete = Command.make("delete", { id: idArgument }, ({ id }) =>
  withKeys((keys) => keys.remove(id)).pipe(Effect.andThen(Console.log(`deleted ${id}`)))).pipe(
    Command.withDescription("Delete a key (it then gets 401 unauthorized)")
  )

const keys = Command.make("keys").pipe(
  Command.withDescription("Manage API keys in the configured store"),
  Command.withSubcommands([keysCreate, keysList, keysRotate, keysRevoke, keysDelete])
)

const creditsAdd = Command.make(
  "add",
  {
    amount: Argument.Int("credits").pipe(Argument.withDescription("Credits to add to the workspace pool")),
    note: Flag.String("note").pipe(Flag.withDescription("Why (kept in the ledger)"), Flag.optional)
  },
  Effect.fn(function*({ amount, note }) {
    if (amount <= 0) return yield* Console.error("modelgate: credits must be a positive integer")
    const config = yield* readConfig()
    const balance = yield* Effect.flatMap(Credits, (credits) => credits.topup({ amount, actor: "cli", note: Option.getOrNull(note) })).pipe(
      Effect.provide(Credits.layer({ replica: false }).pipe(Layer.provideMerge(coreLayer(config))))
    )
    yield* print({ credits: balance })
  })
).pipe(Command.withDescription("Top up the workspace credit pool"))

const credits = Command.make("credits").pipe(
  Command.withDescription("Manage the workspace credit pool"),
  Command.withSubcommands([creditsAdd])
)

const cli = root.pipe(Command.withSubcommands([serve, keys, credits]), Command.run({ version: "0.1.0" }))

cli.pipe(
  Effect.catchTag("ConfigInvalid", (error) =>
    Effect.andThen(Console.error(`modelgate: invalid configuration: ${error.message}`), Effect.sync(() => process.exit(1)))),
  Effect.catchTag("DependencyUnavailable", (error) =>
    Effect.andThen(Console.error(`modelgate: ${error.message}`), Effect.sync(() => process.exit(1)))),
  Effect.catchTag("NotFound", (error) =>
    Effect.andThen(Console.error(`modelgate: ${error.message}`), Effect.sync(() => process.exit(1)))),
  Effect.provide(NodeServices.layer),
  Effect.provide(Logger.layer([Logger.consolePretty()])),
  (program) =>
    NodeRuntime.runMain(program, {
      // A SIGTERM/SIGINT is the normal way to stop a server: once the finalizers ran (audit flushed), exit 0.
      teardown: (exit, onExit) =>
        Exit.isFailure(exit) && Cause.hasInterruptsOnly(exit.cause) ? onExit(0) : Runtime.defaultTeardown(exit, onExit)
    })
)
