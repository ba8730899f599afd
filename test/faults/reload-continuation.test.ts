/**
 * A reload that removes the provider a stream's continuation needs (issue 35 item 3): a stream
 * on one of a model's two deployments is cut after the reload took the other one (and its
 * provider) away. The continuation's target is gone: the stream ends with the in-band error and
 * the charge is refunded, like any other continuation that fails. Before, the gateway reset the
 * client's connection and recorded `client_closed_request` with the charge kept.
 */
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startFakeOpenAI, type FakeUpstream } from "../support/fake-openai.ts"
import { auditFor, type TestGateway } from "../support/gateway.ts"
import { type ConfigFile, type Reload, reloadableGateway } from "../support/reloadable.ts"

const UPSTREAM_KEY = `sk-upstream-${randomBytes(12).toString("hex")}`
const PRICE = 7

let fakes: Record<"one" | "two", FakeUpstream>
let gateway: TestGateway
let reload: Reload

const configWith = (names: ReadonlyArray<"one" | "two">): ConfigFile => ({
  workspace: { credits: 1000 },
  routing: { stream_continuation: true, retries: 1, backoff_ms: 1, allowed_fails: 0 },
  providers: names.map((name) => ({ name, kind: "openai", base_url: fakes[name].url, api_key: UPSTREAM_KEY })),
  models: [{ alias: "duo", id: "gpt-4o-mini-2024-07-18", deployments: names.map((provider) => ({ provider })), credits: PRICE }]
})

beforeAll(async () => {
  const [one, two] = await Promise.all([startFakeOpenAI({ apiKey: UPSTREAM_KEY }), startFakeOpenAI({ apiKey: UPSTREAM_KEY })])
  fakes = { one, two }
  for (const fake of [one, two]) fake.setDefault(() => ({ kind: "stall_after", chunks: 2 }))
  ;({ gateway, reload } = await reloadableGateway(configWith(["one", "two"])))
})

afterAll(async () => {
  await gateway?.close()
  await Promise.all(Object.values(fakes ?? {}).map((fake) => fake.close()))
})

describe("a reload that removes the provider a stream continuation needs", () => {
  it("ends the cut stream with the in-band error and refunds it, never a reset", async () => {
    const { key } = await gateway.createKey()
    const balance = async () => (await Effect.runPromise(gateway.store.credits.getWorkspace)).credits
    const before = await balance()
    const response = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "duo", stream: true, messages: [{ role: "user", content: "hello" }] })
    })
    expect(response.status).toBe(200)
    const requestId = response.headers.get("x-request-id")!
    const reader = response.body!.getReader()
    const decoder = new TextDecoder()
    let text = decoder.decode((await reader.read()).value, { stream: true })
    expect(await balance()).toBe(before - PRICE * 1_000_000)

    // The deployment serving it stays; the reload removes the other, provider and all.
    const serving = fakes.one.requests.length === 1 ? "one" : "two"
    const removed = serving === "one" ? "two" : "one"
    expect(fakes[serving].requests).toHaveLength(1)
    const reloaded = await reload(configWith([serving]))
    expect(reloaded.status).toBe(200)

    // The serving upstream drops the stream: the continuation's only other target is gone.
    await fakes[serving].close()
    for (let next = await reader.read(); !next.done; next = await reader.read()) text += decoder.decode(next.value, { stream: true })

    const frames = text.split("\n").filter((line) => line.startsWith("data: ")).map((line) => line.slice(6))
    const errorFrame = frames.map((f) => (f === "[DONE]" ? undefined : JSON.parse(f) as Record<string, unknown>)).find((f) => f?.["error"] !== undefined)
    expect(errorFrame).toBeDefined()
    expect(fakes[removed].requests).toHaveLength(0)

    await expect.poll(balance, { timeout: 5000 }).toBe(before)
    const [record] = await auditFor(gateway, requestId)
    expect(record).toBeDefined()
    expect(record!.error).not.toBe("client_closed_request")
    expect(record!.error).toBe("provider_error")
    expect(record!.credits).toBe(0)
    const attempts = record!.details!["attempts"] as Array<{ deployment: string; error: string | null; continuation?: boolean }>
    expect(attempts.at(-1)).toMatchObject({ deployment: removed, error: "provider_error", continuation: true })
  }, 30_000)
})
