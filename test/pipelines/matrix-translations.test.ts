/**
 * The translation details behind the matrix, through the real server: every row of the
 * stop-reason table (docs/wire-translation.md 3.5) both ways and in both modes, JSON mode toward Anthropic,
 * sampling and limits, `user` <-> `metadata.user_id`, merged tool results and the other
 * request rewrites, each checked on what the fake upstream received.
 */
import Anthropic from "@anthropic-ai/sdk"
import OpenAI from "openai"
import type { ChatCompletionStreamParams } from "openai/lib/ChatCompletionStream"
import { createHash } from "node:crypto"
import { beforeAll, describe, expect, it } from "vitest"
import type { FakeUpstream, JsonBody } from "../support/fake-common.ts"
import type { TestGateway } from "../support/gateway.ts"
import { useModelGateway } from "../support/model-gateway.ts"
import { anthropicFor, openaiFor } from "../support/sdk-clients.ts"

const GPT_ID = "gpt-4.1-2025-04-14"
const CLAUDE_ID = "claude-opus-4-1-20250805"
const CAP = 2048

let openaiFake: FakeUpstream
let anthropicFake: FakeUpstream
let gw: TestGateway
let chat: OpenAI
let messages: Anthropic

const fixture = useModelGateway({ gptId: GPT_ID, claudeId: CLAUDE_ID, cap: CAP })

beforeAll(async () => {
  gw = fixture.gateway()
  openaiFake = fixture.openaiFake()
  anthropicFake = fixture.anthropicFake()
  const { key } = await gw.createKey()
  chat = openaiFor(gw.url, key)
  messages = anthropicFor(gw.url, key)
})

const MODES = ["non-streaming", "streaming"] as const
type Mode = (typeof MODES)[number]

const chatCompletion = (params: ChatCompletionStreamParams, mode: Mode) =>
  mode === "streaming"
    ? chat.chat.completions.stream({ ...params, stream_options: { include_usage: true } }).finalChatCompletion()
    : chat.chat.completions.create({ ...params, stream: false })

const anthropicMessage = (params: Anthropic.MessageCreateParamsNonStreaming, mode: Mode) =>
  mode === "streaming" ? messages.messages.stream(params).finalMessage() : messages.messages.create(params)

const sentToAnthropic = (i = 0): JsonBody => anthropicFake.requests[i]!.body!
const sentToOpenAI = (i = 0): JsonBody => openaiFake.requests[i]!.body!

const weatherTool: OpenAI.Chat.ChatCompletionFunctionTool = {
  type: "function",
  function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } }
}

const anthropicWeatherTool: Anthropic.Tool = {
  name: "get_weather",
  input_schema: { type: "object", properties: { city: { type: "string" } } }
}

describe("stop reasons follow reference table 3.5 in both modes", () => {
  const anthropicToChat = [
    { upstream: "end_turn", client: "stop" },
    { upstream: "stop_sequence", client: "stop" },
    { upstream: "max_tokens", client: "length" },
    { upstream: "refusal", client: "content_filter" },
    { upstream: "pause_turn", client: "stop" },
    { upstream: "model_context_window_exceeded", client: "length" }
  ]
  it.each(MODES.flatMap((mode) => anthropicToChat.map((row) => ({ ...row, mode }))))(
    "anthropic $upstream -> chat $client ($mode)",
    async ({ upstream, client, mode }) => {
      anthropicFake.enqueue({ kind: "text", text: "Some answer here.", finish: upstream })
      const completion = await chatCompletion({ model: "claude", messages: [{ role: "user", content: "go" }] }, mode)
      expect(completion.choices[0]!.finish_reason).toBe(client)
      expect(completion.choices[0]!.message.content).toBe("Some answer here.")
    }
  )

  const chatToAnthropic = [
    { upstream: "stop", client: "end_turn" },
    { upstream: "length", client: "max_tokens" },
    { upstream: "content_filter", client: "refusal" }
  ]
  it.each(MODES.flatMap((mode) => chatToAnthropic.map((row) => ({ ...row, mode }))))(
    "openai $upstream -> anthropic $client ($mode)",
    async ({ upstream, client, mode }) => {
      openaiFake.enqueue({ kind: "text", text: "Some answer here.", finish: upstream })
      const message = await anthropicMessage({ model: "gpt", max_tokens: 100, messages: [{ role: "user", content: "go" }] }, mode)
      expect(message.stop_reason).toBe(client)
      expect(message.stop_sequence).toBeNull()
      expect(message.content).toEqual([{ type: "text", text: "Some answer here." }])
    }
  )
})

