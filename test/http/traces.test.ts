/**
 * OpenTelemetry traces on the real server, collected by an OTLP/HTTP receiver (OTLP/JSON): the
 * span tree of a chat completion, a stream and an MCP SQL tool call (names, attributes, parent
 * links), a client's traceparent adopted as the request span's parent, the upstream receiving
 * the traceparent of the upstream-call span, and no prompt text, statement text or key anywhere
 * in what was exported. Then what tracing must not do: fail or slow requests when the collector
 * is down (spans dropped and counted), lose the last spans at shutdown, or export anything
 * (while still passing a client's trace context on) when it is off.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { Client as PgClient } from "../support/pg-admin.ts"
import { createPostgresDatabase, type TempDatabase } from "../support/databases.ts"
import type { FakeUpstream } from "../support/fake-common.ts"
import { startFakeOpenAI } from "../support/fake-openai.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { type OtlpReceiver, type ReceivedSpan, startOtlpReceiver } from "../support/otlp-receiver.ts"

const OPENAI_KEY = "sk-upstream-traces-0123456789abcdef"
const GPT_ID = "gpt-4o-mini-2024-07-18"
const PROMPT_MARKER = "prompt-text-that-must-not-be-traced-5d1c"
const SQL_MARKER = "statement-text-that-must-not-be-traced-77e0"
const CLIENT_TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
const CLIENT_SPAN_ID = "00f067aa0ba902b7"
const SERVER = 2
const CLIENT = 3

const chat = (gw: TestGateway, key: string, body: Record<string, unknown>, headers: Record<string, string> = {}) =>
  fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...headers },
    body: JSON.stringify({ model: "gpt", messages: [{ role: "user", content: `say hi ${PROMPT_MARKER}` }], ...body })
  })

const requestSpanOf = (spans: ReadonlyArray<ReceivedSpan>, requestId: string) =>
  spans.find((s) => s.kind === SERVER && s.attributes["modelgate.request_id"] === requestId)

/** Every span under `root` in its trace. */
const descendants = (spans: ReadonlyArray<ReceivedSpan>, root: ReceivedSpan): Array<ReceivedSpan> => {
  const inTrace = spans.filter((s) => s.traceId === root.traceId)
  const found: Array<ReceivedSpan> = []
  let frontier = [root.spanId]
  while (frontier.length > 0) {
    const children = inTrace.filter((s) => s.parentSpanId !== undefined && frontier.includes(s.parentSpanId))
    found.push(...children)
    frontier = children.map((s) => s.spanId)
  }
  return found
}

const named = (spans: ReadonlyArray<ReceivedSpan>, name: string) => {
  const span = spans.find((s) => s.name === name)
  if (span === undefined) throw new Error(`no span named ${name} among ${spans.map((s) => s.name).join(", ")}`)
  return span
}

const waitForRequest = async (receiver: OtlpReceiver, requestId: string) => {
  const spans = await receiver.waitFor((all) => requestSpanOf(all, requestId) !== undefined)
  const root = requestSpanOf(spans, requestId)!
  return { root, tree: descendants(spans, root) }
}

