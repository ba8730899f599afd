/**
 * Stored Responses (issue 24 item 1) through two replicas on one Postgres store: the AI SDK's
 * default `openai(model)` provider (store true, so later turns send `item_reference` items)
 * holds a three-turn conversation on an Anthropic-kind and a Chat-kind model with each turn on
 * the other replica; the openai SDK's `previous_response_id`, retrieve, input_items and delete;
 * ownership (another key's id is 404); `store: false`; a passthrough provider keeping its own
 * ids; and a gateway with storing turned off refusing references by name.
 */
import { createOpenAI } from "@ai-sdk/openai"
import { generateText, type ModelMessage, streamText } from "ai"
import OpenAI from "openai"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { createPostgresDatabase, type TempDatabase } from "../support/databases.ts"
import { startFakeAnthropic } from "../support/fake-anthropic.ts"
import type { FakeUpstream, JsonBody } from "../support/fake-common.ts"
import { startFakeOpenAI } from "../support/fake-openai.ts"
import { startFakeOpenAIResponses } from "../support/fake-openai-responses.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { openaiFor } from "../support/sdk-clients.ts"

const OPENAI_KEY = "sk-fake-openai-0123456789abcdef"
const ANTHROPIC_KEY = "sk-ant-fake-0123456789abcdef"

let responsesFake: FakeUpstream
let chatFake: FakeUpstream
let anthropicFake: FakeUpstream
let db: TempDatabase
let a: TestGateway
let b: TestGateway
let key: string
let otherKey: string

const config = (store: string, extra: Record<string, unknown> = {}) =>
  testConfig({
    store,
    workspace: { credits: 1_000_000 },
    limits: { requests_per_minute: 100_000, concurrent_streams: 100 },
    providers: [
      { name: "openai-responses", kind: "openai", base_url: responsesFake.url, api_key: OPENAI_KEY, responses_api: true },
      { name: "openai-chat", kind: "openai", base_url: chatFake.url, api_key: OPENAI_KEY },
      { name: "anthropic", kind: "anthropic", base_url: anthropicFake.url, api_key: ANTHROPIC_KEY }
    ],
    models: [
      { alias: "gpt-r", id: "gpt-5.5", provider: "openai-responses", max_tokens: 32000 },
      { alias: "gpt-c", id: "gpt-4o-mini-2024-07-18", provider: "openai-chat", max_tokens: 16000 },
      { alias: "claude", id: "claude-sonnet-4-5-20250929", provider: "anthropic", max_tokens: 16000 }
    ],
    ...extra
  })

beforeAll(async () => {
  ;[responsesFake, chatFake, anthropicFake, db] = await Promise.all([
    startFakeOpenAIResponses({ apiKey: OPENAI_KEY }),
    startFakeOpenAI({ apiKey: OPENAI_KEY }),
    startFakeAnthropic({ apiKey: ANTHROPIC_KEY }),
    createPostgresDatabase("mg_responses")
  ])
  // Two replicas of one deployment: one Postgres store, nothing else shared.
  a = await startGateway(config(db.url))
  b = await startGateway(config(db.url))
  key = (await a.createKey()).key
  otherKey = (await a.createKey({ name: "other" })).key
}, 60_000)

afterAll(async () => {
  await a?.close()
  await b?.close()
  await Promise.all([responsesFake?.close(), chatFake?.close(), anthropicFake?.close()])
  await db?.drop()
})

beforeEach(() => {
  responsesFake.reset()
  chatFake.reset()
  anthropicFake.reset()
})

const openai = (gateway: TestGateway, apiKey = key) => openaiFor(gateway.url, apiKey)
/** What the AI SDK sent, to show it really referred to earlier answers by id. */
const sentBodies: Array<JsonBody> = []
const recordingFetch: typeof fetch = async (input, init) => {
  if (typeof init?.body === "string") sentBodies.push(JSON.parse(init.body) as JsonBody)
  return fetch(input, init)
}
const aiSdk = (gateway: TestGateway) => createOpenAI({ apiKey: key, baseURL: `${gateway.url}/v1`, fetch: recordingFetch })

/** The text of every message the upstream received, in order, whatever its format. */
const upstreamTexts = (body: JsonBody): Array<string> =>
  (body.messages as Array<JsonBody>).map((message) => {
    const content = message.content
    if (typeof content === "string") return `${message.role}: ${content}`
    if (!Array.isArray(content)) return `${message.role}:`
    return `${message.role}: ${content.map((part: JsonBody) => part.text ?? "").join("")}`
  })

