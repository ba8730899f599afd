import type { ResponseCreateParamsBase, ResponseInputItem, Tool } from "openai/resources/responses/responses"
import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import {
  DECODE_SLICE,
  decodeResponsesPassthrough,
  decodeResponsesRequest,
  decodeResponsesRequestInSlices,
  OPAQUE_ITEM_TYPES,
  OPAQUE_TOOL_TYPES,
  RESPONSES_REQUEST_FIELDS
} from "../../src/wire/openai-responses.ts"
import { responsesBody } from "./responses-sdk.ts"
import { expectDecodesUnchanged } from "../support/decoded.ts"

/**
 * Every top-level field of the SDK's `ResponseCreateParamsBase`, typed by the SDK: the type
 * check fails when a newer SDK adds a field that is missing here.
 */
const everyField: { [K in keyof Required<ResponseCreateParamsBase>]: NonNullable<ResponseCreateParamsBase[K]> } = {
  access_programs: { cyber: "standard" },
  background: false,
  context_management: [{ type: "compaction", compact_threshold: 1000 }],
  conversation: { id: "conv_1" },
  image: { context_compression: "auto" },
  include: ["reasoning.encrypted_content", "message.output_text.logprobs"],
  input: [{ role: "user", content: "Hello" }],
  instructions: "Be brief.",
  max_output_tokens: 256,
  max_tool_calls: 3,
  metadata: { team: "a" },
  model: "gpt-5",
  moderation: { model: "omni-moderation-latest", policy: { input: { mode: "score" }, output: null } },
  parallel_tool_calls: true,
  previous_response_id: "resp_0",
  prompt: { id: "pmpt_1", variables: { city: "Paris" }, version: "2" },
  prompt_cache_key: "k",
  prompt_cache_options: { mode: "explicit", ttl: "30m", prewarm: false, comparison_response_id: null },
  prompt_cache_retention: "24h",
  reasoning: { effort: "low", summary: "auto", generate_summary: null, context: "auto", mode: "standard" },
  safety_identifier: "user-hash",
  service_tier: "flex",
  store: false,
  stream: false,
  stream_options: { include_obfuscation: false },
  temperature: 0.5,
  text: { format: { type: "json_schema", name: "answer", schema: { type: "object" }, strict: true }, verbosity: "low" },
  tool_choice: { type: "function", name: "get_weather" },
  tools: [{ type: "function", name: "get_weather", parameters: { type: "object" }, strict: true }],
  top_logprobs: 2,
  top_p: 0.9,
  truncation: "disabled",
  user: "u1"
}

/** One of every input item shape, as the SDK types them. */
const everyItem: Array<ResponseInputItem> = [
  { role: "developer", content: "Use tools." },
  { type: "message", role: "user", content: [{ type: "input_text", text: "Look" }, { type: "input_image", detail: "high", image_url: "https://x/y.png" }] },
  { type: "message", role: "user", content: [{ type: "input_file", file_data: "data:application/pdf;base64,AAAA", filename: "a.pdf" }] },
  {
    type: "message",
    id: "msg_1",
    role: "assistant",
    status: "completed",
    content: [{ type: "output_text", text: "Sure", annotations: [], logprobs: [] }, { type: "refusal", refusal: "no" }]
  },
  { type: "reasoning", id: "rs_1", summary: [{ type: "summary_text", text: "thinking" }], encrypted_content: "gAAA" },
  { type: "function_call", id: "fc_1", call_id: "call_1", name: "get_weather", arguments: "{}", status: "completed" },
  { type: "function_call_output", call_id: "call_1", output: [{ type: "input_text", text: "sunny" }] },
  { type: "function_call_output", call_id: "call_1", output: "sunny" },
  { id: "msg_0" },
  { type: "item_reference", id: "msg_0" },
  { type: "computer_call_output", call_id: "c", output: { type: "computer_screenshot", image_url: "https://x" } },
  { type: "custom_tool_call", call_id: "c2", name: "apply_patch", input: "*** Begin Patch" }
]

const everyTool: Array<Tool> = [
  { type: "function", name: "f", parameters: null, strict: null, description: null, defer_loading: true },
  { type: "web_search" },
  { type: "custom", name: "apply_patch", format: { type: "text" } },
  { type: "mcp", server_label: "s", server_url: "https://mcp" }
]

const failure = (body: unknown) => {
  const result = decodeResponsesRequest(body)
  if (result.ok) throw new Error(`expected a failure for ${JSON.stringify(body)}`)
  return result
}

