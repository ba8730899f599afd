/**
 * Issue 37 against a real MCP server from npm, not one written for the test: the reference
 * server `@modelcontextprotocol/server-everything`, once over Streamable HTTP (its own process,
 * its own sessions) and once over stdio (started and kept by the gateway), proxied by the
 * gateway to an agent on the official SDK client. Its tools are listed as `<server>__<tool>`
 * with the server's own schemas, and calls come back as the server answered them. Beside it,
 * `@modelcontextprotocol/server-filesystem` over stdio, rooted in a temporary directory: its
 * own access rule holds through the gateway. Resource templates, completions and the logging
 * level reach the server that owns them.
 */
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client"
import { type ChildProcess, spawn } from "node:child_process"
import { createServer } from "node:net"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { createRequire } from "node:module"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

const resolve = createRequire(import.meta.url).resolve
const everything = resolve("@modelcontextprotocol/server-everything/dist/index.js")
const filesystem = resolve("@modelcontextprotocol/server-filesystem/dist/index.js")

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
  const root = mkdtempSync(join(tmpdir(), "modelgate-files-"))
  writeFileSync(join(root, "notes.txt"), "kept on disk\n")

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
          { name: "local", command: process.execPath, args: [everything, "stdio"], timeout_ms: 20_000 },
          { name: "files", command: process.execPath, args: [filesystem, root], timeout_ms: 20_000 }
        ]
      }
    }))
    key = ((await (await gw.admin("POST", "/api-keys", { name: "agent", tools_enabled: true, mcp_servers: ["everything", "local", "files"] })).json()) as { key: string }).key
  }, 60_000)

  afterAll(async () => {
    await gw?.close()
    http?.kill()
    rmSync(root, { recursive: true, force: true })
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

  it("server-filesystem over stdio: reads inside its root, and its own refusal outside it comes back as the server gave it", { timeout: 60_000 }, async () => {
    const client = await connect()
    try {
      const names = (await client.listTools()).tools.map((tool) => tool.name)
      expect(names).toEqual(expect.arrayContaining(["files__read_text_file", "files__list_directory", "files__write_file"]))
      const read = await client.callTool({ name: "files__read_text_file", arguments: { path: join(root, "notes.txt") } })
      expect(read.isError).not.toBe(true)
      expect(read.content).toEqual([{ type: "text", text: "kept on disk\n" }])
      const listed = await client.callTool({ name: "files__list_directory", arguments: { path: root } })
      expect(JSON.stringify(listed.content)).toContain("[FILE] notes.txt")
      const outside = await client.callTool({ name: "files__read_text_file", arguments: { path: "/etc/hostname" } })
      expect(outside.isError).toBe(true)
      expect(JSON.stringify(outside.content)).toMatch(/outside allowed directories/i)
      await Effect.runPromise(gw.audit.flush)
      const records = ((await (await gw.admin("GET", "/audit?endpoint=/v1/mcp&limit=200")).json()) as { data: Array<{ details: Record<string, unknown> | null }> }).data
      const calls = records.filter((record) => record.details?.mcp_server === "files")
      expect(calls.length).toBeGreaterThanOrEqual(3)
      expect(calls.map((record) => record.details?.upstream_tool)).toEqual(expect.arrayContaining(["read_text_file", "list_directory"]))
      // Arguments and results are never recorded.
      expect(JSON.stringify(calls)).not.toContain("kept on disk")
    } finally {
      await client.close()
    }
  })

  it("resource templates are listed as the server gives them and reads of their URIs are routed back to it", { timeout: 60_000 }, async () => {
    const client = await connect()
    try {
      expect(client.getServerCapabilities()).toMatchObject({ resources: {}, prompts: {}, completions: {}, logging: {} })
      const { resourceTemplates } = await client.listResourceTemplates()
      const templates = resourceTemplates.map((template) => template.uriTemplate)
      expect(templates).toContain("demo://resource/dynamic/text/{resourceId}")
      const read = await client.readResource({ uri: "demo://resource/dynamic/text/7" })
      expect(read.contents).toEqual([expect.objectContaining({ uri: "demo://resource/dynamic/text/7", text: expect.stringContaining("Resource 7") })])
      // A URI no server listed and no template fits is not sent anywhere.
      await expect(client.readResource({ uri: "demo://resource/nowhere/7" })).rejects.toThrow(/unknown resource/)
    } finally {
      await client.close()
    }
  })

  it("completions reach the server of the prompt or template, and the logging level is accepted", { timeout: 60_000 }, async () => {
    const client = await connect()
    try {
      const prompt = await client.complete({ ref: { type: "ref/prompt", name: "local__completable-prompt" }, argument: { name: "department", value: "" } })
      expect(prompt.completion.values).toEqual(expect.arrayContaining(["Engineering", "Sales"]))
      const resource = await client.complete({
        ref: { type: "ref/resource", uri: "demo://resource/dynamic/text/{resourceId}" },
        argument: { name: "resourceId", value: "" }
      })
      expect(Array.isArray(resource.completion.values)).toBe(true)
      await expect(client.complete({ ref: { type: "ref/prompt", name: "elsewhere__completable-prompt" }, argument: { name: "department", value: "" } }))
        .rejects.toThrow(/unknown prompt/)
      await expect(client.setLoggingLevel("warning")).resolves.toBeDefined()
    } finally {
      await client.close()
    }
  })
})
