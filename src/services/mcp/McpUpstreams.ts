/**
 * Upstream MCP servers behind /v1/mcp (issue 37): the gateway is their client, with the official
 * SDK's Client over Streamable HTTP, and serves their tools to the keys allowed to use them as
 * `<server>__<tool>`.
 *
 * - Sessions are opened lazily, one per server per replica, and opened again when the server
 *   forgets them (HTTP 404 on the session) or the connection breaks.
 * - A server's tool list is kept for REFRESH_MS and fetched again when a client lists tools
 *   after that, or at once on `notifications/tools/list_changed`. A listing waits at most
 *   LIST_WAIT_MS for any server (DOWN_LIST_WAIT_MS for one whose last call failed): one that is
 *   down or slow is left out (and its fetch goes on in the background), so the rest are always
 *   answered.
 * - Pinned definitions: the first time a replica sees a tool, its name, description and input
 *   schema are pinned in the store (shared by replicas). A tool whose definition later differs
 *   from its pin is withheld (not listed, calls refused) until an admin approves it; the change
 *   is an audit record. Pins are read at every refresh, so an approval reaches every replica
 *   within REFRESH_MS.
 * - Credentials (the configured headers) never leave this module: error texts are redacted of
 *   every header value before they are kept, shown or logged.
 */
import type { CallToolResult, Tool } from "@modelcontextprotocol/client"
import { Context, Duration, Effect, Layer, Option } from "effect"
import { randomUUID } from "node:crypto"
import { Audit } from "../audit/Audit.ts"
import { Metrics } from "../metrics/Metrics.ts"
import { McpPinsRepo, type ToolPin } from "../store/McpPinsRepo.ts"
import { resolveCommand, StdioProcessTransport } from "./stdio-process.ts"
import { ProviderError, UpstreamTimeout } from "../../domain/errors.ts"
import { matchesUriTemplate, parseUriTemplate, type UriTemplate } from "./uri-template.ts"
import type { McpServerConfig } from "../config/schema.ts"
import { SERVER_INFO } from "./advertised.ts"

/** A client's name for an upstream tool: `<server>__<tool>`. */
export const SEPARATOR = "__"

/** How long a fetched tool list answers listings (the issue asks for changes to show within 10 s). */
const REFRESH_MS = 5_000
/** How long one listing waits for a server before answering without it (the issue: 6 s in all). */
const LIST_WAIT_MS = 5_000
/**
 * How long a listing waits for a server whose last call failed (status down). Its fetch still
 * goes on in the background, and a server that is back answers within this and is listed again;
 * a hung one no longer costs every listing of every key that names it its full wait (up to
 * LIST_WAIT_MS, each time, until it answers).
 */
const DOWN_LIST_WAIT_MS = 250

/** What one listing waits for this server: less once its last call failed. */
const listWaitMs = (upstream: Upstream) => Math.min(upstream.status === "down" ? DOWN_LIST_WAIT_MS : LIST_WAIT_MS, upstream.config.timeout_ms)
/** Resources kept of one server's listing: a listing is answered whole, and this bounds it. */
const MAX_RESOURCES = 10_000
/** Error texts kept of an upstream failure: enough to diagnose, never a whole page. */
const MAX_ERROR_CHARS = 300

type ClientModule = typeof import("@modelcontextprotocol/client")
type SdkClient = InstanceType<ClientModule["Client"]>

/** Loaded with the first upstream call: a gateway without upstream servers never loads it. */
let clientModule: Promise<ClientModule> | undefined
const loadClient = () => (clientModule ??= import("@modelcontextprotocol/client"))

export interface UpstreamStatus {
  readonly name: string
  /** `unknown` until the gateway first needed the server on this replica. */
  readonly status: "up" | "down" | "unknown"
  readonly last_error: string | null
  readonly last_checked_at: string | null
  /** The tools clients may see (after the `tools` allow-list); null before the first listing. */
  readonly tool_count: number | null
}

/** A tool of an upstream server as clients see it, and where it comes from. */
export interface UpstreamTool {
  readonly server: string
  readonly upstreamName: string
  readonly definition: Tool
}

/** A tool withheld because its definition no longer matches its pin. */
export interface WithheldTool {
  readonly tool: string
  readonly pinned: unknown
  readonly current: unknown
}