/** `store` is in the API's answer; the SDK's Response type leaves it out. */
const storeOf = (response: object): unknown => (response as { store?: unknown }).store

const TRANSLATED = [
  { name: "Anthropic-kind", model: "claude", fake: () => anthropicFake },
  { name: "Chat-kind", model: "gpt-c", fake: () => chatFake }
]

describe.each(TRANSLATED)("AI SDK default openai(model) on $name, turns alternating replicas", (route) => {
  it("holds a three-turn conversation through item references", async () => {
    sentBodies.length = 0
    const messages: Array<ModelMessage> = []
    const turn = async (gateway: TestGateway, text: string, streamed: boolean) => {
      messages.push({ role: "user", content: text })
      const model = aiSdk(gateway)(route.model)
      if (streamed) {
        const result = streamText({ model, messages, maxRetries: 0 })
        let answer = ""
        for await (const delta of result.textStream) answer += delta
        messages.push(...(await result.response).messages)
        return answer
      }
      const result = await generateText({ model, messages, maxRetries: 0 })
      messages.push(...result.response.messages)
      return result.text
    }
    expect(await turn(a, "first question", false)).toBe("echo: first question")
    expect(await turn(b, "second question", true)).toBe("echo: second question")
    expect(await turn(a, "third question", false)).toBe("echo: third question")

    // The client's default: stored, and earlier answers sent back as references only.
    expect(sentBodies).toHaveLength(3)
    expect(sentBodies[2]!.store).not.toBe(false)
    expect(sentBodies[2]!.input.filter((item: JsonBody) => item.type === "item_reference")).toHaveLength(2)
    const requests = route.fake().requests
    expect(requests).toHaveLength(3)
    // The last upstream request carries the whole conversation: the earlier answers came from
    // the store (the client sent only their ids), written by the other replica.
    const texts = upstreamTexts(requests[2]!.body!).filter((text) => !text.startsWith("system"))
    expect(texts).toEqual([
      "user: first question",
      "assistant: echo: first question",
      "user: second question",
      "assistant: echo: second question",
      "user: third question"
    ])
  })
})

describe.each(TRANSLATED)("openai SDK on $name", (route) => {
  it("previous_response_id, retrieve, input_items and delete, across replicas", async () => {
    const first = await openai(a).responses.create({ model: route.model, input: "remember this", instructions: "be brief" })
    expect(storeOf(first)).toBe(true)
    expect(first.output_text).toBe("echo: remember this")

    const second = await openai(b).responses.create({ model: route.model, input: "and now?", previous_response_id: first.id })
    expect(second.previous_response_id).toBe(first.id)
    expect(second.output_text).toBe("echo: and now?")
    const texts = upstreamTexts(route.fake().requests[1]!.body!).filter((text) => !text.startsWith("system"))
    expect(texts).toEqual(["user: remember this", "assistant: echo: remember this", "user: and now?"])

    const streamed = openai(a).responses.stream({ model: route.model, input: "third", previous_response_id: second.id })
    const final = await streamed.finalResponse()
    expect(storeOf(final)).toBe(true)
    expect(final.previous_response_id).toBe(second.id)
    expect(upstreamTexts(route.fake().requests[2]!.body!).filter((text) => !text.startsWith("system"))).toHaveLength(5)

    const retrieved = await openai(b).responses.retrieve(second.id)
    expect(retrieved.id).toBe(second.id)
    expect(retrieved.output_text).toBe("echo: and now?")
    expect(retrieved.previous_response_id).toBe(first.id)
    const streamedBack = await openai(b).responses.retrieve(final.id)
    expect(streamedBack.output_text).toBe("echo: third")

    const items = await openai(a).responses.inputItems.list(second.id)
    expect(items.data).toHaveLength(1)
    expect(items.data[0]).toMatchObject({ type: "message", role: "user", content: [{ type: "input_text", text: "and now?" }] })

    // Another key sees nothing: not the response, not its items, and it cannot continue it.
    for (
      const attempt of [
        () => openai(a, otherKey).responses.retrieve(second.id),
        () => openai(b, otherKey).responses.inputItems.list(second.id),
        () => openai(a, otherKey).responses.delete(second.id),
        () => openai(b, otherKey).responses.create({ model: route.model, input: "x", previous_response_id: second.id })
      ]
    ) {
      await expect(attempt()).rejects.toMatchObject({ status: 404, error: "not_found" })
    }

    await openai(b).responses.delete(second.id)
    await expect(openai(a).responses.retrieve(second.id)).rejects.toMatchObject({ status: 404 })
    // A conversation through a deleted turn can no longer be continued, and says which turn is gone.
    const broken = await fetch(`${a.url}/v1/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: route.model, input: "more", previous_response_id: final.id })
    })
    expect(broken.status).toBe(404)
    expect(await broken.json()).toMatchObject({ error: "not_found", details: { field: "previous_response_id", response_id: second.id } })
  })

  it("store: false keeps nothing", async () => {
    const response = await openai(a).responses.create({ model: route.model, input: "forget me", store: false })
    expect(storeOf(response)).toBe(false)
    await expect(openai(b).responses.retrieve(response.id)).rejects.toMatchObject({ status: 404 })
  })

  it("an unknown item reference is 404 naming the item", async () => {
    const response = await fetch(`${b.url}/v1/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: route.model, input: [{ role: "user", content: "hi" }, { type: "item_reference", id: "msg_nope" }] })
    })
    expect(response.status).toBe(404)
    expect(await response.json()).toMatchObject({ error: "not_found", details: { field: "input.1.id" } })
    expect(route.fake().requests).toHaveLength(0)
  })
})

