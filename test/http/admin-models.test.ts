/**
 * `GET /models/routing` (issue 31): the admin API's view of routing. A deployment that fails
 * shows cooling down with its cause and end and its recent errors, then healthy once the
 * cooldown is over; a cooldown set by another replica shows through Redis; a Redis that stops
 * answering leaves the answer to this replica's view. No provider secret is in it.
 */
import { randomBytes } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ProviderError } from "../../src/domain/errors.ts"
import { scriptedProviders } from "../../src/services/providers/scripted.ts"
import type { ChatResponse } from "../../src/wire/openai-chat.ts"
import { REDIS_URL, waitFor } from "../limits/support.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { startTcpProxy, type TcpProxy } from "../support/tcp-proxy.ts"
import { chatCompletion } from "../support/chat-answers.ts"

const SECRET = `sk-never-shown-${randomBytes(8).toString("hex")}`

const completion = chatCompletion("ok", { id: "chatcmpl-r", usage: [1, 1] })

const failing = (provider: string, status: number, retryAfter?: string) =>
  new ProviderError({
    message: `provider "${provider}" answered ${status}`,
    details: { provider, upstream_status: status, upstream_error: { message: "boom" } },
    ...(retryAfter === undefined ? {} : { retryAfter })
  })

interface DeploymentJson {
  key: string | null
  provider: string
  provider_kind: string
  upstream_id: string | null
  weight: number
  status: "healthy" | "cooling"
  cooldown: { until: string; seconds_left: number; cause: string | null } | null
  in_flight: number
  ttfb_seconds: number | null
  recent: Record<"last_5m" | "last_60m", { attempts: number; errors: number; by_error: Record<string, number> }> | null
}
interface ModelJson {
  kind: "model" | "route"
  name: string
  id: string | null
  match: string | null
  credits: number
  max_tokens: number
  fallbacks: Array<string>
  deployments: Array<DeploymentJson>
}
interface Answer {
  replica: string
  cooldowns: string
  data: Array<ModelJson>
}

const routing = async (gateway: TestGateway): Promise<Answer> => {
  const response = await gateway.admin("GET", "/models/routing")
  expect(response.status).toBe(200)
  return (await response.json()) as Answer
}
const deploymentOf = (answer: Answer, key: string) => answer.data.flatMap((m) => m.deployments).find((d) => d.key === key)

