/**
 * One structured log line per request at info (issue 16): the real `modelgate serve` with
 * `log.format: json`, its stdout captured and parsed line by line. Each request's line names the
 * request, key, route, model, status, slug and duration, and nothing a client sent: not the
 * key (valid or not), not the body, not the message content.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { join } from "node:path"
import { startFakeOpenAI, type FakeUpstream } from "../support/fake-openai.ts"
import { runCli, serveInProcess, spawnGateway, tempDir, writeConfig, type GatewayProcess } from "../support/process.ts"

const SECRET_CONTENT = "the-launch-code-is-7731-zebra"
const WRONG_KEY = "sk-mg-this-key-does-not-exist-0123456789"

/** A flat line: its own keys and the annotations side by side. */
interface LogLine extends Record<string, unknown> {
  readonly message: unknown
  readonly level: string
  readonly time: string
}

describe("the request log", () => {
  let dir: string
  let configPath: string
  let gateway: GatewayProcess
  let key: string
  let upstream: FakeUpstream

  beforeAll(async () => {
    dir = tempDir("modelgate-log-")
    upstream = await startFakeOpenAI({ apiKey: "the-right-provider-key" })
    configPath = writeConfig(dir, {
      store: `sqlite:${join(dir, "store.db")}`,
      admin: { token: "log-test-admin-token-0123" },
      log: { level: "info", format: "json" },
      // A provider configured with a wrong key: it answers 401 to every call.
      providers: [{ name: "misconfigured", kind: "openai", base_url: upstream.url, api_key: "a-wrong-provider-key" }],
      models: [
        { alias: "echo", id: "echo-1", provider: "echo", credits: 0 },
        { alias: "upstream", id: "gpt-4o-mini-2024-07-18", provider: "misconfigured", credits: 0 }
      ]
    })
    const created = await runCli(["--config", configPath, "keys", "create", "--name", "logs"])
    expect(created.code).toBe(0)
    key = (JSON.parse(created.stdout) as { key: string }).key
    gateway = await spawnGateway(configPath)
  }, 30_000)

  afterAll(async () => {
    await gateway?.stop()
    await upstream?.close()
  })

  it("is one JSON line per request with identifiers only, never the key, the body or the content", async () => {
    const answered = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "echo", messages: [{ role: "user", content: SECRET_CONTENT }] })
    })
    expect(answered.status).toBe(200)
    expect(JSON.stringify(await answered.json())).toContain(SECRET_CONTENT)
    const okId = answered.headers.get("x-request-id")!

    const refused = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${WRONG_KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "echo", messages: [{ role: "user", content: SECRET_CONTENT }] })
    })
    expect(refused.status).toBe(401)
    const refusedId = refused.headers.get("x-request-id")!

    const providerRefused = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "upstream", messages: [{ role: "user", content: SECRET_CONTENT }] })
    })
    expect(providerRefused.status).toBe(502)
    const envelope = (await providerRefused.json()) as { error: string; details: { provider: string; upstream_status: number } }
    expect(envelope).toMatchObject({ error: "provider_error", details: { provider: "misconfigured", upstream_status: 401 } })
    const providerRefusedId = providerRefused.headers.get("x-request-id")!
    // The audit record keeps it too (written off the request path: waited for).
    let audited: { details: Record<string, unknown> } | undefined
    for (const until = Date.now() + 5_000; audited === undefined && Date.now() < until;) {
      const page = await fetch(`${gateway.url}/audit?error=provider_error`, { headers: { authorization: "Bearer log-test-admin-token-0123" } })
      audited = ((await page.json()) as { data: Array<{ request_id: string; details: Record<string, unknown> }> }).data
        .find((record) => record.request_id === providerRefusedId)
      if (audited === undefined) await new Promise((r) => setTimeout(r, 50))
    }
    expect(audited?.details).toMatchObject({ upstream_status: 401 })

    // Lines are written as requests end; give the process a moment, then stop it.
    const deadline = Date.now() + 5_000
    while (![refusedId, providerRefusedId].every((id) => gateway.output().includes(id)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50))
    expect(await gateway.stop()).toBe(0)

    const output = gateway.output()
    const lines = output.split("\n").filter((line) => line.trim() !== "")
    // Every line is one JSON object: a log collector can take the stream as it is.
    const parsed = lines.map((line) => JSON.parse(line) as LogLine)
    // Flat: no nested annotations, no fiber ids or log spans; every line says when and how bad.
    for (const line of parsed) {
      expect(line).not.toHaveProperty("annotations")
      expect(line).not.toHaveProperty("fiberId")
      expect(line).not.toHaveProperty("spans")
      expect(Number.isNaN(Date.parse(line.time))).toBe(false)
      expect(["DEBUG", "INFO", "WARN", "ERROR", "FATAL"]).toContain(line.level)
      for (const value of Object.values(line)) if (typeof value === "object" && value !== null) expect(Array.isArray(value)).toBe(true)
    }
    const requests = parsed.filter((line) => line.message === "request" && line.route === "/v1/chat/completions")
    expect(requests).toHaveLength(3)

    const ok = requests.find((line) => line.request_id === okId)!
    expect(ok.level).toBe("INFO")
    expect(ok).toMatchObject({
      request_id: okId,
      method: "POST",
      route: "/v1/chat/completions",
      model: "echo-1",
      status: 200
    })
    // A success has no slug: the field is left out, not written as null.
    expect(ok).not.toHaveProperty("slug")
    expect(ok.key_id).toMatch(/^key_/)
    expect(ok).toMatchObject({ provider: "echo" })
    expect(typeof ok.prompt_tokens).toBe("number")
    expect(typeof ok.completion_tokens).toBe("number")
    expect(typeof ok.duration_ms).toBe("number")

    const bad = requests.find((line) => line.request_id === refusedId)!
    expect(bad).toMatchObject({ status: 401, slug: "unauthorized", key_id: null, route: "/v1/chat/completions" })

    // A provider's refusal (here its 401: a wrong provider key) names the provider and its status,
    // as the client's envelope does, so the line says whose fault the 502 is.
    const upstreamLine = requests.find((line) => line.request_id === providerRefusedId)!
    expect(upstreamLine).toMatchObject({ status: 502, slug: "provider_error", provider: "misconfigured", upstream_status: 401, level: "ERROR" })

    // Redaction: nothing the clients sent that is secret or content shows up anywhere in the log.
    expect(output).not.toContain(key)
    expect(output).not.toContain(key.slice(6, 20))
    expect(output).not.toContain(WRONG_KEY)
    expect(output).not.toContain(SECRET_CONTENT)
    expect(output).not.toContain("messages")
  }, 30_000)

  it("in the pretty format, leaves the slug out of a success and names it on an error", async () => {
    const pretty = writeConfig(tempDir("modelgate-log-pretty-"), { store: "sqlite::memory:", admin: { token: "log-test-admin-token-0123" }, log: { level: "info" } })
    const gw = await serveInProcess(["--config", pretty, "serve", "--port", "0"])
    let output: string
    try {
      const ok = await fetch(`${gw.url}/healthz`)
      const missing = await fetch(`${gw.url}/no-such-path`)
      const ids = [ok.headers.get("x-request-id")!, missing.headers.get("x-request-id")!]
      const deadline = Date.now() + 5_000
      while (!ids.every((id) => gw.output().includes(id)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 25))
      output = gw.output()
      const lineOf = (id: string) => output.split("\n").find((line) => line.includes(` request request_id=${id} `))!
      expect(lineOf(ids[0]!)).toMatch(/ status=200 /)
      expect(lineOf(ids[0]!)).not.toContain("slug=")
      expect(lineOf(ids[1]!)).toMatch(/ status=404 slug=not_found /)
    } finally {
      await gw.stop()
    }
    expect(output).not.toContain("slug=null")
  })
})
