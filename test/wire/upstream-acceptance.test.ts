/**
 * What the wire package hands an upstream is a request that upstream accepts: the bodies built
 * by the passthrough and translation functions are sent to the fake vendors, which refuse what
 * the real APIs refuse (unknown fields at every level, a thinking budget >= max_tokens).
 */
import { Result } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  chatPassthroughBody,
  chatRequestToAnthropic,
  decodeChatRequest,
  decodeMessagesRequest,
  messagesPassthroughBody,
  messagesRequestToChat
} from "../../src/wire/index.ts"
import { startFakeAnthropic } from "../support/fake-anthropic.ts"
import type { FakeUpstream } from "../support/fake-common.ts"
import { startFakeOpenAI } from "../support/fake-openai.ts"
import { claudeCodeBody } from "./client-bodies.ts"

const KEY = "sk-upstream"
let anthropic: FakeUpstream
let openai: FakeUpstream

beforeAll(async () => {
  anthropic = await startFakeAnthropic({ apiKey: KEY })
  openai = await startFakeOpenAI({ apiKey: KEY })
})
afterAll(async () => {
  await anthropic.close()
  await openai.close()
})

const toAnthropic = async (body: unknown) => {
  const response = await fetch(`${anthropic.url}/v1/messages`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-api-key": KEY, "anthropic-version": "2023-06-01" },
    body: JSON.stringify({ ...(body as object), stream: false })
  })
  return { status: response.status, body: await response.json() as { error?: { message: string } } }
}

const toOpenAI = async (body: unknown) => {
  const { stream: _stream, stream_options: _options, ...rest } = body as Record<string, unknown>
  const response = await fetch(`${openai.url}/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${KEY}` },
    body: JSON.stringify(rest)
  })
  return { status: response.status, body: await response.json() as { error?: { message: string } } }
}

const success = <A>(result: { ok: true; value: A } | { ok: false; message: string }): A => {
  if (!result.ok) throw new Error(result.message)
  return result.value
}

describe("passthrough bodies are accepted by the vendor", () => {
  it("Claude Code's thinking request on a model capped below its max_tokens", async () => {
    const forwarded = success(messagesPassthroughBody(claudeCodeBody, { model: "claude-sonnet-4-5-20250929", maxTokensCap: 8192 }))
    expect((await toAnthropic(forwarded)).status).toBe(200)
    // Clamping max_tokens alone is what the provider refuses.
    const naive = await toAnthropic({ ...claudeCodeBody, max_tokens: 8192 })
    expect(naive.status).toBe(400)
    expect(naive.body.error?.message).toBe("`max_tokens` must be greater than `thinking.budget_tokens`")
  })

  it("a chat body with today's OpenAI fields", async () => {
    const body = {
      model: "gpt-5",
      messages: [{ role: "user", content: "hi" }],
      max_completion_tokens: 100_000,
      reasoning_effort: "low",
      store: false,
      prompt_cache_key: "k",
      safety_identifier: "u1"
    }
    expect((await toOpenAI(chatPassthroughBody(body, { model: "gpt-5-2025", maxTokensCap: 32768 }))).status).toBe(200)
  })
})

describe("translated bodies are accepted by the other vendor", () => {
  it("Claude Code's request, translated for an OpenAI-kind provider", async () => {
    const request = success(decodeMessagesRequest(claudeCodeBody))
    const translated = messagesRequestToChat(request, { model: "gpt-5", maxTokensCap: 16384 })
    if (Result.isFailure(translated)) throw new Error(translated.failure.message)
    const answer = await toOpenAI(translated.success)
    expect(answer.body.error?.message).toBeUndefined()
    expect(answer.status).toBe(200)
  })

  it("a chat request with today's OpenAI fields, translated for an Anthropic-kind provider", async () => {
    const request = success(decodeChatRequest({
      model: "gpt-5",
      messages: [
        { role: "developer", content: "Be brief." },
        { role: "user", content: [{ type: "text", text: "weather?", prompt_cache_breakpoint: { mode: "explicit" } }] },
        { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "weather", arguments: "{}" } }] },
        { role: "tool", tool_call_id: "call_1", content: "sunny", name: "weather" },
        { role: "system", content: "Answer in French." },
        { role: "user", content: [{ type: "file", file: { file_data: "data:application/pdf;base64,JVBERi0=", filename: "a.pdf" } }] }
      ],
      tools: [{ type: "function", function: { name: "weather", parameters: { type: "object" }, strict: true } }],
      reasoning_effort: "medium",
      store: true,
      service_tier: "auto",
      safety_identifier: "user-1",
      max_completion_tokens: 50_000
    }))
    const translated = chatRequestToAnthropic(request, { model: "claude-sonnet-4-5", maxTokensCap: 8192 })
    if (Result.isFailure(translated)) throw new Error(translated.failure.message)
    const answer = await toAnthropic(translated.success)
    expect(answer.body.error?.message).toBeUndefined()
    expect(answer.status).toBe(200)
  })
})
