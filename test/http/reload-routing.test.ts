/**
 * Config reload applies `routing`, `count_tokens`, `responses` and the per-request parts of `mcp`
 * live (issue 26), as it does limits: the gateway runs in this process, its "file" is an object
 * the test rewrites, and `POST /admin/reload` reads it again as a SIGHUP would. What a client
 * sees: a request the old `routing.retries` answered with 502 is answered after a reload raises
 * them (and 502 again once lowered); the router's cooldowns and latency stats outlive a reload,
 * and a changed strategy decides the next pick; a count is priced from the next request on; a
 * turned-off store refuses the next continuation; an origin allowed by a reload reaches MCP; and
 * a setting that still needs a restart (`server.port`, `mcp.session_ttl_seconds`) is named in
 * the 409 with nothing of the same file applied.
 */
import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ProviderError } from "../../src/domain/errors.ts"
import { isLive } from "../../src/services/config/ConfigReload.ts"
import { type ScriptedCall, scriptedProviders } from "../../src/services/providers/scripted.ts"
import type { ChatResponse } from "../../src/wire/openai-chat.ts"
import type { TestGateway } from "../support/gateway.ts"
import { type ConfigFile, type Reload, reloadableGateway } from "../support/reloadable.ts"
import { chatCompletion } from "../support/chat-answers.ts"

const completion = (text: string) => chatCompletion(text, { id: "chatcmpl-r", usage: [3, 2] })

const unavailable = (provider: string) =>
  new ProviderError({
    message: `provider "${provider}" answered 503`,
    details: { provider, upstream_status: 503, upstream_error: { message: "boom" } }
  })

const duo = (alias: string, first: string, second: string) => ({
  alias,
  id: `${alias}-model`,
  deployments: [{ provider: first }, { provider: second }],
  credits: 0,
  max_tokens: 100
})

const chatTo = (gw: TestGateway, key: string, model: string, user: string) =>
  fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, user, messages: [{ role: "user", content: "hi" }] })
  })

describe("reload: routing.retries", () => {
  let gw: TestGateway
  let reload: Reload
  /** Requests (by their `user`) whose first attempt already failed: each request fails once, on whichever deployment it met first. */
  const failedOnce = new Set<string>()
  const file = (routing: Record<string, unknown>, extra: ConfigFile = {}): ConfigFile => ({
    providers: ["r1", "r2", "down", "spare"].map((name) => ({ name, kind: "openai", base_url: "http://scripted.invalid/v1" })),
    models: [
      duo("flaky", "r1", "r2"),
      { alias: "alone", id: "alone-model", provider: "down", credits: 0, max_tokens: 100 },
      { alias: "spare", id: "spare-model", provider: "spare", credits: 0, max_tokens: 100 }
    ],
    limits: { requests_per_minute: 1000 },
    routing,
    ...extra
  })
  // No cooldown: which deployment a request meets first does not depend on the ones before it.
  const routing = (retries: number) => ({ retries, cooldown_seconds: 0, backoff_ms: 1 })

  beforeAll(async () => {
    const scripted = scriptedProviders(["r1", "r2", "down", "spare"].map((name) => ({ name, kind: "openai" as const })), {
      openai: (call: ScriptedCall) => {
        if (call.provider === "down") return { fail: unavailable("down") }
        if (call.provider === "spare") return { respond: completion("from spare") }
        const user = String(call.body["user"])
        if (failedOnce.has(user)) return { respond: completion(`from ${call.provider}`) }
        failedOnce.add(user)
        return { fail: unavailable(call.provider) }
      }
    })
    ;({ gateway: gw, reload } = await reloadableGateway(file(routing(0)), { providers: scripted.layer }))
  })
  afterAll(() => gw?.close())

  it("a provider failing once is answered 502 without retries, 200 once a reload allows two, and 502 again once lowered", async () => {
    const { key } = await gw.createKey()
    const first = await chatTo(gw, key, "flaky", "u1")
    expect(first.status).toBe(502)
    expect(await first.json()).toMatchObject({ error: "provider_error" })

    const raised = await reload(file(routing(2)))
    expect(raised.status, JSON.stringify(raised.body)).toBe(200)
    expect(raised.body).toMatchObject({ reloaded: true, changed: ["routing.retries"] })
    const retried = await chatTo(gw, key, "flaky", "u2")
    expect(retried.status).toBe(200)
    expect(((await retried.json()) as ChatResponse).choices[0]!.message.content).toMatch(/^from r[12]$/)

    expect((await reload(file(routing(0)))).status).toBe(200)
    expect((await chatTo(gw, key, "flaky", "u3")).status).toBe(502)
  })

  it("a model failing alone is answered by routing.default_fallbacks once a reload names one", async () => {
    const { key } = await gw.createKey()
    expect((await chatTo(gw, key, "alone", "f1")).status).toBe(502)
    const named = await reload(file({ ...routing(0), default_fallbacks: ["spare"] }))
    expect(named.status, JSON.stringify(named.body)).toBe(200)
    expect(named.body.changed).toEqual(["routing.default_fallbacks"])
    const answered = await chatTo(gw, key, "alone", "f2")
    expect(answered.status).toBe(200)
    expect(((await answered.json()) as ChatResponse).choices[0]!.message.content).toBe("from spare")
    expect((await reload(file(routing(0)))).status).toBe(200)
    expect((await chatTo(gw, key, "alone", "f3")).status).toBe(502)
  })

  it("a reload also changing server.port or mcp.session_ttl_seconds is refused naming them, and its routing is not applied", async () => {
    const { key } = await gw.createKey()
    const refused = await reload(file(routing(2), { server: { host: "127.0.0.1", port: 1 }, mcp: { session_ttl_seconds: 60 } }))
    expect(refused.status).toBe(409)
    expect(refused.body.error).toBe("conflict")
    expect([...refused.body.details.restart_required].sort()).toEqual(["mcp.session_ttl_seconds", "server.port"])
    expect(refused.body.message).toContain("server.port")
    expect(refused.body.message).toContain("mcp.session_ttl_seconds")
    // Still no retries: the refused file's routing did not apply.
    expect((await chatTo(gw, key, "flaky", "u4")).status).toBe(502)
  })
})

