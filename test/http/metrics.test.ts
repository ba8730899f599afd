/**
 * GET /metrics on the real server: scraped before and after traffic (a chat completion, a
 * stream, a refused request, an MCP call) and parsed as Prometheus text; the numbers must match
 * what the clients saw and what the audit trail holds.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { startFakeOpenAI } from "../support/fake-openai.ts"
import type { FakeUpstream } from "../support/fake-common.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

const OPENAI_KEY = "sk-upstream-metrics-test"
const METRICS_TOKEN = "metrics-token-0123456789"

interface Sample {
  readonly name: string
  readonly labels: Readonly<Record<string, string>>
  readonly value: number
}

/**
 * The Prometheus text exposition format (0.0.4), strictly: comments, and
 * `name{label="value",...} value` lines with the format's escapes. Any other line fails the
 * test, so a malformed exposition cannot pass.
 */
const parsePrometheus = (text: string) => {
  const samples: Array<Sample> = []
  const types = new Map<string, string>()
  for (const line of text.split("\n")) {
    if (line === "") continue
    if (line.startsWith("#")) {
      const type = /^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$/.exec(line)
      if (type) types.set(type[1]!, type[2]!)
      else if (!/^# HELP [a-zA-Z_:][a-zA-Z0-9_:]* /.test(line)) throw new Error(`bad comment line: ${line}`)
      continue
    }
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: -?\d+)?$/.exec(line)
    if (!match) throw new Error(`bad sample line: ${line}`)
    const labels: Record<string, string> = {}
    const body = match[2] ?? ""
    const label = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?/y
    let at = 0
    while (at < body.length) {
      label.lastIndex = at
      const found = label.exec(body)
      if (!found) throw new Error(`bad labels: ${body}`)
      labels[found[1]!] = found[2]!.replace(/\\(.)/g, (_, c: string) => (c === "n" ? "\n" : c))
      at = label.lastIndex
    }
    const raw = match[3]!
    const value = raw === "+Inf" ? Infinity : raw === "-Inf" ? -Infinity : Number(raw)
    if (Number.isNaN(value) && raw !== "NaN") throw new Error(`bad value: ${line}`)
    samples.push({ name: match[1]!, labels, value })
  }
  return { samples, types }
}

type Parsed = ReturnType<typeof parsePrometheus>

/** The value of the one sample with this name and these labels (0 when absent). */
const valueOf = (parsed: Parsed, name: string, labels: Record<string, string> = {}): number => {
  const found = parsed.samples.filter((s) =>
    s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)
  )
  return found.reduce((sum, s) => sum + s.value, 0)
}

