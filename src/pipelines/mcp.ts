/**
 * /v1/mcp: Model Context Protocol over Streamable HTTP. Two eras share the endpoint:
 *
 * - the session revisions (2025-03-26 to 2025-11-25), answered here with the gateway's own
 *   sessions (McpSessions) so any replica serves any session;
 * - the stateless revision 2026-07-28 (no initialize, no session; each request carries its
 *   version and capabilities), answered by the MCP SDK v2 through StatelessMcp, with the
 *   gateway's checks and costs run from inside the SDK's dispatch.
 *
 * Every request is authenticated and rate limited like the other surfaces; then, in the order of
 * docs/decisions.md section 4: 400 malformed JSON-RPC -> 404 session (session revisions) ->
 * 403 tools_disabled -> 429 budget -> 402 credits (tools/call) -> the tool. Answers are JSON
 * (clients must accept JSON or SSE), notifications get 202 with no body.
 */
import { type Cause, Effect, Exit, Scope } from "effect"
import { HttpServerResponse } from "effect/http"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import { ScopeViolation, ToolsDisabled, toEnvelope, ValidationFailed } from "../domain/errors.ts"
import type { Principal } from "../domain/records.ts"
import { CurrentRequest, RequestBody } from "./request.ts"
import { json } from "./respond.ts"
import { AppConfig } from "../services/config/AppConfig.ts"
import { advertisedTools, FORWARDED_METHODS, LOGGING_LEVELS, SERVER_INFO, SERVER_INSTRUCTIONS, serverCapabilities } from "../services/mcp/advertised.ts"
import type { Credits } from "../services/credits/Credits.ts"
import type { StreamSlots } from "../services/limits/StreamSlots.ts"
import { CANCELLED, McpSessions } from "../services/mcp/McpSessions.ts"
import { McpUpstreams, isUpstreamRpcError, type UpstreamRpcError } from "../services/mcp/McpUpstreams.ts"
import { validateSpec } from "../services/mcp/sdk.ts"
import { StatelessMcp } from "../services/mcp/StatelessMcp.ts"
import { Connections } from "../services/sql/Connections.ts"
import { SqlTools } from "../services/sql/SqlTools.ts"
import { admitCosts } from "./admission.ts"
import { authenticated, AuthenticatedKey, type RateDecision } from "./authenticate.ts"

/** The session revisions this handler speaks, newest first; 2026-07-28 is StatelessMcp's. */
export const SUPPORTED_MCP_VERSIONS = ["2025-11-25", "2025-06-18", "2025-03-26"] as const
export const STATELESS_MCP_VERSION = "2026-07-28"

const rpcResult = (id: string | number, result: unknown) => json({ jsonrpc: "2.0", id, result })
const rpcError = (id: string | number | null, code: number, message: string) => json({ jsonrpc: "2.0", id, error: { code, message } })

const isLoopbackOrigin = (origin: string) => {
  try {
    const host = new URL(origin).hostname
    return host === "localhost" || host === "127.0.0.1" || host === "[::1]"
  } catch {
    return false
  }
}

/** Browsers send Origin; a page on another site must not drive a user's local gateway (DNS rebinding). */
const checkOrigin = Effect.gen(function*() {
  const request = yield* HttpServerRequest
  const origin = request.headers["origin"]
  if (origin === undefined) return
  const allowed = (yield* AppConfig).mcp.allowed_origins
  if (allowed.includes(origin) || isLoopbackOrigin(origin)) return
  return yield* new ScopeViolation({ message: `Origin ${origin} is not allowed to use /v1/mcp`, details: { origin } })
})

const checkProtocolHeader = Effect.gen(function*() {
  const request = yield* HttpServerRequest
  const version = request.headers["mcp-protocol-version"]
  if (version !== undefined && !(SUPPORTED_MCP_VERSIONS as ReadonlyArray<string>).includes(version)) {
    return yield* new ValidationFailed({
      message: `unsupported MCP-Protocol-Version ${version}; supported: ${SUPPORTED_MCP_VERSIONS.join(", ")}`,
      details: { field: "MCP-Protocol-Version" }
    })
  }
})