/** What the pins need from the store and the audit trail, as promises (the upstream code is promise-based). */
interface PinStore {
  readonly pinsOf: (server: string) => Promise<ReadonlyMap<string, string>>
  readonly pinNew: (server: string, pins: ReadonlyArray<ToolPin>) => Promise<void>
  readonly approve: (server: string, pins: ReadonlyArray<ToolPin>) => Promise<void>
  /** A tool's definition changed from its pin: recorded once per change on this replica. */
  readonly changed: (server: string, tool: string) => void
}

/** The pinned form of a definition: name, description and input schema, keys sorted so equal means equal. */
const canonical = (tool: Tool): string => {
  const sort = (value: unknown): unknown =>
    Array.isArray(value)
      ? value.map(sort)
      : typeof value === "object" && value !== null
      ? Object.fromEntries(Object.keys(value).sort().map((k) => [k, sort((value as Record<string, unknown>)[k])]))
      : value
  return JSON.stringify(sort({ name: tool.name, description: tool.description ?? null, inputSchema: tool.inputSchema }))
}

export type UpstreamFailure = ProviderError | UpstreamTimeout

/** The server's answer was a JSON-RPC error (unknown tool, bad arguments): forwarded to the client as such. */
export interface UpstreamRpcError {
  readonly _tag: "UpstreamRpcError"
  readonly code: number
  readonly message: string
}

export const isUpstreamRpcError = (value: unknown): value is UpstreamRpcError =>
  typeof value === "object" && value !== null && (value as { _tag?: unknown })._tag === "UpstreamRpcError"

const globMatcher = (patterns: ReadonlyArray<string> | undefined) => {
  if (patterns === undefined) return () => true
  const expressions = patterns.map((p) => new RegExp(`^${p.split("*").map((part) => part.replace(/[.+?^${}()|[\]\\]/g, "\\$&")).join(".*")}$`))
  return (name: string) => expressions.some((e) => e.test(name))
}

/** `${VAR}` in a configured header value, from the gateway's environment; an unset variable is empty. */
const resolveHeaders = (headers: Readonly<Record<string, string>>, env: Readonly<Record<string, string | undefined>>) =>
  Object.fromEntries(Object.entries(headers).map(([name, value]) => [name, value.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g, (_, v: string) => env[v] ?? "")]))

const isTimeout = (error: unknown) => {
  const e = error as { code?: unknown; name?: unknown; message?: unknown }
  return e?.code === "REQUEST_TIMEOUT" || e?.code === -32001
}

/** The server no longer knows the session the gateway holds: open a new one and try again. */
const isSessionLost = (error: unknown) => {
  const e = error as { data?: { status?: unknown }; message?: unknown }
  return e?.data?.status === 404 || (typeof e?.message === "string" && /\(HTTP 404\)|session not found/i.test(e.message))
}

/** A JSON-RPC error the server answered with (as opposed to a transport or SDK failure). */
const rpcErrorOf = (error: unknown): UpstreamRpcError | undefined => {
  const e = error as { name?: unknown; code?: unknown; message?: unknown }
  if (e?.name !== "ProtocolError" || typeof e.code !== "number" || typeof e.message !== "string") return undefined
  return { _tag: "UpstreamRpcError", code: e.code, message: e.message }
}

class Upstream {
  readonly matches: (name: string) => boolean
  readonly secrets: ReadonlyArray<string>
  readonly headers: Record<string, string>
  client: Promise<SdkClient> | undefined
  tools: { readonly list: ReadonlyArray<UpstreamTool>; readonly at: number } | undefined
  refreshing: Promise<ReadonlyArray<UpstreamTool>> | undefined
  withheld: ReadonlyMap<string, { readonly pinned: string; readonly current: string }> = new Map()
  /** The resource URIs of the server's last `resources/list`, for routing `resources/read` back. */
  resourceUris: ReadonlySet<string> = new Set()
  /** The resource templates of the server's last `resources/templates/list`, for routing reads and completions of their URIs. */
  resourceTemplates: ReadonlyArray<UriTemplate> = []
  readonly pins: PinStore
  status: UpstreamStatus["status"] = "unknown"
  lastError: string | null = null
  lastCheckedAt: string | null = null

  readonly config: McpServerConfig

