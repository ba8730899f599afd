/**
 * Model names as clients use them, against the real server: `GET /v1/models` and
 * `GET /v1/models/{id}` through both official SDKs (each gets its vendor's shape, Anthropic's with
 * cursor pages the SDK walks by itself), only what the key may use, and `match:` routes that
 * send the requested id upstream with the route's provider, credits and cap.
 */
import Anthropic from "@anthropic-ai/sdk"
import OpenAI from "openai"
import { beforeAll, describe, expect, it } from "vitest"
import type { FakeUpstream } from "../support/fake-common.ts"
import type { TestGateway } from "../support/gateway.ts"
import { useModelGateway } from "../support/model-gateway.ts"
import { anthropicFor, openaiFor } from "../support/sdk-clients.ts"


/** Eleven concrete Claude models with aliases: 22 names, more than one default page of 20. */
const CLAUDES = Array.from({ length: 11 }, (_, i) => ({ alias: `c${i}`, id: `claude-test-${i}-20250101`, provider: "up-anthropic" }))
const NAMES = [
  "smart", "claude-sonnet-4-5-20250929",
  "fast", "gpt-4o-mini-2024-07-18",
  "vendor/model-x",
  ...CLAUDES.flatMap((m) => [m.alias, m.id])
]

let openaiFake: FakeUpstream
let anthropicFake: FakeUpstream
let gw: TestGateway
let key: string
let openai: OpenAI
let anthropic: Anthropic

const fixture = useModelGateway({
  openaiModels: "any",
  anthropicModels: "any",
  models: () => [
    { alias: "smart", id: "claude-sonnet-4-5-20250929", display_name: "Claude Sonnet 4.5", provider: "up-anthropic", credits: 5, max_tokens: 8192 },
    { match: "claude-*", provider: "up-anthropic", credits: 7, max_tokens: 3000 },
    { alias: "fast", id: "gpt-4o-mini-2024-07-18", provider: "up-openai", credits: 1, max_tokens: 16384 },
    { match: "gpt-*", provider: "up-openai", credits: 3, max_tokens: 2000 },
    { id: "vendor/model-x", provider: "up-openai" },
    ...CLAUDES
  ]
})

beforeAll(async () => {
  gw = fixture.gateway()
  openaiFake = fixture.openaiFake()
  anthropicFake = fixture.anthropicFake()
  ;({ key } = await gw.createKey())
  openai = openaiFor(gw.url, key)
  anthropic = anthropicFor(gw.url, key)
})

const get = async (path: string, headers: Record<string, string>) => {
  const response = await fetch(gw.url + path, { headers })
  return { status: response.status, body: (await response.json()) as any }
}

const balance = async (): Promise<number> => ((await (await gw.admin("GET", "/workspace")).json()) as { credits: number }).credits

describe("GET /v1/models for an OpenAI client", () => {
  it("lists every model under each of its names, in OpenAI's shape, and no route", async () => {
    const listed = []
    for await (const model of openai.models.list()) listed.push(model)
    expect(listed.map((m) => m.id)).toEqual(NAMES)
    expect(listed[0]).toEqual({
      id: "smart",
      object: "model",
      created: 0,
      owned_by: "up-anthropic",
      full_id: "claude-sonnet-4-5-20250929",
      credits: 5,
      max_tokens: 8192
    })
    const raw = await get("/v1/models", { authorization: `Bearer ${key}` })
    expect(raw.body.object).toBe("list")
    expect(raw.body.data.some((m: { id: string }) => m.id.includes("*"))).toBe(false)
  })

  it("retrieves a model by alias, by id (slashes included), or by a name a route serves", async () => {
    expect(await openai.models.retrieve("fast")).toMatchObject({ id: "fast", object: "model", owned_by: "up-openai", full_id: "gpt-4o-mini-2024-07-18" })
    expect(await openai.models.retrieve("vendor/model-x")).toMatchObject({ id: "vendor/model-x", owned_by: "up-openai" })
    expect(await openai.models.retrieve("gpt-5")).toMatchObject({ id: "gpt-5", owned_by: "up-openai", credits: 3, max_tokens: 2000 })
  })

  it("answers 404 not_found for a name nothing serves", async () => {
    const error = await openai.models.retrieve("mistral-large").catch((e: unknown) => e)
    expect(error).toBeInstanceOf(OpenAI.NotFoundError)
    // The SDK exposes the envelope's `error` slug; the body carries the rest.
    expect((error as InstanceType<typeof OpenAI.NotFoundError>).error).toBe("not_found")
    expect(await get("/v1/models/mistral-large", { authorization: `Bearer ${key}` })).toMatchObject({
      status: 404,
      body: { error: "not_found", message: `unknown model "mistral-large"`, details: { model: "mistral-large" } }
    })
  })
})

