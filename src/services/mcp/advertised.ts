/**
 * What every MCP revision the gateway serves tells clients about itself: its identity, its
 * instructions and the tool list as `tools/list` shows it. One definition, so the session
 * revisions and the stateless one can never drift apart.
 */
import { VERSION } from "../../domain/version.ts"
import type { McpToolDefinition } from "../sql/tools/definitions.ts"

export const SERVER_INFO = { name: "modelgate", version: VERSION }

/**
 * The capabilities both eras declare. With upstream servers configured, their prompts, resources
 * (and resource templates) and completions are forwarded (issue 37); resource subscriptions are
 * not (the gateway has no channel to push an upstream's updates to a client's session), so
 * `subscribe` is not declared. `logging` is declared so a client may set a level; the gateway
 * itself sends no log messages.
 */
export const serverCapabilities = (upstreams: boolean) =>
  upstreams
    ? { tools: { listChanged: false }, prompts: { listChanged: false }, resources: { listChanged: false }, completions: {}, logging: {} }
    : { tools: { listChanged: false }, logging: {} }

/** The methods answered from upstream servers when any is configured (see pipelines/mcp.ts forwardUpstream). */
export const FORWARDED_METHODS = ["prompts/list", "prompts/get", "resources/list", "resources/templates/list", "resources/read", "completion/complete"] as const

/** The levels of `logging/setLevel` (syslog's, as the MCP schema names them). */
export const LOGGING_LEVELS: ReadonlySet<string> = new Set(["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"])

export const SERVER_INSTRUCTIONS =
  "SQL tools over the databases this API key has been granted. Start with sql_list_connections."

/**
 * A tool error's structuredContent is the spec's envelope, and the official clients validate
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

export interface AdvertisedTool extends Omit<McpToolDefinition, "outputSchema"> {
  readonly outputSchema: { readonly type: "object"; readonly anyOf: ReadonlyArray<unknown> }
}

const cache = new WeakMap<ReadonlyArray<McpToolDefinition>, ReadonlyArray<AdvertisedTool>>()

/** The tool list as clients get it; the definitions never change, so it is built once per list. */
export const advertisedTools = (definitions: ReadonlyArray<McpToolDefinition>): ReadonlyArray<AdvertisedTool> => {
  let tools = cache.get(definitions)
  if (tools === undefined) {
    tools = definitions.map((tool) => ({ ...tool, outputSchema: { type: "object", anyOf: [tool.outputSchema, ENVELOPE_SCHEMA] } }))
    cache.set(definitions, tools)
  }
  return tools
}
