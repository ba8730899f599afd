import { describe, expect, it } from "vitest"
import { decodeMessagesRequest } from "../../src/wire/index.ts"
import { SERVER_BLOCK_TYPES, SERVER_TOOL_TYPES } from "../../src/wire/anthropic-messages.ts"
import { anthropicBody } from "./sdk.ts"
import { expectDecodesUnchanged } from "../support/decoded.ts"

const base = { model: "claude-sonnet-4-5", max_tokens: 1024, messages: [{ role: "user", content: "Hello" }] }
const withContent = (content: unknown, role = "user") => ({ ...base, messages: [{ role, content }] })
const toolUse = { type: "tool_use", id: "toolu_01", name: "get_weather", input: { city: "Paris" } }

const failure = (body: unknown) => {
  const result = decodeMessagesRequest(body)
  if (result.ok) throw new Error(`expected a failure for ${JSON.stringify(body)}`)
  return result
}

describe("decodeMessagesRequest rejects, naming the field", () => {
  const cases: ReadonlyArray<readonly [string, unknown, string, string]> = [
    ["a missing model", { max_tokens: 1, messages: base.messages }, "model", "model: required field missing"],
    ["a missing max_tokens", { model: "m", messages: base.messages }, "max_tokens", "max_tokens: required field missing"],
    ["max_tokens zero", { ...base, max_tokens: 0 }, "max_tokens", "max_tokens: expected a positive integer"],
    ["empty messages", { ...base, messages: [] }, "messages", "messages: expected a non-empty array"],
    [
      "an unknown role in messages",
      { ...base, messages: [{ role: "tool", content: "x" }] },
      "messages.0.role",
      "messages.0.role: expected one of user, assistant, system"
    ],
    [
      "an empty text block",
      withContent([{ type: "text", text: "" }]),
      "messages.0.content.0.text",
      "messages.0.content.0.text: text content blocks must be non-empty"
    ],
    [
      "an unknown block type",
      withContent([{ type: "video", url: "https://x" }]),
      "messages.0.content.0.type",
      `messages.0.content.0.type: expected one of text, image, document, search_result, tool_use, tool_result, thinking, redacted_thinking, ${SERVER_BLOCK_TYPES.join(", ")}`
    ],
    [
      "an unknown field in a tool_use block",
      withContent([{ ...toolUse, extra: 1 }], "assistant"),
      "messages.0.content.0.extra",
      "messages.0.content.0.extra: unknown field"
    ],
    [
      "an image with an unsupported media type",
      withContent([{ type: "image", source: { type: "base64", media_type: "image/bmp", data: "AAAA" } }]),
      "messages.0.content.0.source.media_type",
      "messages.0.content.0.source.media_type: expected one of image/jpeg, image/png, image/gif, image/webp"
    ],
    [
      "an image with an unknown source type",
      withContent([{ type: "image", source: { type: "s3", key: "f" } }]),
      "messages.0.content.0.source.type",
      "messages.0.content.0.source.type: expected one of base64, url, file"
    ],
    [
      "a tool_use id with a colon",
      withContent([{ ...toolUse, id: "functions.Bash:0" }], "assistant"),
      "messages.0.content.0.id",
      "messages.0.content.0.id: expected an id matching ^[a-zA-Z0-9_-]+$"
    ],
    [
      "a tool_use input that is not an object",
      withContent([{ ...toolUse, input: "{}" }], "assistant"),
      "messages.0.content.0.input",
      "messages.0.content.0.input: expected an object"
    ],
    [
      "a tool_result with a tool_use block",
      withContent([{ type: "tool_result", tool_use_id: "toolu_01", content: [toolUse] }]),
      "messages.0.content.0.content.0.type",
      "messages.0.content.0.content.0.type: expected one of text, image, document, search_result, tool_reference, browser_state"
    ],
    [
      "a non-boolean is_error",
      withContent([{ type: "tool_result", tool_use_id: "toolu_01", is_error: "yes" }]),
      "messages.0.content.0.is_error",
      "messages.0.content.0.is_error: expected a boolean"
    ],
    [
      "an unknown cache_control type",
      withContent([{ type: "text", text: "x", cache_control: { type: "persistent" } }]),
      "messages.0.content.0.cache_control.type",
      "messages.0.content.0.cache_control.type: expected \"ephemeral\""
    ],
    [
      "an unknown field on a block",
      withContent([{ type: "text", text: "x", weight: 2 }]),
      "messages.0.content.0.weight",
      "messages.0.content.0.weight: unknown field"
    ],
    [
      "a system image block",
      { ...base, system: [{ type: "image", source: { type: "url", url: "https://x" } }] },
      "system.0.type",
      "system.0.type: expected \"text\""
    ],
    [
      "a tool without input_schema",
      { ...base, tools: [{ name: "f" }] },
      "tools.0.input_schema",
      "tools.0.input_schema: required field missing"
    ],
    [
      "a tool input_schema without type",
      { ...base, tools: [{ name: "f", input_schema: { properties: {} } }] },
      "tools.0.input_schema.type",
      "tools.0.input_schema.type: required field missing"
    ],
    [
      "a tool input_schema of type array",
      { ...base, tools: [{ name: "f", input_schema: { type: "array" } }] },
      "tools.0.input_schema.type",
      "tools.0.input_schema.type: expected \"object\""
    ],
    [
      "an unknown server tool",
      { ...base, tools: [{ type: "web_search_20991231", name: "web_search" }] },
      "tools.0.type",
      `tools.0.type: expected one of custom, ${SERVER_TOOL_TYPES.join(", ")}`
    ],
    [
      "an unknown tool_choice type",
      { ...base, tool_choice: { type: "required" } },
      "tool_choice.type",
      "tool_choice.type: expected one of auto, any, tool, none"
    ],
    [
      "tool_choice tool without name",
      { ...base, tool_choice: { type: "tool" } },
      "tool_choice.name",
      "tool_choice.name: required field missing"
    ],
    [
      "disable_parallel_tool_use on none",
      { ...base, tool_choice: { type: "none", disable_parallel_tool_use: true } },
      "tool_choice.disable_parallel_tool_use",
      "tool_choice.disable_parallel_tool_use: unknown field"
    ],
    ["a string stop_sequences", { ...base, stop_sequences: "END" }, "stop_sequences", "stop_sequences: expected an array"],
    ["temperature above 1", { ...base, temperature: 1.5 }, "temperature", "temperature: expected a number between 0 and 1"],
    ["top_p above 1", { ...base, top_p: 2 }, "top_p", "top_p: expected a number between 0 and 1"],
    ["negative top_k", { ...base, top_k: -1 }, "top_k", "top_k: expected an integer >= 0"],
    ["unknown metadata", { ...base, metadata: { session: "s" } }, "metadata.session", "metadata.session: unknown field"],
    ["stream not boolean", { ...base, stream: 1 }, "stream", "stream: expected a boolean"],
    [
      "a small thinking budget",
      { ...base, thinking: { type: "enabled", budget_tokens: 100 } },
      "thinking.budget_tokens",
      "thinking.budget_tokens: expected an integer >= 1024"
    ],
    [
      "an unknown thinking type",
      { ...base, thinking: { type: "on" } },
      "thinking.type",
      "thinking.type: expected one of enabled, disabled, adaptive, between_tools"
    ],
    ["an unknown top-level field", { ...base, service_tiers: "auto" }, "service_tiers", "service_tiers: unknown field"]
  ]
  it.each(cases)("%s", (_name, body, path, message) => {
    const result = failure(body)
    expect(result.path).toBe(path)
    expect(result.message).toBe(message)
  })
})

