/**
 * Clocks under failure (issue 35 items 6 and 7):
 *
 * - Two replicas share a Postgres store, one's clock 31 days ahead: a response either answered
 *   with `store: true` is found on the other (expiry is written and judged by the store's clock;
 *   before, the replica ahead found the other's fresh responses expired, 4 of 8 lookups 404), and
 *   an MCP session either opened is served by the other.
 * - A replica's wall clock set back 31 days right after a deployment's 3 s cooldown began: the
 *   deployment is back in the rotation once those 3 s have passed (cooldowns run on monotonic
 *   time; before, it stayed out for 31 days). The replica is a child process whose Date is moved
 *   by a signal (test/support/wall-clock-shift.mjs).
 * - The same step back on the admin sign-in throttle and the in-memory rate limiter: neither
 *   refuses longer than its window or refill (both on monotonic time; before, both refused for
 *   31 days).
 */
import { Clock, Context, Effect, Layer } from "effect"
import { randomBytes } from "node:crypto"
import { resolve } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { AdminThrottle } from "../../src/services/limits/AdminThrottle.ts"
import { RateLimiter } from "../../src/services/limits/RateLimiter.ts"
import { createPostgresDatabase, type TempDatabase } from "../support/databases.ts"
import { startFakeOpenAI, type FakeUpstream } from "../support/fake-openai.ts"
import { ADMIN_TOKEN, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { movableClock } from "../support/movable-clock.ts"
import { type GatewayProcess, ROOT, spawnGateway, tempDir, writeConfig } from "../support/process.ts"
import { chat, newKey, waitFor } from "../limits/support.ts"

const DAY = 24 * 60 * 60 * 1000

describe("a replica whose clock runs 31 days ahead", () => {
  let db: TempDatabase
  let normal: TestGateway
  let ahead: TestGateway

  beforeAll(async () => {
    db = await createPostgresDatabase("mg_clock_ahead")
    const config = testConfig({
      store: db.url,
      providers: [{ name: "echo", kind: "echo" }],
      models: [{ alias: "echo", id: "echo-1", provider: "echo", credits: 0 }],
      responses: { retention_days: 30 }
    })
    const time = movableClock()
    time.advance(31 * DAY)
    normal = await startGateway(config)
    ahead = await startGateway(config, { clock: time.clock })
  }, 30_000)

  afterAll(async () => {
    await normal?.close()
    await ahead?.close()
    await db?.drop()
  })

  it("finds the responses the other stored, and the other finds its own", async () => {
    const { key } = await normal.createKey()
    const create = (gateway: TestGateway, input: string) =>
      fetch(`${gateway.url}/v1/responses`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "echo", input })
      })
    const retrieve = (gateway: TestGateway, id: string) =>
      fetch(`${gateway.url}/v1/responses/${id}`, { headers: { authorization: `Bearer ${key}` } })

    const stored: Array<{ id: string; on: TestGateway; other: TestGateway }> = []
    for (let i = 0; i < 8; i++) {
      const [on, other] = i % 2 === 0 ? [normal, ahead] : [ahead, normal]
      const created = await create(on, `turn ${i}`)
      expect(created.status).toBe(200)
      const body = await created.json() as { id: string; store: boolean }
      expect(body.store).toBe(true)
      stored.push({ id: body.id, on, other })
    }
    const statuses = await Promise.all(stored.map(async ({ id, other }) => (await retrieve(other, id)).status))
    expect(statuses).toEqual(stored.map(() => 200))
    // And a conversation continues across them.
    const next = await fetch(`${ahead.url}/v1/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "echo", input: "and then", previous_response_id: stored[0]!.id })
    })
    expect(next.status).toBe(200)
  }, 30_000)

  it("serves the MCP sessions the other opened, and the other serves its own", async () => {
    const { key } = await normal.createKey({ tools_enabled: true })
    const rpc = (gateway: TestGateway, body: Record<string, unknown>, session?: string) =>
      fetch(`${gateway.url}/v1/mcp`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${key}`,
          "content-type": "application/json",
          accept: "application/json, text/event-stream",
          ...(session === undefined ? {} : { "mcp-session-id": session })
        },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, ...body })
      })
    const initialize = { method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "1" } } }
    for (const [on, other] of [[normal, ahead], [ahead, normal]] as const) {
      const opened = await rpc(on, initialize)
      expect(opened.status).toBe(200)
      const session = opened.headers.get("mcp-session-id")!
      expect((await rpc(other, { method: "ping" }, session)).status).toBe(200)
      expect((await rpc(on, { method: "ping" }, session)).status).toBe(200)
    }
  })
})