describe("traces over OTLP/HTTP", () => {
  let receiver: OtlpReceiver
  let upstream: FakeUpstream
  let db: TempDatabase
  let gw: TestGateway
  let key: string
  let keyId: string

  beforeAll(async () => {
    receiver = await startOtlpReceiver()
    upstream = await startFakeOpenAI({ apiKey: OPENAI_KEY, models: [GPT_ID] })
    db = await createPostgresDatabase("mg_traces_data")
    const admin = new PgClient(db.url)
    await admin.query("CREATE TABLE items (id serial PRIMARY KEY, name text NOT NULL)")
    await admin.query("INSERT INTO items (name) VALUES ('a'), ('b')")
    gw = await startGateway(testConfig({
      workspace: { credits: 100_000 },
      providers: [{ name: "up-openai", kind: "openai", base_url: upstream.url, api_key: OPENAI_KEY }],
      models: [{ alias: "gpt", id: GPT_ID, provider: "up-openai" }],
      connections: [{ id: 1, name: "analytics", dialect: "postgres", url: db.url }],
      telemetry: { otlp_endpoint: receiver.url, export_interval_ms: 50, service_name: "modelgate-test" }
    }))
    const created = (await (await gw.admin("POST", "/api-keys", {
      name: "traced",
      tools_enabled: true,
      connections: [{ connection_id: 1, role: "read" }]
    })).json()) as { key: string; id: string }
    key = created.key
    keyId = created.id
  })
  afterAll(async () => {
    await gw?.close()
    await upstream?.close()
    await receiver?.close()
    await db?.drop()
  })

  it("a chat completion: request span under the client's traceparent, its stages, and the upstream call", async () => {
    const response = await chat(gw, key, { max_tokens: 64, temperature: 0.25 }, {
      traceparent: `00-${CLIENT_TRACE_ID}-${CLIENT_SPAN_ID}-01`,
      tracestate: "vendor=opaque-value"
    })
    expect(response.status).toBe(200)
    const requestId = response.headers.get("x-request-id")!
    const { root, tree } = await waitForRequest(receiver, requestId)

    expect(root.name).toBe("POST /v1/chat/completions")
    expect(root.traceId).toBe(CLIENT_TRACE_ID)
    expect(root.parentSpanId).toBe(CLIENT_SPAN_ID)
    expect(root.resource["service.name"]).toBe("modelgate-test")
    expect(root.attributes).toMatchObject({
      "http.request.method": "POST",
      "http.route": "/v1/chat/completions",
      "http.response.status_code": 200,
      "modelgate.request_id": requestId,
      "modelgate.key_id": keyId,
      "modelgate.model": GPT_ID,
      "modelgate.provider": "up-openai",
      "modelgate.stream": false
    })
    expect(root.attributes["gen_ai.usage.input_tokens"]).toBeGreaterThan(0)
    expect(root.attributes["error.type"]).toBeUndefined()

    const auth = named(tree, "Auth.authenticate")
    expect(auth.parentSpanId).toBe(root.spanId)
    expect(auth.attributes["modelgate.key_id"]).toBe(keyId)
    expect(named(tree, "RateLimiter.consume").attributes).toMatchObject({ "modelgate.rate.allowed": true })
    const admission = named(tree, "Admission.admitModelRequest")
    expect(named(tree, "Credits.reserve").parentSpanId).toBe(admission.spanId)

    const call = named(tree, "Provider.request")
    expect(call.kind).toBe(CLIENT)
    expect(call.attributes).toMatchObject({
      "modelgate.provider": "up-openai",
      "gen_ai.request.model": GPT_ID,
      "modelgate.stream": false,
      "http.response.status_code": 200,
      // OpenTelemetry's GenAI semantic conventions, request side and answer side.
      "gen_ai.operation.name": "chat",
      "gen_ai.provider.name": "openai",
      "gen_ai.request.max_tokens": 64,
      "gen_ai.request.temperature": 0.25,
      "gen_ai.response.model": GPT_ID,
      "gen_ai.response.finish_reasons": ["stop"]
    })
    expect(call.attributes["gen_ai.usage.input_tokens"]).toBeGreaterThan(0)
    expect(call.attributes["gen_ai.usage.output_tokens"]).toBeGreaterThan(0)
    // The upstream got the upstream-call span as parent, and the client's tracestate as it came.
    const sent = upstream.requests.at(-1)!
    expect(sent.headers.traceparent).toBe(`00-${CLIENT_TRACE_ID}-${call.spanId}-01`)
    expect(sent.headers.tracestate).toBe("vendor=opaque-value")
    // Children end before the request does.
    for (const span of tree) expect(span.endTimeUnixNano <= root.endTimeUnixNano).toBe(true)
  })

  it("a stream: the request and upstream spans last until the stream ended", async () => {
    const response = await chat(gw, key, { stream: true })
    expect(response.status).toBe(200)
    const text = await response.text()
    expect(text).toContain("data: [DONE]")
    const requestId = response.headers.get("x-request-id")!
    const { root, tree } = await waitForRequest(receiver, requestId)

    expect(root.parentSpanId).toBeUndefined()
    expect(root.attributes).toMatchObject({ "http.response.status_code": 200, "modelgate.stream": true, "modelgate.model": GPT_ID })
    expect(named(tree, "StreamSlots.acquire").attributes).toMatchObject({ "modelgate.streams.acquired": true })
    const call = named(tree, "Provider.request")
    expect(call.attributes).toMatchObject({
      "modelgate.stream": true,
      "http.response.status_code": 200,
      "gen_ai.operation.name": "chat",
      "gen_ai.response.model": GPT_ID,
      "gen_ai.response.finish_reasons": ["stop"]
    })
    expect(call.parentSpanId).toBe(root.spanId)
    expect(call.endTimeUnixNano <= root.endTimeUnixNano).toBe(true)
    expect(upstream.requests.at(-1)!.headers.traceparent).toBe(`00-${root.traceId}-${call.spanId}-01`)
  })

  it("an MCP tools/call of a SQL tool: tool, connection, row count and duration, never the statement", async () => {
    const transport = new StreamableHTTPClientTransport(new URL(`${gw.url}/v1/mcp`), {
      requestInit: { headers: { Authorization: `Bearer ${key}` } }
    })
    const client = new Client({ name: "traces-test", version: "1.0.0" })
    await client.connect(transport)
    const run = await client.callTool({
      name: "sql_run",
      arguments: { connection_id: 1, statement: `SELECT name, '${SQL_MARKER}' AS marker FROM items ORDER BY id` }
    })
    expect(run.isError).toBeFalsy()
    await client.close()

    const spans = await receiver.waitFor((all) => all.some((s) => s.name === "SqlTools.sql_run"))
    const tool = named(spans, "SqlTools.sql_run")
    expect(tool.attributes).toMatchObject({
      "modelgate.tool": "sql_run",
      "modelgate.connection_id": 1,
      "modelgate.sql.row_count": 2,
      "modelgate.sql.verdict": "read"
    })
    expect(typeof tool.attributes["modelgate.sql.duration_ms"]).toBe("number")
    expect(tool.attributes["modelgate.sql.statement_hash"]).toMatch(/^[0-9a-f]{64}$/)
    // Under the request span of its POST /v1/mcp, with the tool's charge and the statement's own spans.
    const root = spans.find((s) => s.kind === SERVER && s.traceId === tool.traceId)!
    expect(root.name).toBe("POST /v1/mcp")
    expect(root.attributes).toMatchObject({ "modelgate.tool": "sql_run", "modelgate.connection_id": 1, "http.response.status_code": 200 })
    const tree = descendants(spans, root)
    expect(tree.map((s) => s.spanId)).toContain(tool.spanId)
    const underTool = descendants(spans, tool)
    expect(underTool.length).toBeGreaterThan(0)
    for (const span of underTool) expect(span.attributes["db.query.text"]).toBeUndefined()
  })

  it("a stateless (2026-07-28) tools/call: the tool span is under its request span too", async () => {
    const response = await fetch(`${gw.url}/v1/mcp`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${key}`,
        "content-type": "application/json",
        accept: "application/json, text/event-stream",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": "sql_list_tables"
      },
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: 1,
        method: "tools/call",
        params: {
          name: "sql_list_tables",
          arguments: { connection_id: 1 },
          _meta: {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": { name: "raw", version: "1" },
            "io.modelcontextprotocol/clientCapabilities": {}
          }
        }
      })
    })
    expect(response.status).toBe(200)
    const { root, tree } = await waitForRequest(receiver, response.headers.get("x-request-id")!)
    expect(root.attributes).toMatchObject({ "modelgate.tool": "sql_list_tables", "http.response.status_code": 200 })
    expect(named(tree, "SqlTools.sql_list_tables").attributes).toMatchObject({ "modelgate.connection_id": 1, "modelgate.sql.count": 1 })
  })

  it("a refused request is traced with its status and slug; a malformed traceparent is ignored", async () => {
    const wrongKey = "sk-mg-00000000000000000000000000000000"
    const response = await chat(gw, wrongKey, {}, { traceparent: "00-not-a-trace-context-01" })
    expect(response.status).toBe(401)
    const { root, tree } = await waitForRequest(receiver, response.headers.get("x-request-id")!)
    expect(root.parentSpanId).toBeUndefined()
    expect(root.traceId).toMatch(/^[0-9a-f]{32}$/)
    expect(root.attributes).toMatchObject({ "http.response.status_code": 401, "modelgate.slug": "unauthorized", "error.type": "unauthorized" })
    // A 4xx is the client's: the request span is not an error; the failed stage says what failed, by slug only.
    expect(root.status.code).not.toBe(2)
    const auth = named(tree, "Auth.authenticate")
    expect(auth.status).toEqual({ code: 2, message: "unauthorized" })
    expect(JSON.stringify(auth.raw)).not.toContain(wrongKey)
  })

  it("exports no prompt text, statement text or key, and nothing of background work", async () => {
    await receiver.waitFor((all) => all.length > 0)
    const exported = JSON.stringify(receiver.spans.map((s) => s.raw))
    for (const secret of [PROMPT_MARKER, SQL_MARKER, key, OPENAI_KEY, "say hi"]) expect(exported).not.toContain(secret)
    // Every trace starts at a request.
    const roots = receiver.spans.filter((s) => s.parentSpanId === undefined || s.parentSpanId === CLIENT_SPAN_ID)
    for (const span of roots) expect(span.kind).toBe(SERVER)
  })
})

/** A port nothing listens on: taken, then released. */
const closedPort = async () => {
  const server = http.createServer()
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo
  await new Promise<void>((resolve) => server.close(() => resolve()))
  return port
}

const scrape = async (gw: TestGateway) => (await fetch(`${gw.url}/metrics`)).text()
const droppedSpans = (metrics: string) => Number(/modelgate_trace_spans_total\{outcome="dropped"\} (\d+)/.exec(metrics)?.[1] ?? "NaN")

describe("tracing that must not get in the way", () => {
  it("a collector that is down fails no request, and its spans are dropped and counted", async () => {
    const gw = await startGateway(testConfig({
      telemetry: { otlp_endpoint: `http://127.0.0.1:${await closedPort()}`, export_interval_ms: 20 }
    }))
    try {
      const { key } = await gw.createKey()
      for (let i = 0; i < 20; i++) {
        const response = await chat(gw, key, { model: "echo" })
        expect(response.status).toBe(200)
      }
      const until = Date.now() + 10_000
      while (!(droppedSpans(await scrape(gw)) > 0)) {
        if (Date.now() > until) throw new Error("no dropped spans counted")
        await new Promise((resolve) => setTimeout(resolve, 50))
      }
      expect(await scrape(gw)).toMatch(/modelgate_trace_spans_total\{outcome="exported"\} 0/)
    } finally {
      await gw.close()
    }
  })

  it("a stop sends the spans still waiting for their batch (here as protobuf)", async () => {
    const receiver = await startOtlpReceiver()
    const gw = await startGateway(testConfig({
      telemetry: {
        otlp_endpoint: receiver.url,
        otlp_protocol: "http/protobuf",
        otlp_headers: { "x-collector-token": "collector-secret" },
        export_interval_ms: 600_000
      }
    }))
    try {
      const { key } = await gw.createKey()
      expect((await chat(gw, key, { model: "echo" })).status).toBe(200)
      expect(receiver.protobufBatches).toHaveLength(0)
      await gw.close()
      expect(receiver.protobufBatches.length).toBeGreaterThan(0)
      const bytes = Buffer.concat(receiver.protobufBatches)
      expect(bytes.includes("POST /v1/chat/completions")).toBe(true)
      expect(bytes.includes("Auth.authenticate")).toBe(true)
      expect(bytes.includes(PROMPT_MARKER)).toBe(false)
      expect(receiver.requests[0]!.headers["content-type"]).toBe("application/x-protobuf")
      expect(receiver.requests[0]!.headers["x-collector-token"]).toBe("collector-secret")
    } finally {
      await receiver.close()
    }
  })

  it("sample_ratio 0 exports no request without a client's sampled traceparent, and follows one that has it", async () => {
    const receiver = await startOtlpReceiver()
    const gw = await startGateway(testConfig({
      telemetry: { otlp_endpoint: receiver.url, export_interval_ms: 20, sample_ratio: 0 }
    }))
    try {
      const { key } = await gw.createKey()
      const unsampled = await chat(gw, key, { model: "echo" })
      const sampled = await chat(gw, key, { model: "echo" }, { traceparent: `00-${CLIENT_TRACE_ID}-${CLIENT_SPAN_ID}-01` })
      await waitForRequest(receiver, sampled.headers.get("x-request-id")!)
      expect(requestSpanOf(receiver.spans, unsampled.headers.get("x-request-id")!)).toBeUndefined()
      expect(receiver.spans.every((s) => s.traceId === CLIENT_TRACE_ID)).toBe(true)
    } finally {
      await gw.close()
      await receiver.close()
    }
  })

  it("off: nothing is exported, and a client's trace context still reaches the upstream unchanged", async () => {
    const upstream = await startFakeOpenAI({ apiKey: OPENAI_KEY, models: [GPT_ID] })
    const gw = await startGateway(testConfig({
      providers: [{ name: "up-openai", kind: "openai", base_url: upstream.url, api_key: OPENAI_KEY }],
      models: [{ alias: "gpt", id: GPT_ID, provider: "up-openai" }]
    }))
    try {
      const { key } = await gw.createKey()
      const traceparent = `00-${CLIENT_TRACE_ID}-${CLIENT_SPAN_ID}-01`
      expect((await chat(gw, key, {}, { traceparent, tracestate: "a=1" })).status).toBe(200)
      expect(upstream.requests.at(-1)!.headers.traceparent).toBe(traceparent)
      expect(upstream.requests.at(-1)!.headers.tracestate).toBe("a=1")
      expect((await chat(gw, key, {})).status).toBe(200)
      expect(upstream.requests.at(-1)!.headers.traceparent).toBeUndefined()
    } finally {
      await gw.close()
      await upstream.close()
    }
  })
})
