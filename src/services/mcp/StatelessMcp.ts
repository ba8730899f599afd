/**
 * MCP revision 2026-07-28 on /v1/mcp, served statelessly by the MCP SDK v2: no initialize, no
 * session; every request carries its protocol version, client info and capabilities in
 * `params._meta` and names its method in the `Mcp-Method` header. The SDK owns that wire (the
 * era classification, its validation ladder with the HTTP statuses and JSON-RPC codes the
 * revision prescribes, `server/discover`, result stamping); the gateway hands it, per request,
 * what the gateway owns: its refusals and costs, and the tools.
 *
 * The session revisions (2025-03-26 .. 2025-11-25) stay with the gateway's own handler, which
 * keeps sessions in the store: `isStateless` is the SDK's own routing predicate, so the two can
 * never disagree about which request is whose.
 */
import type { AuthInfo, CallToolResult, McpRequestContext, Tool } from "@modelcontextprotocol/server"
import { Context, Effect, Layer, Scope } from "effect"
import { FORWARDED_METHODS, SERVER_INFO, SERVER_INSTRUCTIONS, serverCapabilities } from "./advertised.ts"
import { isUpstreamRpcError } from "./McpUpstreams.ts"
import { mcpSdk } from "./sdk.ts"

/** What the gateway does for one stateless request; built by the /v1/mcp pipeline. */
export interface StatelessExchange {
  /**
   * Runs after the SDK has validated the request (so a malformed one is a 400 that costs
   * nothing) and before it is dispatched. Rejecting ends the exchange: the caller answers with
   * its own refusal (403 tools_disabled, 429 budget, 402 credits) instead of the SDK's answer.
   */
  readonly admit: () => Promise<void>
  /** The tools this caller may list: the SQL tools and those of its upstream MCP servers. */
  readonly listTools: () => Promise<ReadonlyArray<unknown>>
  /** Whether upstream MCP servers are configured: their prompts and resources are then offered too. */
  readonly upstreams: boolean
  /** `prompts/list`, `prompts/get`, `resources/list` or `resources/read` of the upstream servers. */
  readonly forward: (
    method: string,
    params: Record<string, unknown>,
    signal: AbortSignal
  ) => Promise<Record<string, unknown> | { readonly _tag: "UpstreamRpcError"; readonly code: number; readonly message: string } | undefined>
  /**
   * A known tool's result, or an upstream server's JSON-RPC error; undefined when no such tool
   * exists. Rejecting ends the exchange as above.
   */
  readonly callTool: (
    name: string,
    args: Record<string, unknown>,
    signal: AbortSignal
  ) => Promise<CallToolResult | { readonly _tag: "UpstreamRpcError"; readonly code: number; readonly message: string } | undefined>
}

export interface StatelessRequest {
  readonly headers: Readonly<Record<string, string | undefined>>
  /** The JSON body, already read under the gateway's own size limit. */
  readonly body: unknown
  /** Who is calling; the SDK passes it through untouched (it never holds the key itself). */
  readonly keyId: string
  readonly exchange: StatelessExchange
}

/**
 * The URL of the web Request handed to the SDK. Its stateless path reads the method, headers and
 * abort signal, never the URL (that only feeds OAuth metadata, which the gateway does not use),
 * so a fixed one keeps a client's Host header out of it.
 */
const REQUEST_URL = "http://modelgate.invalid/v1/mcp"

/**
 * The headers the SDK's stateless path reads: the media types and the MCP headers
 * (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`). Nothing else is handed
 * over, the credentials least of all: the gateway has checked them already.
 */
const forwarded = (name: string) => name === "content-type" || name === "accept" || name.startsWith("mcp-")

/** The request context's route into the factory: the SDK hands authInfo through as it was given. */
const EXCHANGE = "modelgate.exchange"

const exchangeOf = (context: McpRequestContext): StatelessExchange => {
  const exchange = context.authInfo?.extra?.[EXCHANGE] as StatelessExchange | undefined
  if (exchange === undefined) throw new Error("stateless MCP request served without its exchange")
  return exchange
}

