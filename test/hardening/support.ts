/** Raw MCP over HTTP for the hardening tests: one session, tool calls as plain JSON-RPC posts. */
import { expect } from "vitest"
import type { TestGateway } from "../support/gateway.ts"

export interface ToolResult {
  readonly isError?: boolean
  readonly structuredContent: Record<string, any>
}

export interface McpSession {
  readonly call: (name: string, args: unknown) => Promise<ToolResult>
  /** The raw HTTP answer to a tools/call, for tests that look at status and envelope. */
  readonly post: (body: unknown) => Promise<Response>
}

const headers = (key: string) => ({
  authorization: `Bearer ${key}`,
  "content-type": "application/json",
  accept: "application/json, text/event-stream"
})

export const mcpSession = async (url: string, key: string): Promise<McpSession> => {
  const init = await fetch(`${url}/v1/mcp`, {
    method: "POST",
    headers: headers(key),
    body: JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "hardening", version: "1" } }
    })
  })
  expect(init.status).toBe(200)
  const sessionId = init.headers.get("mcp-session-id")!
  await init.text()
  let id = 1
  const post = (body: unknown) =>
    fetch(`${url}/v1/mcp`, {
      method: "POST",
      headers: { ...headers(key), "mcp-session-id": sessionId, "mcp-protocol-version": "2025-06-18" },
      body: typeof body === "string" ? body : JSON.stringify(body)
    })
  return {
    post,
    call: async (name, args) => {
      const response = await post({ jsonrpc: "2.0", id: ++id, method: "tools/call", params: { name, arguments: args } })
      const text = await response.text()
      expect(response.status, text.slice(0, 500)).toBe(200)
      const message = JSON.parse(text) as { result?: ToolResult; error?: unknown }
      if (message.result === undefined) throw new Error(`tools/call failed: ${text.slice(0, 500)}`)
      return message.result
    }
  }
}

/** A key with tools enabled and the given role on each connection, made through the admin API. */
export const toolKey = async (
  gw: TestGateway,
  grants: ReadonlyArray<{ readonly connection_id: number; readonly role: "read" | "edit" }>
): Promise<string> => {
  const response = await gw.admin("POST", "/api-keys", { name: "hardening", tools_enabled: true, connections: grants })
  expect(response.status).toBe(201)
  return ((await response.json()) as { key: string }).key
}
