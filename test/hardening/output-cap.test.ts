/**
 * Issue 22, finding 2: the model's `max_tokens` is the operator's cost ceiling, so it reaches the
 * upstream on every request, in the field that vendor reads, also when the client names no
 * limit (chat completions to an OpenAI-kind model, /v1/responses forwarded or translated).
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import type { FakeUpstream } from "../support/fake-common.ts"
import { startFakeOpenAI } from "../support/fake-openai.ts"
import { startFakeOpenAIResponses } from "../support/fake-openai-responses.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

const OPENAI_KEY = "sk-fake-openai-0123456789abcdef"
const CAP = 321

let responsesFake: FakeUpstream
let chatFake: FakeUpstream
let gw: TestGateway
let key: string

beforeAll(async () => {
  ;[responsesFake, chatFake] = await Promise.all([
    startFakeOpenAIResponses({ apiKey: OPENAI_KEY }),
    startFakeOpenAI({ apiKey: OPENAI_KEY })
  ])
  gw = await startGateway(testConfig({
    providers: [
      { name: "openai-responses", kind: "openai", base_url: responsesFake.url, api_key: OPENAI_KEY, responses_api: true },
      { name: "openai-chat", kind: "openai", base_url: chatFake.url, api_key: OPENAI_KEY }
    ],
    models: [
      { alias: "gpt-r", id: "gpt-5.5", provider: "openai-responses", max_tokens: CAP },
      { alias: "gpt-c", id: "gpt-4o-mini-2024-07-18", provider: "openai-chat", max_tokens: CAP }
    ]
  }))
  key = (await gw.createKey()).key
})
afterAll(async () => {
  await gw?.close()
  await Promise.all([responsesFake?.close(), chatFake?.close()])
})
beforeEach(() => {
  responsesFake.reset()
  chatFake.reset()
})

const post = async (path: string, body: unknown) => {
  const response = await fetch(`${gw.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify(body)
  })
  const text = await response.text()
  expect(response.status, text.slice(0, 300)).toBe(200)
  return text
}

describe("the model's output cap is always sent upstream", () => {
  it("chat completions without a limit: max_completion_tokens is the cap (plain and streamed)", async () => {
    await post("/v1/chat/completions", { model: "gpt-c", messages: [{ role: "user", content: "hi" }] })
    await post("/v1/chat/completions", { model: "gpt-c", messages: [{ role: "user", content: "hi" }], stream: true })
    for (const request of chatFake.requests) {
      expect(request.body).toMatchObject({ max_completion_tokens: CAP })
      expect(request.body).not.toHaveProperty("max_tokens")
    }
    expect(chatFake.requests).toHaveLength(2)
  })

  it("chat completions with explicit nulls: the nulls are dropped and the cap sent", async () => {
    await post("/v1/chat/completions", { model: "gpt-c", messages: [{ role: "user", content: "hi" }], max_tokens: null, max_completion_tokens: null })
    expect(chatFake.requests[0]!.body).toMatchObject({ max_completion_tokens: CAP })
    expect(chatFake.requests[0]!.body).not.toHaveProperty("max_tokens")
  })

  it("a smaller limit stays, in the client's field", async () => {
    await post("/v1/chat/completions", { model: "gpt-c", messages: [{ role: "user", content: "hi" }], max_tokens: 5 })
    expect(chatFake.requests[0]!.body).toMatchObject({ max_tokens: 5 })
    expect(chatFake.requests[0]!.body).not.toHaveProperty("max_completion_tokens")
  })

  it("/v1/responses forwarded to a Responses provider without a limit: max_output_tokens is the cap", async () => {
    await post("/v1/responses", { model: "gpt-r", input: "hi" })
    await post("/v1/responses", { model: "gpt-r", input: "hi", max_output_tokens: null })
    for (const request of responsesFake.requests) expect(request.body).toMatchObject({ max_output_tokens: CAP })
    expect(responsesFake.requests).toHaveLength(2)
  })

  it("/v1/responses translated to chat completions without a limit: the cap is sent", async () => {
    await post("/v1/responses", { model: "gpt-c", input: "hi" })
    expect(chatFake.requests).toHaveLength(1)
    const body = chatFake.requests[0]!.body!
    expect(body.max_tokens ?? body.max_completion_tokens).toBe(CAP)
  })
})