describe("reload: what the router remembers", () => {
  let gw: TestGateway
  let reload: Reload
  let calls: ReturnType<typeof scriptedProviders>["calls"]
  /** The first of `bad1`/`bad2` to be called fails from then on; the other answers. */
  let broken: string | undefined
  const callsTo = (provider: string) => calls.filter((c) => c.provider === provider).length
  const PROVIDERS = ["fast", "slow", "bad1", "bad2"]
  const file = (routing: Record<string, unknown>): ConfigFile => ({
    providers: PROVIDERS.map((name) => ({ name, kind: "openai", base_url: "http://scripted.invalid/v1" })),
    models: [duo("pair", "fast", "slow"), duo("cooling", "bad1", "bad2")],
    limits: { requests_per_minute: 1000 },
    routing: { cooldown_seconds: 600, backoff_ms: 1, allowed_fails: 0, ...routing }
  })

  beforeAll(async () => {
    const scripted = scriptedProviders(PROVIDERS.map((name) => ({ name, kind: "openai" as const })), {
      openai: (call) => {
        switch (call.provider) {
          case "fast":
            return { respond: completion("fast") }
          case "slow":
            return { respond: completion("slow"), delay: "40 millis" }
          default:
            broken ??= call.provider
            return broken === call.provider ? { fail: unavailable(call.provider) } : { respond: completion(call.provider) }
        }
      }
    })
    calls = scripted.calls
    ;({ gateway: gw, reload } = await reloadableGateway(file({ strategy: "weighted", retries: 2 }), { providers: scripted.layer }))
  })
  afterAll(() => gw?.close())

  it("a deployment cooling down stays out after a reload of routing, and a changed strategy decides the next pick from the latencies measured before it", async () => {
    const { key } = await gw.createKey()
    // The first deployment met fails and cools down (600 s); the request is answered by the other.
    expect((await chatTo(gw, key, "cooling", "c0")).status).toBe(200)
    expect(broken).toBeDefined()
    expect(callsTo(broken!)).toBe(1)
    // Weighted picks until both of the pair have answered once (so both have a latency).
    for (let i = 0; i < 200 && (callsTo("fast") === 0 || callsTo("slow") === 0); i++) {
      expect((await chatTo(gw, key, "pair", `p${i}`)).status).toBe(200)
    }
    expect(callsTo("fast")).toBeGreaterThan(0)
    expect(callsTo("slow")).toBeGreaterThan(0)

    // No retries from now on: a request that met the cooling deployment would be answered 502.
    const applied = await reload(file({ strategy: "latency", retries: 0 }))
    expect(applied.status, JSON.stringify(applied.body)).toBe(200)
    expect(applied.body.changed).toEqual(["routing.retries", "routing.strategy"])

    for (let i = 0; i < 10; i++) expect((await chatTo(gw, key, "cooling", `c${i + 1}`)).status).toBe(200)
    expect(callsTo(broken!)).toBe(1)

    // Lowest measured latency: every request goes to `fast` (forgotten latencies would have sent the first to either).
    const slowBefore = callsTo("slow")
    for (let i = 0; i < 10; i++) {
      const answered = await chatTo(gw, key, "pair", `q${i}`)
      expect(answered.status).toBe(200)
      expect(((await answered.json()) as ChatResponse).choices[0]!.message.content).toBe("fast")
    }
    expect(callsTo("slow")).toBe(slowBefore)
  })
})

