/**
 * POST /v1/chat/completions refusals before any provider is called: every validation rule of
 * spec 4.1 answers 400 `validation_failed` naming the offending field's path, an unknown model
 * 404, a model outside the key's `allowed_models` 403, and none of them reaches the upstream.
 */
import OpenAI from "openai"
import { beforeAll, describe, expect, it } from "vitest"
import type { FakeUpstream } from "../support/fake-common.ts"
import { auditFor, type TestGateway } from "../support/gateway.ts"
import { OPENAI_KEY, useModelGateway } from "../support/model-gateway.ts"
import { openaiFor } from "../support/sdk-clients.ts"

const MODEL_ID = "gpt-4o-mini-2024-07-18"
const OTHER_ID = "gpt-4o-2024-08-06"

let fake: FakeUpstream
let gw: TestGateway
let key: string
let client: OpenAI

const fixture = useModelGateway({
  openaiModels: "any",
  providers: (_, urls) => [{ name: "fake-openai", kind: "openai", base_url: urls.openai, api_key: OPENAI_KEY }],
  models: () => [
    { alias: "fast", id: MODEL_ID, provider: "fake-openai" },
    { alias: "big", id: OTHER_ID, provider: "fake-openai" }
  ]
})

beforeAll(async () => {
  gw = fixture.gateway()
  fake = fixture.openaiFake()
  ;({ key } = await gw.createKey())
  client = openaiFor(gw.url, key)
})