const requireTools = (key: Principal) =>
  key.tools_enabled
    ? Effect.void
    : Effect.fail(new ToolsDisabled({
      message: `this ${key.kind === "subject" ? "token's policy" : "key"} may not use the MCP tools (tools_enabled is false)`
    }))

const sessionHeader = Effect.gen(function*() {
  const request = yield* HttpServerRequest
  const id = request.headers["mcp-session-id"]
  if (id === undefined || id === "") {
    return yield* new ValidationFailed({
      message: "missing Mcp-Session-Id header: send initialize first, then the session id it returned",
      details: { field: "Mcp-Session-Id" }
    })
  }
  return id
})

/**
 * What the gateway offers: its tools, and prompts and resources when upstream servers are
 * configured (their prompts and resources are forwarded; without any there is nothing to offer).
 */
const capabilities = Effect.map(McpUpstreams, (upstreams) => serverCapabilities(upstreams.names.length > 0))

/** The upstream servers this principal may reach and the gateway has configured. */
const reachable = (key: Principal, upstreams: McpUpstreams["Service"]) => upstreams.names.filter((name) => key.mcp_servers.includes(name))

/** The tools/list both eras answer: the SQL tools, then every allowed upstream server's tools. */
const listTools = Effect.fnUntraced(function*(key: Principal) {
  const upstreams = yield* McpUpstreams
  const own = advertisedTools((yield* SqlTools).definitions)
  const servers = reachable(key, upstreams)
  return servers.length === 0 ? own : [...own, ...(yield* upstreams.tools(servers))]
})

const rpcRefusal = (code: number, message: string): UpstreamRpcError => ({ _tag: "UpstreamRpcError", code, message })

/**
 * The server a resource URI (or a template's own text, as `completion/complete` names it) belongs
 * to. Not listed on this replica yet (another replica answered the listing, or the client never
 * listed): both listings are taken, then routed.
 */
const resourceServerOf = Effect.fnUntraced(function*(upstreams: McpUpstreams["Service"], servers: ReadonlyArray<string>, uri: string) {
  const known = upstreams.resourceServer(servers, uri)
  if (known !== undefined) return known
  yield* Effect.all([upstreams.list("resources", servers), upstreams.list("resourceTemplates", servers)], { concurrency: 2 })
  return upstreams.resourceServer(servers, uri)
})

/**
 * `prompts/list`, `prompts/get`, `resources/list`, `resources/templates/list`, `resources/read`
 * and `completion/complete`, forwarded to the upstream
 * servers the principal may use (issue 37): prompts named `<server>__<prompt>`, resource URIs as
 * the servers give them, a read routed back to the server that listed its URI. Audited by server,
 * never charged credits (the request still counts against rate limit and budget). A server's
 * failure is a JSON-RPC error naming it; undefined for a method this does not forward.
 */
