/**
 * The `modelgate` command line as one function: `runCommandLine(argv, { env })` parses `argv`,
 * runs the command and succeeds with the exit status; it never exits the process. stdout and
 * stderr go through Effect's `Console`, so whoever runs it chooses where they go: main.ts runs it
 * on the real process, the tests run it in-process with a console of their own (a child Node per
 * command was most of the suite's time; only the tests of the process boundary still spawn one).
 *
 * Only the command line's grammar and the config loader load up front; each command imports its
 * module (src/commands) when it runs, so `keys list` or a config error never loads the server
 * (issue 14: a store command answers in a fraction of `serve`'s start-up time and memory).
 * Effect modules are imported one by one (`effect/Effect`, not the `effect` index) for the
 * same reason: the index loads every module of the library.
 */
import { toMicros } from "./domain/money.ts"
import * as NodeServices from "@effect/platform-node/NodeServices"
import * as Cause from "effect/Cause"
import * as Argument from "effect/cli/Argument"
import * as CliError from "effect/cli/CliError"
import * as CliOutput from "effect/cli/CliOutput"
import * as Command from "effect/cli/Command"
import * as Flag from "effect/cli/Flag"
import * as GlobalFlag from "effect/cli/GlobalFlag"
import * as Console from "effect/Console"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Logger from "effect/Logger"
import * as Option from "effect/Option"
import { Refused } from "./commands/refused.ts"
import { VERSION } from "./domain/version.ts"
import { ConfigInvalid } from "./services/config/load.ts"
import type { GatewayConfig } from "./services/config/schema.ts"
import { cliArgs, commandWords } from "./cli/args.ts"
import { failureLine } from "./cli/failure.ts"
import { loadConfig } from "./cli/load-config.ts"
import { preflight } from "./cli/preflight.ts"
import { type LogFormat, noticeLine } from "./services/logging/notice.ts"

const configFlag = Flag.String("config").pipe(
  Flag.withAlias("c"),
  Flag.withDescription("YAML config file (default: $MODELGATE_CONFIG, else the embedded default)"),
  Flag.optional
)

const root = Command.make("modelgate").pipe(
  Command.withSharedFlags({ config: configFlag }),
  Command.withDescription(
    "Self-hostable model gateway: one API key, one base URL for OpenAI Chat Completions and Responses, " +
      "Anthropic Messages, embeddings and MCP SQL tools. Config: a YAML file (--config, else $MODELGATE_CONFIG, " +
      "else the embedded default), MODELGATE_* variables override it. --log-level overrides log.level."
  )
)

/** `--log-level` (Effect's names) as `log.level` (the config's): the flag wins over the file and the environment. */
const LEVEL_OF: Readonly<Record<string, GatewayConfig["log"]["level"]>> = {
  All: "debug",
  Trace: "debug",
  Debug: "debug",
  Info: "info",
  Warn: "warn",
  Error: "error",
  Fatal: "error",
  None: "none"
}

/**
 * What one run of the command line sees of its process: the environment it reads the config's
 * MODELGATE_* overrides from, and the store its command configured (a failure's one line names
 * it). A service rather than the process's globals so that a run is self-contained: the tests
 * run commands in-process, each with its own environment.
 */
class Invocation extends Context.Service<Invocation, {
  readonly env: Readonly<Record<string, string | undefined>>
  store: string | undefined
  /** `serve`'s log.format once its config is loaded: its own lines (a failure included) follow it. */
  logFormat: LogFormat | undefined
  readonly onLogFormat: ((format: LogFormat) => void) | undefined
}>()("modelgate/cli/Invocation") {}

/** Where the config came from, as its messages name it. */
const configSource = Effect.gen(function*() {
  const { config } = yield* root
  const { env } = yield* Invocation
  return Option.getOrUndefined(config) ?? env.MODELGATE_CONFIG
})

/**
 * The config every command runs with: loaded and checked, then the machine checked against it
 * (cli/preflight.ts) before anything is opened. `serving` adds the checks only `serve` needs.
 */
