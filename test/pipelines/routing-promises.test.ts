/**
 * Promises of the README's routing section that no other test kept (issue 39 item 3):
 * `routing.deadline_ms` (no new attempt starts after it), count_tokens never going to a fallback
 * (another model's count is not this model's), and the `latency` strategy trying a deployment it
 * has not measured yet before the measured ones.
 */
import Anthropic from "@anthropic-ai/sdk"
import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ProviderError } from "../../src/domain/errors.ts"
import type { Deployment } from "../../src/services/catalog/ModelCatalog.ts"
import { makeRouter } from "../../src/services/routing/Router.ts"
import { scriptedProviders, type ScriptedCall } from "../../src/services/providers/scripted.ts"
import type { ChatResponse } from "../../src/wire/openai-chat.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { chatCompletion } from "../support/chat-answers.ts"
import { anthropicFor } from "../support/sdk-clients.ts"

const failure = (provider: string, status: number) =>
  new ProviderError({ message: `provider "${provider}" answered ${status}`, details: { provider, upstream_status: status, upstream_error: { message: "boom" } } })

const completion = chatCompletion("fallback answered", { id: "chatcmpl-p", usage: [1, 1] })

const SLOW = ["s1", "s2", "s3", "s4", "s5", "s6"]
let gateway: TestGateway
let key: string
let calls: ReadonlyArray<ScriptedCall>

beforeAll(async () => {
  const scripted = scriptedProviders(
    [...SLOW.map((name) => ({ name, kind: "openai" as const })), { name: "fb", kind: "openai" as const }, { name: "c1", kind: "anthropic" as const }, { name: "cfb", kind: "anthropic" as const }],
    {
      // Each slow deployment fails after 300 ms: six of them would take 1.8 s, past the 700 ms deadline.
      openai: (call) => call.provider === "fb" ? { respond: completion } : { fail: failure(call.provider, 503), delay: "300 millis" },
      anthropicCount: (call) => call.provider === "cfb" ? { respond: { input_tokens: 7 } } : { fail: failure(call.provider, 503) }
    }
  )
  calls = scripted.calls
  gateway = await startGateway(
    testConfig({
      limits: { requests_per_minute: 100_000 },
      routing: { retries: 10, backoff_ms: 0, deadline_ms: 700, cooldown_seconds: 0 },
      providers: [
        ...SLOW.map((name) => ({ name, kind: "openai", base_url: "http://scripted.invalid/v1" })),
        { name: "fb", kind: "openai", base_url: "http://scripted.invalid/v1" },
        { name: "c1", kind: "anthropic", base_url: "http://scripted.invalid" },
        { name: "cfb", kind: "anthropic", base_url: "http://scripted.invalid" }
      ],
      models: [
        { alias: "slow", id: "slow-model", deployments: SLOW.map((provider) => ({ provider })), credits: 0, max_tokens: 100 },
        { alias: "counted", id: "counted-model", provider: "c1", credits: 0, max_tokens: 100, fallbacks: ["counted-fallback"] },
        { alias: "counted-fallback", id: "counted-fallback-model", provider: "cfb", credits: 0, max_tokens: 100 }
      ]
    }),
    { providers: scripted.layer }
  )
  key = (await gateway.createKey()).key
})

afterAll(() => gateway.close())

describe("routing promises", () => {
  it("starts no attempt after routing.deadline_ms: six slow failing deployments, ten retries allowed, at most three tried", async () => {
    const response = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "slow", messages: [{ role: "user", content: "hi" }] })
    })
    expect(response.status).toBe(502)
    // 300 ms each: attempts start at ~0, ~300 and ~600 ms; the fourth would start at ~900, past 700.
    // (On a loaded machine attempts start later, so fewer start: never more.)
    const tried = calls.filter((call) => SLOW.includes(call.provider)).length
    expect(tried).toBeGreaterThanOrEqual(1)
    expect(tried).toBeLessThanOrEqual(3)
  })

  it("never counts tokens on a fallback: every deployment of the model failing is the answer, whatever its fallbacks", async () => {
    const anthropic = anthropicFor(gateway.url, key)
    await expect(anthropic.messages.countTokens({ model: "counted", messages: [{ role: "user", content: "hi" }] })).rejects.toMatchObject({ status: 502 })
    expect(calls.filter((call) => call.provider === "c1")).not.toHaveLength(0)
    expect(calls.filter((call) => call.provider === "cfb")).toHaveLength(0)
  })
})

describe("the latency strategy", () => {
  const deployment = (name: string): Deployment => ({ key: `${name}/m`, id: "m", weight: 1, provider: { name } } as unknown as Deployment)

  it("tries a deployment it has not measured before the measured ones, then the faster", () => {
    const router = makeRouter({ strategy: "latency" })
    const [a, b, c] = [deployment("a"), deployment("b"), deployment("c")]
    // a answered slowly, b quickly; c was never tried.
    Effect.runSync(router.begin(a)({ _tag: "Answered", seconds: 2 }))
    Effect.runSync(router.begin(b)({ _tag: "Answered", seconds: 0.1 }))
    for (let i = 0; i < 20; i++) expect(Effect.runSync(router.pick([a, b, c], new Set(), false))?.key).toBe("c/m")
    Effect.runSync(router.begin(c)({ _tag: "Answered", seconds: 1 }))
    for (let i = 0; i < 20; i++) expect(Effect.runSync(router.pick([a, b, c], new Set(), false))?.key).toBe("b/m")
  })
})