const forwardUpstream = Effect.fnUntraced(function*(key: Principal, method: string, params: Record<string, unknown>) {
  const state = yield* CurrentRequest
  const upstreams = yield* McpUpstreams
  const servers = reachable(key, upstreams)
  const answer = <A>(server: string, request: Effect.Effect<A | UpstreamRpcError, Effect.Error<ReturnType<typeof upstreams.readResource>>>) =>
    request.pipe(
      Effect.interruptible,
      Effect.catch((error) => {
        const envelope = toEnvelope(error, state.requestId)
        state.audit.details = { ...state.audit.details, error: envelope.error }
        return Effect.succeed(rpcRefusal(-32603, `${envelope.message} (${envelope.error})`))
      }),
      Effect.tap(() => Effect.sync(() => {
        state.audit.details = { ...state.audit.details, mcp_server: server }
      }))
    )
  switch (method) {
    case "prompts/list":
      return { prompts: yield* upstreams.list("prompts", servers) }
    case "resources/list":
      return { resources: yield* upstreams.list("resources", servers) }
    case "resources/templates/list":
      return { resourceTemplates: yield* upstreams.list("resourceTemplates", servers) }
    case "completion/complete": {
      const ref = typeof params.ref === "object" && params.ref !== null ? params.ref as Record<string, unknown> : {}
      if (ref.type === "ref/prompt") {
        const name = typeof ref.name === "string" ? ref.name : ""
        const at = name.indexOf("__")
        const server = at > 0 ? name.slice(0, at) : ""
        if (!servers.includes(server)) return rpcRefusal(-32602, `unknown prompt: ${name.slice(0, 200)}`)
        return yield* answer(server, upstreams.complete(server, { ...params, ref: { ...ref, name: name.slice(at + 2) } }))
      }
      if (ref.type === "ref/resource") {
        const uri = typeof ref.uri === "string" ? ref.uri : ""
        const server = yield* resourceServerOf(upstreams, servers, uri)
        if (server === undefined) return rpcRefusal(-32602, `unknown resource: ${uri.slice(0, 200)}`)
        return yield* answer(server, upstreams.complete(server, params))
      }
      return rpcRefusal(-32602, "completion/complete: ref.type must be ref/prompt or ref/resource")
    }
    case "prompts/get": {
      const name = typeof params.name === "string" ? params.name : ""
      const at = name.indexOf("__")
      const server = at > 0 ? name.slice(0, at) : ""
      if (!servers.includes(server)) return rpcRefusal(-32602, `unknown prompt: ${name.slice(0, 200)}`)
      const args = params.arguments
      if (args !== undefined && (typeof args !== "object" || args === null || Object.values(args).some((v) => typeof v !== "string"))) {
        return rpcRefusal(-32602, "prompts/get: arguments must be an object of strings")
      }
      state.audit.details = { ...state.audit.details, upstream_prompt: name.slice(at + 2) }
      return yield* answer(server, upstreams.getPrompt(server, name.slice(at + 2), args as Record<string, string> | undefined))
    }
    case "resources/read": {
      const uri = typeof params.uri === "string" ? params.uri : ""
      const server = yield* resourceServerOf(upstreams, servers, uri)
      if (server === undefined) return rpcRefusal(-32002, `unknown resource: ${uri.slice(0, 200)}`)
      return yield* answer(server, upstreams.readResource(server, uri))
    }
    default:
      return undefined
  }
})

/** The methods forwardUpstream answers. */
const FORWARDED: ReadonlySet<string> = new Set(FORWARDED_METHODS)

/**
 * A tools/call of an upstream server's tool (issue 37): one audit record naming server and tool
 * (never arguments or results), charged like an SQL tool call and refunded when the server
 * fails, cancelled upstream when the client leaves, bounded by the server's timeout_ms. The
 * server's result is returned as it is; its JSON-RPC error is forwarded as one.
 */
const runUpstreamTool = Effect.fnUntraced(function*(key: Principal, name: string, args: Record<string, unknown>) {
  const state = yield* CurrentRequest
  const upstreams = yield* McpUpstreams
  const route = upstreams.route(name)
  if (route === undefined) return undefined
  const server = route.server.name
  state.audit.details = { ...state.audit.details, mcp_server: server, upstream_tool: route.tool }
  if (!key.mcp_servers.includes(server)) {
    state.audit.details = { ...state.audit.details, error: "scope_violation" }
    const rpc: UpstreamRpcError = {
      _tag: "UpstreamRpcError",
      code: -32602,
      message: `this ${key.kind === "subject" ? "token's policy" : "key"} may not use MCP server "${server}" (not in its mcp_servers)`
    }
    return rpc
  }
  // The pin check (a listing, when this replica's is due) counts against the call's timeout_ms.
  const started = Date.now()
  const changed = yield* upstreams.refusal(server, route.tool)
  if (changed !== undefined) {
    state.audit.details = { ...state.audit.details, error: "tool_definition_changed" }
    return { _tag: "UpstreamRpcError", code: -32602, message: changed } satisfies UpstreamRpcError
  }
  const call = yield* Scope.fork(state.scope)
  const price = route.server.credits_per_call ?? (yield* AppConfig).mcp.credits_per_tool_call
  yield* admitCosts({ scope: call, stream: false, model: `mcp:${name}`, credits: price })
  // Interruptible, as an SQL tool call is: a client that leaves interrupts the call, and the
  // SDK then cancels it upstream (notifications/cancelled).
  const outcome = yield* upstreams.call(server, route.tool, args, route.server.timeout_ms - (Date.now() - started)).pipe(
    Effect.interruptible,
    Effect.map((result) => ({ result })),
    Effect.catch((error) => Effect.succeed({ error }))
  )
  if ("result" in outcome) {
    const result = outcome.result
    // A JSON-RPC internal error is the server's failure: refunded like one.
    const failed = isUpstreamRpcError(result) && result.code === -32603
    if (isUpstreamRpcError(result)) state.audit.details = { ...state.audit.details, upstream_error_code: result.code }
    yield* Scope.close(call, Exit.succeed({ status: 200, slug: null, failure: failed ? 502 : undefined }))
    return result
  }
  const envelope = toEnvelope(outcome.error, state.requestId)
  state.audit.details = { ...state.audit.details, error: envelope.error }
  yield* Scope.close(call, Exit.succeed({ status: 200, slug: envelope.error, failure: envelope.status }))
  return {
    content: [{ type: "text" as const, text: JSON.stringify(envelope) }],
    structuredContent: envelope as unknown as Record<string, unknown>,
    isError: true
  }
})