describe("GET /metrics", () => {
  let fake: FakeUpstream
  let gw: TestGateway
  let key: string
  let toolsKey: string
  let budgetKey: string

  const scrape = (token: string | null) =>
    fetch(`${gw.url}/metrics`, token === null ? {} : { headers: { authorization: `Bearer ${token}` } })
  const metrics = async () => {
    const response = await scrape(METRICS_TOKEN)
    expect(response.status).toBe(200)
    expect(response.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/)
    return parsePrometheus(await response.text())
  }
  const chat = (k: string, body: Record<string, unknown>) =>
    fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${k}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "fast", messages: [{ role: "user", content: "hello" }], ...body })
    })

  beforeAll(async () => {
    fake = await startFakeOpenAI({ apiKey: OPENAI_KEY })
    gw = await startGateway(testConfig({
      workspace: { credits: 10_000 },
      limits: { requests_per_minute: 10_000, concurrent_streams: 10 },
      providers: [{ name: "up-openai", kind: "openai", base_url: fake.url, api_key: OPENAI_KEY }],
      models: [{ alias: "fast", id: "gpt-4o-mini-2024-07-18", provider: "up-openai", credits: 3 }],
      telemetry: { metrics_token: METRICS_TOKEN }
    }))
    ;({ key } = await gw.createKey())
    ;({ key: toolsKey } = await gw.createKey({ tools_enabled: true }))
    ;({ key: budgetKey } = await gw.createKey({ budget: { max_requests: 1 } }))
  })

  afterAll(async () => {
    await gw?.close()
    await fake?.close()
  })

  it("wants the configured token, and counts what the traffic did", async () => {
    const missing = await scrape(null)
    expect(missing.status).toBe(401)
    expect(missing.headers.get("www-authenticate")).toBe("Bearer")
    const wrong = await scrape("not-the-token-at-all")
    expect(wrong.status).toBe(401)
    expect(wrong.headers.get("www-authenticate")).toMatch(/^Bearer error="invalid_token"/)
    expect(((await wrong.json()) as { error: string }).error).toBe("unauthorized")

    const before = await metrics()
    expect(before.types.get("modelgate_requests_total")).toBe("counter")
    expect(before.types.get("modelgate_request_duration_seconds")).toBe("histogram")
    expect(before.types.get("modelgate_open_streams")).toBe("gauge")
    // Present at zero before any traffic, so alerts on them have a series from the start.
    expect(before.samples.some((s) => s.name === "modelgate_refusals_total" && s.labels.reason === "budget_exhausted")).toBe(true)
    expect(before.samples.some((s) => s.name === "modelgate_dependency_errors_total" && s.labels.dependency === "store")).toBe(true)
    expect(valueOf(before, "modelgate_requests_total", { route: "/v1/chat/completions" })).toBe(0)

    // A plain chat completion.
    fake.enqueue({ kind: "text", text: "hi there", usage: { input: 11, output: 2 } })
    const plain = await chat(key, {})
    expect(plain.status).toBe(200)

    // A stream, held open between frames so the open-streams gauge can be seen at 1.
    fake.enqueue({ kind: "text", text: "one two three four", usage: { input: 5, output: 4 }, chunkDelayMs: 150 })
    const stream = await chat(key, { stream: true, stream_options: { include_usage: true } })
    expect(stream.status).toBe(200)
    const reader = stream.body!.getReader()
    await reader.read()
    expect(valueOf(await metrics(), "modelgate_open_streams")).toBe(1)
    while (!(await reader.read()).done) { /* drain */ }

    // A refused request: the key's budget allows one request.
    fake.enqueue({ kind: "text", text: "ok", usage: { input: 1, output: 1 } })
    expect((await chat(budgetKey, {})).status).toBe(200)
    const refused = await chat(budgetKey, {})
    expect(refused.status).toBe(429)
    expect(((await refused.json()) as { error: string }).error).toBe("budget_exhausted")

    // An MCP call.
    const mcp = await fetch(`${gw.url}/v1/mcp`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${toolsKey}`,
        "content-type": "application/json",
        accept: "application/json, text/event-stream"
      },
      body: JSON.stringify({
        jsonrpc: "2.0",
        id: 1,
        method: "initialize",
        params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "metrics-test", version: "1" } }
      })
    })
    expect(mcp.status).toBe(200)
    await mcp.text()

    // An unknown path is counted under one label, never under its own.
    expect((await fetch(`${gw.url}/no/such/path/${Date.now()}`)).status).toBe(404)

    // The stream's request ends (and is counted) when its scope closes, just after the last frame.
    let after = await metrics()
    for (let i = 0; i < 50 && valueOf(after, "modelgate_open_streams") !== 0; i++) {
      await new Promise((r) => setTimeout(r, 20))
      after = await metrics()
    }
    expect(valueOf(after, "modelgate_open_streams")).toBe(0)
    const chatRoute = { route: "/v1/chat/completions" }
    expect(valueOf(after, "modelgate_requests_total", { ...chatRoute, status: "200", slug: "" })).toBe(3)
    expect(valueOf(after, "modelgate_requests_total", { ...chatRoute, status: "429", slug: "budget_exhausted" })).toBe(1)
    expect(valueOf(after, "modelgate_refusals_total", { reason: "budget_exhausted" })).toBe(1)
    expect(valueOf(after, "modelgate_requests_total", { route: "/v1/mcp", status: "200" })).toBe(1)
    expect(valueOf(after, "modelgate_requests_total", { route: "unmatched", status: "404", slug: "not_found" })).toBe(1)
    expect(after.samples.some((s) => s.labels.route?.startsWith("/no/such"))).toBe(false)
    // Earlier scrapes are requests too (200 on /metrics, two 401s).
    expect(valueOf(after, "modelgate_requests_total", { route: "/metrics", status: "401", slug: "unauthorized" })).toBe(2)

    // Histograms: one observation per chat request, including the refused one.
    expect(valueOf(after, "modelgate_request_duration_seconds_count", chatRoute)).toBe(4)
    expect(valueOf(after, "modelgate_request_duration_seconds_bucket", { ...chatRoute, le: "+Inf" })).toBe(4)
    // Upstream time to first byte: one per upstream call (three reached the provider).
    expect(valueOf(after, "modelgate_upstream_first_byte_seconds_count", { provider: "up-openai" })).toBe(3)

    // Tokens and credits, by the model the alias resolved to and its provider: what the audit trail says.
    const usage = { model: "gpt-4o-mini-2024-07-18", provider: "up-openai" }
    await Effect.runPromise(gw.audit.flush)
    const page = await Effect.runPromise(gw.store.audit.queryAudit({ limit: 100 }))
    const chats = page.items.filter((r) => r.endpoint === "/v1/chat/completions")
    const sum = (f: (r: (typeof chats)[number]) => number | null) => chats.reduce((n, r) => n + (f(r) ?? 0), 0)
    expect(valueOf(after, "modelgate_tokens_total", { ...usage, direction: "prompt" })).toBe(sum((r) => r.prompt_tokens))
    expect(valueOf(after, "modelgate_tokens_total", { ...usage, direction: "completion" })).toBe(sum((r) => r.completion_tokens))
    expect(valueOf(after, "modelgate_tokens_total", { ...usage, direction: "prompt" })).toBe(11 + 5 + 1)
    expect(valueOf(after, "modelgate_credits_total", usage)).toBe(sum((r) => r.credits))
    expect(valueOf(after, "modelgate_credits_total", usage)).toBe(9)

    // Audit buffer gauges are present; nothing was dropped.
    expect(after.types.get("modelgate_audit_buffered_records")).toBe("gauge")
    expect(valueOf(after, "modelgate_audit_dropped_records_total")).toBe(0)
    expect(valueOf(after, "modelgate_dependency_errors_total")).toBe(0)
  })
})