describe("a replica whose wall clock is set back 31 days", () => {
  const UPSTREAM_KEY = `sk-upstream-${randomBytes(12).toString("hex")}`
  const COOLDOWN_SECONDS = 3
  let flaky: FakeUpstream
  let steady: FakeUpstream
  let gateway: GatewayProcess

  afterAll(async () => {
    await gateway?.stop("SIGKILL")
    await flaky?.close()
    await steady?.close()
  })

  it("puts a deployment back in the rotation once its cooldown has passed", async () => {
    ;[flaky, steady] = await Promise.all([startFakeOpenAI({ apiKey: UPSTREAM_KEY }), startFakeOpenAI({ apiKey: UPSTREAM_KEY })])
    flaky.setDefault(() => ({ kind: "error", status: 500 }))
    const dir = tempDir("modelgate-clock-back-")
    gateway = await spawnGateway(
      writeConfig(dir, {
        server: { data_dir: dir },
        store: `sqlite:${dir}/modelgate.db`,
        admin: { token: ADMIN_TOKEN },
        log: { level: "info" },
        // High enough for the calls below; the limiter itself must not refuse the key for the
        // length of the jump either (its buckets run on monotonic time too).
        limits: { requests_per_minute: 100_000 },
        routing: { cooldown_seconds: COOLDOWN_SECONDS, allowed_fails: 0, retries: 1, backoff_ms: 1, strategy: "least_busy" },
        providers: [
          { name: "flaky", kind: "openai", base_url: flaky.url, api_key: UPSTREAM_KEY },
          { name: "steady", kind: "openai", base_url: steady.url, api_key: UPSTREAM_KEY }
        ],
        models: [{ alias: "duo", id: "gpt-4o-mini-2024-07-18", deployments: [{ provider: "flaky" }, { provider: "steady" }], credits: 0 }]
      }),
      { NODE_OPTIONS: `--import ${resolve(ROOT, "test/support/wall-clock-shift.mjs")}`, TEST_CLOCK_SHIFT_MS: String(-31 * DAY) }
    )
    const { key } = await newKey(gateway.url)
    // Calls until one reached the failing deployment (each is answered by the other): it cools now.
    await waitFor("a call on the failing deployment", async () => {
      expect((await chat(gateway.url, key, { model: "duo" })).status).toBe(200)
      return flaky.requests.length > 0
    }, 10_000)
    const cooledAt = performance.now()
    flaky.setDefault(() => ({ kind: "text", text: "healthy again" }))
    gateway.child.kill("SIGUSR2")
    await waitFor("the clock set back", () => gateway.output().includes("test clock shifted by"))

    // Within its cooldown it gets nothing; once the cooldown has passed it is back.
    const before = flaky.requests.length
    await waitFor("the deployment back in the rotation", async () => {
      expect((await chat(gateway.url, key, { model: "duo" })).status).toBe(200)
      return flaky.requests.length > before
    }, COOLDOWN_SECONDS * 1000 + 10_000)
    expect(performance.now() - cooledAt).toBeGreaterThanOrEqual(COOLDOWN_SECONDS * 1000 - 500)
    let reached = 0
    for (let i = 0; i < 16; i++) {
      const was = flaky.requests.length
      expect((await chat(gateway.url, key, { model: "duo" })).status).toBe(200)
      if (flaky.requests.length > was) reached++
    }
    expect(reached).toBeGreaterThan(0)
  }, 60_000)
})

describe("local timers when the wall clock is set back 31 days", () => {
  /** Runs `check` until it is true, on real time, at most `ms`. */
  const until = async (what: string, check: () => Promise<boolean>, ms: number) => waitFor(what, check, ms)

  it("the admin sign-in throttle lets an address in again once its window has passed", async () => {
    const time = movableClock()
    const throttle = Effect.runSync(
      Effect.scoped(Effect.map(Layer.build(AdminThrottle.layerMemory({ maxFailures: 2, windowSeconds: 1 })), (ctx) => Context.get(ctx, AdminThrottle))).pipe(
        Effect.provideService(Clock.Clock, time.clock)
      )
    )
    const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(Effect.provideService(Effect.result(effect), Clock.Clock, time.clock))
    await run(throttle.fail("10.0.0.1"))
    await run(throttle.fail("10.0.0.1"))
    expect((await run(throttle.check("10.0.0.1")))._tag).toBe("Failure")
    time.advance(-31 * DAY)
    await until("the address let in again", async () => (await run(throttle.check("10.0.0.1")))._tag === "Success", 1000 + 3000)
  })

  it("the in-memory rate limiter refuses a key no longer than its bucket takes to refill", async () => {
    const time = movableClock()
    const limiter = Effect.runSync(
      Effect.scoped(Effect.map(Layer.build(RateLimiter.layerMemory), (ctx) => Context.get(ctx, RateLimiter))).pipe(Effect.provideService(Clock.Clock, time.clock))
    )
    const consume = () => Effect.runPromise(limiter.consume("key_clock", 60))
    for (let i = 0; i < 60; i++) expect((await consume()).allowed).toBe(true)
    expect((await consume()).allowed).toBe(false)
    time.advance(-31 * DAY)
    // One request's worth of time (1 s at 60 a minute) brings one back, whatever the wall clock did.
    await until("the key admitted again", async () => (await consume()).allowed, 1000 + 3000)
  })
})