const readConfig = (
  options: { flags?: { host?: string | undefined; port?: number | undefined }; serving?: boolean; createsStore?: boolean } = {}
) =>
  Effect.gen(function*() {
    const path = yield* configSource
    const invocation = yield* Invocation
    const loaded = yield* loadConfig({ path, env: invocation.env, flags: options.flags })
    const level = yield* GlobalFlag.LogLevel
    const config: GatewayConfig = Option.isSome(level)
      ? { ...loaded, log: { ...loaded.log, level: LEVEL_OF[level.value] ?? loaded.log.level } }
      : loaded
    const checked = preflight(config, { serving: options.serving ?? false })
    if (checked.problem !== undefined) return yield* new ConfigInvalid({ message: `${path ?? "configuration"}: ${checked.problem}` })
    invocation.store = config.store
    if (options.serving) {
      invocation.logFormat = config.log.format
      invocation.onLogFormat?.(config.log.format)
    }
    // `backup` and `restore` never create a store through the store layer: no announcement.
    if (checked.createsStore !== undefined && options.createsStore !== false) {
      const notice = `no store at ${checked.createsStore} yet: creating a new SQLite store`
      yield* Console.error(noticeLine(invocation.logFormat, "INFO", `modelgate: ${notice}`, { message: notice }))
    }
    return config
  })

/** A command's module, imported when the command runs (a failed import is a defect: a broken install). */
const load = <M>(module: () => Promise<M>) => Effect.promise(module)

const serve = Command.make(
  "serve",
  {
    host: Flag.String("host").pipe(Flag.withDescription("Address to bind (overrides server.host)"), Flag.optional),
    port: Flag.Int("port").pipe(Flag.withDescription("Port to bind, 0 for any free port (overrides server.port)"), Flag.optional)
  },
  Effect.fn(function*({ host, port }) {
    const flags = { host: Option.getOrUndefined(host), port: Option.getOrUndefined(port) }
    const config = yield* readConfig({ flags, serving: true })
    const { env } = yield* Invocation
    // A reload (SIGHUP, POST /admin/reload) reads the configuration again exactly this way; the
    // log settings stay as started (a --log-level given on the command line still wins).
    const reload = Effect.map(loadConfig({ path: yield* configSource, env, flags }), (next): GatewayConfig => ({ ...next, log: config.log }))
    const { serve } = yield* load(() => import("./commands/serve.ts"))
    return yield* serve(config, env, reload)
  })
).pipe(Command.withDescription("Run the gateway"))

const keysModule = load(() => import("./commands/keys.ts"))
const idArgument = Argument.String("id").pipe(Argument.withDescription("Key id (key_...)"))

const keysCreate = Command.make(
  "create",
  {
    name: Flag.String("name").pipe(Flag.withDescription("A name to recognise the key by")),
    models: Flag.String("models").pipe(Flag.withDescription("Comma-separated allowed models (default: all)"), Flag.optional),
    tools: Flag.Boolean("tools").pipe(Flag.withDescription("Allow the MCP SQL tools"), Flag.withDefault(false)),
    mcpServers: Flag.String("mcp-servers").pipe(
      Flag.withDescription("Comma-separated upstream MCP servers (mcp.servers names) the key may use (default: none)"),
      Flag.optional
    ),
    budget: Flag.Int("budget").pipe(Flag.withDescription("Maximum number of requests for this key (per --budget-period)"), Flag.optional),
    budgetCredits: Flag.String("budget-credits").pipe(Flag.withDescription("Maximum credits this key may spend (per --budget-period; decimals allowed)"), Flag.optional),
    budgetPeriod: Flag.String("budget-period").pipe(Flag.withDescription("day, week or month (UTC; weeks from Monday): when the budget resets; default never"), Flag.optional),
    tokensPerMinute: Flag.Int("tokens-per-minute").pipe(
      Flag.withDescription("Input + output tokens this key may use per minute (default: limits.tokens_per_minute)"),
      Flag.optional
    ),
    expires: Flag.String("expires").pipe(Flag.withDescription("Expiry, ISO-8601"), Flag.optional),
    team: Flag.String("team").pipe(Flag.withDescription("The team (its id or name) the key belongs to"), Flag.optional)
  },
  Effect.fn(function*(flags) {
    const config = yield* readConfig()
    return yield* (yield* keysModule).createKey(config, flags)
  })
).pipe(Command.withDescription("Create an API key and print it (the only time the full key is shown)"))