const chat = async (gateway: TestGateway, key: string, model: string) =>
  (await fetch(`${gateway.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }] })
  })).status

describe("one replica", () => {
  /** The providers that fail now, by name. */
  const broken = new Set<string>()
  const scripted = scriptedProviders(["a", "b", "pat"].map((name) => ({ name, kind: "openai" as const })), {
    // Retry-After: 3 makes the cooldown 3 s (cooldown_seconds is 1): long enough to be seen on a busy machine.
    openai: (call) => (broken.has(call.provider) ? { fail: failing(call.provider, 503, "3") } : { respond: completion })
  })
  let gateway: TestGateway

  beforeAll(async () => {
    gateway = await startGateway(
      testConfig({
        limits: { requests_per_minute: 100_000 },
        // Short cooldowns: the test waits for the end of one (by state, polling).
        routing: { cooldown_seconds: 1, backoff_ms: 1, allowed_fails: 0 },
        providers: ["a", "b", "pat"].map((name) => ({ name, kind: "openai", base_url: "http://scripted.invalid/v1", api_key: SECRET })),
        models: [
          { alias: "duo", id: "duo-model", deployments: [{ provider: "a" }, { provider: "b", id: "duo-on-b", weight: 3 }], credits: 7, max_tokens: 123, fallbacks: ["solo"] },
          { alias: "solo", id: "solo-model", provider: "b", credits: 2, max_tokens: 50 },
          { match: "pat-*", provider: "pat", credits: 1, max_tokens: 10 }
        ]
      }),
      { providers: scripted.layer }
    )
  })
  afterAll(() => gateway?.close())

  it("answers only with the admin token", async () => {
    const response = await fetch(`${gateway.url}/models/routing`)
    expect(response.status).toBe(401)
    expect(((await response.json()) as { error: string }).error).toBe("unauthorized")
  })

  it("lists every model and route with price, cap, fallbacks and deployments, and no provider secret", async () => {
    const response = await gateway.admin("GET", "/models/routing")
    const text = await response.text()
    expect(text).not.toContain(SECRET)
    expect(text).not.toContain("api_key")
    const answer = JSON.parse(text) as Answer
    expect(answer.cooldowns).toBe("replica")
    expect(answer.replica).toMatch(/:\d+$/)
    expect(answer.data.map((m) => [m.kind, m.name])).toEqual([["model", "duo"], ["model", "solo"], ["route", "pat-*"]])
    const duo = answer.data[0]!
    expect(duo).toMatchObject({ id: "duo-model", credits: 7, max_tokens: 123, fallbacks: ["solo"] })
    expect(duo.deployments).toEqual([
      expect.objectContaining({ key: "a/duo-model", provider: "a", provider_kind: "openai", upstream_id: "duo-model", weight: 1, status: "healthy", cooldown: null }),
      expect.objectContaining({ key: "b/duo-on-b", provider: "b", upstream_id: "duo-on-b", weight: 3, status: "healthy" })
    ])
    // A route sending the requested name: no deployment until a name was served.
    expect(answer.data[2]!.deployments).toEqual([expect.objectContaining({ key: null, provider: "pat", upstream_id: null, status: "healthy" })])
    const { key } = await gateway.createKey()
    expect(await chat(gateway, key, "pat-one")).toBe(200)
    const after = await routing(gateway)
    expect(after.data[2]!.deployments).toEqual([
      expect.objectContaining({ key: "pat/pat-one", upstream_id: "pat-one", status: "healthy", recent: expect.objectContaining({ last_5m: { attempts: 1, errors: 0, by_error: {} } }) })
    ])
    expect(after.data[2]!.deployments[0]!.ttfb_seconds).toBeGreaterThanOrEqual(0)
  })

  it("a failing deployment shows cooling with its cause, end and errors, then healthy once the cooldown is over", async () => {
    broken.add("a")
    const { key } = await gateway.createKey()
    // Until the router has sent `a` one request (weighted random: b takes 3 in 4).
    for (let i = 0; i < 200 && !scripted.calls.some((c) => c.provider === "a"); i++) expect(await chat(gateway, key, "duo")).toBe(200)
    const sentAt = Date.now()
    const cooling = deploymentOf(await routing(gateway), "a/duo-model")!
    expect(cooling.status).toBe("cooling")
    expect(cooling.cooldown!.cause).toBe("upstream 503")
    const until = Date.parse(cooling.cooldown!.until)
    expect(until).toBeGreaterThan(sentAt - 1000)
    expect(until).toBeLessThanOrEqual(Date.now() + 3000)
    expect(cooling.recent!.last_5m).toEqual({ attempts: 1, errors: 1, by_error: { "upstream 503": 1 } })
    expect(cooling.recent!.last_60m.errors).toBe(1)
    // The other deployment answered every request.
    const other = deploymentOf(await routing(gateway), "b/duo-on-b")!
    expect(other.status).toBe("healthy")
    expect(other.recent!.last_5m.errors).toBe(0)
    expect(other.recent!.last_5m.attempts).toBeGreaterThanOrEqual(1)

    broken.delete("a")
    await waitFor("the cooldown to end", async () => deploymentOf(await routing(gateway), "a/duo-model")!.status === "healthy", 10_000)
    const healthy = deploymentOf(await routing(gateway), "a/duo-model")!
    expect(healthy.cooldown).toBeNull()
    // The errors stay counted in the window after the cooldown ends.
    expect(healthy.recent!.last_5m.by_error).toEqual({ "upstream 503": 1 })
  })
})

describe("replicas on one Redis", () => {
  // Names of their own: the Redis is shared with other suites.
  const run = randomBytes(4).toString("hex")
  const BAD = `bad-${run}`
  const GOOD = `good-${run}`
  const replica = (redis: string) => {
    const scripted = scriptedProviders([{ name: BAD, kind: "openai" }, { name: GOOD, kind: "openai" }], {
      openai: (call) => (call.provider === BAD ? { fail: failing(BAD, 429) } : { respond: completion })
    })
    return {
      scripted,
      start: () =>
        startGateway(
          testConfig({
            redis,
            routing: { cooldown_seconds: 60, backoff_ms: 1, allowed_fails: 0 },
            limits: { requests_per_minute: 100_000 },
            providers: [BAD, GOOD].map((name) => ({ name, kind: "openai", base_url: "http://scripted.invalid/v1" })),
            models: [{ alias: "shared", id: "shared-model", deployments: [{ provider: BAD }, { provider: GOOD }], credits: 1 }]
          }),
          { providers: scripted.layer }
        )
    }
  }
  let proxy: TcpProxy
  const first = replica(REDIS_URL)
  let second: ReturnType<typeof replica>
  let a: TestGateway
  let b: TestGateway

  beforeAll(async () => {
    proxy = await startTcpProxy(Number(new URL(REDIS_URL).port || 6379))
    second = replica(`redis://127.0.0.1:${proxy.port}`)
    a = await first.start()
    b = await second.start()
  })
  afterAll(async () => {
    proxy?.heal()
    await Promise.all([a?.close(), b?.close()])
    await proxy?.close()
  })

  it("shows the cooldown another replica set, with its cause; a Redis that does not answer leaves this replica's view", async () => {
    const { key } = await a.createKey()
    for (let i = 0; i < 200 && first.scripted.calls.every((c) => c.provider !== BAD); i++) expect(await chat(a, key, "shared")).toBe(200)
    const deployment = `${BAD}/shared-model`
    // Replica B never sent it a request, and sees it cooling because of A's 429.
    expect(second.scripted.calls).toHaveLength(0)
    const seen = await routing(b)
    expect(seen.cooldowns).toBe("shared")
    const shared = deploymentOf(seen, deployment)!
    expect(shared.status).toBe("cooling")
    expect(shared.cooldown!.cause).toBe("upstream 429")
    expect(shared.cooldown!.seconds_left).toBeGreaterThan(50)
    // The recent counts are B's own: it made no attempt.
    expect(shared.recent!.last_60m).toEqual({ attempts: 0, errors: 0, by_error: {} })
    expect(deploymentOf(await routing(a), deployment)!.recent!.last_60m.by_error).toEqual({ "upstream 429": 1 })

    // Redis stops answering B: the page still answers with what B knows (nothing cooling). Its
    // own wait is bounded (test/services/routing/router.test.ts); the admin throttle's Redis
    // check before it waits for the Redis client's deadline, a second.
    proxy.cut()
    const alone = await routing(b)
    expect(alone.cooldowns).toBe("replica_redis_unavailable")
    expect(deploymentOf(alone, deployment)!.status).toBe("healthy")
  })
})
