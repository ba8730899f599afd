/**
 * A real MCP server over Streamable HTTP on 127.0.0.1:0, built with the official SDK (v1's
 * Server and StreamableHTTPServerTransport, with sessions, as most deployed servers run), for
 * the gateway to proxy in tests (issue 37). Its tools are JSON Schemas set by the test and may
 * be changed while it runs; it records what it was asked and what it saw.
 */
import { Server } from "@modelcontextprotocol/sdk/server/index.js"
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js"
import {
  CallToolRequestSchema,
  GetPromptRequestSchema,
  ListPromptsRequestSchema,
  ListResourcesRequestSchema,
  ListToolsRequestSchema,
  ReadResourceRequestSchema
} from "@modelcontextprotocol/sdk/types.js"
import { randomUUID } from "node:crypto"
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"

export interface UpstreamToolDef {
  readonly name: string
  readonly description?: string
  readonly inputSchema: Record<string, unknown>
  readonly outputSchema?: Record<string, unknown>
  readonly annotations?: Record<string, unknown>
}

export type ToolHandler = (args: Record<string, unknown>, signal: AbortSignal) => Promise<Record<string, unknown>>

export interface McpUpstream {
  readonly url: string
  /** Every tools/call the server received, in order. */
  readonly calls: Array<{ readonly name: string; readonly args: Record<string, unknown> }>
  /** Names of calls whose request was cancelled by the client (its signal aborted). */
  readonly cancelled: Array<string>
  /** The Authorization header of every HTTP request. */
  readonly authorizations: Array<string | undefined>
  /** Initialize requests seen: one per session opened. */
  readonly initializations: () => number
  /** Replaces the tool list; `notify` sends notifications/tools/list_changed on every session. */
  readonly setTools: (tools: ReadonlyArray<UpstreamToolDef>, notify?: boolean) => Promise<void>
  /** Forgets every session: the next request on one is answered 404, as after a restart. */
  readonly forgetSessions: () => void
  readonly close: () => Promise<void>
}

export const startMcpUpstream = async (
  tools: ReadonlyArray<UpstreamToolDef>,
  handlers: Readonly<Record<string, ToolHandler>>
): Promise<McpUpstream> => {
  let current = [...tools]
  const sessions = new Map<string, { transport: StreamableHTTPServerTransport; server: Server }>()
  const calls: McpUpstream["calls"] = []
  const cancelled: Array<string> = []
  const authorizations: Array<string | undefined> = []
  let initializations = 0

  const newSession = () => {
    const server = new Server({ name: "test-upstream", version: "1.0.0" }, {
      capabilities: { tools: { listChanged: true }, prompts: {}, resources: {} }
    })
    // One prompt and one resource, for the forwarding of prompts/* and resources/*.
    server.setRequestHandler(ListPromptsRequestSchema, () => ({
      prompts: [{ name: "review", description: "Reviews a change", arguments: [{ name: "topic", required: true }] }]
    }))
    server.setRequestHandler(GetPromptRequestSchema, (request) => {
      if (request.params.name !== "review") throw new Error(`no prompt ${request.params.name}`)
      return { messages: [{ role: "user", content: { type: "text", text: `Review ${request.params.arguments?.topic}` } }] }
    })
    server.setRequestHandler(ListResourcesRequestSchema, () => ({
      resources: [{ uri: "test://docs/readme", name: "readme", mimeType: "text/plain" }]
    }))
    server.setRequestHandler(ReadResourceRequestSchema, (request) => ({
      contents: [{ uri: request.params.uri, mimeType: "text/plain", text: `contents of ${request.params.uri}` }]
    }))
    server.setRequestHandler(ListToolsRequestSchema, () => ({ tools: current as never }))
    server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
      const name = request.params.name
      const args = (request.params.arguments ?? {}) as Record<string, unknown>
      calls.push({ name, args })
      extra.signal.addEventListener("abort", () => cancelled.push(name))
      const handler = handlers[name]
      if (handler === undefined) throw new Error(`no tool ${name}`)
      return (await handler(args, extra.signal)) as never
    })
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => {
        sessions.set(id, { transport, server })
      }
    })
    return { server, transport }
  }

  const readBody = (req: IncomingMessage) =>
    new Promise<unknown>((resolve, reject) => {
      const chunks: Array<Buffer> = []
      req.on("data", (c: Buffer) => chunks.push(c))
      req.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8")
        try {
          resolve(text === "" ? undefined : JSON.parse(text))
        } catch (error) {
          reject(error)
        }
      })
      req.on("error", reject)
    })

  const http = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    authorizations.push(req.headers.authorization)
    const body = req.method === "POST" ? await readBody(req) : undefined
    const sessionId = req.headers["mcp-session-id"] as string | undefined
    if (sessionId !== undefined) {
      const session = sessions.get(sessionId)
      if (session === undefined) {
        res.writeHead(404, { "content-type": "application/json" })
        res.end(JSON.stringify({ jsonrpc: "2.0", error: { code: -32001, message: "Session not found" }, id: null }))
        return
      }
      await session.transport.handleRequest(req, res, body)
      return
    }
    if (req.method === "POST" && (body as { method?: string } | undefined)?.method === "initialize") {
      initializations++
      const { server, transport } = newSession()
      await server.connect(transport)
      await transport.handleRequest(req, res, body)
      return
    }
    res.writeHead(400, { "content-type": "application/json" })
    res.end(JSON.stringify({ jsonrpc: "2.0", error: { code: -32000, message: "No session" }, id: null }))
  })
  await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve))
  const port = (http.address() as AddressInfo).port

  return {
    url: `http://127.0.0.1:${port}/mcp`,
    calls,
    cancelled,
    authorizations,
    initializations: () => initializations,
    setTools: async (tools, notify = false) => {
      current = [...tools]
      if (notify) await Promise.all([...sessions.values()].map((s) => s.server.sendToolListChanged().catch(() => {})))
    },
    forgetSessions: () => {
      for (const session of sessions.values()) void session.transport.close().catch(() => {})
      sessions.clear()
    },
    close: async () => {
      for (const session of sessions.values()) await session.transport.close().catch(() => {})
      sessions.clear()
      http.closeAllConnections()
      await new Promise<void>((resolve) => http.close(() => resolve()))
    }
  }
}

/** An HTTP server that accepts requests and never answers them: an MCP server that hangs. */
export const startHangingServer = async () => {
  const held: Array<ServerResponse> = []
  const http = createServer((_req, res) => {
    held.push(res)
  })
  await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve))
  return {
    url: `http://127.0.0.1:${(http.address() as AddressInfo).port}/mcp`,
    close: async () => {
      http.closeAllConnections()
      await new Promise<void>((resolve) => http.close(() => resolve()))
    }
  }
}