const keysUpdate = Command.make(
  "update",
  {
    id: idArgument,
    name: Flag.String("name").pipe(Flag.withDescription("New name"), Flag.optional),
    models: Flag.String("models").pipe(Flag.withDescription("Comma-separated allowed models; \"\" allows all"), Flag.optional),
    team: Flag.String("team").pipe(Flag.withDescription("The team (id or name) to move the key to; \"\" takes it out of its team"), Flag.optional),
    budget: Flag.Int("budget").pipe(Flag.withDescription("Maximum number of requests (per --budget-period)"), Flag.optional),
    budgetCredits: Flag.String("budget-credits").pipe(Flag.withDescription("Maximum credits (per --budget-period; decimals allowed)"), Flag.optional),
    budgetPeriod: Flag.String("budget-period").pipe(Flag.withDescription("day, week or month (UTC; weeks from Monday); default never"), Flag.optional),
    noBudget: Flag.Boolean("no-budget").pipe(Flag.withDescription("Remove the key's budget"), Flag.withDefault(false))
  },
  Effect.fn(function*({ id, ...flags }) {
    const config = yield* readConfig()
    return yield* (yield* keysModule).updateKey(config, id, flags)
  })
).pipe(Command.withDescription("Change a key's name, models, team or budget (budget flags replace the whole budget, as PATCH /api-keys/:id)"))

const keysList = Command.make(
  "list",
  {},
  Effect.fn(function*() {
    const config = yield* readConfig()
    return yield* (yield* keysModule).listKeys(config)
  })
).pipe(Command.withDescription("List API keys"))

const keysRotate = Command.make(
  "rotate",
  {
    id: idArgument,
    grace: Flag.Int("grace-seconds").pipe(Flag.withDescription("Keep the old key working this long"), Flag.withDefault(0))
  },
  Effect.fn(function*({ id, grace }) {
    const config = yield* readConfig()
    return yield* (yield* keysModule).rotateKey(config, id, grace)
  })
).pipe(Command.withDescription("Replace a key's secret; prints the new key"))

const keysRevoke = Command.make(
  "revoke",
  { id: idArgument },
  Effect.fn(function*({ id }) {
    const config = yield* readConfig()
    return yield* (yield* keysModule).revokeKey(config, id)
  })
).pipe(Command.withDescription("Deactivate a key (it then gets 401 key_inactive)"))

const keysDelete = Command.make(
  "delete",
  { id: idArgument },
  Effect.fn(function*({ id }) {
    const config = yield* readConfig()
    return yield* (yield* keysModule).deleteKey(config, id)
  })
).pipe(Command.withDescription("Delete a key (it then gets 401 unauthorized)"))

const keys = Command.make("keys").pipe(
  Command.withDescription("Manage API keys in the configured store"),
  Command.withSubcommands([keysCreate, keysList, keysUpdate, keysRotate, keysRevoke, keysDelete])
)

const teamsModule = load(() => import("./commands/teams.ts"))
const teamIdArgument = Argument.String("id").pipe(Argument.withDescription("Team id (team_...)"))
/** The fields of a team as flags: what POST /teams and PATCH /teams/:id take. */
const teamFlags = {
  models: Flag.String("models").pipe(Flag.withDescription("Comma-separated models the team's keys may use (narrows each key's); \"\" removes the list"), Flag.optional),
  budgetRequests: Flag.Int("budget-requests").pipe(Flag.withDescription("Budget: at most this many requests per period"), Flag.optional),
  budgetCredits: Flag.String("budget-credits").pipe(Flag.withDescription("Budget: at most this many credits per period (up to 6 decimals)"), Flag.optional),
  period: Flag.String("period").pipe(Flag.withDescription("Budget period: day, week or month (UTC; default: never resets)"), Flag.optional),
  rpm: Flag.Int("rpm").pipe(Flag.withDescription("Requests per minute shared by all the team's keys"), Flag.optional),
  streams: Flag.Int("streams").pipe(Flag.withDescription("Concurrent streams shared by all the team's keys"), Flag.optional),
  tpm: Flag.Int("tpm").pipe(Flag.withDescription("Tokens per minute shared by all the team's keys"), Flag.optional)
}