export class StatelessMcp extends Context.Service<StatelessMcp, {
  /**
   * Whether a POST belongs to the stateless revision (including the requests its validation
   * ladder refuses, such as a 2026-07-28 header on a body without the `_meta` envelope), as
   * opposed to the session revisions.
   */
  readonly isStateless: (headers: Readonly<Record<string, string | undefined>>, body: unknown) => Effect.Effect<boolean>
  /** The SDK's answer to one request; a client that goes away aborts it. */
  readonly serve: (request: StatelessRequest) => Effect.Effect<Response>
}>()("modelgate/StatelessMcp") {
  static readonly layer = Layer.effect(
    StatelessMcp,
    Effect.gen(function*() {
      const runLog = Effect.runForkWith(yield* Effect.context<never>())

      const layerScope = yield* Effect.scope

      // Built on the first /v1/mcp request (the SDK loads then, see sdk.ts) and closed with the layer.
      const sdkHandler = yield* Effect.cached(Effect.gen(function*() {
        const sdk = yield* mcpSdk
        // A fresh low-level Server per request, as the SDK's stateless serving expects: nothing
        // outlives the exchange. The tools are JSON Schemas already, so the low-level Server fits
        // better than McpServer's Standard Schema registration.
        const factory = async (context: McpRequestContext) => {
          const exchange = exchangeOf(context)
          await exchange.admit()
          const server = new sdk.Server(SERVER_INFO, {
            capabilities: serverCapabilities(exchange.upstreams),
            instructions: SERVER_INSTRUCTIONS
          })
          if (exchange.upstreams) {
            for (const method of FORWARDED_METHODS) {
              server.setRequestHandler(method, async (request, ctx) => {
                const result = await exchange.forward(method, (request.params ?? {}) as Record<string, unknown>, ctx.mcpReq.signal)
                if (result === undefined) throw new sdk.ProtocolError(sdk.ProtocolErrorCode.MethodNotFound, `method not found: ${method}`)
                if (isUpstreamRpcError(result)) throw new sdk.ProtocolError(result.code, result.message)
                return result as never
              })
            }
          }
          // Accepted and answered with nothing to send (see serverCapabilities).
          server.setRequestHandler("logging/setLevel", async () => ({}))
          server.setRequestHandler("tools/list", async () => ({ tools: [...await exchange.listTools()] as Array<Tool> }))
          server.setRequestHandler("tools/call", async (request, ctx) => {
            const { name, arguments: args } = request.params
            const result = await exchange.callTool(name, args ?? {}, ctx.mcpReq.signal)
            if (result === undefined) throw new sdk.ProtocolError(sdk.ProtocolErrorCode.InvalidParams, `unknown tool: ${name}`)
            if (isUpstreamRpcError(result)) throw new sdk.ProtocolError(result.code, result.message)
            return result
          })
          return server
        }
        const handler = sdk.createMcpHandler(factory, {
          // 2025-era traffic never reaches this handler (isStateless routes it to the session
          // handler); refusing it here keeps the SDK's stateless legacy fallback out of the way.
          legacy: "reject",
          onerror: (error) => runLog(Effect.logDebug(`MCP 2026-07-28 request refused or failed: ${error.message}`))
        })
        yield* Scope.addFinalizer(layerScope, Effect.promise(() => handler.close()))
        return handler
      }))

      return StatelessMcp.of({
        isStateless: (headers, body) =>
          Effect.map(mcpSdk, (sdk) =>
            sdk.classifyInboundRequest({
              httpMethod: "POST",
              ...(headers["mcp-protocol-version"] === undefined ? {} : { protocolVersionHeader: headers["mcp-protocol-version"] }),
              ...(headers["mcp-method"] === undefined ? {} : { mcpMethodHeader: headers["mcp-method"] }),
              ...(headers["mcp-name"] === undefined ? {} : { mcpNameHeader: headers["mcp-name"] }),
              body
            }).kind !== "legacy"),
        serve: (request) =>
          // Interruptible, so that a client that leaves aborts the SDK's request (the HTTP server
          // runs handlers uninterruptibly): the signal reaches the tool call, whose statement the
          // driver then cancels on the database.
          Effect.flatMap(sdkHandler, (handler) => Effect.interruptible(Effect.promise((signal) => {
            const headers = new Headers()
            for (const [name, value] of Object.entries(request.headers)) {
              if (value !== undefined && forwarded(name)) headers.set(name, value)
            }
            const authInfo: AuthInfo = {
              // The key itself never enters the SDK: its id is enough to name the caller.
              token: "",
              clientId: request.keyId,
              scopes: [],
              extra: { [EXCHANGE]: request.exchange }
            }
            return handler.fetch(new Request(REQUEST_URL, { method: "POST", headers, signal }), {
              parsedBody: request.body,
              authInfo
            })
          })))
      })
    })
  )
}