describe("GET /v1/models for an Anthropic client", () => {
  it("walks every page by itself, in Anthropic's shape", async () => {
    const listed = []
    for await (const model of anthropic.models.list()) listed.push(model)
    expect(listed.map((m) => m.id)).toEqual(NAMES)
    expect(listed[0]).toEqual({
      type: "model",
      id: "smart",
      display_name: "Claude Sonnet 4.5",
      created_at: "1970-01-01T00:00:00Z",
      capabilities: null,
      deprecated_at: null,
      lifecycle: "active",
      line: null,
      max_input_tokens: null,
      max_tokens: 8192,
      retires_at: null,
      allowed_fallback_models: null,
      credits: 5
    })
    expect(listed.find((m) => m.id === "fast")?.display_name).toBe("fast")
    // The beta resource reads the same endpoint.
    const beta = []
    for await (const model of anthropic.beta.models.list({ limit: 7 })) beta.push(model.id)
    expect(beta).toEqual(NAMES)
  })

  it("pages with limit, after_id and before_id as the SDK sends them", async () => {
    const first = await anthropic.models.list({ limit: 5 })
    expect(first.data.map((m) => m.id)).toEqual(NAMES.slice(0, 5))
    expect(first).toMatchObject({ has_more: true, first_id: NAMES[0], last_id: NAMES[4] })
    const second = await first.getNextPage()
    expect(second.data.map((m) => m.id)).toEqual(NAMES.slice(5, 10))

    const last = await anthropic.models.list({ limit: 5, after_id: NAMES[NAMES.length - 3]! })
    expect(last.data.map((m) => m.id)).toEqual(NAMES.slice(-2))
    expect(last.has_more).toBe(false)
    expect(last.hasNextPage()).toBe(false)

    // Backwards: the items right before the cursor, then the SDK asks before the page's first id.
    const backwards: Array<string> = []
    for await (const model of anthropic.models.list({ limit: 4, before_id: NAMES[10]! })) backwards.push(model.id)
    expect(backwards).toEqual([...NAMES.slice(6, 10), ...NAMES.slice(2, 6), ...NAMES.slice(0, 2)])

    const all = await get("/v1/models?limit=1000", { "x-api-key": key })
    expect(all.body).toMatchObject({ has_more: false, first_id: NAMES[0], last_id: NAMES[NAMES.length - 1] })
    expect(all.body.data).toHaveLength(NAMES.length)
  })

  it("filters by lifecycle: configured models are all active", async () => {
    const active = await anthropic.models.list({ lifecycle: ["active", "deprecated"], limit: 1000 })
    expect(active.data).toHaveLength(NAMES.length)
    const retired = await anthropic.models.list({ lifecycle: ["retired"] })
    expect(retired).toMatchObject({ data: [], has_more: false, first_id: null, last_id: null })
  })

  it("refuses bad page parameters with 400 validation_failed naming the parameter", async () => {
    const cases: Array<[string, string]> = [
      ["limit=0", "limit"],
      ["limit=1001", "limit"],
      ["limit=ten", "limit"],
      ["after_id=nope", "after_id"],
      ["before_id=nope", "before_id"],
      ["after_id=smart&before_id=fast", "before_id"],
      ["lifecycle[]=gone", "lifecycle"]
    ]
    for (const [query, field] of cases) {
      const { status, body } = await get(`/v1/models?${query}`, { "x-api-key": key })
      expect({ query, status, error: body.error, field: body.details?.field }).toEqual({ query, status: 400, error: "validation_failed", field })
      expect(body.message).toMatch(new RegExp(`^${field.replace("[", "\\[")}: `))
    }
  })

  it("retrieves a model by alias, by id, or by a name a route serves", async () => {
    expect(await anthropic.models.retrieve("smart")).toMatchObject({ type: "model", id: "smart", display_name: "Claude Sonnet 4.5", max_tokens: 8192 })
    expect(await anthropic.models.retrieve("claude-sonnet-4-5-20250929")).toMatchObject({ id: "claude-sonnet-4-5-20250929", display_name: "Claude Sonnet 4.5" })
    expect(await anthropic.models.retrieve("claude-opus-4-6")).toMatchObject({ type: "model", id: "claude-opus-4-6", display_name: "claude-opus-4-6", max_tokens: 3000, credits: 7 })
    const error = await anthropic.models.retrieve("gemini-2.5-pro").catch((e: unknown) => e)
    expect(error).toBeInstanceOf(Anthropic.NotFoundError)
    expect((error as InstanceType<typeof Anthropic.NotFoundError>).error).toMatchObject({ error: "not_found" })
  })

  it("answers in Anthropic's shape when the request carries anthropic-version or x-api-key, OpenAI's otherwise", async () => {
    const anthropicShaped: Array<Record<string, string>> = [
      { "x-api-key": key },
      { authorization: `Bearer ${key}`, "anthropic-version": "2023-06-01" }
    ]
    for (const headers of anthropicShaped) {
      const list = await get("/v1/models", headers)
      expect(list.body).toMatchObject({ has_more: true, first_id: "smart", last_id: NAMES[19] })
      expect(list.body.object).toBeUndefined()
      expect((await get("/v1/models/smart", headers)).body).toMatchObject({ type: "model", id: "smart" })
    }
    const list = await get("/v1/models", { authorization: `Bearer ${key}` })
    expect(list.body.object).toBe("list")
    expect(list.body.has_more).toBeUndefined()
    expect((await get("/v1/models/smart", { authorization: `Bearer ${key}` })).body).toMatchObject({ object: "model", id: "smart" })
  })
})

