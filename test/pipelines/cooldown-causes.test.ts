/**
 * Cooldowns are caused by the deployment, not by one client (issue 32 item 3). With the default
 * `routing.allowed_fails` (3): a refusal of the request itself (OpenAI's per-request 429 "Request
 * too large", a non-streamed answer running past the first-byte timeout) is retried elsewhere and
 * never cools; a deployment's own trouble cools it once more than `allowed_fails` distinct
 * requests failed on it within the window; what only the deployment can cause (unreachable, the
 * gateway's credentials refused) cools it at once; a provider's Retry-After is capped by
 * `routing.max_cooldown_seconds`. Cooling is read from `/readyz`, as an operator sees it.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ProviderError, UpstreamTimeout } from "../../src/domain/errors.ts"
import { scriptedProviders, type ScriptedAnswer, type ScriptedCall } from "../../src/services/providers/scripted.ts"
import type { ChatChunk, ChatResponse } from "../../src/wire/openai-chat.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { chatCompletion } from "../support/chat-answers.ts"

const completion = (text: string) => chatCompletion(text, { id: "chatcmpl-c", usage: [3, 2] })

const failure = (provider: string, status: number | null, message = "boom", retryAfter?: string) =>
  new ProviderError({
    message: `provider "${provider}" answered ${status}`,
    details: { provider, upstream_status: status, upstream_error: { message } },
    ...(retryAfter === undefined ? {} : { retryAfter })
  })

type Script = (call: ScriptedCall) => ScriptedAnswer<ChatResponse, ChatChunk>

/** Per model: its first deployment (`<name>-a`) fails as scripted, the second (`<name>-b`) answers. */
const CASES = ["large", "slow", "flaky", "down", "creds", "later"] as const
const failing = new Map<string, Script>()

let gateway: TestGateway
let key: string

beforeAll(async () => {
  const providers = CASES.flatMap((name) => [`${name}-a`, `${name}-b`])
  const scripted = scriptedProviders(providers.map((name) => ({ name, kind: "openai" as const })), {
    openai: (call) => call.provider.endsWith("-b") ? { respond: completion(`from ${call.provider}`) } : failing.get(call.provider)!(call)
  })
  gateway = await startGateway(
    testConfig({
      limits: { requests_per_minute: 100_000, concurrent_streams: 100 },
      // The defaults of allowed_fails (3) and its window (60 s) are what is tested.
      routing: { backoff_ms: 1, cooldown_seconds: 60, max_cooldown_seconds: 120 },
      providers: providers.map((name) => ({ name, kind: "openai", base_url: "http://scripted.invalid/v1" })),
      models: CASES.map((name) => ({
        alias: name,
        id: `${name}-model`,
        // The failing deployment is met first (all but one time in a million): what it does to its cooldown is the subject.
        deployments: [{ provider: `${name}-a`, weight: 1_000_000 }, { provider: `${name}-b`, weight: 1 }],
        credits: 0,
        max_tokens: 100
      }))
    }),
    { providers: scripted.layer }
  )
  key = (await gateway.createKey()).key
})

afterAll(() => gateway.close())

const chat = async (model: string, extra: Record<string, unknown> = {}) => {
  const response = await fetch(`${gateway.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }], ...extra })
  })
  const body = await response.json() as { choices?: Array<{ message: { content: string } }> }
  return { status: response.status, text: body.choices?.[0]?.message.content }
}

/** The deployments `/readyz` lists as cooling, with their seconds left. */
const cooling = async (): Promise<Record<string, number>> => {
  const body = await (await fetch(`${gateway.url}/readyz`)).json() as { cooling?: Array<{ deployment: string; seconds_left: number }> }
  return Object.fromEntries((body.cooling ?? []).map((d) => [d.deployment, d.seconds_left]))
}

describe("cooldowns are caused by the deployment, not by one client", () => {
  it("a per-request 429 'Request too large' is answered by the other deployment and never cools the first", async () => {
    failing.set("large-a", () => ({
      fail: failure("large-a", 429, "Request too large for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Requested 80000.")
    }))
    for (let i = 0; i < 8; i++) expect(await chat("large")).toEqual({ status: 200, text: "from large-b" })
    expect(await cooling()).not.toHaveProperty("large-a/large-model")
  })

  it("a non-streamed request running past the first-byte timeout never cools the deployment", async () => {
    failing.set("slow-a", () => ({
      fail: new UpstreamTimeout({ message: "provider \"slow-a\" timed out", details: { provider: "slow-a", timeout: "first_byte", timeout_ms: 60_000 } })
    }))
    for (let i = 0; i < 8; i++) expect(await chat("slow", { max_tokens: 4000 })).toEqual({ status: 200, text: "from slow-b" })
    expect(await cooling()).not.toHaveProperty("slow-a/slow-model")
  })

  it("a deployment's own 5xx cools it once more than allowed_fails distinct requests failed on it", async () => {
    failing.set("flaky-a", () => ({ fail: failure("flaky-a", 503) }))
    for (let i = 0; i < 3; i++) {
      expect(await chat("flaky")).toEqual({ status: 200, text: "from flaky-b" })
      expect(await cooling()).not.toHaveProperty("flaky-a/flaky-model")
    }
    expect(await chat("flaky")).toEqual({ status: 200, text: "from flaky-b" })
    expect((await cooling())["flaky-a/flaky-model"]).toBeGreaterThan(0)
  })

  it("an unreachable deployment, or one refusing the gateway's credentials, cools at once", async () => {
    failing.set("down-a", () => ({ fail: failure("down-a", null, "connection refused") }))
    failing.set("creds-a", () => ({ fail: failure("creds-a", 401, "invalid api key") }))
    expect(await chat("down")).toEqual({ status: 200, text: "from down-b" })
    expect(await chat("creds")).toEqual({ status: 200, text: "from creds-b" })
    const now = await cooling()
    expect(now["down-a/down-model"]).toBeGreaterThan(0)
    expect(now["creds-a/creds-model"]).toBeGreaterThan(0)
  })

  it("a provider's Retry-After lengthens a cooldown up to routing.max_cooldown_seconds, never for years", async () => {
    failing.set("later-a", () => ({ fail: failure("later-a", 401, "come back later", String(10 * 365 * 24 * 3600)) }))
    expect(await chat("later")).toEqual({ status: 200, text: "from later-b" })
    const left = (await cooling())["later-a/later-model"]!
    expect(left).toBeGreaterThan(60)
    expect(left).toBeLessThanOrEqual(120)
  })
})