const teamsCreate = Command.make(
  "create",
  { name: Flag.String("name").pipe(Flag.withDescription("The team's name (unique)")), ...teamFlags },
  Effect.fn(function*({ name, ...flags }) {
    const config = yield* readConfig()
    return yield* (yield* teamsModule).createTeam(config, { ...flags, name: Option.some(name) })
  })
).pipe(Command.withDescription("Create a team"))

const teamsList = Command.make(
  "list",
  {},
  Effect.fn(function*() {
    const config = yield* readConfig()
    return yield* (yield* teamsModule).listTeams(config)
  })
).pipe(Command.withDescription("List teams with their budgets, limits and key counts"))

const teamsShow = Command.make(
  "show",
  { id: teamIdArgument },
  Effect.fn(function*({ id }) {
    const config = yield* readConfig()
    return yield* (yield* teamsModule).showTeam(config, id)
  })
).pipe(Command.withDescription("Show one team"))

const teamsUpdate = Command.make(
  "update",
  {
    id: teamIdArgument,
    name: Flag.String("name").pipe(Flag.withDescription("New name"), Flag.optional),
    ...teamFlags,
    clearBudget: Flag.Boolean("clear-budget").pipe(Flag.withDescription("Remove the team's budget"), Flag.withDefault(false)),
    clearLimits: Flag.Boolean("clear-limits").pipe(Flag.withDescription("Remove the team's limits"), Flag.withDefault(false))
  },
  Effect.fn(function*({ id, ...flags }) {
    const config = yield* readConfig()
    return yield* (yield* teamsModule).updateTeam(config, id, flags)
  })
).pipe(Command.withDescription("Change a team (a budget or limits flag replaces the whole budget or limits)"))

const teamsDelete = Command.make(
  "delete",
  { id: teamIdArgument },
  Effect.fn(function*({ id }) {
    const config = yield* readConfig()
    return yield* (yield* teamsModule).deleteTeam(config, id)
  })
).pipe(Command.withDescription("Delete a team (refused while keys are in it)"))

const teams = Command.make("teams").pipe(
  Command.withDescription("Manage teams (keys sharing models, a budget and limits) in the configured store"),
  Command.withSubcommands([teamsList, teamsCreate, teamsShow, teamsUpdate, teamsDelete])
)

const creditsModule = load(() => import("./commands/credits.ts"))

const creditsAdd = Command.make(
  "add",
  {
    amount: Argument.String("credits").pipe(Argument.withDescription("Credits to add to the workspace pool (a decimal of at most 6 fractional digits)")),
    note: Flag.String("note").pipe(Flag.withDescription("Why (kept in the ledger)"), Flag.optional)
  },
  Effect.fn(function*({ amount: text, note }) {
    const amount = /^\d+(\.\d+)?$/.test(text) ? Number(text) : Number.NaN
    if (!(amount > 0) || toMicros(amount) === undefined) {
      return yield* new Refused({ message: "credits must be a positive number with at most 6 fractional digits" })
    }
    const config = yield* readConfig()
    return yield* (yield* creditsModule).addCredits(config, amount, note)
  })
).pipe(Command.withDescription("Top up the workspace credit pool"))

const showBalance = Effect.fn(function*() {
  const config = yield* readConfig()
  return yield* (yield* creditsModule).showBalance(config)
})

const creditsBalance = Command.make("balance", {}, showBalance).pipe(
  Command.withDescription("Print the workspace credit pool (what GET /workspace answers); the same as `modelgate credits`")
)

/** The most ledger rows one command prints, as `GET /workspace/ledger`'s `limit`. */
const MAX_LEDGER_ROWS = 1000

