import { APIError } from "openai"
import { describe, expect, it } from "vitest"
import type { AnthropicResponse, AnthropicStreamEvent } from "../../src/wire/anthropic-messages.ts"
import type { ChatChunk, ChatDelta, ChatResponse, ChatToolCallDelta, ChatUsage } from "../../src/wire/openai-chat.ts"
import { decodeResponsesRequest, type ResponsesRequest, type ResponsesStreamEvent } from "../../src/wire/openai-responses.ts"
import { ResponsesPassthroughStream } from "../../src/wire/responses-stream.ts"
import { AnthropicToChatStream } from "../../src/wire/translate/anthropic-to-chat-stream.ts"
import { auditUsageFromResponses, chatResponseToResponses } from "../../src/wire/translate/chat-response-to-responses.ts"
import { ChatToResponsesStream, type ChatToResponsesStreamOptions } from "../../src/wire/translate/chat-to-responses-stream.ts"
import { anthropicResponseToChat } from "../../src/wire/translate/responses.ts"
import { iterateThroughSdk, offlineClient, streamThroughSdk } from "./responses-sdk.ts"

const usage: ChatUsage = {
  prompt_tokens: 2006,
  completion_tokens: 17,
  total_tokens: 2023,
  prompt_tokens_details: { cached_tokens: 1920 },
  completion_tokens_details: { reasoning_tokens: 5 }
}

const chunk = (delta: ChatDelta & Record<string, unknown>, finish: string | null = null): ChatChunk => ({
  id: "chatcmpl-up",
  object: "chat.completion.chunk",
  created: 1,
  model: "up",
  choices: [{ index: 0, delta, finish_reason: finish as never, logprobs: null }]
})
const usageChunk = (value: ChatUsage = usage): ChatChunk => ({ id: "chatcmpl-up", object: "chat.completion.chunk", created: 1, model: "up", choices: [], usage: value })
const toolStart = (index: number | undefined, id: string, name: string | undefined, args = ""): ChatToolCallDelta => ({
  ...(index === undefined ? {} : { index }),
  id,
  type: "function",
  function: { ...(name === undefined ? {} : { name }), arguments: args }
})
const toolArgs = (index: number, args: string): ChatToolCallDelta => ({ index, function: { arguments: args } })

const run = (chunks: ReadonlyArray<ChatChunk>, options: Partial<ChatToResponsesStreamOptions> = {}) => {
  const machine = new ChatToResponsesStream({ model: "fast", id: "resp_test", createdAt: 100, ...options })
  const events = [...chunks.flatMap((item) => machine.push(item)), ...machine.end()]
  return { machine, events }
}

/** What every translated stream must satisfy, whatever the SDK says. */
const expectInvariants = (events: ReadonlyArray<ResponsesStreamEvent>) => {
  events.forEach((event, index) => expect(event.sequence_number).toBe(index))
  expect(events[0]?.type).toBe("response.created")
  expect(events[1]?.type).toBe("response.in_progress")
  const terminal = events.filter((event) => ["response.completed", "response.incomplete", "response.failed"].includes(event.type))
  expect(terminal).toHaveLength(1)
  expect(events.at(-1)).toBe(terminal[0])
  const open = new Set<number>()
  const done = new Set<number>()
  for (const event of events) {
    if (event.type === "response.output_item.added") {
      expect(open.has(event.output_index) || done.has(event.output_index)).toBe(false)
      expect(event.output_index).toBe(open.size + done.size)
      open.add(event.output_index)
    } else if (event.type === "response.output_item.done") {
      expect(open.delete(event.output_index)).toBe(true)
      done.add(event.output_index)
    } else if ("output_index" in event) {
      expect(open.has(event.output_index as number)).toBe(true)
    }
  }
  if (terminal[0]?.type !== "response.failed") expect(open.size).toBe(0)
}

const types = (events: ReadonlyArray<ResponsesStreamEvent>) => events.map((event) => event.type)