/**
 * A tools/call of a known tool, as the CallToolResult both eras send (or an upstream server's
 * JSON-RPC error); undefined for an unknown tool (a JSON-RPC error that costs nothing). Credits
 * are charged once the tool is known.
 */
const runTool = Effect.fnUntraced(function*(key: Principal, name: string, args: Record<string, unknown>) {
  const state = yield* CurrentRequest
  const tools = yield* SqlTools
  state.audit.tool = name
  if (!tools.has(name)) return yield* runUpstreamTool(key, name, args)
  // The call's charge is held by a scope of its own, closed with the tool's outcome: a tool
  // failure is a 200 with isError (MCP), but what a server-side failure cost is still refunded,
  // as on the other surfaces.
  const call = yield* Scope.fork(state.scope)
  yield* admitCosts({ scope: call, stream: false, model: `mcp:${name}`, credits: (yield* AppConfig).mcp.credits_per_tool_call })
  const grants = yield* (yield* Connections).grantsFor(key)
  // Interruptible, as the upstream call of a model request is: the HTTP server runs handlers
  // uninterruptibly, so without it a client that leaves would wait out the statement (up to its
  // timeout) on the database. Interrupted, the driver cancels the statement on the server.
  const outcome = yield* Effect.interruptible(tools.call(name, args, { keyId: key.id, grants, requestId: state.requestId }))
  state.audit.connection_id = outcome.audit.connection_id
  state.audit.details = { ...state.audit.details, ...outcome.audit.details }
  if (outcome._tag === "Success") {
    yield* Scope.close(call, Exit.succeed({ status: 200, slug: null, failure: undefined }))
    return { content: [{ type: "text" as const, text: JSON.stringify(outcome.structured) }], structuredContent: outcome.structured }
  }
  const envelope = toEnvelope(outcome.error, state.requestId)
  state.audit.details = { ...state.audit.details, error: envelope.error }
  yield* Scope.close(call, Exit.succeed({ status: 200, slug: envelope.error, failure: envelope.status }))
  return {
    content: [{ type: "text" as const, text: JSON.stringify(envelope) }],
    structuredContent: envelope as unknown as Record<string, unknown>,
    isError: true
  }
})

/**
 * Headers of the SDK's Response the gateway's answer does not copy: the connection and framing
 * are the gateway server's own, and the content type is set with the body.
 */
const NOT_COPIED = new Set(["connection", "keep-alive", "transfer-encoding", "content-length", "content-type"])

/**
 * The SDK's answer as a plain (buffered) response, so the request ends when it is sent: every
 * answer this server gives is finite. Results are JSON; the only event streams are a
 * `subscriptions/listen`, which ends right after its acknowledgement because the server offers
 * no change notifications, and a result the SDK chose to frame as an event stream.
 */
