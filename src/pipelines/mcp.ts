/**
 * /v1/mcp: Model Context Protocol over Streamable HTTP (revisions 2025-03-26 to 2025-11-25),
 * with the gateway's own sessions (McpSessions) so any replica serves any session. Every
 * request is authenticated and rate limited like the other surfaces; then, in the order of
 * docs/decisions.md section 4: 400 malformed JSON-RPC -> 404 session -> 403 tools_disabled ->
 * 429 budget -> 402 credits (tools/call) -> the tool. Answers are JSON (clients must accept
 * JSON or SSE), notifications get 202 with no body.
 */
import {
  CallToolRequestSchema,
  InitializeRequestSchema,
  JSONRPCMessageSchema,
  LATEST_PROTOCOL_VERSION
} from "@modelcontextprotocol/sdk/types.js"
import { Effect, Exit, Scope } from "effect"
import { HttpServerResponse } from "effect/http"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import { ScopeViolation, ToolsDisabled, toEnvelope, ValidationFailed } from "../domain/errors.ts"
import type { ApiKeyRecord } from "../domain/records.ts"
import { CurrentRequest, RequestBody } from "./request.ts"
import { json } from "./respond.ts"
import { AppConfig } from "../services/config/AppConfig.ts"
import { McpSessions } from "../services/mcp/McpSessions.ts"
import { Connections } from "../services/sql/Connections.ts"
import { SqlTools } from "../services/sql/SqlTools.ts"
import { admitCosts } from "./admission.ts"
import { authenticated, AuthenticatedKey } from "./authenticate.ts"

/** Revisions this server speaks, newest first; 2026-07-28's stateless mode is not served by the SDK in use. */
export const SUPPORTED_MCP_VERSIONS = ["2025-11-25", "2025-06-18", "2025-03-26"] as const
const SERVER_INFO = { name: "modelgate", version: "0.1.0" }

/**
 * A tool error's structuredContent is the spec's envelope, and the official client validates
 * structuredContent against outputSchema even on errors; so every advertised outputSchema also
 * admits the envelope.
 */
const ENVELOPE_SCHEMA = {
  type: "object",
  properties: {
    status: { type: "integer" },
    error: { type: "string" },
    message: { type: "string" },
    request_id: { type: "string" },
    details: { type: "object" }
  },
  required: ["status", "error", "message", "request_id"]
} as const

const advertisedCache = new WeakMap<SqlTools["Service"]["definitions"], unknown>()

/** The tool list as clients get it; the definitions never change, so it is built once per list. */
const advertised = (definitions: SqlTools["Service"]["definitions"]) => {
  let tools = advertisedCache.get(definitions)
  if (tools === undefined) {
    tools = definitions.map((tool) => ({ ...tool, outputSchema: { type: "object", anyOf: [tool.outputSchema, ENVELOPE_SCHEMA] } }))
    advertisedCache.set(definitions, tools)
  }
  return tools
}

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

const requireTools = (key: ApiKeyRecord) =>
  key.tools_enabled
    ? Effect.void
    : Effect.fail(new ToolsDisabled({ message: "this key may not use the MCP tools (tools_enabled is false)" }))

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

const toolCall = (key: ApiKeyRecord, id: string | number, params: { name: string; arguments?: Record<string, unknown> | undefined }) =>
  Effect.gen(function*() {
    const state = yield* CurrentRequest
    const tools = yield* SqlTools
    state.audit.tool = params.name
    if (!tools.has(params.name)) return rpcError(id, -32602, `unknown tool: ${params.name}`)
    // The call's charge is held by a scope of its own, closed with the tool's outcome: a tool
    // failure is a 200 with isError (MCP), but what a server-side failure cost is still refunded,
    // as on the other surfaces.
    const call = yield* Scope.fork(state.scope)
    yield* admitCosts({ scope: call, stream: false, model: `mcp:${params.name}`, credits: (yield* AppConfig).mcp.credits_per_tool_call })
    const grants = new Map((yield* (yield* Connections).grantsOf(key.id)).map((g) => [g.connection_id, g.role] as const))
    const outcome = yield* tools.call(params.name, params.arguments ?? {}, { keyId: key.id, grants, requestId: state.requestId })
    state.audit.connection_id = outcome.audit.connection_id
    state.audit.details = { ...outcome.audit.details, method: "tools/call" }
    if (outcome._tag === "Success") {
      yield* Scope.close(call, Exit.succeed({ status: 200, slug: null, failure: undefined }))
      return rpcResult(id, { content: [{ type: "text", text: JSON.stringify(outcome.structured) }], structuredContent: outcome.structured })
    }
    const envelope = toEnvelope(outcome.error, state.requestId)
    state.audit.details = { ...state.audit.details, error: envelope.error }
    yield* Scope.close(call, Exit.succeed({ status: 200, slug: envelope.error, failure: envelope.status }))
    return rpcResult(id, { content: [{ type: "text", text: JSON.stringify(envelope) }], structuredContent: envelope, isError: true })
  })