  constructor(config: McpServerConfig, env: Readonly<Record<string, string | undefined>>, pins: PinStore) {
    this.config = config
    this.pins = pins
    this.matches = globMatcher(config.tools)
    this.headers = resolveHeaders(config.headers, env)
    this.processEnv = resolveHeaders(config.env, env)
    this.command = config.command === undefined ? undefined : resolveCommand(config.command, env.PATH)
    // Every header and process environment value, and the URL's userinfo and query, are kept out of every error text.
    const url = config.url === undefined ? undefined : new URL(config.url)
    this.secrets = [...Object.values(this.headers), ...Object.values(this.processEnv), url?.password ?? "", url?.username ?? "", url?.search.slice(1) ?? ""]
      .filter((s) => s.length >= 4)
  }

  readonly processEnv: Record<string, string>
  /** The stdio server's program as a path; undefined for a url server. */
  readonly command: string | undefined
  /** Stdio: when the process may be started again, after it exited (exponential backoff). */
  nextStartAt = 0
  backoffMs = 0
  restartTimer: NodeJS.Timeout | undefined
  closed = false

  /**
   * A stdio server's process ended without the gateway asking: it is started again after the
   * backoff (0.5 s, doubling up to 30 s; back to nothing once it has answered again), so it keeps
   * running without a crash loop costing anything.
   */
  processEnded() {
    if (this.closed || this.command === undefined) return
    this.backoffMs = Math.min(Math.max(this.backoffMs * 2, 500), 30_000)
    this.nextStartAt = Date.now() + this.backoffMs
    this.status = "down"
    this.lastError = this.redact(`the server's process exited; restarting in ${this.backoffMs} ms`)
    this.lastCheckedAt = new Date().toISOString()
    clearTimeout(this.restartTimer)
    this.restartTimer = setTimeout(() => {
      this.tools = undefined
      void this.listTools().catch(() => {})
    }, this.backoffMs)
    this.restartTimer.unref()
  }

  redact(text: string): string {
    let out = text
    for (const secret of this.secrets) out = out.split(secret).join("[redacted]")
    return out.length > MAX_ERROR_CHARS ? `${out.slice(0, MAX_ERROR_CHARS)}...` : out
  }

  recordFailure(error: unknown): string {
    const message = this.redact(error instanceof Error ? error.message : String(error))
    this.status = "down"
    this.lastError = message
    this.lastCheckedAt = new Date().toISOString()
    return message
  }

  recordSuccess() {
    this.backoffMs = 0
    this.status = "up"
    this.lastCheckedAt = new Date().toISOString()
  }

  /** The session, opened on first use; a failed or broken one is dropped so the next use opens another. */
  connect(): Promise<SdkClient> {
    if (this.client !== undefined) return this.client
    const wait = this.nextStartAt - Date.now()
    if (this.command !== undefined && wait > 0) {
      return Promise.reject(new Error(`the server's process exited; restarting in ${wait} ms`))
    }
    const opening = (async () => {
      const sdk = await loadClient()
      const client = new sdk.Client({ name: SERVER_INFO.name, version: SERVER_INFO.version }, { capabilities: {} })
      const transport = this.command !== undefined
        ? new StdioProcessTransport(sdk, this.command, this.config.args, this.processEnv)
        : new sdk.StreamableHTTPClientTransport(new URL(this.config.url!), { requestInit: { headers: this.headers } })
      client.onclose = () => {
        if (this.client !== opening) return
        this.client = undefined
        this.processEnded()
      }
      // The SDK reports transport trouble here too; the failing request reports it to its caller.
      client.onerror = () => {}
      client.setNotificationHandler("notifications/tools/list_changed", () => {
        this.tools = undefined
      })
      const timer = setTimeout(() => void client.close().catch(() => {}), this.config.timeout_ms)
      try {
        await client.connect(transport)
      } finally {
        clearTimeout(timer)
      }
      return client
    })()
    this.client = opening
    opening.catch(() => {
      if (this.client !== opening) return
      this.client = undefined
      // A process that cannot start, or does not initialize in time, is retried with the backoff too.
      this.processEnded()
    })
    return opening
  }

  /** Drops the session the server forgot (or that broke), so the next use opens a new one. */
  async reset(stale: Promise<SdkClient>) {
    if (this.client === stale) this.client = undefined
    await stale.then((c) => c.close()).catch(() => {})
  }