describe("decodeResponsesRequest", () => {
  it("knows every field of the SDK's ResponseCreateParams", () => {
    // client_metadata: sent by Codex CLI and accepted by the API, though absent from the SDK's types.
    expect([...RESPONSES_REQUEST_FIELDS].sort()).toEqual([...Object.keys(everyField), "client_metadata"].sort())
  })

  it("accepts a body the SDK sends with every field", async () => {
    const body = await responsesBody({ ...everyField, stream: false })
    // Field for field, with the one normalisation: an input item without `type` is a message (the API's default).
    const sent = body as { input: ReadonlyArray<Record<string, unknown>> }
    expect(decodeResponsesRequest(body)).toEqual({ ok: true, value: { ...sent, input: sent.input.map((item) => ({ type: "message", ...item })) } })
    expectDecodesUnchanged(decodeResponsesPassthrough, body)
  })

  it("accepts every input item and tool shape, filling in the type of bare items", async () => {
    const body = await responsesBody({ model: "m", input: everyItem, tools: everyTool })
    const result = decodeResponsesRequest(body)
    if (!result.ok) throw new Error(result.message)
    const input = result.value.input as ReadonlyArray<{ type: string }>
    expect(input.map((item) => item.type)).toEqual([
      "message",
      "message",
      "message",
      "message",
      "reasoning",
      "function_call",
      "function_call_output",
      "function_call_output",
      "item_reference",
      "item_reference",
      "computer_call_output",
      "custom_tool_call"
    ])
    expectDecodesUnchanged(decodeResponsesPassthrough, body)
  })

  it("accepts a plain string input and nulls where the SDK allows them", () => {
    const nulls = Object.fromEntries(
      ["background", "include", "instructions", "max_output_tokens", "metadata", "previous_response_id", "reasoning", "store", "temperature", "top_p", "truncation"]
        .map((key) => [key, null])
    )
    expectDecodesUnchanged(decodeResponsesRequest, { model: "m", input: "Hi", ...nulls })
  })

  it("accepts absent optionals sent as null, as clients in other languages replay items", () => {
    const input = [
      { type: "reasoning", summary: [], content: null, encrypted_content: null, id: null, status: null },
      { type: "function_call", id: null, status: null, call_id: "c", name: "shell", arguments: "{}" },
      { type: "function_call_output", call_id: "c", output: "ok", id: null, status: null }
    ]
    expectDecodesUnchanged(decodeResponsesRequest, { model: "m", input })
  })

  it("accepts every opaque item and tool type", () => {
    for (const type of OPAQUE_ITEM_TYPES) {
      expectDecodesUnchanged(decodeResponsesRequest, { model: "m", input: [{ type, anything: 1 }] }, type)
    }
    for (const type of OPAQUE_TOOL_TYPES) {
      expectDecodesUnchanged(decodeResponsesRequest, { model: "m", input: "x", tools: [{ type, anything: 1 }] }, type)
    }
  })

  const cases: ReadonlyArray<readonly [string, unknown, string]> = [
    ["an unknown top-level field", { model: "m", input: "x", temprature: 1 }, "temprature: unknown field"],
    ["a missing model", { input: "x" }, "model: required field missing"],
    ["an unknown field in a message", { model: "m", input: [{ role: "user", content: "x", name: "bob" }] }, "input.0.name: unknown field"],
    [
      "an unknown field in a content part",
      { model: "m", input: [{ role: "user", content: [{ type: "input_text", text: "x", cache: true }] }] },
      "input.0.content.0.cache: unknown field"
    ],
    [
      "an unknown part type",
      { model: "m", input: [{ role: "user", content: [{ type: "text", text: "x" }] }] },
      "input.0.content.0.type: expected one of input_text, input_image, input_file, output_text, refusal"
    ],
    ["an unknown role", { model: "m", input: [{ role: "bot", content: "x" }] }, "input.0.role: expected one of user, assistant, system, developer"],
    [
      "an unknown item type",
      { model: "m", input: [{ type: "function_result", call_id: "c", output: "x" }] },
      "input.0.type: expected one of message, function_call, function_call_output, reasoning, item_reference, " +
      OPAQUE_ITEM_TYPES.join(", ")
    ],
    [
      "a function call without arguments",
      { model: "m", input: [{ type: "function_call", call_id: "c", name: "f" }] },
      "input.0.arguments: required field missing"
    ],
    [
      "an unknown field on a function tool",
      { model: "m", input: "x", tools: [{ type: "function", name: "f", parameters: {}, strict: true, function: {} }] },
      "tools.0.function: unknown field"
    ],
    [
      "a chat-style tool",
      { model: "m", input: "x", tools: [{ type: "function", function: { name: "f" } }] },
      "tools.0.function: unknown field"
    ],
    [
      "an unknown text format field",
      { model: "m", input: "x", text: { format: { type: "json_schema", name: "a", schema: {}, json_schema: {} } } },
      "text.format.json_schema: unknown field"
    ],
    ["a bad reasoning effort", { model: "m", input: "x", reasoning: { effort: "extreme" } }, "reasoning.effort: expected one of none, minimal, low, medium, high, xhigh, max"],
    ["a temperature out of range", { model: "m", input: "x", temperature: 3 }, "temperature: expected a number between 0 and 2"],
    ["an unknown includable", { model: "m", input: "x", include: ["usage"] }, "include.0: expected one of file_search_call.results, web_search_call.results, web_search_call.action.sources, message.input_image.image_url, computer_call_output.output.image_url, code_interpreter_call.outputs, reasoning.encrypted_content, message.output_text.logprobs"]
  ]
  for (const [name, body, message] of cases) {
    it(`refuses ${name}, naming the field`, () => {
      expect(failure(body).message).toBe(message)
    })
  }
})