describe("answers without text, in both modes, either way", () => {
  it.each(MODES)("chat client <- anthropic tool calls only: content null, finish tool_calls (%s)", async (mode) => {
    anthropicFake.enqueue({ kind: "tool_calls", calls: [{ id: "toolu_01only", name: "get_weather", arguments: {} }] })
    const completion = await chatCompletion({ model: "claude", messages: [{ role: "user", content: "Weather?" }], tools: [weatherTool] }, mode)
    const choice = completion.choices[0]!
    expect(choice.finish_reason).toBe("tool_calls")
    expect(choice.message.content).toBeNull()
    // A call without arguments still carries a JSON object the client can parse.
    expect(choice.message.tool_calls).toEqual([{ id: "call_01only", type: "function", function: { name: "get_weather", arguments: "{}" } }])
  })

  it.each(MODES)("anthropic client <- openai tool calls only: tool_use blocks only, stop tool_use (%s)", async (mode) => {
    openaiFake.enqueue({ kind: "tool_calls", calls: [{ id: "call_only", name: "get_weather", arguments: {} }] })
    const message = await anthropicMessage({ model: "gpt", max_tokens: 64, messages: [{ role: "user", content: "Weather?" }], tools: [anthropicWeatherTool] }, mode)
    expect(message.content).toEqual([{ type: "tool_use", id: "toolu_only", name: "get_weather", input: {} }])
    expect(message.stop_reason).toBe("tool_use")
  })

  it.each(MODES)("an empty answer is empty content, not an empty text block (%s)", async (mode) => {
    anthropicFake.enqueue({ kind: "text", text: "" })
    openaiFake.enqueue({ kind: "text", text: "" })
    const completion = await chatCompletion({ model: "claude", messages: [{ role: "user", content: "Say nothing." }] }, mode)
    expect(completion.choices[0]!.message.content ?? "").toBe("")
    expect(completion.choices[0]!.finish_reason).toBe("stop")
    const message = await anthropicMessage({ model: "gpt", max_tokens: 64, messages: [{ role: "user", content: "Say nothing." }] }, mode)
    expect(message.content).toEqual([])
    expect(message.stop_reason).toBe("end_turn")
  })
})

