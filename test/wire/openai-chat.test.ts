import { describe, expect, it } from "vitest"
import { decodeChatRequest } from "../../src/wire/index.ts"
import { openaiBody } from "./sdk.ts"
import { expectDecodesUnchanged } from "../support/decoded.ts"

const base = { model: "gpt-4o-mini", messages: [{ role: "user", content: "Hello" }] }
const withMessage = (message: unknown) => ({ ...base, messages: [message] })
const call = { id: "call_1", type: "function", function: { name: "get_weather", arguments: "{\"city\":\"Paris\"}" } }

const failure = (body: unknown) => {
  const result = decodeChatRequest(body)
  if (result.ok) throw new Error(`expected a failure for ${JSON.stringify(body)}`)
  return result
}

describe("decodeChatRequest rejects, naming the field", () => {
  const cases: ReadonlyArray<readonly [string, unknown, string, string]> = [
    ["a non-object body", "hello", "", "body: expected an object"],
    ["a missing model", { messages: base.messages }, "model", "model: required field missing"],
    ["an empty model", { ...base, model: "" }, "model", "model: expected a non-empty string"],
    ["a missing messages", { model: "m" }, "messages", "messages: required field missing"],
    ["empty messages", { ...base, messages: [] }, "messages", "messages: expected a non-empty array"],
    [
      "an unknown role",
      { ...base, messages: [base.messages[0], { role: "bot", content: "x" }] },
      "messages.1.role",
      "messages.1.role: expected one of system, user, assistant, tool, developer, function"
    ],
    ["a missing role", withMessage({ content: "x" }), "messages.0.role", "messages.0.role: required field missing"],
    ["a message that is not an object", withMessage("hi"), "messages.0", "messages.0: expected an object"],
    [
      "non-string content",
      withMessage({ role: "user", content: 5 }),
      "messages.0.content",
      "messages.0.content: expected a string or an array of content parts"
    ],
    [
      "an unknown part type",
      withMessage({ role: "user", content: [{ type: "audio", text: "x" }] }),
      "messages.0.content.0.type",
      "messages.0.content.0.type: expected one of text, image_url, input_audio, file"
    ],
    [
      "an image part outside a user message",
      withMessage({ role: "system", content: [{ type: "image_url", image_url: { url: "https://x/y.png" } }] }),
      "messages.0.content.0.type",
      "messages.0.content.0.type: expected \"text\""
    ],
    [
      "a text part without text",
      withMessage({ role: "user", content: [{ type: "text" }] }),
      "messages.0.content.0.text",
      "messages.0.content.0.text: required field missing"
    ],
    [
      "a bad image detail",
      withMessage({ role: "user", content: [{ type: "image_url", image_url: { url: "https://x", detail: 5 } }] }),
      "messages.0.content.0.image_url.detail",
      "messages.0.content.0.image_url.detail: expected a string"
    ],
    [
      "an assistant message without content or tool_calls",
      withMessage({ role: "assistant", content: null }),
      "messages.0.content",
      "messages.0.content: required unless tool_calls is present"
    ],
    [
      "a tool message without tool_call_id",
      withMessage({ role: "tool", content: "42" }),
      "messages.0.tool_call_id",
      "messages.0.tool_call_id: required field missing"
    ],
    [
      "a tool message with image content",
      withMessage({ role: "tool", tool_call_id: "c", content: [{ type: "image_url", image_url: { url: "https://x" } }] }),
      "messages.0.content.0.type",
      "messages.0.content.0.type: expected \"text\""
    ],
    [
      "an unknown field in a message",
      withMessage({ role: "user", content: "x", mood: "happy" }),
      "messages.0.mood",
      "messages.0.mood: unknown field"
    ],
    [
      "an unknown field in a tool call",
      withMessage({ role: "assistant", tool_calls: [{ ...call, function: { ...call.function, extra: 1 } }] }),
      "messages.0.tool_calls.0.function.extra",
      "messages.0.tool_calls.0.function.extra: unknown field"
    ],
    [
      "a tool call that is not a function",
      withMessage({ role: "assistant", tool_calls: [{ ...call, type: "hosted" }] }),
      "messages.0.tool_calls.0.type",
      "messages.0.tool_calls.0.type: expected one of function, custom"
    ],
    ["stream not boolean", { ...base, stream: "yes" }, "stream", "stream: expected a boolean or null"],
    [
      "stream_options without stream",
      { ...base, stream_options: { include_usage: true } },
      "stream_options",
      "stream_options: only allowed when stream is true"
    ],
    [
      "an unknown stream option",
      { ...base, stream: true, stream_options: { include_everything: false } },
      "stream_options.include_everything",
      "stream_options.include_everything: unknown field"
    ],
    ["temperature above 2", { ...base, temperature: 2.5 }, "temperature", "temperature: expected a number between 0 and 2"],
    ["negative temperature", { ...base, temperature: -0.1 }, "temperature", "temperature: expected a number between 0 and 2"],
    ["top_p above 1", { ...base, top_p: 1.2 }, "top_p", "top_p: expected a number between 0 and 1"],
    ["max_tokens zero", { ...base, max_tokens: 0 }, "max_tokens", "max_tokens: expected a positive integer"],
    [
      "fractional max_completion_tokens",
      { ...base, max_completion_tokens: 10.5 },
      "max_completion_tokens",
      "max_completion_tokens: expected a positive integer"
    ],
    ["an empty stop array", { ...base, stop: [] }, "stop", "stop: expected an array of 1 to 4 strings"],
    ["five stops", { ...base, stop: ["a", "b", "c", "d", "e"] }, "stop", "stop: expected an array of 1 to 4 strings"],
    ["a numeric stop", { ...base, stop: 7 }, "stop", "stop: expected a string or an array of 1 to 4 strings or null"],
    ["a non-string stop item", { ...base, stop: ["a", 1] }, "stop.1", "stop.1: expected a string"],
    [
      "a tool name with spaces",
      { ...base, tools: [{ type: "function", function: { name: "get weather" } }] },
      "tools.0.function.name",
      "tools.0.function.name: expected a name matching ^[a-zA-Z0-9_-]{1,64}$"
    ],
    [
      "a 65-character tool name",
      { ...base, tools: [{ type: "function", function: { name: "x".repeat(65) } }] },
      "tools.0.function.name",
      "tools.0.function.name: expected a name matching ^[a-zA-Z0-9_-]{1,64}$"
    ],
    [
      "tool parameters that are not an object schema",
      { ...base, tools: [{ type: "function", function: { name: "f", parameters: { type: "array" } } }] },
      "tools.0.function.parameters.type",
      "tools.0.function.parameters.type: expected \"object\""
    ],
    [
      "tool parameters that are not an object",
      { ...base, tools: [{ type: "function", function: { name: "f", parameters: "{}" } }] },
      "tools.0.function.parameters",
      "tools.0.function.parameters: expected an object"
    ],
    [
      "a non-function tool",
      { ...base, tools: [{ type: "hosted", function: { name: "f" } }] },
      "tools.0.type",
      "tools.0.type: expected one of function, custom"
    ],
    [
      "an unknown field in a tool",
      { ...base, tools: [{ type: "function", function: { name: "f" }, cache_control: {} }] },
      "tools.0.cache_control",
      "tools.0.cache_control: unknown field"
    ],
    ["an unknown tool_choice", { ...base, tool_choice: "any" }, "tool_choice", "tool_choice: expected one of auto, none, required"],
    [
      "a tool_choice without function",
      { ...base, tool_choice: { type: "function" } },
      "tool_choice.function",
      "tool_choice.function: required field missing"
    ],
    [
      "parallel_tool_calls not boolean",
      { ...base, parallel_tool_calls: 1 },
      "parallel_tool_calls",
      "parallel_tool_calls: expected a boolean"
    ],
    [
      "an unknown response_format type",
      { ...base, response_format: { type: "xml" } },
      "response_format.type",
      "response_format.type: expected one of text, json_object, json_schema"
    ],
    [
      "a json_schema without name",
      { ...base, response_format: { type: "json_schema", json_schema: { schema: {} } } },
      "response_format.json_schema.name",
      "response_format.json_schema.name: required field missing"
    ],
    ["a numeric user", { ...base, user: 7 }, "user", "user: expected a string"],
    ["n of 2", { ...base, n: 2 }, "n", "n: only n = 1 is supported"],
    ["a fractional seed", { ...base, seed: 1.5 }, "seed", "seed: expected an integer"],
    [
      "presence_penalty out of range",
      { ...base, presence_penalty: 2.5 },
      "presence_penalty",
      "presence_penalty: expected a number between -2 and 2"
    ],
    [
      "frequency_penalty out of range",
      { ...base, frequency_penalty: -3 },
      "frequency_penalty",
      "frequency_penalty: expected a number between -2 and 2"
    ],
    ["non-string metadata", { ...base, metadata: { team: 7 } }, "metadata.team", "metadata.team: expected a string"],
    ["an unknown top-level field", { ...base, logprob: true }, "logprob", "logprob: unknown field"]
  ]
  it.each(cases)("%s", (_name, body, path, message) => {
    const result = failure(body)
    expect(result.path).toBe(path)
    expect(result.message).toBe(message)
  })
})