describe("ChatToResponsesStream", () => {
  it("streams text in OpenAI's exact event sequence, and the SDK assembles it", async () => {
    const { machine, events } = run([
      chunk({ role: "assistant", content: "" }),
      chunk({ content: "Hello" }),
      chunk({ content: " world" }),
      chunk({}, "stop"),
      usageChunk()
    ])
    expectInvariants(events)
    expect(types(events)).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.content_part.added",
      "response.output_text.delta",
      "response.output_text.delta",
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.completed"
    ])
    expect(events[6]).toMatchObject({ type: "response.output_text.done", text: "Hello world", content_index: 0, output_index: 0 })
    expect(machine.usage()).toEqual({ input_tokens: 86, output_tokens: 17, cache_read_tokens: 1920, cache_write_tokens: 0 })
    expect(machine.completed()).toBe(true)

    const { final, seen } = await streamThroughSdk(events)
    expect(seen.map((event) => event.sequence_number)).toEqual(events.map((_, index) => index))
    expect(final.id).toBe("resp_test")
    expect(final.status).toBe("completed")
    expect(final.output_text).toBe("Hello world")
    expect(final.usage).toEqual({
      input_tokens: 2006,
      input_tokens_details: { cached_tokens: 1920, cache_write_tokens: 0 },
      output_tokens: 17,
      output_tokens_details: { reasoning_tokens: 5 },
      total_tokens: 2023
    })
  })

  it("streams text then tool calls as a message item and function_call items", async () => {
    const { events } = run([
      chunk({ role: "assistant", content: "Checking." }),
      chunk({ tool_calls: [toolStart(0, "call_a", "get_weather")] }),
      chunk({ tool_calls: [toolArgs(0, "{\"city\":")] }),
      chunk({ tool_calls: [toolArgs(0, "\"Paris\"}")] }),
      chunk({ tool_calls: [toolStart(1, "call_b", "get_time", "{}")] }),
      chunk({}, "tool_calls"),
      usageChunk()
    ])
    expectInvariants(events)
    expect(types(events).slice(2)).toEqual([
      "response.output_item.added",
      "response.content_part.added",
      "response.output_text.delta",
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.output_item.added",
      "response.function_call_arguments.delta",
      "response.function_call_arguments.delta",
      "response.output_item.added",
      "response.function_call_arguments.delta",
      "response.function_call_arguments.done",
      "response.output_item.done",
      "response.function_call_arguments.done",
      "response.output_item.done",
      "response.completed"
    ])
    const { final } = await streamThroughSdk(events)
    expect(final.output_text).toBe("Checking.")
    expect(final.output.map((item) => item.type)).toEqual(["message", "function_call", "function_call"])
    expect(final.output.slice(1)).toMatchObject([
      { type: "function_call", call_id: "call_a", name: "get_weather", arguments: "{\"city\":\"Paris\"}", status: "completed" },
      { type: "function_call", call_id: "call_b", name: "get_time", arguments: "{}", status: "completed" }
    ])
  })

  it("keeps interleaved parallel calls apart, waits for late names, and numbers index-less calls", async () => {
    const { events } = run([
      chunk({ role: "assistant", content: null, tool_calls: [toolStart(0, "call_a", "f", "{\"a\":")] }),
      chunk({ tool_calls: [toolStart(1, "call_b", undefined, "{\"b\":")] }),
      chunk({ tool_calls: [toolArgs(0, "1}")] }),
      chunk({ tool_calls: [{ index: 1, function: { name: "g", arguments: "2}" } }] }),
      chunk({ tool_calls: [toolStart(2, "call_nameless", undefined, "{}")] }),
      chunk({}, "tool_calls"),
      usageChunk()
    ])
    expectInvariants(events)
    const { final } = await streamThroughSdk(events)
    expect(final.output).toMatchObject([
      { type: "function_call", call_id: "call_a", name: "f", arguments: "{\"a\":1}" },
      { type: "function_call", call_id: "call_b", name: "g", arguments: "{\"b\":2}" }
    ])

    const gemini = run([
      chunk({ role: "assistant", tool_calls: [toolStart(undefined, "c1", "f", "{\"x\":1}")] }),
      chunk({ tool_calls: [toolStart(undefined, "c2", "f", "")] }),
      chunk({}, "stop"),
      usageChunk()
    ])
    expectInvariants(gemini.events)
    const assembled = await streamThroughSdk(gemini.events)
    // A natural stop with tool calls is still a completed response with both calls; no arguments is "{}".
    expect(assembled.final.status).toBe("completed")
    expect(assembled.final.output).toMatchObject([
      { type: "function_call", call_id: "c1", arguments: "{\"x\":1}" },
      { type: "function_call", call_id: "c2", arguments: "{}" }
    ])
  })

  it("streams reasoning text as a reasoning item before the message, and refusals as a refusal part", async () => {
    const { events } = run([
      chunk({ role: "assistant", reasoning_content: "Think" }),
      chunk({ reasoning_content: "ing." }),
      chunk({ content: "Answer." }),
      chunk({ refusal: "But not that." }),
      chunk({}, "stop"),
      usageChunk()
    ])
    expectInvariants(events)
    expect(events).toContainEqual(expect.objectContaining({ type: "response.reasoning_text.done", text: "Thinking.", output_index: 0 }))
    expect(events).toContainEqual(expect.objectContaining({ type: "response.refusal.done", refusal: "But not that.", content_index: 1 }))
    const { final } = await streamThroughSdk(events)
    expect(final.output).toMatchObject([
      { type: "reasoning", content: [{ type: "reasoning_text", text: "Thinking." }] },
      { type: "message", content: [{ type: "output_text", text: "Answer." }, { type: "refusal", refusal: "But not that." }] }
    ])
    expect(final.output_text).toBe("Answer.")
  })

  it("ends a length stop with response.incomplete and max_output_tokens", async () => {
    const { events } = run([chunk({ role: "assistant", content: "Once upon" }), chunk({}, "length"), usageChunk()])
    expectInvariants(events)
    expect(events.at(-1)).toMatchObject({
      type: "response.incomplete",
      response: { status: "incomplete", incomplete_details: { reason: "max_output_tokens" }, output: [{ status: "incomplete" }] }
    })
    const { final } = await streamThroughSdk(events)
    expect(final.status).toBe("incomplete")
    expect(final.output_text).toBe("Once upon")
  })

  it("gives an answer without any output its empty message, as the non-streaming translation does", async () => {
    const { events } = run([chunk({ role: "assistant", content: "" }), chunk({}, "stop"), usageChunk()])
    expectInvariants(events)
    expect(types(events).slice(2, -1)).toEqual([
      "response.output_item.added",
      "response.content_part.added",
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done"
    ])
    const { final } = await streamThroughSdk(events)
    expect(final.output).toMatchObject([{ type: "message", content: [{ type: "output_text", text: "" }] }])
  })

  it("reports each item with the status its output_item.done gave", () => {
    const { events } = run([
      chunk({ role: "assistant", content: "Writing the file." }),
      chunk({ tool_calls: [toolStart(0, "call_a", "write", "{\"text\":\"long")] }),
      chunk({}, "length"),
      usageChunk()
    ])
    expectInvariants(events)
    const done = events.filter((event) => event.type === "response.output_item.done")
    expect(done.map((event) => event.type === "response.output_item.done" && event.item.status)).toEqual(["completed", "incomplete"])
    expect(events.at(-1)).toMatchObject({
      type: "response.incomplete",
      response: { output: [{ type: "message", status: "completed" }, { type: "function_call", status: "incomplete" }] }
    })
  })

  it("holds the terminal event for the usage chunk unless told not to wait", () => {
    const machine = new ChatToResponsesStream({ model: "fast" })
    machine.push(chunk({ role: "assistant", content: "Hi" }))
    expect(types(machine.push(chunk({}, "stop")))).not.toContain("response.completed")
    expect(types(machine.push(usageChunk())).at(-1)).toBe("response.completed")
    expect(machine.push(chunk({ content: "late" }))).toEqual([])
    expect(machine.end()).toEqual([])

    const eager = new ChatToResponsesStream({ model: "fast", awaitUsage: false })
    eager.push(chunk({ role: "assistant", content: "Hi" }))
    expect(types(eager.push(chunk({}, "stop"))).at(-1)).toBe("response.completed")
  })

  it("finishes a stream cut short at end(), and says so through completed()", async () => {
    const { machine, events } = run([chunk({ role: "assistant", content: "Hal" })])
    expectInvariants(events)
    expect(machine.completed()).toBe(false)
    expect((await streamThroughSdk(events)).final.output_text).toBe("Hal")
  })

  it("echoes the request's settings on the response object", async () => {
    const decoded = decodeResponsesRequest({
      model: "fast",
      input: "x",
      instructions: "Be brief.",
      temperature: 0.3,
      tools: [{ type: "function", name: "f", parameters: { type: "object" }, strict: true }],
      tool_choice: "required",
      metadata: { a: "b" },
      max_output_tokens: 50,
      text: { format: { type: "json_object" } },
      reasoning: { effort: "low" }
    })
    if (!decoded.ok) throw new Error(decoded.message)
    const request: ResponsesRequest = decoded.value
    const { events } = run([chunk({ role: "assistant", content: "{}" }), chunk({}, "stop"), usageChunk()], { request })
    expect(events[0]).toMatchObject({
      response: {
        status: "in_progress",
        instructions: "Be brief.",
        temperature: 0.3,
        tool_choice: "required",
        metadata: { a: "b" },
        max_output_tokens: 50,
        text: { format: { type: "json_object" } },
        reasoning: { effort: "low" },
        tools: [{ type: "function", name: "f" }],
        store: false,
        usage: null
      }
    })
    const { final } = await streamThroughSdk(events)
    expect(final.instructions).toBe("Be brief.")
  })

  it("fails in-band: an error event, then response.failed, numbered on; the SDK raises it", async () => {
    const machine = new ChatToResponsesStream({ model: "fast", id: "resp_f" })
    const events = [
      ...machine.push(chunk({ role: "assistant", content: "Partial" })),
      ...machine.fail({ code: "provider_error", message: "upstream went away", extra: { status: 502, request_id: "req_1" } })
    ]
    expectInvariants(events)
    expect(events.slice(-2)).toMatchObject([
      { type: "error", code: "provider_error", message: "upstream went away", param: null, status: 502, request_id: "req_1" },
      {
        type: "response.failed",
        response: { id: "resp_f", status: "failed", error: { code: "provider_error", message: "upstream went away" }, output: [{ type: "message", status: "in_progress" }] }
      }
    ])
    expect(machine.fail({ code: "x", message: "y" })).toEqual([])
    expect(machine.end()).toEqual([])

    const raised = await iterateThroughSdk(events).catch((error: unknown) => error)
    expect(raised).toBeInstanceOf(APIError)
    expect((raised as APIError).message).toContain("upstream went away")
    expect(await streamThroughSdk(events).catch((error: unknown) => error)).toBeInstanceOf(APIError)
  })

  it("carries an Anthropic stream through chat to Responses (the Anthropic-kind path)", async () => {
    const anthropic: Array<AnthropicStreamEvent> = [
      {
        type: "message_start",
        message: {
          id: "msg_1",
          type: "message",
          role: "assistant",
          model: "claude",
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: { input_tokens: 10, output_tokens: 1, cache_read_input_tokens: 5, cache_creation_input_tokens: 0 }
        }
      },
      { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
      { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Let me check." } },
      { type: "content_block_stop", index: 0 },
      { type: "content_block_start", index: 1, content_block: { type: "tool_use", id: "toolu_1", name: "get_weather", input: {} } },
      { type: "content_block_delta", index: 1, delta: { type: "input_json_delta", partial_json: "{\"city\":\"Paris\"}" } },
      { type: "content_block_stop", index: 1 },
      { type: "message_delta", delta: { stop_reason: "tool_use", stop_sequence: null }, usage: { output_tokens: 20 } },
      { type: "message_stop" }
    ]
    const toChat = new AnthropicToChatStream({ id: "chatcmpl-1", model: "claude", created: 1, includeUsage: true })
    const toResponses = new ChatToResponsesStream({ model: "claude" })
    const events = [
      ...anthropic.flatMap((event) => toChat.push(event)).flatMap((item) => toResponses.push(item)),
      ...toChat.end().flatMap((item) => toResponses.push(item)),
      ...toResponses.end()
    ]
    expectInvariants(events)
    const { final } = await streamThroughSdk(events)
    expect(final.output_text).toBe("Let me check.")
    expect(final.output[1]).toMatchObject({ type: "function_call", call_id: "call_1", name: "get_weather", arguments: "{\"city\":\"Paris\"}" })
    expect(final.usage).toMatchObject({ input_tokens: 15, output_tokens: 20, input_tokens_details: { cached_tokens: 5 } })
    expect(toResponses.usage()).toEqual({ input_tokens: 10, output_tokens: 20, cache_read_tokens: 5, cache_write_tokens: 0 })
  })
})

