import { createHash } from "node:crypto"
import { Result } from "effect"
import { describe, expect, it } from "vitest"
import {
  chatRequestToAnthropic,
  decodeChatRequest,
  decodeMessagesRequest,
  type MessagesRequest,
  sanitizeToolId,
  type Untranslatable
} from "../../src/wire/index.ts"

const options = { model: "claude-sonnet-4-5-20250929", maxTokensCap: 8192 }
const user = { role: "user", content: "Hi" }

const translate = (body: Record<string, unknown>): Result.Result<MessagesRequest, Untranslatable> => {
  const decoded = decodeChatRequest({ model: "smart", messages: [user], ...body })
  if (!decoded.ok) throw new Error(decoded.message)
  return chatRequestToAnthropic(decoded.value, options)
}

/** Translates and checks the result is itself a valid Anthropic request. */
const ok = (body: Record<string, unknown>): MessagesRequest => {
  const result = translate(body)
  if (Result.isFailure(result)) throw new Error(result.failure.message)
  const valid = decodeMessagesRequest(result.success)
  if (!valid.ok) throw new Error(`translation is not a valid Anthropic request: ${valid.message}`)
  return result.success
}

const refused = (body: Record<string, unknown>): Untranslatable => {
  const result = translate(body)
  if (Result.isSuccess(result)) throw new Error(`expected a refusal, got ${JSON.stringify(result.success)}`)
  return result.failure
}

const call = (id: string, name: string, args: string) => ({ id, type: "function", function: { name, arguments: args } })