describe("decodeChatRequest accepts", () => {
  it("a full request built by openai-node", async () => {
    const body = await openaiBody({
      model: "gpt-4o-mini",
      messages: [
        { role: "developer", content: "Be brief." },
        { role: "system", content: [{ type: "text", text: "You are helpful." }] },
        {
          role: "user",
          content: [
            { type: "text", text: "What is in this image?" },
            { type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0KGgo=", detail: "low" } }
          ],
          name: "alice"
        },
        { role: "assistant", content: null, tool_calls: [call as never] },
        { role: "tool", tool_call_id: "call_1", content: "{\"temp\":21}" },
        { role: "assistant", content: [{ type: "text", text: "It is 21." }] }
      ],
      temperature: 0.2,
      top_p: 0.9,
      max_completion_tokens: 256,
      max_tokens: 256,
      stop: ["\n\n"],
      tools: [{
        type: "function",
        function: {
          name: "get_weather",
          description: "Weather for a city",
          parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
          strict: true
        }
      }],
      tool_choice: { type: "function", function: { name: "get_weather" } },
      parallel_tool_calls: false,
      response_format: { type: "json_schema", json_schema: { name: "answer", schema: { type: "object" }, strict: true } },
      user: "user-123",
      n: 1,
      seed: 7,
      presence_penalty: 0.5,
      frequency_penalty: -0.5,
      metadata: { team: "a" }
    })
    expectDecodesUnchanged(decodeChatRequest, body)
  })

  it("nulls where the SDK types allow them", () => {
    expectDecodesUnchanged(decodeChatRequest, {
      ...base,
      temperature: null,
      top_p: null,
      max_tokens: null,
      stop: null,
      n: null,
      seed: null,
      stream: null,
      stream_options: null,
      metadata: null
    })
  })

  it("a returned assistant message appended to the history unchanged", () => {
    const returned = { role: "assistant", content: null, refusal: null, annotations: [], audio: null, function_call: null, tool_calls: [call] }
    expectDecodesUnchanged(decodeChatRequest, { ...base, messages: [base.messages[0], returned, { role: "tool", tool_call_id: "call_1", content: "sunny" }] })
  })

  it("streaming with include_usage, json_object and string stop", () => {
    expectDecodesUnchanged(decodeChatRequest, {
      ...base,
      stream: true,
      stream_options: { include_usage: true },
      response_format: { type: "json_object" },
      stop: "END",
      tool_choice: "required",
      tools: [{ type: "function", function: { name: "f" } }]
    })
  })
})