export const mcpPostPipeline = authenticated(Effect.gen(function*() {
  const state = yield* CurrentRequest
  const key = yield* AuthenticatedKey
  yield* checkOrigin
  yield* checkProtocolHeader
  const body = yield* (yield* RequestBody).jsonObject
  const parsed = JSONRPCMessageSchema.safeParse(body)
  if (!parsed.success) {
    return yield* new ValidationFailed({ message: "not a JSON-RPC 2.0 message", details: { field: parsed.error.issues[0]?.path.join(".") ?? "" } })
  }
  const message = parsed.data as { method?: string; id?: string | number; params?: unknown }
  state.audit.details = { method: message.method ?? "response" }
  const sessions = yield* McpSessions

  if (message.method === "initialize") {
    const init = InitializeRequestSchema.safeParse(body)
    if (!init.success) return yield* new ValidationFailed({ message: "malformed initialize request", details: { field: "params" } })
    yield* requireTools(key)
    yield* admitCosts({ scope: state.scope, stream: false, model: "mcp:initialize", credits: 0 })
    const requested = init.data.params.protocolVersion
    const version = (SUPPORTED_MCP_VERSIONS as ReadonlyArray<string>).includes(requested) ? requested : LATEST_PROTOCOL_VERSION
    const session = yield* sessions.open(key.id, version)
    return HttpServerResponse.setHeader(
      rpcResult(message.id!, {
        protocolVersion: version,
        capabilities: { tools: { listChanged: false } },
        serverInfo: SERVER_INFO,
        instructions: "SQL tools over the databases this API key has been granted. Start with sql_list_connections."
      }),
      "mcp-session-id",
      session.id
    )
  }

  yield* sessions.use(yield* sessionHeader, key.id)
  yield* requireTools(key)

  // Notifications and client responses carry nothing to answer.
  if (message.id === undefined || message.method === undefined) {
    yield* admitCosts({ scope: state.scope, stream: false, model: "mcp:notification", credits: 0 })
    return HttpServerResponse.empty({ status: 202 })
  }
  const id = message.id
  switch (message.method) {
    case "ping":
      yield* admitCosts({ scope: state.scope, stream: false, model: "mcp:ping", credits: 0 })
      return rpcResult(id, {})
    case "tools/list":
      yield* admitCosts({ scope: state.scope, stream: false, model: "mcp:tools/list", credits: 0 })
      return rpcResult(id, { tools: advertised((yield* SqlTools).definitions) })
    case "tools/call": {
      const call = CallToolRequestSchema.safeParse(body)
      if (!call.success) return rpcError(id, -32602, "malformed tools/call: params.name is required")
      return yield* toolCall(key, id, call.data.params)
    }
    default:
      yield* admitCosts({ scope: state.scope, stream: false, model: `mcp:${message.method}`, credits: 0 })
      return rpcError(id, -32601, `method not found: ${message.method}`)
  }
}))

export const mcpDeletePipeline = authenticated(Effect.gen(function*() {
  const key = yield* AuthenticatedKey
  yield* checkOrigin
  yield* (yield* McpSessions).close(yield* sessionHeader, key.id)
  return HttpServerResponse.empty({ status: 204 })
}))
