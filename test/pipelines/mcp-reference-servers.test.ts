/**
 * Issue 37 against a real MCP server from npm, not one written for the test: the reference
 * server `@modelcontextprotocol/server-everything`, once over Streamable HTTP (its own process,
 * its own sessions) and once over stdio (started and kept by the gateway), proxied by the
 * gateway to an agent on the official SDK client. Its tools are listed as `<server>__<tool>`
 * with the server's own schemas, and calls come back as the server answered them.
 */
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client"
import { type ChildProcess, spawn } from "node:child_process"
import { createServer } from "node:net"
import { createRequire } from "node:module"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

const everything = createRequire(import.meta.url).resolve("@modelcontextprotocol/server-everything/dist/index.js")

/** A port free a moment ago (the reference server takes its port from PORT, not 0). */
const freePort = () =>
  new Promise<number>((resolve, reject) => {
    const probe = createServer()
    probe.once("error", reject)
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address() as { port: number }
      probe.close(() => resolve(port))
    })
  })

describe("the reference MCP server (server-everything) behind /v1/mcp", () => {
  let http: ChildProcess | undefined
  let gw: TestGateway
  let key: string

  beforeAll(async () => {
    // The port was free a moment ago; another process may take it first: tried again then.
    let port = 0
    for (let attempt = 0; http === undefined; attempt++) {
      port = await freePort()
      const child = spawn(process.execPath, [everything, "streamableHttp"], { env: { PATH: process.env.PATH ?? "", PORT: String(port) }, stdio: ["ignore", "ignore", "pipe"] })
      const started = await new Promise<boolean>((resolve, reject) => {
        let said = ""
        const timer = setTimeout(() => reject(new Error(`server-everything did not start: ${said}`)), 30_000)
        child.stderr!.on("data", (chunk: Buffer) => {
          said += chunk.toString()
          if (/listening on port/i.test(said)) {
            clearTimeout(timer)
            resolve(true)
          }
        })
        child.once("exit", (code) => {
          clearTimeout(timer)
          if (/already in use/i.test(said) && attempt < 3) resolve(false)
          else reject(new Error(`server-everything exited with ${code}: ${said}`))
        })
      })
      if (started) http = child
    }
    gw = await startGateway(testConfig({
      mcp: {
        servers: [
          { name: "everything", url: `http://127.0.0.1:${port}/mcp`, timeout_ms: 20_000 },
          { name: "local", command: process.execPath, args: [everything, "stdio"], timeout_ms: 20_000 }
        ]
      }
    }))
    key = ((await (await gw.admin("POST", "/api-keys", { name: "agent", tools_enabled: true, mcp_servers: ["everything", "local"] })).json()) as { key: string }).key
  }, 60_000)

  afterAll(async () => {
    await gw?.close()
    http?.kill()
  })

  const connect = async () => {
    const client = new Client({ name: "agent", version: "1.0.0" })
    await client.connect(new StreamableHTTPClientTransport(new URL(`${gw.url}/v1/mcp`), { requestInit: { headers: { Authorization: `Bearer ${key}` } } }))
    return client
  }

  for (const server of ["everything", "local"] as const) {
    it(`${server === "everything" ? "over Streamable HTTP" : "over stdio"}: lists its tools with their schemas and answers calls as the server does`, { timeout: 60_000 }, async () => {
      const client = await connect()
      try {
        const { tools } = await client.listTools()
        const names = tools.map((tool) => tool.name)
        expect(names).toEqual(expect.arrayContaining(["sql_list_connections", `${server}__echo`, `${server}__get-sum`]))
        expect(tools.find((tool) => tool.name === `${server}__echo`)!.inputSchema).toMatchObject({
          type: "object",
          properties: { message: { type: "string" } }
        })
        const echoed = await client.callTool({ name: `${server}__echo`, arguments: { message: "through the gateway" } })
        expect(echoed.content).toEqual([{ type: "text", text: "Echo: through the gateway" }])
        const sum = await client.callTool({ name: `${server}__get-sum`, arguments: { a: 2, b: 40 } })
        expect(JSON.stringify(sum.content)).toContain("The sum of 2 and 40 is 42.")
      } finally {
        await client.close()
      }
    })
  }
})
