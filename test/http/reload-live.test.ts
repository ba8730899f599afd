/**
 * Config reload applies limits and identity-provider policies live (issue 26): the gateway runs
 * in this process, its "file" is an object the test rewrites, and `POST /admin/reload` reads it
 * again the way a SIGHUP would. What a client sees: a key refused at its per-minute limit passes
 * after a reload raises it, a lowered limit applies to the next request, the same token may do
 * more (or nothing) once its issuer's policy changed, a change that needs a restart is refused
 * by name and changes nothing, and a request under way during a reload completes.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { scriptedProviders } from "../../src/services/providers/scripted.ts"
import type { ChatChunk, ChatResponse } from "../../src/wire/openai-chat.ts"
import type { TestGateway } from "../support/gateway.ts"
import { type ConfigFile, type Reload, reloadableGateway } from "../support/reloadable.ts"
import { startTestIssuer, type TestIssuer } from "../support/oidc-issuer.ts"
import { REDIS_URL } from "../limits/support.ts"
import { chatCompletion } from "../support/chat-answers.ts"

const echoFile = (extra: ConfigFile = {}): ConfigFile => ({
  providers: [{ name: "echo", kind: "echo" }],
  models: [{ id: "echo", provider: "echo" }, { id: "other", provider: "echo" }],
  ...extra
})

const chatBody = (model: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ model, messages: [{ role: "user", content: "hello" }], ...extra })

describe("reload: limits", () => {
  let gw: TestGateway
  let reload: Reload
  beforeAll(async () => {
    ;({ gateway: gw, reload } = await reloadableGateway(echoFile({ limits: { requests_per_minute: 2 } })))
  })
  afterAll(() => gw?.close())

  it("a key at its per-minute limit passes once a reload raises it, and a lowered limit applies to the next request", async () => {
    const { key } = await gw.createKey()
    const list = () => fetch(`${gw.url}/v1/models`, { headers: { "x-api-key": key } })
    expect((await list()).status).toBe(200)
    expect((await list()).status).toBe(200)
    const refused = await list()
    expect(refused.status).toBe(429)
    expect(refused.headers.get("x-ratelimit-limit")).toBe("2")

    const raised = await reload(echoFile({ limits: { requests_per_minute: 5 } }))
    expect(raised.status, JSON.stringify(raised.body)).toBe(200)
    expect(raised.body).toMatchObject({ reloaded: true, changed: ["limits.requests_per_minute"] })
    // The two requests already spent are kept (nothing is reset): 5 - 2 - this one = 2 left.
    const passed = await list()
    expect(passed.status).toBe(200)
    expect(passed.headers.get("x-ratelimit-limit")).toBe("5")
    expect(passed.headers.get("x-ratelimit-remaining")).toBe("2")

    // Three of five spent; lowered to three: none left for the next request.
    expect((await reload(echoFile({ limits: { requests_per_minute: 3 } }))).status).toBe(200)
    const lowered = await list()
    expect(lowered.status).toBe(429)
    expect(lowered.headers.get("x-ratelimit-limit")).toBe("3")
    expect(await lowered.json()).toMatchObject({ error: "rate_limited", details: { limit: "requests_per_minute", requests_per_minute: 3 } })
  })

  it("a lowered body size limit applies to the next request", async () => {
    const { key } = await gw.createKey({ limits: { requests_per_minute: 100 } })
    const chat = () =>
      fetch(`${gw.url}/v1/chat/completions`, {
        method: "POST",
        headers: { "x-api-key": key, "content-type": "application/json" },
        body: chatBody("echo", { user: "x".repeat(400) })
      })
    expect((await chat()).status).toBe(200)
    expect((await reload(echoFile({ limits: { requests_per_minute: 3, max_body_bytes: 300 } }))).status).toBe(200)
    const tooLarge = await chat()
    expect(tooLarge.status).toBe(413)
    expect((await reload(echoFile({ limits: { requests_per_minute: 3 } }))).status).toBe(200)
    expect((await chat()).status).toBe(200)
  })

  it("a reload changing the listen port or the store is refused by name, and the limits in the same file are not applied", async () => {
    const { key } = await gw.createKey()
    const refused = await reload(echoFile({
      server: { host: "127.0.0.1", port: 1 },
      store: "sqlite::memory:?other",
      limits: { requests_per_minute: 40 }
    }))
    expect(refused.status).toBe(409)
    expect(refused.body.error).toBe("conflict")
    expect(refused.body.details.restart_required).toEqual(expect.arrayContaining(["server.port", "store"]))
    expect(refused.body.details.restart_required).not.toContain("limits.requests_per_minute")
    expect(refused.body.message).toContain("server.port")
    const after = await fetch(`${gw.url}/v1/models`, { headers: { "x-api-key": key } })
    expect(after.status).toBe(200)
    expect(after.headers.get("x-ratelimit-limit")).toBe("3")
  })
})

describe("reload: limits kept in Redis", () => {
  let gw: TestGateway
  let reload: Reload
  const file = (limits: Record<string, unknown>) => echoFile({ redis: REDIS_URL, limits })
  beforeAll(async () => {
    ;({ gateway: gw, reload } = await reloadableGateway(file({ requests_per_minute: 2, stream_lease_seconds: 30 })))
  })
  afterAll(() => gw?.close())

  it("the shared rate state is rescaled, not reset, by a raised and then a lowered limit", async () => {
    const { key } = await gw.createKey()
    const list = () => fetch(`${gw.url}/v1/models`, { headers: { "x-api-key": key } })
    expect((await list()).status).toBe(200)
    expect((await list()).status).toBe(200)
    expect((await list()).status).toBe(429)
    const raised = await reload(file({ requests_per_minute: 5, stream_lease_seconds: 10 }))
    expect(raised.status, JSON.stringify(raised.body)).toBe(200)
    expect(raised.body.changed).toEqual(["limits.requests_per_minute", "limits.stream_lease_seconds"])
    const passed = await list()
    expect(passed.status).toBe(200)
    expect(passed.headers.get("x-ratelimit-remaining")).toBe("2")
    expect((await reload(file({ requests_per_minute: 3, stream_lease_seconds: 10 }))).status).toBe(200)
    expect((await list()).status).toBe(429)
  })
})

const completion = chatCompletion("slow answer", { id: "chatcmpl-r", usage: [3, 2] })

const chunk = (content: string, finish: string | null = null): ChatChunk =>
  ({ id: "chatcmpl-r", object: "chat.completion.chunk", created: 1, model: "up", choices: [{ index: 0, delta: { content }, logprobs: null, finish_reason: finish }] }) as ChatChunk

describe("reload: requests under way", () => {
  let gw: TestGateway
  let reload: Reload
  /** Resolved when the provider was called: the request is under way. */
  let called: () => void = () => {}
  const file = (extra: ConfigFile = {}): ConfigFile => ({
    providers: [{ name: "up", kind: "openai", base_url: "http://scripted.invalid/v1" }],
    models: [{ alias: "slow", id: "up-model", provider: "up", credits: 1 }, { alias: "fast", id: "up-fast", provider: "up", credits: 1 }],
    ...extra
  })
  beforeAll(async () => {
    const scripted = scriptedProviders([{ name: "up", kind: "openai" }], {
      openai: (call) => {
        if (call.body["model"] === "up-fast") return { respond: completion }
        called()
        return call.stream
          ? { events: [{ event: chunk("one ") }, { delay: "1500 millis" }, { event: chunk("two", "stop") }] }
          : { respond: completion, delay: "1500 millis" }
      }
    })
    ;({ gateway: gw, reload } = await reloadableGateway(file({ limits: { requests_per_minute: 100, concurrent_streams: 2 } }), { providers: scripted.layer }))
  })
  afterAll(() => gw?.close())

  const chat = (key: string, model: string, stream = false) =>
    fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "x-api-key": key, "content-type": "application/json" },
      body: chatBody(model, { stream })
    })

  it("a request under way when its model is removed and its limits lowered completes; the next one sees the change", async () => {
    const { key } = await gw.createKey()
    const started = new Promise<void>((resolve) => (called = resolve))
    const pending = chat(key, "slow")
    await started
    const applied = await reload(file({ models: [{ alias: "fast", id: "up-fast", provider: "up", credits: 1 }], limits: { requests_per_minute: 100, concurrent_streams: 1 } }))
    expect(applied.status, JSON.stringify(applied.body)).toBe(200)
    const answered = await pending
    expect(answered.status).toBe(200)
    expect(((await answered.json()) as ChatResponse).choices[0]!.message.content).toBe("slow answer")
    expect((await chat(key, "slow")).status).toBe(404)
    expect((await reload(file({ limits: { requests_per_minute: 100, concurrent_streams: 2 } }))).status).toBe(200)
  })

  it("a stream open across a reload that lowers concurrent_streams runs to its end and counts against the new cap", async () => {
    const { key } = await gw.createKey()
    const started = new Promise<void>((resolve) => (called = resolve))
    const first = await chat(key, "slow", true)
    expect(first.status).toBe(200)
    await started
    expect((await reload(file({ limits: { requests_per_minute: 100, concurrent_streams: 1 } }))).status).toBe(200)
    const second = await chat(key, "slow", true)
    expect(second.status).toBe(429)
    expect(await second.json()).toMatchObject({ details: { limit: "concurrent_streams", concurrent_streams: 1 } })
    const text = await first.text()
    expect(text).toContain("one ")
    expect(text).toContain("two")
    expect(text).toContain("[DONE]")
    // Its slot is given back: the cap of one admits the next stream.
    const started2 = new Promise<void>((resolve) => (called = resolve))
    const third = await chat(key, "slow", true)
    expect(third.status).toBe(200)
    await started2
    expect(await third.text()).toContain("[DONE]")
  })
})