describe("decodeResponsesPassthrough", () => {
  it("keeps fields the gateway does not model", () => {
    const body = { model: "m", input: [{ type: "future_item", x: 1 }], future_field: { a: 1 }, stream: true }
    expect(decodeResponsesPassthrough(body)).toEqual({ ok: true, value: body })
  })

  const cases: ReadonlyArray<readonly [string, unknown, string]> = [
    ["a non-object body", [], "body: expected an object"],
    ["a missing model", { input: "x" }, "model: required field missing"],
    ["an empty model", { model: "", input: "x" }, "model: expected a non-empty string"],
    ["a non-boolean stream", { model: "m", input: "x", stream: "yes" }, "stream: expected a boolean or null"],
    ["an input of the wrong shape", { model: "m", input: 5 }, "input: expected a string or an array of input items"],
    ["an input item that is not an object", { model: "m", input: ["x"] }, "input.0: expected an object"]
  ]
  for (const [name, body, message] of cases) {
    it(`refuses ${name}`, () => {
      const result = decodeResponsesPassthrough(body)
      expect(result.ok).toBe(false)
      if (!result.ok) expect(result.message).toBe(message)
    })
  }
})

describe("decodeResponsesRequestInSlices (issue 32: a turn of the event loop every DECODE_SLICE items)", () => {
  const many = DECODE_SLICE * 3 + 7
  const items = Array.from({ length: many }, (_, i) =>
    i % 3 === 0
      ? { role: "user", content: `m${i}` }
      : i % 3 === 1
      ? { type: "function_call", call_id: `c${i}`, name: "t0", arguments: "{}" }
      : { type: "function_call_output", call_id: `c${i - 1}`, output: "r" })
  const tools = Array.from({ length: many }, (_, i) => ({ type: "function", name: `t${i}`, parameters: { type: "object" } }))
  const body = { model: "m", instructions: "be brief", input: items, tools, stream: false }
  const sliced = (value: unknown) => Effect.runSync(decodeResponsesRequestInSlices(value))

  it("decodes what decodeResponsesRequest decodes", () => {
    expect(sliced(body)).toEqual(decodeResponsesRequest(body))
    expect(sliced({ model: "m", input: items.slice(0, 5) })).toEqual(decodeResponsesRequest({ model: "m", input: items.slice(0, 5) }))
    expect(sliced({ model: "m", input: "hi" })).toEqual(decodeResponsesRequest({ model: "m", input: "hi" }))
  })

  it("names the item or tool at fault by its index in the body, as the whole decode does", () => {
    const badItem = { ...body, input: items.map((item, i) => (i === DECODE_SLICE * 2 + 3 ? { ...item, role: "robot" } : item)) }
    const badTool = { ...body, tools: tools.map((tool, i) => (i === DECODE_SLICE + 1 ? { ...tool, name: 5 } : tool)) }
    const unknownField = { ...body, tools: tools.map((tool, i) => (i === many - 1 ? { ...tool, extra: true } : tool)) }
    for (const bad of [badItem, badTool, unknownField]) {
      const result = sliced(bad)
      expect(result.ok).toBe(false)
      expect(result).toEqual(decodeResponsesRequest(bad))
    }
    const result = sliced(badItem)
    if (!result.ok) expect(result.path).toBe(`input.${DECODE_SLICE * 2 + 3}.role`)
  })

  it("checks the other fields first", () => {
    expect(sliced({ ...body, model: "" })).toMatchObject({ ok: false, path: "model" })
  })
})

describe("decodeResponsesPassthrough on many items", () => {
  it("keeps every item as sent and refuses a non-object item by its index", () => {
    const input = Array.from({ length: 5_000 }, (_, i) => ({ type: "item_reference", id: `msg_${i}` }))
    expect(decodeResponsesPassthrough({ model: "m", input, extra: 1 })).toEqual({ ok: true, value: { model: "m", input, extra: 1 } })
    const bad = decodeResponsesPassthrough({ model: "m", input: [...input, [1]] })
    expect(bad).toMatchObject({ ok: false, message: "input.5000: expected an object" })
    expect(decodeResponsesPassthrough({ input })).toMatchObject({ ok: false, message: "model: required field missing" })
  })
})
