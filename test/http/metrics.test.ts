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

/**
 * What `promtool check metrics` reports (Prometheus' promlint, and its text parser's refusals),
 * as a list of problems: a HELP or TYPE given twice, a metric without help, a counter not ending
 * in _total or another type ending in it, a non-histogram named like a histogram's series,
 * reserved labels, a type's name in the metric's, a colon, camel case, units not in base form
 * or abbreviated.
 */
const promtoolProblems = (text: string): Array<string> => {
  const problems: Array<string> = []
  const help = new Map<string, string>()
  const types = new Map<string, string>()
  const labelsOf = new Map<string, Set<string>>()
  for (const line of text.split("\n")) {
    const comment = /^# (HELP|TYPE) (\S+) ?(.*)$/.exec(line)
    if (comment) {
      const [, kind, name, rest] = comment as unknown as [string, string, string, string]
      const seen = kind === "HELP" ? help : types
      if (seen.has(name)) problems.push(`${name}: second ${kind} line`)
      seen.set(name, rest)
      continue
    }
    const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? /.exec(line)
    if (sample) {
      const family = [...types.keys()].reverse().find((n) => sample[1] === n || sample[1]!.startsWith(`${n}_`)) ?? sample[1]!
      const names = labelsOf.get(family) ?? new Set<string>()
      for (const m of (sample[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="/g)) names.add(m[1]!)
      labelsOf.set(family, names)
    }
  }
  const nonBase: Record<string, string> = {
    milliseconds: "seconds", microseconds: "seconds", nanoseconds: "seconds", minutes: "seconds", hours: "seconds", days: "seconds",
    weeks: "seconds", kilobytes: "bytes", megabytes: "bytes", gigabytes: "bytes", terabytes: "bytes", kilograms: "grams",
    kilometers: "meters", percent: "ratio", fahrenheit: "celsius"
  }
  // promlint's own list.
  const abbreviations = ["s", "ms", "us", "ns", "sec", "b", "kb", "mb", "gb", "tb", "pb", "m", "h", "d"]
  for (const [name, type] of types) {
    if ((help.get(name) ?? "") === "") problems.push(`${name}: no help text`)
    if (type === "counter" && !name.endsWith("_total")) problems.push(`${name}: counter metrics should have "_total" suffix`)
    if (type !== "counter" && name.endsWith("_total")) problems.push(`${name}: non-counter metrics should not have "_total" suffix`)
    if (type !== "histogram" && type !== "summary" && /_(bucket|count|sum)$/.test(name)) problems.push(`${name}: non-histogram and non-summary metrics should not have a histogram series' suffix`)
    const labels = labelsOf.get(name) ?? new Set()
    if (type !== "histogram" && labels.has("le")) problems.push(`${name}: non-histogram metrics should not have "le" label`)
    if (type !== "summary" && labels.has("quantile")) problems.push(`${name}: non-summary metrics should not have "quantile" label`)
    for (const t of ["counter", "gauge", "histogram", "summary", "untyped"]) {
      if (name.includes(`_${t}_`) || name.endsWith(`_${t}`)) problems.push(`${name}: metric name should not include type '${t}'`)
    }
    if (name.includes(":")) problems.push(`${name}: metric names should not contain ':'`)
    if (/[A-Z]/.test(name)) problems.push(`${name}: metric names should be written in 'snake_case' not 'camelCase'`)
    for (const label of labels) if (/[A-Z]/.test(label)) problems.push(`${name}: label names should be written in 'snake_case' not 'camelCase'`)
    const tokens = name.split("_")
    for (const token of tokens) {
      if (token in nonBase) problems.push(`${name}: use base unit "${nonBase[token]}" instead of "${token}"`)
      if (abbreviations.includes(token)) problems.push(`${name}: metric names should not contain abbreviated units`)
    }
  }
  return problems
}

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
    // The gauge drops first and the request is counted a few finalizers later (after its slot and
    // charge are settled), so both are waited for: on a loaded machine a scrape can fall between.
    const chatRoute = { route: "/v1/chat/completions" }
    const streamCounted = (m: Awaited<ReturnType<typeof metrics>>) =>
      valueOf(m, "modelgate_open_streams") === 0 && valueOf(m, "modelgate_request_duration_seconds_count", chatRoute) === 4
    let after = await metrics()
    for (const deadline = Date.now() + 5000; !streamCounted(after) && Date.now() < deadline;) {
      await new Promise((r) => setTimeout(r, 20))
      after = await metrics()
    }
    expect(valueOf(after, "modelgate_open_streams")).toBe(0)
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
    // The store holds micro-credits (issue 33); the counter counts credits.
    expect(valueOf(after, "modelgate_credits_total", usage)).toBe(sum((r) => r.credits) / 1_000_000)
    expect(valueOf(after, "modelgate_credits_total", usage)).toBe(9)

    // OpenTelemetry's GenAI metrics, from the same records: tokens by type, and the model requests' durations.
    const genAi = { gen_ai_operation_name: "chat", gen_ai_provider_name: "up-openai", gen_ai_request_model: "gpt-4o-mini-2024-07-18" }
    expect(after.types.get("gen_ai_client_token_usage")).toBe("histogram")
    expect(valueOf(after, "gen_ai_client_token_usage_sum", { ...genAi, gen_ai_token_type: "input" })).toBe(sum((r) => r.prompt_tokens))
    expect(valueOf(after, "gen_ai_client_token_usage_sum", { ...genAi, gen_ai_token_type: "output" })).toBe(sum((r) => r.completion_tokens))
    expect(valueOf(after, "gen_ai_client_token_usage_count", { ...genAi, gen_ai_token_type: "input" })).toBe(3)
    expect(after.types.get("gen_ai_server_request_duration_seconds")).toBe("histogram")
    expect(valueOf(after, "gen_ai_server_request_duration_seconds_count", { ...genAi, error_type: "" })).toBe(3)

    // Audit buffer gauges are present; nothing was dropped.
    expect(after.types.get("modelgate_audit_buffered_records")).toBe("gauge")
    expect(valueOf(after, "modelgate_audit_dropped_records_total")).toBe(0)
    expect(valueOf(after, "modelgate_dependency_errors_total")).toBe(0)
  })

  it("passes promtool's lint: Node's default metrics and the gateway's own", async () => {
    const response = await scrape(METRICS_TOKEN)
    expect(response.status).toBe(200)
    const text = await response.text()
    // The defaults are there (so the check covers them), and the lint finds nothing.
    expect(text).toContain("# TYPE nodejs_active_handles gauge")
    expect(text).toContain("# TYPE process_cpu_seconds_total counter")
    expect(text).toContain("# TYPE gen_ai_client_token_usage histogram")
    expect(promtoolProblems(text)).toEqual([])
    // The lint itself finds what promtool would.
    expect(promtoolProblems("# HELP a_total x\n# TYPE a_total gauge\n# HELP a_total y\n# TYPE calls counter\n")).toEqual([
      "a_total: second HELP line",
      `a_total: non-counter metrics should not have "_total" suffix`,
      "calls: no help text",
      `calls: counter metrics should have "_total" suffix`
    ])
  })
})