  /** Runs `use` on the session; once more on a new session when the server forgot the old one. */
  async withSession<A>(use: (client: SdkClient) => Promise<A>): Promise<A> {
    const session = this.connect()
    try {
      return await use(await session)
    } catch (error) {
      if (!isSessionLost(error)) throw error
      await this.reset(session)
      return await use(await this.connect())
    }
  }

  /** The server's tools (after the allow-list), fetched again when older than REFRESH_MS. */
  listTools(): Promise<ReadonlyArray<UpstreamTool>> {
    if (this.tools !== undefined && Date.now() - this.tools.at < REFRESH_MS) return Promise.resolve(this.tools.list)
    if (this.refreshing !== undefined) return this.refreshing
    const refresh = this.withSession((client) => client.listTools(undefined, { timeout: this.config.timeout_ms })).then(
      async (result) => {
        const allowed = result.tools.filter((tool) => this.matches(tool.name))
        const name = this.config.name
        let pinned = await this.pins.pinsOf(name)
        const fresh = allowed.filter((tool) => !pinned.has(tool.name)).map((tool) => ({ tool: tool.name, definition: canonical(tool) }))
        if (fresh.length > 0) {
          await this.pins.pinNew(name, fresh)
          // Read again: another replica may have pinned one of them first, with another definition.
          pinned = await this.pins.pinsOf(name)
        }
        const withheld = new Map<string, { pinned: string; current: string }>()
        const list: Array<UpstreamTool> = []
        for (const tool of allowed) {
          const current = canonical(tool)
          const pin = pinned.get(tool.name)
          if (pin === undefined || pin === current) list.push({ server: name, upstreamName: tool.name, definition: tool })
          else {
            withheld.set(tool.name, { pinned: pin, current })
            if (this.withheld.get(tool.name)?.current !== current) this.pins.changed(name, tool.name)
          }
        }
        this.withheld = withheld
        this.tools = { list, at: Date.now() }
        this.recordSuccess()
        return list
      }
    ).catch((error: unknown) => {
      this.tools = undefined
      throw new Error(this.recordFailure(error))
    }).finally(() => {
      if (this.refreshing === refresh) this.refreshing = undefined
    })
    this.refreshing = refresh
    return refresh
  }

  async close() {
    this.closed = true
    clearTimeout(this.restartTimer)
    const client = this.client
    this.client = undefined
    await client?.then((c) => c.close()).catch(() => {})
  }
}