const creditsLedger = Command.make(
  "ledger",
  { limit: Flag.Int("limit").pipe(Flag.withDescription(`How many rows, newest first (1 to ${MAX_LEDGER_ROWS})`), Flag.withDefault(20)) },
  Effect.fn(function*({ limit }) {
    if (limit < 1 || limit > MAX_LEDGER_ROWS) return yield* new Refused({ message: `--limit: expected a number from 1 to ${MAX_LEDGER_ROWS}` })
    const config = yield* readConfig()
    return yield* (yield* creditsModule).showLedger(config, limit)
  })
).pipe(Command.withDescription("Print the most recent credit ledger rows (charges, refunds, top-ups), newest first"))

// `modelgate credits` alone prints the balance: what an operator asks the pool most often.
const credits = Command.make("credits", {}, showBalance).pipe(
  Command.withDescription("The workspace credit pool: print the balance (no subcommand, or `balance`), the ledger, or top it up"),
  Command.withSubcommands([creditsBalance, creditsLedger, creditsAdd])
)

const connectionsModule = load(() => import("./commands/connections.ts"))
const connectionId = Argument.Int("id").pipe(Argument.withDescription("Connection id"))

const connectionsList = Command.make(
  "list",
  {},
  Effect.fn(function*() {
    const config = yield* readConfig()
    return yield* (yield* connectionsModule).listConnections(config)
  })
).pipe(Command.withDescription("List database connections (passwords masked)"))

const connectionsAdd = Command.make(
  "add",
  {
    id: Flag.Int("id").pipe(Flag.withDescription("Id to give it (default: the next free one)"), Flag.optional),
    name: Flag.String("name").pipe(Flag.withDescription("A name (what keys' grants and the MCP tools show)")),
    dialect: Flag.String("dialect").pipe(Flag.withDescription("postgres or mysql")),
    url: Flag.String("url").pipe(Flag.withDescription("DSN for writes (the edit role), and reads when --read-url is not given")),
    readUrl: Flag.String("read-url").pipe(Flag.withDescription("DSN of a read-only user, used for every read"), Flag.optional),
    defaultSchema: Flag.String("default-schema").pipe(Flag.withDescription("Schema unqualified names resolve in"), Flag.optional),
    environment: Flag.String("environment").pipe(Flag.withDescription("development (default) or production (refuses schema changes)"), Flag.optional),
    ssh: Flag.String("ssh").pipe(Flag.withDescription("SSH tunnel as JSON: {\"host\",\"user\",\"private_key_file\",\"host_key_sha256\",...}"), Flag.optional)
  },
  Effect.fn(function*(flags) {
    const config = yield* readConfig()
    return yield* (yield* connectionsModule).addConnection(config, flags)
  })
).pipe(Command.withDescription("Add a database connection for the SQL tools (stored as POST /connections stores it: sealed with secrets.key when set)"))

const connectionsUpdate = Command.make(
  "update",
  {
    id: connectionId,
    name: Flag.String("name").pipe(Flag.withDescription("New name"), Flag.optional),
    dialect: Flag.String("dialect").pipe(Flag.withDescription("postgres or mysql"), Flag.optional),
    url: Flag.String("url").pipe(Flag.withDescription("New DSN (a rotated password, a new host)"), Flag.optional),
    readUrl: Flag.String("read-url").pipe(Flag.withDescription("New read-only DSN; \"\" removes it"), Flag.optional),
    defaultSchema: Flag.String("default-schema").pipe(Flag.withDescription("New default schema; \"\" removes it"), Flag.optional),
    environment: Flag.String("environment").pipe(Flag.withDescription("development or production"), Flag.optional),
    ssh: Flag.String("ssh").pipe(Flag.withDescription("New SSH tunnel as JSON (replaces the old one); \"\" connects directly"), Flag.optional)
  },
  Effect.fn(function*({ id, ...flags }) {
    const config = yield* readConfig()
    return yield* (yield* connectionsModule).updateConnection(config, id, flags)
  })
).pipe(Command.withDescription("Change a connection added through the admin API"))

const connectionsDelete = Command.make(
  "delete",
  { id: connectionId },
  Effect.fn(function*({ id }) {
    const config = yield* readConfig()
    return yield* (yield* connectionsModule).deleteConnection(config, id)
  })
).pipe(Command.withDescription("Delete a connection added through the admin API, with every grant on it"))

