/**
 * Routing's cooldowns shared through Redis (issue 20): two real gateway replicas on one Redis.
 * A deployment that failed on one replica leaves the rotation of the other at once, without the
 * other ever sending it a request; the `/readyz` details of both list it.
 */
import { randomBytes } from "node:crypto"
import { afterAll, beforeAll, expect, it } from "vitest"
import { ProviderError } from "../../src/domain/errors.ts"
import { scriptedProviders } from "../../src/services/providers/scripted.ts"
import type { ChatResponse } from "../../src/wire/openai-chat.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { REDIS_URL } from "../limits/support.ts"
import { chatCompletion } from "../support/chat-answers.ts"

// Names of their own: the Redis is shared with other suites.
const run = randomBytes(4).toString("hex")
const BAD = `bad-${run}`
const GOOD = `good-${run}`

const completion = chatCompletion("ok", { id: "chatcmpl-r", usage: [1, 1] })

const replica = () => {
  const scripted = scriptedProviders([{ name: BAD, kind: "openai" }, { name: GOOD, kind: "openai" }], {
    openai: (call) =>
      call.provider === BAD
        ? { fail: new ProviderError({ message: "down", details: { provider: BAD, upstream_status: 503, upstream_error: { message: "down" } } }) }
        : { respond: completion }
  })
  return { scripted, start: () =>
    startGateway(
      testConfig({
        redis: REDIS_URL,
        routing: { cooldown_seconds: 60, backoff_ms: 1, allowed_fails: 0 },
        limits: { requests_per_minute: 100_000 },
        providers: [
          { name: BAD, kind: "openai", base_url: "http://scripted.invalid/v1" },
          { name: GOOD, kind: "openai", base_url: "http://scripted.invalid/v1" }
        ],
        models: [{ alias: "shared", id: "shared-model", deployments: [{ provider: BAD }, { provider: GOOD }], credits: 1 }]
      }),
      { providers: scripted.layer }
    ) }
}

const first = replica()
const second = replica()
let a: TestGateway
let b: TestGateway

beforeAll(async () => {
  a = await first.start()
  b = await second.start()
})
afterAll(async () => {
  await Promise.all([a?.close(), b?.close()])
})

const ask = async (gateway: TestGateway, key: string) =>
  (await fetch(`${gateway.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "shared", messages: [{ role: "user", content: "hi" }] })
  })).status

it("a deployment cooled by one replica is skipped by the other", async () => {
  const { key: keyA } = await a.createKey()
  // Until replica A has sent the bad deployment one request (weighted random picks it soon).
  for (let i = 0; i < 200 && first.scripted.calls.every((c) => c.provider !== BAD); i++) expect(await ask(a, keyA)).toBe(200)
  expect(first.scripted.calls.some((c) => c.provider === BAD)).toBe(true)
  const { key: keyB } = await b.createKey()
  for (let i = 0; i < 20; i++) expect(await ask(b, keyB)).toBe(200)
  expect(second.scripted.calls.filter((c) => c.provider === BAD)).toHaveLength(0)
  expect(second.scripted.calls.filter((c) => c.provider === GOOD)).toHaveLength(20)
  for (const gateway of [a, b]) {
    const ready = (await (await fetch(`${gateway.url}/readyz`)).json()) as { cooling?: Array<{ deployment: string }> }
    expect(ready.cooling?.map((d) => d.deployment)).toContain(`${BAD}/shared-model`)
  }
})