export class McpUpstreams extends Context.Service<McpUpstreams, {
  /** The configured servers' names, in config order. */
  readonly names: ReadonlyArray<string>
  /**
   * The server and upstream tool a client's `<server>__<tool>` names, if it names a configured
   * server and a tool its `tools` allow-list admits.
   */
  readonly route: (name: string) => { readonly server: McpServerConfig; readonly tool: string } | undefined
  /**
   * The tools of these servers, as clients list them (`<server>__<tool>`). Answers within
   * LIST_WAIT_MS: a server that is down or slower is left out. Never fails.
   */
  readonly tools: (servers: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<Tool>>
  /**
   * Calls an allowed tool of a server; the result is the server's own. Interrupting the effect
   * cancels the call upstream. A server that fails, breaks or exceeds its `timeout_ms` is a
   * ProviderError or UpstreamTimeout naming it; its JSON-RPC error, an UpstreamRpcError.
   */
  readonly call: (
    server: string,
    tool: string,
    args: Record<string, unknown>,
    /** What is left of the call's `timeout_ms` (the pin check before it took the rest); default all of it. */
    remainingMs?: number
  ) => Effect.Effect<CallToolResult | UpstreamRpcError, UpstreamFailure>
  /**
   * `prompts/list` or `resources/list` of these servers, within LIST_WAIT_MS like `tools`: prompt
   * names as `<server>__<prompt>`, resources with the URIs the servers gave (remembered, so that
   * `resources/read` finds its server). Never fails.
   */
  readonly list: (kind: "prompts" | "resources" | "resourceTemplates", servers: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<Record<string, unknown>>>
  readonly getPrompt: (
    server: string,
    prompt: string,
    args: Record<string, string> | undefined
  ) => Effect.Effect<Record<string, unknown> | UpstreamRpcError, UpstreamFailure>
  /** Which of these servers listed this resource URI last (on this replica). */
  /** The server that listed this URI, or whose listed template it fits; undefined: none of these (yet). */
  readonly resourceServer: (servers: ReadonlyArray<string>, uri: string) => string | undefined
  /** `completion/complete` forwarded to one server, its `ref` already in the server's own names. */
  readonly complete: (server: string, params: Record<string, unknown>) => Effect.Effect<Record<string, unknown> | UpstreamRpcError, UpstreamFailure>
  readonly readResource: (server: string, uri: string) => Effect.Effect<Record<string, unknown> | UpstreamRpcError, UpstreamFailure>
  /**
   * Why a call of this tool is refused before it reaches the server, if it is: its definition
   * changed since it was pinned. Waits for a due refresh of the tool list at most LIST_WAIT_MS.
   */
  readonly refusal: (server: string, tool: string) => Effect.Effect<string | undefined>
  /**
   * An admin's approval of the current definitions of a server's withheld tools (all, or those
   * named): they become the pins and the tools are served again. Fails as the server's failure
   * when it cannot be listed. Answers the tools approved.
   */
  readonly approve: (server: string, tools: ReadonlyArray<string> | undefined) => Effect.Effect<ReadonlyArray<WithheldTool>, UpstreamFailure>
  /** Each server's state as this replica last saw it. */
  readonly status: Effect.Effect<ReadonlyArray<UpstreamStatus & { readonly withheld: ReadonlyArray<WithheldTool> }>>
}>()("modelgate/McpUpstreams") {
  static readonly layer = (servers: ReadonlyArray<McpServerConfig>, env: Readonly<Record<string, string | undefined>>) =>
    Layer.effect(
      McpUpstreams,
      Effect.gen(function*() {
        const repo = yield* McpPinsRepo
        const audit = Option.getOrUndefined(yield* Effect.serviceOption(Audit))
        const metrics = Option.getOrUndefined(yield* Effect.serviceOption(Metrics))
        const run = Effect.runPromiseWith(yield* Effect.context<never>())
        const now = () => new Date().toISOString()
        const pins: PinStore = {
          pinsOf: (server) => run(repo.pinsOf(server)),
          pinNew: (server, list) => run(repo.pinNew(server, list, now())),
          approve: (server, list) => run(repo.approve(server, list, now())),
          changed: (server, tool) => {
            void run(Effect.logWarning(`MCP server "${server}" changed the definition of tool "${tool}": withheld until an admin approves it`))
            metrics?.mcpToolChanged(server)
            audit?.append({
              request_id: `mcp_pin_${randomUUID()}`,
              ts: now(),
              key_id: null,
              method: "MCP",
              endpoint: "mcp:tool_definition_changed",
              status: 409,
              error: "tool_definition_changed",
              model: null,
              provider: null,
              tool: `${server}${SEPARATOR}${tool}`,
              connection_id: null,
              credits: 0,
              prompt_tokens: null,
              completion_tokens: null,
              duration_ms: 0,
              stream: false,
              client_addr: null,
              details: { mcp_server: server, upstream_tool: tool }
            })
          }
        }
        const upstreams = new Map(servers.map((config) => [config.name, new Upstream(config, env, pins)]))
        yield* Effect.addFinalizer(() => Effect.promise(() => Promise.all([...upstreams.values()].map((u) => u.close()))))

        const failure = (upstream: Upstream, error: unknown): UpstreamFailure => {
          const name = upstream.config.name
          const message = upstream.recordFailure(error)
          return new ProviderError({ message: `MCP server "${name}" failed: ${message}`, details: { mcp_server: name } })
        }

        /**
         * One request to a server on its session: its answer, or its JSON-RPC error as an
         * UpstreamRpcError; a failure or `timeout_ms` (the whole request, opening a session
         * included) as the server's failure. Interrupted, the signal makes the SDK cancel it upstream.
         */
        const forward = <A>(
          upstream: Upstream,
          what: string,
          request: (client: SdkClient, signal: AbortSignal) => Promise<A>,
          remainingMs = upstream.config.timeout_ms
        ) => {
          const name = upstream.config.name
          const timeout = new UpstreamTimeout({
            message: `MCP server "${name}" did not answer ${what} within ${upstream.config.timeout_ms} ms`,
            details: { mcp_server: name, timeout_ms: upstream.config.timeout_ms }
          })
          return Effect.tryPromise({
            try: (signal) =>
              upstream.withSession((client) => request(client, signal)).then((result): A | UpstreamRpcError => {
                upstream.recordSuccess()
                return result
              }, (error) => {
                const rpc = rpcErrorOf(error)
                if (rpc !== undefined && !isTimeout(error)) {
                  upstream.recordSuccess()
                  return rpc
                }
                throw error
              }),
            catch: (error) => failure(upstream, error)
          }).pipe(
            Effect.timeoutOrElse({
              duration: Duration.millis(Math.max(0, remainingMs)),
              orElse: () =>
                Effect.suspend(() => {
                  upstream.recordFailure(new Error(timeout.message))
                  return Effect.fail(timeout)
                })
            })
          )
        }

        return McpUpstreams.of({
          names: servers.map((s) => s.name),
          route: (name) => {
            const at = name.indexOf(SEPARATOR)
            if (at <= 0) return undefined
            const upstream = upstreams.get(name.slice(0, at))
            const tool = name.slice(at + SEPARATOR.length)
            if (upstream === undefined || tool === "" || !upstream.matches(tool)) return undefined
            return { server: upstream.config, tool }
          },
          tools: (names) =>
            Effect.promise(async () => {
              const lists = await Promise.all(names.map(async (name) => {
                const upstream = upstreams.get(name)
                if (upstream === undefined) return []
                let timer: NodeJS.Timeout | undefined
                const wait = new Promise<ReadonlyArray<UpstreamTool>>((resolve) => {
                  timer = setTimeout(() => resolve([]), listWaitMs(upstream))
                })
                try {
                  return await Promise.race([upstream.listTools().catch(() => []), wait])
                } finally {
                  clearTimeout(timer)
                }
              }))
              return lists.flat().map((t): Tool => ({ ...t.definition, name: `${t.server}${SEPARATOR}${t.upstreamName}` }))
            }),
          call: (server, tool, args, remainingMs) => {
            const upstream = upstreams.get(server)
            if (upstream === undefined) return Effect.die(new Error(`no MCP server named ${server}`))
            return forward<CallToolResult>(upstream, tool, async (client, signal) => {
              // The last listing's definition, if any: a call never waits for a listing.
              const known = upstream.tools?.list.find((t) => t.upstreamName === tool)
              // The result goes back unchanged: the client checks it against the tool's
              // outputSchema itself, so the SDK's own check (which would turn a mismatch into
              // an exception here) is left out by handing it the definition without one.
              const { outputSchema: _, ...definition } = known?.definition ?? { name: tool, inputSchema: { type: "object" as const } }
              return (await client.callTool({ name: tool, arguments: args }, { signal, toolDefinition: definition as Tool })) as CallToolResult
            }, remainingMs)
          },
          list: (kind, names) =>
            Effect.promise(async () => {
              const lists = await Promise.all(names.map(async (name) => {
                const upstream = upstreams.get(name)
                if (upstream === undefined) return []
                let timer: NodeJS.Timeout | undefined
                const wait = new Promise<ReadonlyArray<Record<string, unknown>>>((resolve) => {
                  timer = setTimeout(() => resolve([]), listWaitMs(upstream))
                })
                const listing = upstream.withSession(async (client) => {
                  const capabilities = client.getServerCapabilities()
                  if (kind === "prompts") {
                    if (capabilities?.prompts === undefined) return []
                    const { prompts } = await client.listPrompts(undefined, { timeout: upstream.config.timeout_ms })
                    return prompts.map((p) => ({ ...p, name: `${name}${SEPARATOR}${p.name}` }))
                  }
                  if (capabilities?.resources === undefined) return []
                  if (kind === "resourceTemplates") {
                    // Templates are optional within the resources capability: a server without them
                    // answers "method not found", which is an empty list, not a failure of the server.
                    const listed = await client.listResourceTemplates(undefined, { timeout: upstream.config.timeout_ms }).catch((error) => {
                      if (rpcErrorOf(error)?.code === -32601) return { resourceTemplates: [] }
                      throw error
                    })
                    const { resourceTemplates } = listed
                    const kept = resourceTemplates.slice(0, MAX_RESOURCES)
                    upstream.resourceTemplates = kept.flatMap((t) => {
                      const parsed = parseUriTemplate(t.uriTemplate)
                      return parsed === undefined ? [] : [parsed]
                    })
                    return kept as unknown as ReadonlyArray<Record<string, unknown>>
                  }
                  const { resources } = await client.listResources(undefined, { timeout: upstream.config.timeout_ms })
                  upstream.resourceUris = new Set(resources.slice(0, MAX_RESOURCES).map((r) => r.uri))
                  return resources.slice(0, MAX_RESOURCES) as unknown as ReadonlyArray<Record<string, unknown>>
                }).catch((error) => {
                  upstream.recordFailure(error)
                  return []
                })
                try {
                  return await Promise.race([listing, wait])
                } finally {
                  clearTimeout(timer)
                }
              }))
              return lists.flat()
            }),
          getPrompt: (server, prompt, args) => {
            const upstream = upstreams.get(server)
            if (upstream === undefined) return Effect.die(new Error(`no MCP server named ${server}`))
            return forward<Record<string, unknown>>(upstream, prompt, async (client, signal) =>
              (await client.getPrompt({ name: prompt, ...(args === undefined ? {} : { arguments: args }) }, { signal })) as Record<string, unknown>)
          },
          resourceServer: (names, uri) =>
            names.find((name) => upstreams.get(name)?.resourceUris.has(uri) === true) ??
              names.find((name) => upstreams.get(name)?.resourceTemplates.some((template) => template.template === uri || matchesUriTemplate(template, uri)) === true),
          complete: (server, params) => {
            const upstream = upstreams.get(server)
            if (upstream === undefined) return Effect.die(new Error(`no MCP server named ${server}`))
            return forward<Record<string, unknown>>(upstream, "completion/complete", async (client, signal) => {
              // A server that offers no completions answers with none (the spec's empty result), not an error.
              if (client.getServerCapabilities()?.completions === undefined) return { completion: { values: [], hasMore: false } }
              return (await client.complete(params as never, { signal })) as unknown as Record<string, unknown>
            })
          },
          readResource: (server, uri) => {
            const upstream = upstreams.get(server)
            if (upstream === undefined) return Effect.die(new Error(`no MCP server named ${server}`))
            return forward<Record<string, unknown>>(upstream, "resources/read", async (client, signal) =>
              (await client.readResource({ uri }, { signal })) as unknown as Record<string, unknown>)
          },
          refusal: (server, tool) =>
            Effect.promise(async () => {
              const upstream = upstreams.get(server)
              if (upstream === undefined) return undefined
              let timer: NodeJS.Timeout | undefined
              const wait = new Promise<void>((resolve) => {
                timer = setTimeout(resolve, Math.min(LIST_WAIT_MS, upstream.config.timeout_ms))
              })
              await Promise.race([upstream.listTools().catch(() => undefined), wait]).finally(() => clearTimeout(timer))
              if (!upstream.withheld.has(tool)) return undefined
              return `tool "${server}${SEPARATOR}${tool}" changed its definition since it was approved; it is withheld until an admin approves the new one (POST /mcp/servers/${server}/approve)`
            }),
          approve: (server, names) => {
            const upstream = upstreams.get(server)
            if (upstream === undefined) return Effect.die(new Error(`no MCP server named ${server}`))
            return Effect.tryPromise({
              try: async () => {
                // A fresh listing: what is approved is what the server serves now.
                upstream.tools = undefined
                await upstream.listTools()
                const chosen = [...upstream.withheld].filter(([tool]) => names === undefined || names.includes(tool))
                await pins.approve(server, chosen.map(([tool, { current }]) => ({ tool, definition: current })))
                upstream.tools = undefined
                await upstream.listTools().catch(() => undefined)
                return chosen.map(([tool, d]): WithheldTool => ({ tool, pinned: JSON.parse(d.pinned), current: JSON.parse(d.current) }))
              },
              catch: (error) => failure(upstream, error)
            })
          },
          status: Effect.sync(() =>
            [...upstreams.values()].map((u) => ({
              name: u.config.name,
              status: u.status,
              last_error: u.lastError,
              last_checked_at: u.lastCheckedAt,
              tool_count: u.tools?.list.length ?? null,
              withheld: [...u.withheld].map(([tool, d]): WithheldTool => ({ tool, pinned: JSON.parse(d.pinned), current: JSON.parse(d.current) }))
            }))
          )
        })
      })
    )
}