const connections = Command.make("connections").pipe(
  Command.withDescription("Manage the SQL tools' database connections in the configured store"),
  Command.withSubcommands([connectionsList, connectionsAdd, connectionsUpdate, connectionsDelete])
)

const backupModule = load(() => import("./commands/backup.ts"))

const backupCommand = Command.make(
  "backup",
  {
    file: Argument.String("file").pipe(Argument.withDescription("The file to write the backup to")),
    force: Flag.Boolean("force").pipe(Flag.withDescription("Replace the file if it exists"), Flag.withDefault(false))
  },
  Effect.fn(function*({ file, force }) {
    const config = yield* readConfig({ createsStore: false })
    return yield* (yield* backupModule).backupStore(config, file, force)
  })
).pipe(Command.withDescription(
  "Back up the SQLite store to FILE while the gateway serves (a consistent snapshot, mode 600); for Postgres, prints the pg_dump recipe"
))

const restoreCommand = Command.make(
  "restore",
  { file: Argument.String("file").pipe(Argument.withDescription("A backup written by `modelgate backup`")) },
  Effect.fn(function*({ file }) {
    const config = yield* readConfig({ createsStore: false })
    return yield* (yield* backupModule).restoreStore(config, file)
  })
).pipe(Command.withDescription(
  "Replace the SQLite store with a backup, with every gateway on it stopped (the old store is kept aside); for Postgres, prints the pg_restore recipe"
))

const configCheck = Command.make(
  "check",
  {},
  Effect.fn(function*() {
    // The same loading and checks as every command, and nothing opened or created: no store,
    // no port, no network (the existence of files is all it looks at).
    const path = yield* configSource
    const config = yield* loadConfig({ path, env: (yield* Invocation).env })
    const checked = preflight(config, { serving: true })
    if (checked.problem !== undefined) return yield* new ConfigInvalid({ message: `${path ?? "configuration"}: ${checked.problem}` })
    yield* Console.log(`${path ?? "the embedded default"}: valid`)
  })
).pipe(Command.withDescription("Check a config file (with MODELGATE_* variables applied) without opening or creating anything; exit 1 names the field"))

const configCommand = Command.make("config").pipe(
  Command.withDescription("Check the configuration"),
  Command.withSubcommands([configCheck])
)

const cli = root.pipe(Command.withSubcommands([serve, keys, teams, credits, connections, backupCommand, restoreCommand, configCommand]))

/** A console that writes what would go to stdout to stderr (usage shown for a mistake). */
const onStderr = (console: Console.Console): Console.Console =>
  Object.assign(Object.create(console) as Console.Console, {
    log: (...args: ReadonlyArray<unknown>) => console.error(...args),
    info: (...args: ReadonlyArray<unknown>) => console.error(...args)
  })
const toStderr = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Console.consoleWith((console) => Effect.provideService(effect, Console.Console, onStderr(console)))

/**
 * Help asked for (`--help`, `help`) goes to stdout, exit 0; the usage shown for a mistake (a
 * missing flag or subcommand, a bad value) goes to stderr with the error, exit 1, so
 * `modelgate ... > out` never captures a usage as output.
 */
const presenter: CliOutput.Presenter = {
  present: (event) =>
    event._tag === "InvalidInvocation" || (event._tag === "Help" && event.reason === "Implicit")
      ? toStderr(CliOutput.defaultPresenter.present(event))
      : CliOutput.defaultPresenter.present(event)
}

/**
 * The first word of the command line that names no command where one is expected
 * (`modelgate frob`, `modelgate credits frob`, `modelgate help frob`), with the command it was
 * given to and the names that would have been right. The parser reports these only without
 * `--help` (with it, it shows the parent's help and succeeds), so they are found here first.
 */
const unknownCommand = (argv: ReadonlyArray<string>) => {
  let node: Command.Command.Any = cli
  const path: Array<string> = []
  for (const { word } of commandWords(argv)) {
    const children = node.subcommands.flatMap((group) => group.commands)
    if (children.length === 0) return undefined
    const next = children.find((child) => child.name === word)
    if (next === undefined) return { word, path, known: children.map((child) => child.name) }
    node = next
    path.push(word)
  }
  return undefined
}