const plainAnswer = Effect.fnUntraced(function*(response: Response) {
  const headers: Record<string, string> = {}
  response.headers.forEach((value, name) => {
    if (!NOT_COPIED.has(name)) headers[name] = value
  })
  if (response.body === null) return HttpServerResponse.setHeaders(HttpServerResponse.empty({ status: response.status }), headers)
  const text = yield* Effect.promise(() => response.text())
  const contentType = response.headers.get("content-type") ?? "application/json"
  return HttpServerResponse.setHeaders(HttpServerResponse.text(text, { status: response.status, contentType }), headers)
})

type ExchangeServices = CurrentRequest | AuthenticatedKey | RateDecision | AppConfig | SqlTools | Connections | Credits | StreamSlots | McpUpstreams
type ExchangeError = ToolsDisabled | Effect.Error<ReturnType<typeof admitCosts>> | Effect.Error<ReturnType<typeof runTool>>

/**
 * What every MCP request must pass first; a tools/call is charged by runTool once its tool is
 * known. Defined once, not a generator made per request (README, Generators made per request).
 */
const admitMcpCall = Effect.fnUntraced(function*(key: Principal, method: string, scope: Scope.Scope) {
  yield* requireTools(key)
  if (method !== "tools/call") yield* admitCosts({ scope, stream: false, model: `mcp:${method}`, credits: 0 })
})

/**
 * A 2026-07-28 request: the SDK validates and dispatches it, and calls back into the gateway
 * (exchange) for the checks and costs once it is valid, and for the tool. A refusal there
 * (tools_disabled, budget, credits) or a failure of the gateway's own is answered as on every
 * other surface, with the envelope and its status, instead of what the SDK made of it.
 */
const statelessRequest = Effect.fnUntraced(function*(key: Principal, body: Record<string, unknown>) {
  const state = yield* CurrentRequest
  const request = yield* HttpServerRequest
  const method = typeof body.method === "string" ? body.method : "response"
  state.audit.details = { method, protocol_version: STATELESS_MCP_VERSION }
  const services = yield* Effect.context<ExchangeServices>()
  let failure: Cause.Cause<ExchangeError> | undefined
  const run = <A>(effect: Effect.Effect<A, ExchangeError, ExchangeServices>, signal?: AbortSignal) =>
    Effect.runPromiseExitWith(services)(effect, { signal }).then((exit) => {
      if (Exit.isSuccess(exit)) return exit.value
      failure ??= exit.cause
      throw new Error("refused by the gateway")
    })
  const response = yield* (yield* StatelessMcp).serve({
    headers: request.headers,
    body,
    keyId: key.id,
    exchange: {
      admit: () => run(admitMcpCall(key, method, state.scope)),
      listTools: () => run(listTools(key)),
      upstreams: (yield* McpUpstreams).names.length > 0,
      forward: (forwardedMethod, params, signal) => run(forwardUpstream(key, forwardedMethod, params), signal),
      callTool: (name, args, signal) => run(runTool(key, name, args), signal)
    }
  })
  if (failure !== undefined) return yield* Effect.failCause(failure)
  return yield* plainAnswer(response)
})

