/**
 * What every MCP revision the gateway serves tells clients about itself: its identity, its
 * instructions and the tool list as `tools/list` shows it. One definition, so the session
 * revisions and the stateless one can never drift apart.
 */
import { VERSION } from "../../domain/version.ts"
import type { McpToolDefinition } from "../sql/tools/definitions.ts"

export const SERVER_INFO = { name: "modelgate", version: VERSION }

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
