/**
 * The MCP SDK, loaded on the first /v1/mcp request instead of with the gateway: it and the zod
 * it validates with are about 1.6 MB of JavaScript that a deployment without MCP clients never
 * runs. One load per process, shared by the stateless handler and the session revisions'
 * validators.
 */
import * as Effect from "effect/Effect"

export type McpSdk = typeof import("@modelcontextprotocol/server")

let loading: Promise<McpSdk> | undefined

/** The SDK module; the first call imports it, the others wait for that import. */
export const mcpSdk: Effect.Effect<McpSdk> = Effect.promise(() => (loading ??= import("@modelcontextprotocol/server")))

type SpecType = "JSONRPCMessage" | "InitializeRequest" | "CallToolRequest"

/** The SDK's validator for one spec type; its issues carry the path of what is wrong. */
export const validateSpec = <K extends SpecType>(type: K, value: unknown) =>
  Effect.map(mcpSdk, (sdk) => sdk.specTypeSchemas[type]["~standard"].validate(value) as ReturnType<McpSdk["specTypeSchemas"][K]["~standard"]["validate"]>)