const post = async (body: unknown, apiKey = key) => {
  const response = await fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${apiKey}` },
    body: typeof body === "string" ? body : JSON.stringify(body)
  })
  return { status: response.status, headers: response.headers, body: (await response.json()) as any }
}

const user = { role: "user", content: "hi" }
const base = { model: "fast", messages: [user] }
const weatherTool = { type: "function", function: { name: "get_weather", parameters: { type: "object" } } }

/** [what is wrong, body, the path the answer must name] */
const invalid: ReadonlyArray<readonly [string, Record<string, unknown>, string]> = [
  ["temperature above 2", { ...base, temperature: 2.5 }, "temperature"],
  ["temperature below 0", { ...base, temperature: -0.1 }, "temperature"],
  ["temperature as a string", { ...base, temperature: "1" }, "temperature"],
  ["five stop strings", { ...base, stop: ["a", "b", "c", "d", "e"] }, "stop"],
  ["stop as a number", { ...base, stop: 7 }, "stop"],
  ["a stop entry that is not a string", { ...base, stop: ["a", 1] }, "stop.1"],
  ["an unknown tool_choice word", { ...base, tools: [weatherTool], tool_choice: "sometimes" }, "tool_choice"],
  ["a tool_choice object of the wrong type", { ...base, tools: [weatherTool], tool_choice: { type: "tool", function: { name: "get_weather" } } }, "tool_choice.type"],
  ["a tool_choice object without a function name", { ...base, tools: [weatherTool], tool_choice: { type: "function", function: {} } }, "tool_choice.function.name"],
  ["an unknown response_format type", { ...base, response_format: { type: "xml" } }, "response_format.type"],
  ["a response_format without type", { ...base, response_format: {} }, "response_format.type"],
  ["an unknown role", { ...base, messages: [{ role: "robot", content: "beep" }] }, "messages.0.role"],
  ["a message without role", { ...base, messages: [user, { content: "who am I" }] }, "messages.1.role"],
  ["a tool message without tool_call_id", { ...base, messages: [user, { role: "tool", content: "42" }] }, "messages.1.tool_call_id"],
  ["a user message without content", { ...base, messages: [{ role: "user" }] }, "messages.0.content"],
  ["content of the wrong type", { ...base, messages: [{ role: "user", content: 42 }] }, "messages.0.content"],
  ["max_tokens of 0", { ...base, max_tokens: 0 }, "max_tokens"],
  ["a negative max_tokens", { ...base, max_tokens: -5 }, "max_tokens"],
  ["a fractional max_tokens", { ...base, max_tokens: 1.5 }, "max_tokens"],
  ["max_tokens as a string", { ...base, max_tokens: "10" }, "max_tokens"],
  ["an unknown top-level field", { ...base, frobnicate: true }, "frobnicate"],
  ["an unknown field in a message", { ...base, messages: [{ ...user, mood: "happy" }] }, "messages.0.mood"],
  ["an unknown field in a tool", { ...base, tools: [{ ...weatherTool, extra: 1 }] }, "tools.0.extra"],
  ["an unknown field in a tool's function", { ...base, tools: [{ type: "function", function: { name: "f", color: "red" } }] }, "tools.0.function.color"],
  ["an unknown field in stream_options", { ...base, stream: true, stream_options: { include_usage: true, verbose: true } }, "stream_options.verbose"],
  ["an unknown field in a content part", { ...base, messages: [{ role: "user", content: [{ type: "text", text: "x", lang: "en" }] }] }, "messages.0.content.0.lang"],
  ["a tool of a non-function type", { ...base, tools: [{ type: "retrieval" }] }, "tools.0.type"],
  ["stream that is not a boolean", { ...base, stream: "yes" }, "stream"],
  ["stream_options without stream", { ...base, stream_options: { include_usage: true } }, "stream_options"],
  ["a model that is not a string", { model: 5, messages: [user] }, "model"],
  ["a missing model", { messages: [user] }, "model"],
  ["missing messages", { model: "fast" }, "messages"],
  ["an empty messages array", { model: "fast", messages: [] }, "messages"],
  ["messages that are not an array", { model: "fast", messages: "hi" }, "messages"]
]

describe("validation", () => {
  for (const [what, body, path] of invalid) {
    it(`refuses ${what} with 400 naming ${path}`, async () => {
      const response = await post(body)
      expect(response.status).toBe(400)
      expect(response.body).toMatchObject({ status: 400, error: "validation_failed", details: { field: path } })
      expect(response.body.message).toMatch(new RegExp(`^${path.replace(/\./g, "\\.")}: `))
      expect(response.body.request_id).toBe(response.headers.get("x-request-id"))
      expect(fake.requests).toHaveLength(0)
    })
  }

  it("names the offending field once, then says what is wrong with it", async () => {
    expect((await post({ ...base, temperature: 3 })).body.message).toBe("temperature: expected a number between 0 and 2")
    expect((await post({ model: "fast" })).body.message).toBe("messages: required field missing")
    expect((await post({ ...base, frobnicate: true })).body.message).toBe("frobnicate: unknown field")
  })

  it("accepts the boundaries of each rule", async () => {
    const ok = [
      { ...base, temperature: 0 },
      { ...base, temperature: 2 },
      { ...base, stop: "END" },
      { ...base, stop: ["a", "b", "c", "d"] },
      { ...base, max_tokens: 1 },
      { ...base, tools: [weatherTool], tool_choice: "auto" },
      { ...base, tools: [weatherTool], tool_choice: "none" },
      { ...base, tools: [weatherTool], tool_choice: { type: "function", function: { name: "get_weather" } } },
      { ...base, messages: [{ role: "system", content: "Reply in JSON." }, user], response_format: { type: "json_object" } },
      {
        ...base,
        messages: [
          user,
          { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: "{}" } }] },
          { role: "tool", tool_call_id: "call_1", content: "{\"celsius\":20}" }
        ]
      }
    ]
    for (const body of ok) {
      const response = await post(body)
      expect(response.status, JSON.stringify(body)).toBe(200)
    }
    expect(fake.requests).toHaveLength(ok.length)
  })

  it("refuses malformed JSON and a body that is not an object", async () => {
    const malformed = await post('{"model": "fast", "messages": [')
    expect(malformed.status).toBe(400)
    expect(malformed.body.error).toBe("validation_failed")
    const array = await post([base])
    expect(array.status).toBe(400)
    expect(array.body.error).toBe("validation_failed")
    expect(fake.requests).toHaveLength(0)
  })

  it("surfaces as the SDK's BadRequestError with the slug and the request id", async () => {
    const error = await client.chat.completions
      .create({ model: "fast", messages: [{ role: "user", content: "hi" }], temperature: 9 })
      .catch((e: unknown) => e)
    expect(error).toBeInstanceOf(OpenAI.BadRequestError)
    const apiError = error as InstanceType<typeof OpenAI.BadRequestError>
    expect(apiError.status).toBe(400)
    expect(apiError.error).toBe("validation_failed")
    expect(apiError.requestID).toMatch(/^req_/)
    const records = await auditFor(gw, apiError.requestID!)
    expect(records).toMatchObject([{ status: 400, error: "validation_failed", endpoint: "/v1/chat/completions" }])
  })

  it("refuses a streaming request before any stream starts: a JSON 400, not an event stream", async () => {
    const response = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
      body: JSON.stringify({ ...base, stream: true, temperature: 5 })
    })
    expect(response.status).toBe(400)
    expect(response.headers.get("content-type")).toMatch(/^application\/json/)
    expect(((await response.json()) as any).details.field).toBe("temperature")
  })
})

describe("model resolution and scope", () => {
  it("answers 404 not_found for an unknown model", async () => {
    const response = await post({ ...base, model: "gpt-9-ultra" })
    expect(response.status).toBe(404)
    expect(response.body).toMatchObject({ status: 404, error: "not_found" })
    expect(response.body.message).toContain("gpt-9-ultra")
    const error = await client.chat.completions.create({ model: "gpt-9-ultra", messages: [user as never] }).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(OpenAI.NotFoundError)
    const records = await auditFor(gw, (error as InstanceType<typeof OpenAI.NotFoundError>).requestID!)
    expect(records).toMatchObject([{ status: 404, error: "not_found", model: null }])
    expect(fake.requests).toHaveLength(0)
  })

  it("answers 403 scope_violation for a model outside the key's allowed_models, by alias or by id", async () => {
    const { key: limited, id } = await gw.createKey({ allowed_models: ["fast"] })
    expect((await post({ ...base, model: "fast" }, limited)).status).toBe(200)
    expect((await post({ ...base, model: MODEL_ID }, limited)).status).toBe(200)
    for (const model of ["big", OTHER_ID]) {
      const response = await post({ ...base, model }, limited)
      expect(response.status).toBe(403)
      expect(response.body).toMatchObject({ status: 403, error: "scope_violation" })
      const records = await auditFor(gw, response.body.request_id)
      expect(records).toMatchObject([{ status: 403, error: "scope_violation", key_id: id, model: OTHER_ID }])
    }
    const limitedClient = openaiFor(gw.url, limited)
    const error = await limitedClient.chat.completions.create({ model: "big", messages: [user as never] }).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(OpenAI.PermissionDeniedError)
    expect(fake.requests).toHaveLength(2)
  })

  it("checks validation before the model: an invalid body naming an unknown model is a 400", async () => {
    const response = await post({ model: "gpt-9-ultra", messages: [user], temperature: 3 })
    expect(response.status).toBe(400)
    expect(response.body.details.field).toBe("temperature")
  })

  it("refuses a request without a valid key with 401 before looking at the body", async () => {
    const response = await post({ model: 5 }, "sk-mg-" + "0".repeat(32))
    expect(response.status).toBe(401)
    expect(response.body.error).toBe("unauthorized")
    expect(fake.requests).toHaveLength(0)
  })
})