describe("chat client -> anthropic-kind provider", () => {
  it.each(MODES)("honours response_format json_object: the content is the JSON, finish stop, no tool calls (%s)", async (mode) => {
    const answer = { city: "Paris", population: 2_102_650, capital: true }
    anthropicFake.enqueue({ kind: "tool_calls", calls: [{ name: "json_response", arguments: answer }] })
    const completion = await chatCompletion({
      model: "claude",
      messages: [{ role: "user", content: "Describe Paris as a JSON object." }],
      response_format: { type: "json_object" }
    }, mode)
    const choice = completion.choices[0]!
    expect(choice.finish_reason).toBe("stop")
    expect(JSON.parse(choice.message.content!)).toEqual(answer)
    expect(choice.message.tool_calls ?? []).toEqual([])
    // Emulated with a forced tool whose input is the JSON (docs/wire-translation.md 3.7, strategy 2).
    const sent = sentToAnthropic()
    expect(sent.tool_choice).toEqual({ type: "tool", name: "json_response" })
    expect(sent.tools).toEqual([{
      name: "json_response",
      description: expect.any(String),
      input_schema: { type: "object", additionalProperties: true, properties: {} }
    }])
  })

  it.each(MODES)("honours response_format json_schema with the schema as the tool's input (%s)", async (mode) => {
    const schema = { type: "object", properties: { answer: { type: "integer" } }, required: ["answer"], additionalProperties: false }
    anthropicFake.enqueue({ kind: "tool_calls", calls: [{ name: "json_response", arguments: { answer: 42 } }] })
    const completion = await chatCompletion({
      model: "claude",
      messages: [{ role: "user", content: "What is six times seven?" }],
      response_format: { type: "json_schema", json_schema: { name: "product", schema, strict: true } }
    }, mode)
    expect(completion.choices[0]!.finish_reason).toBe("stop")
    expect(JSON.parse(completion.choices[0]!.message.content!)).toEqual({ answer: 42 })
    expect(sentToAnthropic().tools[0].input_schema).toEqual(schema)
  })

  it("clamps temperature above 1 to 1 and leaves other values alone (Anthropic refuses more than 1)", async () => {
    await chat.chat.completions.create({ model: "claude", messages: [{ role: "user", content: "a" }], temperature: 1.7 })
    await chat.chat.completions.create({ model: "claude", messages: [{ role: "user", content: "b" }], temperature: 0.3 })
    await chat.chat.completions.create({ model: "claude", messages: [{ role: "user", content: "c" }], temperature: 1.2, top_p: 1 })
    expect(sentToAnthropic(0).temperature).toBe(1)
    expect(sentToAnthropic(1).temperature).toBe(0.3)
    expect(sentToAnthropic(2).temperature).toBe(1)
    expect(sentToAnthropic(2)).not.toHaveProperty("top_p")
  })

  it("sends the model's cap as max_tokens when the client gave none, clamps larger limits, keeps smaller ones", async () => {
    const ask = (extra: Partial<OpenAI.Chat.ChatCompletionCreateParamsNonStreaming>) =>
      chat.chat.completions.create({ model: "claude", messages: [{ role: "user", content: "hi" }], ...extra })
    await ask({})
    await ask({ max_tokens: 100_000 })
    await ask({ max_tokens: 77 })
    await ask({ max_completion_tokens: 55, max_tokens: 99 })
    expect(anthropicFake.requests.map((r) => r.body!.max_tokens)).toEqual([CAP, CAP, 77, 55])
  })

  it("maps user to metadata.user_id, hashing what looks like an email or phone number", async () => {
    await chat.chat.completions.create({ model: "claude", messages: [{ role: "user", content: "hi" }], user: "user-7781" })
    await chat.chat.completions.create({ model: "claude", messages: [{ role: "user", content: "hi" }], user: "ada@example.com" })
    expect(sentToAnthropic(0).metadata).toEqual({ user_id: "user-7781" })
    expect(sentToAnthropic(1).metadata).toEqual({ user_id: createHash("sha256").update("ada@example.com").digest("hex") })
  })

  it("merges consecutive tool results, and the user text after them, into one user turn; drops empty text", async () => {
    anthropicFake.enqueue({ kind: "text", text: "Paris 21, London 14, Rome: asking next." })
    const completion = await chat.chat.completions.create({
      model: "claude",
      tools: [weatherTool],
      messages: [
        { role: "system", content: "Be brief." },
        { role: "system", content: "" },
        { role: "user", content: "Weather in Paris and London?" },
        {
          role: "assistant",
          content: "",
          tool_calls: [
            { id: "call_p", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
            { id: "call_l", type: "function", function: { name: "get_weather", arguments: '{"city":"London"}' } }
          ]
        },
        { role: "tool", tool_call_id: "call_p", content: "21" },
        { role: "tool", tool_call_id: "call_l", content: [{ type: "text", text: "14" }] },
        { role: "user", content: "And Rome?" }
      ]
    })
    expect(completion.choices[0]!.message.content).toBe("Paris 21, London 14, Rome: asking next.")
    const sent = sentToAnthropic()
    expect(sent.system).toEqual([{ type: "text", text: "Be brief." }])
    expect(sent.messages).toEqual([
      { role: "user", content: [{ type: "text", text: "Weather in Paris and London?" }] },
      {
        role: "assistant",
        content: [
          { type: "tool_use", id: "toolu_p", name: "get_weather", input: { city: "Paris" } },
          { type: "tool_use", id: "toolu_l", name: "get_weather", input: { city: "London" } }
        ]
      },
      {
        role: "user",
        content: [
          { type: "tool_result", tool_use_id: "toolu_p", content: "21" },
          { type: "tool_result", tool_use_id: "toolu_l", content: [{ type: "text", text: "14" }] },
          { type: "text", text: "And Rome?" }
        ]
      }
    ])
  })

  it("makes foreign tool ids acceptable to Anthropic, the same way on the call and on its result", async () => {
    await chat.chat.completions.create({
      model: "claude",
      tools: [weatherTool],
      messages: [
        { role: "user", content: "Weather?" },
        { role: "assistant", content: null, tool_calls: [{ id: "functions.get_weather:0", type: "function", function: { name: "get_weather", arguments: "" } }] },
        { role: "tool", tool_call_id: "functions.get_weather:0", content: "sunny" }
      ]
    })
    const [, assistant, results] = sentToAnthropic().messages as Array<JsonBody>
    const id = assistant!.content[0].id as string
    expect(id).toMatch(/^[a-zA-Z0-9_-]+$/)
    expect(assistant!.content).toEqual([{ type: "tool_use", id, name: "get_weather", input: {} }])
    expect(results!.content).toEqual([{ type: "tool_result", tool_use_id: id, content: "sunny" }])
  })

  it("maps stop, tool_choice and parallel_tool_calls", async () => {
    const base = { model: "claude", messages: [{ role: "user" as const, content: "hi" }], tools: [weatherTool] }
    await chat.chat.completions.create({ ...base, stop: ["END", "  ", "\n\n"] })
    await chat.chat.completions.create({ ...base, tool_choice: "required", parallel_tool_calls: false })
    await chat.chat.completions.create({ ...base, tool_choice: { type: "function", function: { name: "get_weather" } } })
    await chat.chat.completions.create({ ...base, tool_choice: "none" })
    await chat.chat.completions.create({ ...base, parallel_tool_calls: false })
    // Whitespace-only stop sequences are refused by Anthropic, so they are left out.
    expect(sentToAnthropic(0).stop_sequences).toEqual(["END"])
    expect(sentToAnthropic(1).tool_choice).toEqual({ type: "any", disable_parallel_tool_use: true })
    expect(sentToAnthropic(2).tool_choice).toEqual({ type: "tool", name: "get_weather" })
    expect(sentToAnthropic(3).tool_choice).toEqual({ type: "none" })
    expect(sentToAnthropic(4).tool_choice).toEqual({ type: "auto", disable_parallel_tool_use: true })
  })

  it("turns image parts into image blocks", async () => {
    await chat.chat.completions.create({
      model: "claude",
      messages: [{
        role: "user",
        content: [
          { type: "text", text: "Compare these." },
          { type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0KGgo=", detail: "high" } },
          { type: "image_url", image_url: { url: "https://example.com/cat.jpg" } }
        ]
      }]
    })
    expect(sentToAnthropic().messages[0].content).toEqual([
      { type: "text", text: "Compare these." },
      { type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } },
      { type: "image", source: { type: "url", url: "https://example.com/cat.jpg" } }
    ])
  })

  it.each([
    { name: "seed", extra: { seed: 7 }, field: "seed" },
    { name: "a presence penalty", extra: { presence_penalty: 0.5 }, field: "presence_penalty" },
    { name: "temperature and top_p both set", extra: { temperature: 0.5, top_p: 0.8 }, field: "top_p" }
  ])("refuses $name with a 400 that says it cannot be translated", async ({ extra, field }) => {
    const error = await chat.chat.completions.create({ model: "claude", messages: [{ role: "user", content: "hi" }], ...extra })
      .then(() => undefined, (e: unknown) => e)
    expect(error).toBeInstanceOf(OpenAI.BadRequestError)
    const response = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${chat.apiKey}` },
      body: JSON.stringify({ model: "claude", messages: [{ role: "user", content: "hi" }], ...extra })
    })
    const envelope = await response.json() as JsonBody
    expect(response.status).toBe(400)
    expect(envelope).toMatchObject({ error: "validation_failed", details: { field, reason: "untranslatable" } })
    expect(envelope.message).toMatch(/cannot be translated/)
    expect(anthropicFake.requests).toHaveLength(0)
  })
})

describe("anthropic client -> openai-kind provider", () => {
  it("maps metadata.user_id, stop_sequences, sampling, tool_choice and the system blocks", async () => {
    await messages.messages.create({
      model: "gpt",
      max_tokens: 64,
      system: [{ type: "text", text: "Be brief." }, { type: "text", text: "Use metric units." }],
      messages: [{ role: "user", content: "hi" }],
      metadata: { user_id: "user-42" },
      stop_sequences: ["END", "STOP"],
      tools: [anthropicWeatherTool],
      tool_choice: { type: "any", disable_parallel_tool_use: true }
    })
    await messages.messages.create({
      model: "gpt",
      max_tokens: 64,
      messages: [{ role: "user", content: "hi" }],
      tools: [anthropicWeatherTool],
      tool_choice: { type: "tool", name: "get_weather" }
    })
    const sent = sentToOpenAI(0)
    expect(sent).toEqual({
      model: GPT_ID,
      messages: [{ role: "system", content: "Be brief.\n\nUse metric units." }, { role: "user", content: "hi" }],
      max_completion_tokens: 64,
      stop: ["END", "STOP"],
      tools: [{ type: "function", function: { name: "get_weather", parameters: anthropicWeatherTool.input_schema } }],
      tool_choice: "required",
      parallel_tool_calls: false,
      user: "user-42"
    })
    expect(sentToOpenAI(1).tool_choice).toEqual({ type: "function", function: { name: "get_weather" } })
  })

  it("puts tool results first, as tool messages, then the rest of the user turn; marks errors", async () => {
    openaiFake.enqueue({ kind: "text", text: "Noted." })
    await messages.messages.create({
      model: "gpt",
      max_tokens: 64,
      tools: [anthropicWeatherTool],
      messages: [
        { role: "user", content: "Weather in Oslo and Bergen?" },
        {
          role: "assistant",
          content: [
            { type: "text", text: "Checking." },
            { type: "tool_use", id: "toolu_01osl", name: "get_weather", input: { city: "Oslo" } },
            { type: "tool_use", id: "toolu_01brg", name: "get_weather", input: { city: "Bergen" } }
          ]
        },
        {
          role: "user",
          content: [
            { type: "text", text: "Here you go." },
            { type: "tool_result", tool_use_id: "toolu_01osl", content: [{ type: "text", text: "-2" }] },
            { type: "tool_result", tool_use_id: "toolu_01brg", content: "station offline", is_error: true }
          ]
        }
      ]
    })
    expect(sentToOpenAI().messages).toEqual([
      { role: "user", content: "Weather in Oslo and Bergen?" },
      {
        role: "assistant",
        content: "Checking.",
        tool_calls: [
          { id: "call_01osl", type: "function", function: { name: "get_weather", arguments: '{"city":"Oslo"}' } },
          { id: "call_01brg", type: "function", function: { name: "get_weather", arguments: '{"city":"Bergen"}' } }
        ]
      },
      { role: "tool", tool_call_id: "call_01osl", content: "-2", name: "get_weather" },
      { role: "tool", tool_call_id: "call_01brg", content: "Error: station offline", name: "get_weather" },
      { role: "user", content: "Here you go." }
    ])
  })

  it.each(MODES)("never hands the client a whitespace-only text block it could not send back (%s)", async (mode) => {
    openaiFake.enqueue({ kind: "tool_calls", text: "\n\n", calls: [{ id: "call_ws1", name: "get_weather", arguments: { city: "Nice" } }] })
    const message = await anthropicMessage({
      model: "gpt",
      max_tokens: 64,
      tools: [anthropicWeatherTool],
      messages: [{ role: "user", content: "Weather in Nice?" }]
    }, mode)
    expect(message.content).toEqual([{ type: "tool_use", id: "toolu_ws1", name: "get_weather", input: { city: "Nice" } }])
    expect(message.stop_reason).toBe("tool_use")
  })
})

describe("an anthropic-kind provider as Anthropic validates it", () => {
  it.each(MODES)("accepts a chat client's replayed history after a whitespace answer and a trailing-space prefill (%s)", async (mode) => {
    await chatCompletion({
      model: "claude",
      messages: [
        { role: "user", content: "Say something." },
        { role: "assistant", content: "   " },
        { role: "user", content: "Now finish my sentence." },
        { role: "assistant", content: "The sky is " }
      ]
    }, mode)
    expect(sentToAnthropic().messages).toEqual([
      { role: "user", content: [{ type: "text", text: "Say something." }, { type: "text", text: "Now finish my sentence." }] },
      { role: "assistant", content: [{ type: "text", text: "The sky is" }] }
    ])
  })
})