describe("reload: identity-provider policies", () => {
  let idp: TestIssuer
  let gw: TestGateway
  let reload: Reload
  const oidc = (policies: Array<Record<string, unknown>>, extra: Record<string, unknown> = {}): ConfigFile =>
    echoFile({ auth: { oidc: [{ issuer: idp.issuer, audience: idp.audience, jwks_cooldown_seconds: 0, policies, ...extra }] } })
  beforeAll(async () => {
    idp = await startTestIssuer()
    ;({ gateway: gw, reload } = await reloadableGateway(oidc([{ name: "narrow", allowed_models: ["echo"] }])))
  })
  afterAll(async () => {
    await gw?.close()
    await idp?.close()
  })

  const chat = (token: string, model: string) =>
    fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: chatBody(model)
    })

  it("a changed policy decides what the next request of the same token may do; removing and re-adding the issuer applies too", async () => {
    const token = await idp.mint({ subject: "reload-bob", claims: { groups: ["staff"] } })
    expect((await chat(token, "echo")).status).toBe(200)
    const narrow = await chat(token, "other")
    expect(narrow.status).toBe(403)
    expect((await narrow.json() as { error: string }).error).toBe("scope_violation")

    // The token was verified (and remembered) under the old policy: the new one still decides.
    const widened = await reload(oidc([
      { name: "staff", when: { claim: "groups", includes: "staff" }, allowed_models: ["echo", "other"], limits: { requests_per_minute: 7 } },
      { name: "narrow", allowed_models: ["echo"] }
    ]))
    expect(widened.status, JSON.stringify(widened.body)).toBe(200)
    expect(widened.body.changed).toEqual(["auth.oidc"])
    const wide = await chat(token, "other")
    expect(wide.status).toBe(200)
    expect(wide.headers.get("x-ratelimit-limit")).toBe("7")

    // A policy that no longer matches the token's claims: it may do nothing.
    expect((await reload(oidc([{ name: "admins", when: { claim: "groups", includes: "admins" } }]))).status).toBe(200)
    const none = await chat(token, "echo")
    expect(none.status).toBe(403)

    // The issuer removed: its tokens are no longer credentials here.
    expect((await reload(echoFile())).status).toBe(200)
    expect((await chat(token, "echo")).status).toBe(401)

    // Back, with its key set named explicitly this time (a new verifier): accepted again.
    expect((await reload(oidc([{ name: "all" }], { jwks_url: idp.jwksUrl }))).status).toBe(200)
    expect((await chat(token, "other")).status).toBe(200)
  })
})