describe("ResponsesPassthroughStream", () => {
  it("follows a forwarded stream: usage from the terminal event, failure numbered after the last event", () => {
    const { events } = run([chunk({ role: "assistant", content: "Hi" }), chunk({}, "stop"), usageChunk()])
    const whole = new ResponsesPassthroughStream({ model: "fast" })
    for (const event of events) whole.observe(JSON.parse(JSON.stringify(event)))
    expect(whole.finished()).toBe(true)
    expect(whole.usage()).toEqual({ input_tokens: 86, output_tokens: 17, cache_read_tokens: 1920, cache_write_tokens: 0 })
    expect(whole.fail({ code: "x", message: "y" })).toEqual([])

    const cut = new ResponsesPassthroughStream({ model: "fast" })
    for (const event of events.slice(0, 5)) cut.observe(event)
    expect(cut.finished()).toBe(false)
    const failure = cut.fail({ code: "provider_error", message: "gone" })
    expect(failure).toMatchObject([
      { type: "error", sequence_number: 5, code: "provider_error" },
      { type: "response.failed", sequence_number: 6, response: { id: "resp_test", status: "failed" } }
    ])
  })
})

describe("chatResponseToResponses", () => {
  const chatResponse = (message: Record<string, unknown>, finish: string, withUsage = true): ChatResponse => ({
    id: "chatcmpl-1",
    object: "chat.completion",
    created: 1,
    model: "up",
    choices: [{ index: 0, message: { role: "assistant", ...message } as never, finish_reason: finish as never, logprobs: null }],
    ...(withUsage ? { usage } : {})
  })

  /** The SDK's own parse of the object, as `responses.create` returns it. */
  const throughSdk = (response: unknown) =>
    offlineClient(() => new Response(JSON.stringify(response), { headers: { "content-type": "application/json" } }))
      .responses.create({ model: "m", input: "x" })

  it("turns a text answer into a message item with usage", async () => {
    const response = chatResponseToResponses(chatResponse({ content: "Hello", refusal: null }, "stop"), { model: "fast", id: "resp_1", createdAt: 5 })
    expect(response).toMatchObject({
      id: "resp_1",
      object: "response",
      created_at: 5,
      status: "completed",
      model: "fast",
      incomplete_details: null,
      error: null,
      output: [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "Hello", annotations: [] }] }],
      usage: { input_tokens: 2006, output_tokens: 17, total_tokens: 2023, input_tokens_details: { cached_tokens: 1920 }, output_tokens_details: { reasoning_tokens: 5 } }
    })
    expect(auditUsageFromResponses(response.usage)).toEqual({ input_tokens: 86, output_tokens: 17, cache_read_tokens: 1920, cache_write_tokens: 0 })
    expect((await throughSdk(response)).output_text).toBe("Hello")
  })

  it("turns tool calls into function_call items, reasoning into a reasoning item", async () => {
    const response = chatResponseToResponses(
      chatResponse({
        content: null,
        reasoning_content: "The user wants weather.",
        tool_calls: [
          { id: "call_1", type: "function", function: { name: "get_weather", arguments: "{\"city\":\"Paris\"}" } },
          { id: "call_2", type: "function", function: { name: "get_time", arguments: "" } }
        ]
      }, "tool_calls", false),
      { model: "fast" }
    )
    expect(response.output).toMatchObject([
      { type: "reasoning", summary: [], content: [{ type: "reasoning_text", text: "The user wants weather." }] },
      { type: "function_call", call_id: "call_1", name: "get_weather", arguments: "{\"city\":\"Paris\"}", status: "completed" },
      { type: "function_call", call_id: "call_2", name: "get_time", arguments: "{}" }
    ])
    expect(response.id).toMatch(/^resp_/)
    expect(response.output[1]?.id).toMatch(/^fc_/)
    expect(response.usage).toMatchObject({ input_tokens: 0, output_tokens: 0 })
    const parsed = await throughSdk(response)
    expect(parsed.output_text).toBe("")
    expect(parsed.output).toHaveLength(3)
  })

  it("reports length and content-filter stops as incomplete", () => {
    expect(chatResponseToResponses(chatResponse({ content: "Once" }, "length"), { model: "m" })).toMatchObject({
      status: "incomplete",
      incomplete_details: { reason: "max_output_tokens" },
      completed_at: null,
      output: [{ type: "message", status: "incomplete" }]
    })
    expect(chatResponseToResponses(chatResponse({ content: "" }, "content_filter"), { model: "m" })).toMatchObject({
      status: "incomplete",
      incomplete_details: { reason: "content_filter" },
      output: [{ type: "message", content: [{ type: "output_text", text: "" }] }]
    })
  })

  it("carries an Anthropic answer through chat (the Anthropic-kind path)", async () => {
    const anthropic: AnthropicResponse = {
      id: "msg_1",
      type: "message",
      role: "assistant",
      model: "claude",
      content: [{ type: "text", text: "Sure." }, { type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } }],
      stop_reason: "tool_use",
      stop_sequence: null,
      usage: { input_tokens: 10, output_tokens: 5, cache_read_input_tokens: 2, cache_creation_input_tokens: 3 }
    }
    const response = chatResponseToResponses(anthropicResponseToChat(anthropic, { model: "claude" }), { model: "claude" })
    expect(response.output).toMatchObject([
      { type: "message", content: [{ type: "output_text", text: "Sure." }] },
      { type: "function_call", call_id: "call_1", name: "get_weather", arguments: "{\"city\":\"Paris\"}" }
    ])
    expect(response.usage).toMatchObject({ input_tokens: 15, input_tokens_details: { cached_tokens: 2, cache_write_tokens: 3 }, output_tokens: 5 })
    expect((await throughSdk(response)).output_text).toBe("Sure.")
  })
})