describe("a key's allowed_models", () => {
  it("lists and retrieves only what the key may use, patterns included", async () => {
    const { key: scoped } = await gw.createKey({ allowed_models: ["claude-sonnet-*", "c1", "vendor/*"] })
    const scopedOpenAI = openaiFor(gw.url, scoped)
    const scopedAnthropic = anthropicFor(gw.url, scoped)
    const expected = ["smart", "claude-sonnet-4-5-20250929", "vendor/model-x", "c1", "claude-test-1-20250101"]
    const viaOpenAI = []
    for await (const model of scopedOpenAI.models.list()) viaOpenAI.push(model.id)
    expect(viaOpenAI).toEqual(expected)
    const viaAnthropic = []
    for await (const model of scopedAnthropic.models.list({ limit: 2 })) viaAnthropic.push(model.id)
    expect(viaAnthropic).toEqual(expected)

    expect(await scopedAnthropic.models.retrieve("claude-sonnet-4-6")).toMatchObject({ id: "claude-sonnet-4-6" })
    // Outside the scope a model answers as if it did not exist.
    for (const name of ["claude-opus-4-6", "fast", "c2", "gpt-5"]) {
      const error = await scopedAnthropic.models.retrieve(name).catch((e: unknown) => e)
      expect(error, name).toBeInstanceOf(Anthropic.NotFoundError)
    }
    const unknownCursor = await get("/v1/models?after_id=fast", { "x-api-key": scoped })
    expect(unknownCursor).toMatchObject({ status: 400, body: { error: "validation_failed", details: { field: "after_id" } } })
  })

  it("admits requests by pattern and refuses the rest with 403 scope_violation before any upstream call", async () => {
    const { key: scoped } = await gw.createKey({ allowed_models: ["claude-*"] })
    const client = anthropicFor(gw.url, scoped)
    const ok = await client.messages.create({ model: "claude-opus-4-6", max_tokens: 100, messages: [{ role: "user", content: "hi" }] })
    expect(ok.type).toBe("message")
    // `smart` is served by a Claude id, so the pattern covers it.
    await client.messages.create({ model: "smart", max_tokens: 100, messages: [{ role: "user", content: "hi" }] })
    expect(anthropicFake.requests).toHaveLength(2)
    const refused = await client.messages.create({ model: "gpt-5", max_tokens: 100, messages: [{ role: "user", content: "hi" }] }).catch((e: unknown) => e)
    expect(refused).toBeInstanceOf(Anthropic.PermissionDeniedError)
    expect((refused as InstanceType<typeof Anthropic.PermissionDeniedError>).error).toMatchObject({ error: "scope_violation", details: { model: "gpt-5" } })
    expect(openaiFake.requests).toHaveLength(0)
  })
})

describe("match routes on the model endpoints", () => {
  it("send the requested id upstream with the route's credits and cap", async () => {
    const before = await balance()
    const reply = await anthropic.messages.create({ model: "claude-haiku-4-5-20251001", max_tokens: 20_000, messages: [{ role: "user", content: "hi" }] })
    expect(reply.type).toBe("message")
    expect(anthropicFake.requests[0]!.body).toMatchObject({ model: "claude-haiku-4-5-20251001", max_tokens: 3000 })
    expect(before - (await balance())).toBe(7)

    const chat = await openai.chat.completions.create({ model: "gpt-5-mini", max_completion_tokens: 9000, messages: [{ role: "user", content: "hi" }] })
    expect(chat.object).toBe("chat.completion")
    expect(openaiFake.requests[0]!.body).toMatchObject({ model: "gpt-5-mini", max_completion_tokens: 2000 })
    expect(before - (await balance())).toBe(10)
  })

  it("leave exact names to their models and unknown names to 404 not_found", async () => {
    await anthropic.messages.create({ model: "claude-sonnet-4-5-20250929", max_tokens: 20_000, messages: [{ role: "user", content: "hi" }] })
    expect(anthropicFake.requests[0]!.body).toMatchObject({ model: "claude-sonnet-4-5-20250929", max_tokens: 8192 })
    const unknown = await openai.chat.completions.create({ model: "mistral-large", messages: [{ role: "user", content: "hi" }] }).catch((e: unknown) => e)
    expect(unknown).toBeInstanceOf(OpenAI.NotFoundError)
    expect((unknown as InstanceType<typeof OpenAI.NotFoundError>).error).toBe("not_found")
    const starred = await openai.chat.completions.create({ model: "claude-*", messages: [{ role: "user", content: "hi" }] }).catch((e: unknown) => e)
    expect(starred).toBeInstanceOf(OpenAI.NotFoundError)
    expect(openaiFake.requests).toHaveLength(0)
    expect(anthropicFake.requests).toHaveLength(1)
  })
})