describe("a provider serving the Responses API (passthrough)", () => {
  it("keeps the vendor's ids for the vendor, and expands the gateway's own", async () => {
    const first = await openai(a).responses.create({ model: "gpt-r", input: "vendor turn" })
    expect(storeOf(first)).toBe(true)
    // The vendor's own id, continued on the vendor: forwarded as sent.
    await openai(b).responses.create({ model: "gpt-r", input: "again", previous_response_id: first.id })
    expect(responsesFake.requests[1]!.body!.previous_response_id).toBe(first.id)
    // The vendor's response is stored too: retrievable, and only by its owner.
    expect((await openai(b).responses.retrieve(first.id)).id).toBe(first.id)
    await expect(openai(b, otherKey).responses.retrieve(first.id)).rejects.toMatchObject({ status: 404 })
    // Another key cannot reach the vendor's state through the gateway.
    await expect(openai(a, otherKey).responses.create({ model: "gpt-r", input: "x", previous_response_id: first.id })).rejects
      .toMatchObject({ status: 404 })
    expect(responsesFake.requests).toHaveLength(2)

    // A conversation begun on Claude, continued on the vendor: the vendor gets the whole input.
    const ours = await openai(a).responses.create({ model: "claude", input: "start on claude" })
    await openai(b).responses.create({ model: "gpt-r", input: "continue on gpt", previous_response_id: ours.id })
    const forwarded = responsesFake.requests[2]!.body!
    expect(forwarded.previous_response_id).toBeUndefined()
    expect(JSON.stringify(forwarded.input)).toContain("echo: start on claude")
  })
})

describe("responses.store: false", () => {
  let off: TestGateway
  let offKey: string
  beforeAll(async () => {
    off = await startGateway(config("sqlite::memory:", { responses: { store: false } }))
    offKey = (await off.createKey()).key
  })
  afterAll(async () => {
    await off?.close()
  })

  it("stores nothing and refuses references by name", async () => {
    const client = openai(off, offKey)
    const response = await client.responses.create({ model: "claude", input: "hello" })
    expect(storeOf(response)).toBe(false)
    await expect(client.responses.retrieve(response.id)).rejects.toMatchObject({ status: 404 })
    for (
      const [body, field] of [
        [{ previous_response_id: response.id, input: "more" }, "previous_response_id"],
        [{ input: [{ role: "user", content: "hi" }, { type: "item_reference", id: "msg_x" }] }, "input.1"]
      ] as const
    ) {
      const refused = await fetch(`${off.url}/v1/responses`, {
        method: "POST",
        headers: { authorization: `Bearer ${offKey}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "claude", ...body })
      })
      expect(refused.status).toBe(400)
      const envelope = await refused.json() as { error: string; message: string; details: { field: string } }
      expect(envelope.error).toBe("validation_failed")
      expect(envelope.details.field).toBe(field)
      expect(envelope.message).toContain("responses.store: false")
    }
  })
})