describe("chatRequestToAnthropic", () => {
  it("maps model and max tokens: the cap when absent, clamped above it, max_completion_tokens first", () => {
    expect(ok({})).toMatchObject({ model: options.model, max_tokens: 8192 })
    expect(ok({ max_tokens: 100 }).max_tokens).toBe(100)
    expect(ok({ max_tokens: 100_000 }).max_tokens).toBe(8192)
    expect(ok({ max_tokens: 100, max_completion_tokens: 200 }).max_tokens).toBe(200)
  })

  it("hoists system and developer messages, wherever they are, into system text blocks", () => {
    const request = ok({
      messages: [
        { role: "system", content: "Rule one." },
        user,
        { role: "developer", content: [{ type: "text", text: "Rule two." }, { type: "text", text: "" }] },
        { role: "system", content: "" },
        { role: "assistant", content: "Hello." },
        { role: "user", content: "Again" }
      ]
    })
    expect(request.system).toEqual([{ type: "text", text: "Rule one." }, { type: "text", text: "Rule two." }])
    expect(request.messages).toEqual([
      { role: "user", content: [{ type: "text", text: "Hi" }] },
      { role: "assistant", content: [{ type: "text", text: "Hello." }] },
      { role: "user", content: [{ type: "text", text: "Again" }] }
    ])
  })

  it("merges consecutive tool results and the next user message into one user turn, results first", () => {
    const request = ok({
      messages: [
        user,
        { role: "assistant", content: "Checking both.", tool_calls: [call("call_a", "weather", "{\"city\":\"Paris\"}"), call("call_b", "weather", "{\"city\":\"Rome\"}")] },
        { role: "tool", tool_call_id: "call_a", content: "21C" },
        { role: "tool", tool_call_id: "call_b", content: [{ type: "text", text: "25C" }] },
        { role: "user", content: "Which is warmer?" }
      ],
      tools: [{ type: "function", function: { name: "weather" } }]
    })
    expect(request.messages).toEqual([
      { role: "user", content: [{ type: "text", text: "Hi" }] },
      {
        role: "assistant",
        content: [
          { type: "text", text: "Checking both." },
          { type: "tool_use", id: "toolu_a", name: "weather", input: { city: "Paris" } },
          { type: "tool_use", id: "toolu_b", name: "weather", input: { city: "Rome" } }
        ]
      },
      {
        role: "user",
        content: [
          { type: "tool_result", tool_use_id: "toolu_a", content: "21C" },
          { type: "tool_result", tool_use_id: "toolu_b", content: [{ type: "text", text: "25C" }] },
          { type: "text", text: "Which is warmer?" }
        ]
      }
    ])
  })

  it("sanitises tool ids with one deterministic function on both sides", () => {
    const request = ok({
      messages: [
        user,
        { role: "assistant", content: null, tool_calls: [call("functions.Bash:0", "Bash", "{}"), call("functions.Bash:1", "Bash", "{}")] },
        { role: "tool", tool_call_id: "functions.Bash:0", content: "a" },
        { role: "tool", tool_call_id: "functions.Bash:1", content: "b" }
      ],
      tools: [{ type: "function", function: { name: "Bash" } }]
    })
    const [, assistant, results] = request.messages
    const ids = (assistant?.content as ReadonlyArray<unknown> as Array<{ id: string }>).map((block) => block.id)
    const resultIds = (results?.content as ReadonlyArray<unknown> as Array<{ tool_use_id: string }>).map((block) => block.tool_use_id)
    expect(ids).toEqual(resultIds)
    expect(ids[0]).toMatch(/^[a-zA-Z0-9_-]+$/)
    expect(ids[0]).not.toBe(ids[1])
    expect(ids[0]).toBe(sanitizeToolId("toolu_functions.Bash:0"))
    expect(sanitizeToolId("call_abc-1")).toBe("call_abc-1")
  })

  it("parses arguments: empty means {}, invalid JSON and non-objects are refused with the path", () => {
    const history = (args: string) => ({
      messages: [user, { role: "assistant", tool_calls: [call("c1", "f", args)] }, { role: "tool", tool_call_id: "c1", content: "x" }],
      tools: [{ type: "function", function: { name: "f" } }]
    })
    expect(ok(history("")).messages[1]?.content).toEqual([{ type: "tool_use", id: "toolu_c1", name: "f", input: {} }])
    expect(refused(history("{\"a\":"))).toMatchObject({
      path: "messages.1.tool_calls.0.function.arguments",
      message: "messages.1.tool_calls.0.function.arguments: tool call arguments are not valid JSON"
    })
    expect(refused(history("[1,2]")).path).toBe("messages.1.tool_calls.0.function.arguments")
  })

  it("never produces an empty or whitespace-only text block", () => {
    const request = ok({
      messages: [
        { role: "user", content: [{ type: "text", text: "" }, { type: "text", text: " \n" }, { type: "text", text: "Hello" }] },
        { role: "assistant", content: "", tool_calls: [call("c1", "f", "{}")] },
        { role: "tool", tool_call_id: "c1", content: "" },
        { role: "user", content: "" },
        { role: "user", content: "   " },
        { role: "assistant", content: "" },
        { role: "user", content: "Next" }
      ],
      tools: [{ type: "function", function: { name: "f" } }]
    })
    expect(request.messages).toEqual([
      { role: "user", content: [{ type: "text", text: "Hello" }] },
      { role: "assistant", content: [{ type: "tool_use", id: "toolu_c1", name: "f", input: {} }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_c1" }, { type: "text", text: "Next" }] }
    ])
  })

  it("refuses a transcript with nothing to send", () => {
    expect(refused({ messages: [{ role: "system", content: "Only rules" }] }).path).toBe("messages")
  })

  it("trims trailing whitespace off a final assistant prefill", () => {
    const request = ok({ messages: [user, { role: "assistant", content: "The answer is " }] })
    expect(request.messages.at(-1)).toEqual({ role: "assistant", content: [{ type: "text", text: "The answer is" }] })
  })

  it("keeps a replayed refusal as assistant text", () => {
    const request = ok({ messages: [user, { role: "assistant", content: null, refusal: "I can't help.", tool_calls: [] }, user] })
    expect(request.messages[1]).toEqual({ role: "assistant", content: [{ type: "text", text: "I can't help." }] })
  })

  it("converts images: data URIs to base64 sources, https to url sources, others refused", () => {
    const image = (url: string) => ({ messages: [{ role: "user", content: [{ type: "text", text: "Look" }, { type: "image_url", image_url: { url, detail: "high" } }] }] })
    expect(ok(image("data:image/png;base64,iVBORw0KGgo=")).messages[0]?.content).toEqual([
      { type: "text", text: "Look" },
      { type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } }
    ])
    expect(ok(image("https://example.com/cat.jpg")).messages[0]?.content).toContainEqual(
      { type: "image", source: { type: "url", url: "https://example.com/cat.jpg" } }
    )
    expect(refused(image("data:image/bmp;base64,Qk0="))).toMatchObject({ path: "messages.0.content.1.image_url.url" })
    expect(refused(image("ftp://example.com/cat.jpg")).path).toBe("messages.0.content.1.image_url.url")
  })

  it("clamps temperature to 1 and sorts out temperature with top_p", () => {
    expect(ok({ temperature: 1.7 }).temperature).toBe(1)
    expect(ok({ temperature: 0.3 }).temperature).toBe(0.3)
    expect(ok({ top_p: 0.8 })).toMatchObject({ top_p: 0.8 })
    const defaultTopP = ok({ temperature: 0.3, top_p: 1 })
    expect(defaultTopP.temperature).toBe(0.3)
    expect(defaultTopP.top_p).toBeUndefined()
    const defaultTemperature = ok({ temperature: 1, top_p: 0.5 })
    expect(defaultTemperature.temperature).toBeUndefined()
    expect(defaultTemperature.top_p).toBe(0.5)
    expect(refused({ temperature: 0.3, top_p: 0.5 }).path).toBe("top_p")
  })

  it("maps stop to stop_sequences, dropping whitespace-only ones", () => {
    expect(ok({ stop: "END" }).stop_sequences).toEqual(["END"])
    expect(ok({ stop: ["\n", "END", "  "] }).stop_sequences).toEqual(["END"])
    expect(ok({ stop: ["\n\n"] }).stop_sequences).toBeUndefined()
  })

  it("maps tools, giving parameterless tools an empty object schema", () => {
    const request = ok({
      tools: [
        { type: "function", function: { name: "now", description: "Current time" } },
        { type: "function", function: { name: "add", parameters: { type: "object", properties: { a: { type: "number" } }, $defs: { x: {} } }, strict: true } },
        { type: "function", function: { name: "untyped", parameters: { properties: {} } } }
      ]
    })
    expect(request.tools).toEqual([
      { name: "now", description: "Current time", input_schema: { type: "object", properties: {} } },
      { name: "add", input_schema: { type: "object", properties: { a: { type: "number" } }, $defs: { x: {} } } },
      { name: "untyped", input_schema: { type: "object", properties: {} } }
    ])
  })

  it("maps tool_choice and parallel_tool_calls", () => {
    const tools = [{ type: "function", function: { name: "f" } }]
    expect(ok({ tools }).tool_choice).toBeUndefined()
    expect(ok({ tools, tool_choice: "auto" }).tool_choice).toEqual({ type: "auto" })
    expect(ok({ tools, tool_choice: "none" }).tool_choice).toEqual({ type: "none" })
    expect(ok({ tools, tool_choice: "required" }).tool_choice).toEqual({ type: "any" })
    expect(ok({ tools, tool_choice: { type: "function", function: { name: "f" } } }).tool_choice).toEqual({ type: "tool", name: "f" })
    expect(ok({ tools, parallel_tool_calls: false }).tool_choice).toEqual({ type: "auto", disable_parallel_tool_use: true })
    expect(ok({ tools, tool_choice: "required", parallel_tool_calls: false }).tool_choice).toEqual({ type: "any", disable_parallel_tool_use: true })
    expect(ok({ tools, tool_choice: "none", parallel_tool_calls: false }).tool_choice).toEqual({ type: "none" })
    expect(ok({ tools, parallel_tool_calls: true }).tool_choice).toBeUndefined()
    expect(ok({ tool_choice: "auto" }).tool_choice).toBeUndefined()
    expect(refused({ tool_choice: "required" }).path).toBe("tool_choice")
  })

  it("emulates json_object with a forced tool", () => {
    const request = ok({ response_format: { type: "json_object" } })
    expect(request.tools).toEqual([{
      name: "json_response",
      description: "Respond with the final answer as JSON by calling this tool.",
      input_schema: { type: "object", additionalProperties: true, properties: {} }
    }])
    expect(request.tool_choice).toEqual({ type: "tool", name: "json_response" })
  })

  it("emulates json_schema, wrapping schemas that are not objects", () => {
    const objectSchema = { type: "object", properties: { n: { type: "integer" } }, required: ["n"] }
    const plain = ok({ response_format: { type: "json_schema", json_schema: { name: "count", description: "A count", schema: objectSchema } } })
    expect(plain.tools).toEqual([{ name: "json_response", description: "A count", input_schema: objectSchema }])
    const list = ok({ response_format: { type: "json_schema", json_schema: { name: "list", schema: { type: "array", items: { $ref: "#/$defs/item" }, $defs: { item: { type: "string" } } } } } })
    expect(list.tools?.[0]?.input_schema).toEqual({
      type: "object",
      properties: { values: { type: "array", items: { $ref: "#/$defs/item" } } },
      required: ["values"],
      $defs: { item: { type: "string" } }
    })
  })

  it("keeps client tools in JSON mode and lets the model choose among them and the JSON tool", () => {
    const tools = [{ type: "function", function: { name: "search" } }]
    const request = ok({ tools, response_format: { type: "json_object" } })
    expect(request.tools?.map((tool) => tool.name)).toEqual(["search", "json_response"])
    expect(request.tool_choice).toEqual({ type: "any" })
    expect(ok({ tools, tool_choice: "none", response_format: { type: "json_object" } }).tool_choice).toEqual({ type: "tool", name: "json_response" })
    expect(refused({ tools: [{ type: "function", function: { name: "json_response" } }], response_format: { type: "json_object" } }).path)
      .toBe("tools.0.function.name")
  })

  it("maps user to metadata.user_id, hashing values that identify a person", () => {
    expect(ok({ user: "user-123" }).metadata).toEqual({ user_id: "user-123" })
    expect(ok({ user: "ann@example.com" }).metadata).toEqual({
      user_id: createHash("sha256").update("ann@example.com").digest("hex")
    })
    expect(ok({ user: "+1 (555) 010-9999" }).metadata?.user_id).toMatch(/^[0-9a-f]{64}$/)
  })

  it("refuses parameters Anthropic cannot honour, naming them", () => {
    expect(refused({ seed: 42 })).toMatchObject({ path: "seed", message: "seed: not supported by Anthropic models; remove it" })
    expect(refused({ presence_penalty: 0.5 }).path).toBe("presence_penalty")
    expect(refused({ frequency_penalty: 1 }).path).toBe("frequency_penalty")
    expect(ok({ presence_penalty: 0, frequency_penalty: 0, metadata: { team: "a" } })).not.toHaveProperty("metadata")
  })

  it("keeps stream and stream_options out of the way", () => {
    expect(ok({ stream: true, stream_options: { include_usage: true } }).stream).toBe(true)
    expect(ok({ stream: false })).not.toHaveProperty("stream")
  })

  it("returns a tagged error the pipeline can fail with", () => {
    const error = refused({ seed: 1 })
    expect(error._tag).toBe("Untranslatable")
  })
})
