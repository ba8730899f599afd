/**
 * `redis_timeouts` (issue 39): the Redis client's deadline comes from the config. A frozen Redis
 * answers the rate-limited request 503, failing closed, and the message names the configured
 * bound: told by what the gateway says, not by a clock. The default (1,000 ms) is too short for
 * a Redis on a loaded machine or far away, which an operator can now say. And the gateway's
 * parts that use Redis share one client (they had one each).
 */
import { execFileSync } from "node:child_process"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { canRunRedis, startRedis, type Throwaway } from "../support/throwaway.ts"
import { chat, waitFor } from "../limits/support.ts"

let redis: Throwaway
let gateway: TestGateway

beforeAll(async () => {
  if (!canRunRedis) return
  redis = await startRedis()
  gateway = await startGateway(testConfig({ redis: redis.url, redis_timeouts: { command_ms: 321, connect_ms: 2_000 } }))
}, 30_000)

afterAll(async () => {
  redis?.thaw()
  await gateway?.close()
  await redis?.destroy()
})

describe.skipIf(!canRunRedis)("redis_timeouts", () => {
  it("bounds every Redis call by command_ms, failing closed, and serves again once Redis answers", async () => {
    const { key } = await gateway.createKey()
    expect((await chat(gateway.url, key, { model: "echo" })).status).toBe(200)
    // The gateway's parts share one client: the limits, the admin throttle, routing and MCP sessions.
    // (Counted without MCP's cancellation subscriber, a connection of its own, and this CLIENT LIST.)
    const commands = execFileSync("redis-cli", ["-p", String(redis.port), "CLIENT", "LIST"], { encoding: "utf8" })
      .trim().split("\n").map((line) => /cmd=(\S+)/.exec(line)?.[1] ?? "")
    expect(commands.filter((cmd) => cmd !== "subscribe" && cmd !== "client|list")).toHaveLength(1)
    redis.freeze()
    const refused = await chat(gateway.url, key, { model: "echo" })
    expect(refused.status, refused.text).toBe(503)
    expect(refused.body).toMatchObject({ error: "dependency_unavailable", details: { dependency: "redis" } })
    expect(refused.body.message).toContain("no reply within 321 ms")
    redis.thaw()
    await waitFor("Redis answering the rate limiter again", async () => (await chat(gateway.url, key, { model: "echo" })).status === 200, 15_000)
  }, 30_000)
})
