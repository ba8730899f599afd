import { Result } from "effect"
import type { ResponseCreateParamsNonStreaming } from "openai/resources/responses/responses"
import { describe, expect, it } from "vitest"
import { decodeChatRequest } from "../../src/wire/openai-chat.ts"
import { decodeResponsesRequest, type ResponsesRequest } from "../../src/wire/openai-responses.ts"
import { chatRequestToAnthropic } from "../../src/wire/translate/chat-request-to-anthropic.ts"
import {
  type ChatRequestFromResponses,
  responsesRequestToChat,
  type ResponsesToChatOptions
} from "../../src/wire/translate/responses-request-to-chat.ts"
import { responsesBody } from "./responses-sdk.ts"

const options: ResponsesToChatOptions = { model: "upstream-model" }

const decoded = (body: unknown): ResponsesRequest => {
  const result = decodeResponsesRequest(body)
  if (!result.ok) throw new Error(result.message)
  return result.value
}

const translate = (body: unknown, opts: ResponsesToChatOptions = options): ChatRequestFromResponses => {
  const result = responsesRequestToChat(decoded(body), opts)
  if (Result.isFailure(result)) throw new Error(result.failure.message)
  return result.success
}

const refusal = (body: unknown) => {
  const result = responsesRequestToChat(decoded(body), options)
  if (Result.isSuccess(result)) throw new Error(`expected a refusal, got ${JSON.stringify(result.success)}`)
  return { path: result.failure.path, message: result.failure.message }
}

/** The translation is a valid chat request (the two fields ChatRequest does not model yet aside). */
const expectValidChat = (chat: ChatRequestFromResponses) => {
  const { reasoning_effort: _effort, verbosity: _verbosity, ...rest } = chat
  const result = decodeChatRequest(rest)
  expect(result.ok ? "ok" : result.message).toBe("ok")
}

const weatherTool = { type: "function", name: "get_weather", description: "Weather", parameters: { type: "object", properties: { city: { type: "string" } } }, strict: true }