export interface CommandLineOptions {
  /** The environment the config's MODELGATE_* overrides and the providers' key variables come from. */
  readonly env: Readonly<Record<string, string | undefined>>
  /** Told `serve`'s log.format once its config is loaded (main.ts writes its last line in it). */
  readonly onLogFormat?: ((format: LogFormat) => void) | undefined
}

/**
 * Runs one command line to its end and succeeds with its exit status: 0, or 1 with one line on
 * stderr (a refused input, an invalid config, a store that cannot be opened). `serve` runs until
 * interrupted; an interruption is left to the caller (main.ts exits 0 once the finalizers ran).
 */
export const runCommandLine = (argv: ReadonlyArray<string>, options: CommandLineOptions): Effect.Effect<number> => {
  const invocation: Invocation["Service"] = { env: options.env, store: undefined, logFormat: undefined, onLogFormat: options.onLogFormat }
  const failed = (message: string) =>
    Effect.as(Console.error(noticeLine(invocation.logFormat, "ERROR", `modelgate: ${message}`, { message })), 1)
  const args = cliArgs(argv)
  const unknown = unknownCommand(args)
  const run = unknown === undefined
    ? Command.runWith(cli, { version: VERSION })(args)
    : Effect.gen(function*() {
      const parent = ["modelgate", ...unknown.path].join(" ")
      yield* Console.error(`modelgate: unknown command "${unknown.word}" for "${parent}" (one of: ${unknown.known.join(", ")})\n`)
      // The usage of the command it was given to, on stderr with the error.
      yield* toStderr(Effect.ignore(Command.runWith(cli, { version: VERSION })([...unknown.path, "--help"])))
      return yield* new CliError.UnknownSubcommand({ subcommand: unknown.word, parent: ["modelgate", ...unknown.path], suggestions: [] })
    })
  return run.pipe(
    Effect.as(0),
    Effect.catchTag("ConfigInvalid", (error) => failed(`invalid configuration: ${error.message}`)),
    Effect.catchTag("DependencyUnavailable", (error) => failed(error.message)),
    Effect.catchTag("NotFound", (error) => failed(error.message)),
    Effect.catchTag("ValidationFailed", (error) => failed(error.message)),
    Effect.catchTag("Refused", (error) => failed(error.message)),
    // Anything else that stops a command (an address in use, a database that does not exist, a
    // file that cannot be read) is one line without a stack; `--log-level debug` adds the cause.
    Effect.catchCause((cause) => {
      // Only interruptions (no error in it): passed on as they are, for the caller to handle.
      if (Cause.hasInterruptsOnly(cause)) return Effect.failCause(cause as Cause.Cause<never>)
      const error = Cause.findErrorOption(cause)
      // The parser already printed its help and what was wrong.
      if (Option.isSome(error) && CliError.isCliError(error.value)) return Effect.succeed(1)
      const debug = argv.some((arg, i, all) => arg === "--log-level=debug" || (arg === "--log-level" && /^(debug|trace|all)$/i.test(all[i + 1] ?? "")))
      return Effect.gen(function*() {
        const line = failureLine(cause, { store: invocation.store })
        if (invocation.logFormat === "json") {
          yield* Console.error(noticeLine("json", "ERROR", "", { message: line, fields: debug ? { cause: Cause.pretty(cause) } : {} }))
          return 1
        }
        yield* Console.error(`modelgate: ${line}`)
        if (debug) yield* Console.error(Cause.pretty(cause))
        return 1
      })
    }),
    Effect.provideService(Invocation, invocation),
    Effect.provideService(CliOutput.Presenter, presenter),
    Effect.provide(NodeServices.layer),
    Effect.provide(Logger.layer([Logger.consolePretty()])),
    // What a command logs (a store upgrade's progress, say) goes to stderr: stdout is its answer (JSON for scripts).
    Effect.provideService(Logger.LogToStderr, true)
  )
}