describe("reload: count_tokens, responses and mcp", () => {
  let gw: TestGateway
  let reload: Reload
  const POOL = 1000
  const file = (extra: ConfigFile = {}): ConfigFile => ({
    workspace: { credits: POOL },
    providers: [{ name: "echo", kind: "echo" }],
    models: [{ alias: "echo", id: "echo-1", provider: "echo", credits: 0 }],
    limits: { requests_per_minute: 1000 },
    ...extra
  })
  beforeAll(async () => {
    ;({ gateway: gw, reload } = await reloadableGateway(file()))
  })
  afterAll(() => gw?.close())

  const balance = async () => (await Effect.runPromise(gw.store.credits.getWorkspace)).credits / 1_000_000 // credits (the store holds micro-credits, issue 33)

  it("a count is free until a reload prices it, and priced from the next request on", async () => {
    const { key } = await gw.createKey()
    const count = () =>
      fetch(`${gw.url}/v1/messages/count_tokens`, {
        method: "POST",
        headers: { "x-api-key": key, "content-type": "application/json", "anthropic-version": "2023-06-01" },
        body: JSON.stringify({ model: "echo", messages: [{ role: "user", content: "hello there" }] })
      })
    const before = await balance()
    expect((await count()).status).toBe(200)
    expect(await balance()).toBe(before)

    const priced = await reload(file({ count_tokens: { credits: 3 } }))
    expect(priced.status, JSON.stringify(priced.body)).toBe(200)
    expect(priced.body.changed).toEqual(["count_tokens.credits"])
    expect((await count()).status).toBe(200)
    expect(await balance()).toBe(before - 3)
    expect((await reload(file())).status).toBe(200)
    expect((await count()).status).toBe(200)
    expect(await balance()).toBe(before - 3)
  })

  it("storing turned off by a reload refuses the next continuation by name; turned back on, the stored response is there again", async () => {
    const { key } = await gw.createKey()
    const create = (body: Record<string, unknown>) =>
      fetch(`${gw.url}/v1/responses`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "echo", ...body })
      })
    const created = await create({ input: "remember me" })
    expect(created.status).toBe(200)
    const first = await created.json() as { id: string; store: boolean }
    expect(first.store).toBe(true)

    const off = await reload(file({ responses: { store: false } }))
    expect(off.status, JSON.stringify(off.body)).toBe(200)
    expect(off.body.changed).toEqual(["responses.store"])
    const refused = await create({ input: "next", previous_response_id: first.id })
    expect(refused.status).toBe(400)
    expect(await refused.json()).toMatchObject({ error: "validation_failed", details: { field: "previous_response_id" } })
    const unstored = await create({ input: "not kept" })
    expect(unstored.status).toBe(200)
    expect((await unstored.json() as { store?: boolean }).store).not.toBe(true)

    expect((await reload(file())).status).toBe(200)
    expect((await create({ input: "next", previous_response_id: first.id })).status).toBe(200)
  })

  it("an origin a reload allows reaches /v1/mcp as a request without one does", async () => {
    const { key } = await gw.createKey()
    const mcp = (headers: Record<string, string>) =>
      fetch(`${gw.url}/v1/mcp`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json", accept: "application/json, text/event-stream", ...headers },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" })
      })
    const origin = "https://tools.example"
    const refused = await mcp({ origin })
    expect(refused.status).toBe(403)
    expect(await refused.json()).toMatchObject({ error: "scope_violation", details: { origin } })

    const allowed = await reload(file({ mcp: { allowed_origins: [origin] } }))
    expect(allowed.status, JSON.stringify(allowed.body)).toBe(200)
    expect(allowed.body.changed).toEqual(["mcp.allowed_origins"])
    const without = await mcp({})
    const withOrigin = await mcp({ origin })
    expect(withOrigin.status).toBe(without.status)
    expect((await withOrigin.json() as { error?: string }).error).toBe((await without.json() as { error?: string }).error)
    expect((await reload(file())).status).toBe(200)
  })
})

describe("reload: which settings are live", () => {
  it("the per-request settings are; what is built into long-lived parts at start is not, a setting named like a live one included", () => {
    const live = ["routing.retries", "routing.strategy", "count_tokens.credits", "responses.store", "moderations.provider", "mcp.credits_per_tool_call", "mcp.allowed_origins", "mcp.max_statement_bytes", "mcp.max_result_bytes", "limits.requests_per_minute", "auth.oidc", "models", "providers"]
    const restart = ["server.port", "store", "redis", "admin.token", "connections", "mcp.session_ttl_seconds", "mcp.max_rows_cap", "mcp.timeout_ms_cap", "mcp.max_result_bytes_in_flight", "mcp.guard_timeout_ms", "credits.block_size", "store_timeouts.call_ms", "audit.batch_size", "telemetry.otlp_endpoint", "log.level", "workspace.credits"]
    expect(live.filter((name) => !isLive(name))).toEqual([])
    expect(restart.filter(isLive)).toEqual([])
  })
})