describe("responsesRequestToChat", () => {
  it("translates settings, instructions and a string input", () => {
    const chat = translate({
      model: "gpt-5",
      instructions: "Be brief.",
      input: "Hello",
      max_output_tokens: 300,
      temperature: 0.2,
      top_p: 0.5,
      user: "u1",
      reasoning: { effort: "high", summary: "auto" },
      text: { format: { type: "json_schema", name: "answer", schema: { type: "object" }, strict: true }, verbosity: "low" },
      stream: true,
      store: false,
      include: ["reasoning.encrypted_content"],
      prompt_cache_key: "k",
      metadata: { a: "b" },
      service_tier: "auto",
      stream_options: { include_obfuscation: false },
      truncation: "disabled",
      background: false,
      max_tool_calls: 4,
      prompt_cache_retention: "24h",
      image: { context_compression: "auto" }
    })
    expect(chat).toEqual({
      model: "upstream-model",
      messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Hello" }],
      stream: true,
      stream_options: { include_usage: true },
      temperature: 0.2,
      top_p: 0.5,
      max_tokens: 300,
      response_format: { type: "json_schema", json_schema: { name: "answer", schema: { type: "object" }, strict: true } },
      user: "u1",
      reasoning_effort: "high",
      verbosity: "low"
    })
    expectValidChat(chat)
  })

  it("can put the token limit in max_completion_tokens, and takes safety_identifier as the user", () => {
    const chat = translate({ model: "m", input: "x", max_output_tokens: 10, safety_identifier: "hash" }, { model: "o", maxTokensField: "max_completion_tokens" })
    expect(chat).toMatchObject({ max_completion_tokens: 10, user: "hash" })
    expect(chat).not.toHaveProperty("max_tokens")
  })

  it("translates a tool loop: calls become assistant tool_calls, outputs the tool messages right after", () => {
    const chat = translate({
      model: "m",
      instructions: "You are Codex.",
      input: [
        { type: "message", role: "developer", content: [{ type: "input_text", text: "Sandbox: read-only" }] },
        { type: "message", role: "user", content: [{ type: "input_text", text: "List files" }] },
        { type: "reasoning", id: "rs_1", summary: [], encrypted_content: "gAAAA" },
        { type: "message", role: "assistant", content: [{ type: "output_text", text: "Running two commands.", annotations: [] }] },
        { type: "function_call", call_id: "call_a", name: "shell", arguments: "{\"cmd\":[\"ls\"]}" },
        { type: "function_call", call_id: "call_b", name: "shell", arguments: "{\"cmd\":[\"pwd\"]}" },
        { type: "function_call_output", call_id: "call_b", output: "/work" },
        { type: "function_call_output", call_id: "call_a", output: [{ type: "input_text", text: "a.txt" }, { type: "input_text", text: "b.txt" }] },
        { type: "message", role: "assistant", id: "msg_2", status: "completed", content: [{ type: "output_text", text: "Two files.", annotations: [] }] },
        { role: "user", content: "Thanks" }
      ],
      tools: [{ type: "function", name: "shell", parameters: { type: "object" }, strict: false }],
      tool_choice: "auto",
      parallel_tool_calls: true
    })
    expect(chat.messages).toEqual([
      { role: "system", content: "You are Codex." },
      { role: "system", content: "Sandbox: read-only" },
      { role: "user", content: "List files" },
      {
        role: "assistant",
        content: "Running two commands.",
        tool_calls: [
          { id: "call_a", type: "function", function: { name: "shell", arguments: "{\"cmd\":[\"ls\"]}" } },
          { id: "call_b", type: "function", function: { name: "shell", arguments: "{\"cmd\":[\"pwd\"]}" } }
        ]
      },
      { role: "tool", tool_call_id: "call_b", content: "/work" },
      { role: "tool", tool_call_id: "call_a", content: "a.txt\nb.txt" },
      { role: "assistant", content: "Two files." },
      { role: "user", content: "Thanks" }
    ])
    expect(chat.tools).toEqual([{ type: "function", function: { name: "shell", parameters: { type: "object" }, strict: false } }])
    expect(chat).toMatchObject({ tool_choice: "auto", parallel_tool_calls: true })
    expectValidChat(chat)
  })

  it("sends sequential calls as separate assistant turns, and images a tool returned after the tool messages", () => {
    const chat = translate({
      model: "m",
      input: [
        { role: "user", content: "Screenshot, then describe" },
        { type: "function_call", call_id: "c1", name: "screenshot", arguments: "" },
        { type: "function_call_output", call_id: "c1", output: [{ type: "input_text", text: "done" }, { type: "input_image", image_url: "data:image/png;base64,AAAA", detail: "low" }] },
        { type: "function_call", call_id: "c2", name: "screenshot", arguments: "{}" },
        { type: "function_call_output", call_id: "c2", output: "again" }
      ],
      tools: [{ type: "function", name: "screenshot", parameters: null, strict: null }]
    })
    expect(chat.messages).toEqual([
      { role: "user", content: "Screenshot, then describe" },
      { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "screenshot", arguments: "" } }] },
      { role: "tool", tool_call_id: "c1", content: "done" },
      { role: "user", content: [{ type: "image_url", image_url: { url: "data:image/png;base64,AAAA", detail: "low" } }] },
      { role: "assistant", content: null, tool_calls: [{ id: "c2", type: "function", function: { name: "screenshot", arguments: "{}" } }] },
      { role: "tool", tool_call_id: "c2", content: "again" }
    ])
    expect(chat.tools).toEqual([{ type: "function", function: { name: "screenshot" } }])
  })

  it("translates user images and refusals in assistant history", () => {
    const chat = translate({
      model: "m",
      input: [
        { role: "user", content: [{ type: "input_text", text: "What is this?" }, { type: "input_image", image_url: "https://x/y.png", detail: "original" }] },
        { type: "message", role: "assistant", content: [{ type: "refusal", refusal: "I can't help." }] },
        { role: "user", content: "Please" }
      ]
    })
    expect(chat.messages).toEqual([
      { role: "user", content: [{ type: "text", text: "What is this?" }, { type: "image_url", image_url: { url: "https://x/y.png" } }] },
      { role: "assistant", content: "", refusal: "I can't help." },
      { role: "user", content: "Please" }
    ])
    expectValidChat(chat)
  })

  it("leaves out an assistant message with nothing in it", () => {
    const chat = translate({ model: "m", input: [{ role: "user", content: "a" }, { type: "message", role: "assistant", content: [] }, { role: "user", content: "b" }] })
    expect(chat.messages).toEqual([{ role: "user", content: "a" }, { role: "user", content: "b" }])
  })

  it("translates tool_choice, narrowing tools for allowed_tools", () => {
    const tools = [weatherTool, { ...weatherTool, name: "get_time" }]
    expect(translate({ model: "m", input: "x", tools, tool_choice: { type: "function", name: "get_time" } }).tool_choice)
      .toEqual({ type: "function", function: { name: "get_time" } })
    const narrowed = translate({
      model: "m",
      input: "x",
      tools,
      tool_choice: { type: "allowed_tools", mode: "required", tools: [{ type: "function", name: "get_time" }] }
    })
    expect(narrowed.tools?.map((tool) => (tool.type === "function" ? tool.function.name : tool.custom.name))).toEqual(["get_time"])
    expect(narrowed.tool_choice).toBe("required")
    // Without tools, "auto" and "none" mean nothing to send.
    expect(translate({ model: "m", input: "x", tool_choice: "none" })).not.toHaveProperty("tool_choice")
    expect(translate({ model: "m", input: "x", parallel_tool_calls: false })).not.toHaveProperty("parallel_tool_calls")
  })

  it("translates a turn shaped like Codex's (null reasoning, empty include, store false, replayed items)", () => {
    const shell = {
      type: "function",
      name: "shell",
      description: "Runs a shell command and returns its output.",
      strict: false,
      parameters: { type: "object", properties: { command: { type: "array", items: { type: "string" } } }, required: ["command"], additionalProperties: false }
    }
    const chat = translate({
      model: "claude-sonnet",
      instructions: "You are a coding agent.",
      input: [
        { type: "message", role: "developer", content: [{ type: "input_text", text: "<permissions>read-only</permissions>" }] },
        { type: "message", role: "user", content: [{ type: "input_text", text: "<environment_context>cwd=/w</environment_context>" }] },
        { type: "message", role: "user", content: [{ type: "input_text", text: "list files" }] },
        { type: "reasoning", id: "rs_1", summary: [], content: null, encrypted_content: null },
        { type: "function_call", id: "fc_1", name: "shell", arguments: "{\"command\":[\"ls\"]}", call_id: "call_1" },
        { type: "function_call_output", call_id: "call_1", output: "a.txt" }
      ],
      tools: [shell],
      tool_choice: "auto",
      parallel_tool_calls: false,
      reasoning: null,
      store: false,
      stream: true,
      include: [],
      prompt_cache_key: "019a0000-0000-7000-8000-000000000000"
    })
    expect(chat.messages.map((message) => message.role)).toEqual(["system", "system", "user", "user", "assistant", "tool"])
    expect(chat).toMatchObject({ stream: true, stream_options: { include_usage: true }, tool_choice: "auto", parallel_tool_calls: false })
    expect(chat).not.toHaveProperty("reasoning_effort")
    expectValidChat(chat)
    const anthropic = chatRequestToAnthropic(chat, { model: "claude-x", maxTokensCap: 8192 })
    expect(Result.isSuccess(anthropic)).toBe(true)
  })

  it("keeps an earlier custom tool call (Codex's apply_patch) in the history as a function call with its raw input", () => {
    const chat = translate({
      model: "gpt",
      input: [
        { role: "user", content: "fix it" },
        { type: "custom_tool_call", call_id: "ct1", name: "apply_patch", input: "*** Begin Patch\n*** End Patch" },
        { type: "custom_tool_call_output", call_id: "ct1", output: "Done!" },
        { role: "user", content: "thanks" }
      ]
    })
    expect(chat.messages).toEqual([
      { role: "user", content: "fix it" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "ct1", type: "function", function: { name: "apply_patch", arguments: JSON.stringify({ input: "*** Begin Patch\n*** End Patch" }) } }]
      },
      { role: "tool", tool_call_id: "ct1", content: "Done!" },
      { role: "user", content: "thanks" }
    ])
  })

  it("can drop non-function tools instead of refusing them, but never a forced one", () => {
    const body = { model: "m", input: "x", tools: [{ type: "web_search" }, weatherTool, { type: "custom", name: "apply_patch" }] }
    const chat = translate(body, { model: "o", nonFunctionTools: "drop" })
    expect(chat.tools?.map((tool) => (tool.type === "function" ? tool.function.name : tool.custom.name))).toEqual(["get_weather"])
    const onlyHosted = translate({ model: "m", input: "x", tools: [{ type: "web_search" }], tool_choice: "auto" }, { model: "o", nonFunctionTools: "drop" })
    expect(onlyHosted).not.toHaveProperty("tools")
    expect(onlyHosted).not.toHaveProperty("tool_choice")
    const forced = responsesRequestToChat(decoded({ ...body, tool_choice: { type: "web_search_preview" } }), { model: "o", nonFunctionTools: "drop" })
    expect(Result.isFailure(forced) && forced.failure.path).toBe("tool_choice.type")
  })

  it("translates a body the SDK sends for a tool-loop turn", async () => {
    const params: ResponseCreateParamsNonStreaming = {
      model: "gpt-5",
      input: [
        { role: "user", content: "Weather in Paris?" },
        { type: "function_call", call_id: "call_1", name: "get_weather", arguments: "{\"city\":\"Paris\"}" },
        { type: "function_call_output", call_id: "call_1", output: "{\"temp\":21}" }
      ],
      tools: [{ type: "function", name: "get_weather", parameters: { type: "object" }, strict: true }],
      text: { format: { type: "json_object" } }
    }
    const chat = translate(await responsesBody(params))
    expect(chat.messages.map((message) => message.role)).toEqual(["user", "assistant", "tool"])
    expect(chat.response_format).toEqual({ type: "json_object" })
    expectValidChat(chat)
  })

  it("gives the chat -> messages translator a request it turns into paired tool_use / tool_result", () => {
    const chat = translate({
      model: "m",
      instructions: "Be brief.",
      input: [
        { role: "user", content: "Weather?" },
        { type: "function_call", call_id: "call_1", name: "get_weather", arguments: "{\"city\":\"Paris\"}" },
        { type: "function_call_output", call_id: "call_1", output: "sunny" }
      ],
      tools: [weatherTool],
      max_output_tokens: 100
    })
    const result = chatRequestToAnthropic(chat, { model: "claude-x", maxTokensCap: 4096 })
    if (Result.isFailure(result)) throw new Error(result.failure.message)
    expect(result.success).toMatchObject({
      model: "claude-x",
      max_tokens: 100,
      system: [{ type: "text", text: "Be brief." }],
      messages: [
        { role: "user", content: [{ type: "text", text: "Weather?" }] },
        { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "sunny" }] }
      ]
    })
  })

  const refused: ReadonlyArray<readonly [string, Record<string, unknown>, string, RegExp]> = [
    ["previous_response_id", { previous_response_id: "resp_1" }, "previous_response_id", /keeps no conversation state/],
    ["conversation", { conversation: "conv_1" }, "conversation", /keeps no conversation state/],
    ["an item reference", { input: [{ id: "msg_1" }] }, "input.0", /keeps no conversation state/],
    ["a stored prompt", { prompt: { id: "pmpt_1" } }, "prompt", /stored prompts/],
    ["background", { background: true }, "background", /background/],
    ["truncation auto", { truncation: "auto" }, "truncation", /does not truncate/],
    ["logprobs", { top_logprobs: 3 }, "top_logprobs", /log probabilities/],
    ["the logprobs include", { include: ["reasoning.encrypted_content", "message.output_text.logprobs"] }, "include.1", /log probabilities/],
    ["context management", { context_management: [{ type: "compaction" }] }, "context_management", /compaction/],
    ["moderation", { moderation: { model: "omni" } }, "moderation", /moderation/],
    ["pro reasoning", { reasoning: { mode: "pro" } }, "reasoning.mode", /"pro"/],
    ["a hosted tool", { tools: [weatherTool, { type: "web_search" }] }, "tools.1.type", /"web_search" tools cannot be translated/],
    ["a custom tool", { tools: [{ type: "custom", name: "apply_patch" }] }, "tools.0.type", /"custom" tools/],
    ["a forced hosted tool", { tools: [weatherTool], tool_choice: { type: "file_search" } }, "tool_choice.type", /"file_search"/],
    ["required without tools", { tool_choice: "required" }, "tool_choice", /at least one function tool/],
    ["a programmatic caller", { tools: [{ ...weatherTool, allowed_callers: ["programmatic"] }] }, "tools.0.allowed_callers", /programmatic/],
    ["a custom tool call left without output", { input: [{ type: "custom_tool_call", call_id: "c", name: "p", input: "x" }] }, "input.0", /has no function_call_output/],
    ["a file input", { input: [{ role: "user", content: [{ type: "input_file", file_data: "AAAA", filename: "a.pdf" }] }] }, "input.0.content.0", /file inputs/],
    ["an image by file id", { input: [{ role: "user", content: [{ type: "input_image", file_id: "file_1", detail: "auto" }] }] }, "input.0.content.0.file_id", /files stored at OpenAI/],
    ["an image in a system message", { input: [{ role: "system", content: [{ type: "input_image", image_url: "https://x", detail: "auto" }] }] }, "input.0.content.0.type", /system messages carry text only/],
    [
      "a call left without output",
      { input: [{ role: "user", content: "x" }, { type: "function_call", call_id: "c1", name: "f", arguments: "{}" }, { role: "user", content: "y" }] },
      "input.1",
      /function_call "c1" has no function_call_output/
    ],
    [
      "a trailing call without output",
      { input: [{ role: "user", content: "x" }, { type: "function_call", call_id: "c1", name: "f", arguments: "{}" }] },
      "input.1",
      /no function_call_output/
    ],
    [
      "an output for an unknown call",
      { input: [{ role: "user", content: "x" }, { type: "function_call_output", call_id: "c9", output: "y" }] },
      "input.1.call_id",
      /no function_call with call_id "c9"/
    ],
    [
      "an output without call_id",
      { input: [{ type: "function_call", call_id: "c1", name: "f", arguments: "{}" }, { type: "function_call_output", output: "y" }] },
      "input.1.call_id",
      /required/
    ],
    [
      "a namespaced call",
      { input: [{ type: "function_call", call_id: "c1", name: "f", arguments: "{}", namespace: "ns" }] },
      "input.0.namespace",
      /namespaced/
    ],
    ["an empty input", { input: [] }, "input", /at least one input item/],
    ["no input at all", { input: undefined }, "input", /required/]
  ]
  for (const [name, fields, path, message] of refused) {
    it(`refuses ${name}, naming ${path}`, () => {
      const body: Record<string, unknown> = { model: "m", input: "x", ...fields }
      for (const key of Object.keys(body)) if (body[key] === undefined) delete body[key]
      const found = refusal(body)
      expect(found.path).toBe(path)
      expect(found.message.startsWith(`${path}: `)).toBe(true)
      expect(found.message).toMatch(message)
    })
  }
})