export const mcpPostPipeline = authenticated(Effect.gen(function*() {
  const state = yield* CurrentRequest
  const key = yield* AuthenticatedKey
  yield* checkOrigin
  const request = yield* HttpServerRequest
  const body = yield* (yield* RequestBody).jsonObject
  if (yield* (yield* StatelessMcp).isStateless(request.headers, body)) return yield* statelessRequest(key, body)
  yield* checkProtocolHeader
  const parsed = yield* validateSpec("JSONRPCMessage", body)
  if (parsed.issues !== undefined) {
    const field = (parsed.issues[0]?.path ?? []).map((segment) => typeof segment === "object" ? String(segment.key) : String(segment))
    return yield* new ValidationFailed({ message: "not a JSON-RPC 2.0 message", details: { field: field.join(".") } })
  }
  const message = parsed.value as { method?: string; id?: string | number; params?: unknown }
  state.audit.details = { method: message.method ?? "response" }
  const sessions = yield* McpSessions

  if (message.method === "initialize") {
    const init = yield* validateSpec("InitializeRequest", body)
    if (init.issues !== undefined) return yield* new ValidationFailed({ message: "malformed initialize request", details: { field: "params" } })
    yield* requireTools(key)
    yield* admitCosts({ scope: state.scope, stream: false, model: "mcp:initialize", credits: 0 })
    const requested = init.value.params.protocolVersion
    const version = (SUPPORTED_MCP_VERSIONS as ReadonlyArray<string>).includes(requested) ? requested : SUPPORTED_MCP_VERSIONS[0]
    const session = yield* sessions.open(key.id, version)
    return HttpServerResponse.setHeader(
      rpcResult(message.id!, {
        protocolVersion: version,
        capabilities: yield* capabilities,
        serverInfo: SERVER_INFO,
        instructions: SERVER_INSTRUCTIONS
      }),
      "mcp-session-id",
      session.id
    )
  }

  const sessionId = yield* sessionHeader
  yield* sessions.use(sessionId, key.id)
  yield* requireTools(key)

  // Notifications and client responses carry nothing to answer.
  if (message.id === undefined || message.method === undefined) {
    yield* admitCosts({ scope: state.scope, stream: false, model: "mcp:notification", credits: 0 })
    // The client gave up on one of its requests: interrupt it (on this replica, which serves it
    // when the session's requests reach one replica), cancelling its work upstream too.
    if (message.method === "notifications/cancelled") {
      yield* sessions.cancel(sessionId, (message.params as { requestId?: unknown } | undefined)?.requestId)
    }
    return HttpServerResponse.empty({ status: 202 })
  }
  const id = message.id
  switch (message.method) {
    case "ping":
      yield* admitCosts({ scope: state.scope, stream: false, model: "mcp:ping", credits: 0 })
      return rpcResult(id, {})
    case "logging/setLevel": {
      yield* admitCosts({ scope: state.scope, stream: false, model: "mcp:logging/setLevel", credits: 0 })
      const level = (message.params as { level?: unknown } | undefined)?.level
      if (typeof level !== "string" || !LOGGING_LEVELS.has(level)) return rpcError(id, -32602, "logging/setLevel: level must be one of debug, info, notice, warning, error, critical, alert, emergency")
      // Accepted: the gateway sends no log messages at any level (see serverCapabilities).
      return rpcResult(id, {})
    }
    case "tools/list":
      yield* admitCosts({ scope: state.scope, stream: false, model: "mcp:tools/list", credits: 0 })
      return rpcResult(id, { tools: yield* listTools(key) })
    case "tools/call": {
      const call = yield* validateSpec("CallToolRequest", body)
      if (call.issues !== undefined) return rpcError(id, -32602, "malformed tools/call: params.name is required")
      const { name, arguments: args } = call.value.params
      const result = yield* sessions.cancellable(sessionId, id, runTool(key, name, args ?? {}))
      if (result === CANCELLED) return rpcError(id, -32800, "request cancelled by the client")
      if (result === undefined) return rpcError(id, -32602, `unknown tool: ${name}`)
      if (isUpstreamRpcError(result)) return rpcError(id, result.code, result.message)
      return rpcResult(id, result)
    }
    default: {
      yield* admitCosts({ scope: state.scope, stream: false, model: `mcp:${message.method}`, credits: 0 })
      if (FORWARDED.has(message.method) && (yield* McpUpstreams).names.length > 0) {
        const params = typeof message.params === "object" && message.params !== null ? message.params as Record<string, unknown> : {}
        const result = yield* forwardUpstream(key, message.method, params)
        if (isUpstreamRpcError(result)) return rpcError(id, result.code, result.message)
        if (result !== undefined) return rpcResult(id, result)
      }
      return rpcError(id, -32601, `method not found: ${message.method}`)
    }
  }
}))

export const mcpDeletePipeline = authenticated(Effect.gen(function*() {
  const key = yield* AuthenticatedKey
  yield* checkOrigin
  yield* (yield* McpSessions).close(yield* sessionHeader, key.id)
  return HttpServerResponse.empty({ status: 204 })
}))