describe("decodeMessagesRequest accepts", () => {
  it("a full request built by the Anthropic SDK", async () => {
    const body = await anthropicBody({
      model: "claude-sonnet-4-5",
      max_tokens: 2048,
      system: [{ type: "text", text: "You are terse.", cache_control: { type: "ephemeral" } }],
      messages: [
        {
          role: "user",
          content: [
            { type: "text", text: "Weather and this picture?" },
            { type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } },
            { type: "image", source: { type: "url", url: "https://example.com/a.jpg" } }
          ]
        },
        {
          role: "assistant",
          content: [
            { type: "thinking", thinking: "Need the tool.", signature: "sig" },
            { type: "text", text: "Checking." },
            { type: "tool_use", id: "toolu_01", name: "get_weather", input: { city: "Paris" } }
          ]
        },
        {
          role: "user",
          content: [
            { type: "tool_result", tool_use_id: "toolu_01", content: [{ type: "text", text: "21C" }], is_error: false },
            { type: "text", text: "Thanks", cache_control: { type: "ephemeral", ttl: "1h" } }
          ]
        }
      ],
      tools: [{
        name: "get_weather",
        description: "Weather for a city",
        input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
        cache_control: { type: "ephemeral" }
      }],
      tool_choice: { type: "auto", disable_parallel_tool_use: true },
      stop_sequences: ["END"],
      // Current SDK types no longer declare the sampling parameters, but still send them.
      ...({ temperature: 0.5, top_p: 0.9, top_k: 40 } as object),
      metadata: { user_id: "u-1" },
      thinking: { type: "enabled", budget_tokens: 1024 }
    })
    expectDecodesUnchanged(decodeMessagesRequest, body)
  })

  it("response content replayed as history (citations, caller, redacted thinking)", () => {
    expectDecodesUnchanged(decodeMessagesRequest, {
      ...base,
      messages: [
        base.messages[0],
        {
          role: "assistant",
          content: [
            { type: "redacted_thinking", data: "xyz" },
            { type: "text", text: "Let me check.", citations: null },
            { ...toolUse, caller: { type: "direct" } }
          ]
        },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_01", content: "sunny" }] }
      ]
    })
  })

  it("string system, string contents, every tool_choice and thinking shape", () => {
    for (const tool_choice of [{ type: "auto" }, { type: "any" }, { type: "tool", name: "f" }, { type: "none" }]) {
      for (const thinking of [{ type: "disabled" }, { type: "adaptive" }]) {
        expectDecodesUnchanged(decodeMessagesRequest, {
          ...base,
          system: "Be kind.",
          tools: [{ name: "f", input_schema: { type: "object" } }],
          tool_choice,
          thinking,
          stream: true
        })
      }
    }
  })
})
