// The Responses and embeddings fake is checked against the official SDK (which must accept every
// answer, streamed or not) and against the refusals the real API is known for.
import OpenAI from "openai"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import type { FakeUpstream } from "./fake-common.ts"
import { startFakeOpenAIResponses } from "./fake-openai-responses.ts"

const KEY = "sk-test-upstream"
const weatherTool = { type: "function" as const, name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } }, strict: false }

describe("fake OpenAI Responses and embeddings", () => {
  let fake: FakeUpstream
  let client: OpenAI
  beforeAll(async () => {
    fake = await startFakeOpenAIResponses({ apiKey: KEY })
    client = new OpenAI({ apiKey: KEY, baseURL: fake.url, maxRetries: 0 })
  })
  afterAll(() => fake.close())
  beforeEach(() => fake.reset())

  it("echoes the last user message with usage, and the SDK reads output_text", async () => {
    const response = await client.responses.create({ model: "gpt-5", instructions: "Be brief.", input: "hello there" })
    expect(response.output_text).toBe("echo: hello there")
    expect(response).toMatchObject({
      object: "response",
      status: "completed",
      model: "gpt-5",
      instructions: "Be brief.",
      usage: { input_tokens: 4, output_tokens: 3, total_tokens: 7, input_tokens_details: { cached_tokens: 0 } }
    })
    expect(response.id).toMatch(/^resp_/)
    expect(fake.requests[0]).toMatchObject({ method: "POST", path: "/v1/responses" })
  })

  it("streams the exact event sequence, accepted by responses.stream", async () => {
    fake.enqueue({ kind: "text", text: "Hello streaming world" })
    const stream = client.responses.stream({ model: "gpt-5", input: "hi" })
    const types: Array<string> = []
    stream.on("event", (event) => types.push(event.type))
    const final = await stream.finalResponse()
    expect(final.output_text).toBe("Hello streaming world")
    expect(types[0]).toBe("response.created")
    expect(types.at(-1)).toBe("response.completed")
    expect(types.filter((type) => type === "response.output_text.delta")).toHaveLength(3)
  })

  it("runs a tool loop: function_call, then function_call_output with the items sent back", async () => {
    fake.enqueue({ kind: "tool_calls", calls: [{ id: "call_1", name: "get_weather", arguments: { city: "Paris" } }] })
    const first = await client.responses.create({ model: "gpt-5", input: [{ role: "user", content: "Weather?" }], tools: [weatherTool], store: false })
    const call = first.output.find((item) => item.type === "function_call")
    expect(call).toMatchObject({ type: "function_call", call_id: "call_1", name: "get_weather", arguments: "{\"city\":\"Paris\"}" })

    const second = await client.responses.create({
      model: "gpt-5",
      input: [{ role: "user", content: "Weather?" }, ...(first.output as Array<OpenAI.Responses.ResponseInputItem>), { type: "function_call_output", call_id: "call_1", output: "sunny" }],
      tools: [weatherTool],
      store: false
    })
    expect(second.output_text).toBe("echo: sunny")
  })

  it("streams function calls the SDK assembles", async () => {
    fake.enqueue({ kind: "tool_calls", text: "Let me look.", calls: [{ name: "get_weather", arguments: { city: "Oslo" } }, { name: "get_weather", arguments: { city: "Rome" } }] })
    const final = await client.responses.stream({ model: "gpt-5", input: "x", tools: [weatherTool] }).finalResponse()
    expect(final.output_text).toBe("Let me look.")
    expect(final.output.filter((item) => item.type === "function_call").map((item) => item.type === "function_call" && item.arguments))
      .toEqual(["{\"city\":\"Oslo\"}", "{\"city\":\"Rome\"}"])
  })

  it("calls a free-form tool with a custom_tool_call, streamed as the SDK assembles it", async () => {
    fake.enqueue({ kind: "tool_calls", calls: [{ name: "apply_patch", arguments: { input: "*** Begin Patch\n*** End Patch\n" } }] })
    const final = await client.responses.stream({ model: "gpt-5", input: "x", tools: [{ type: "custom", name: "apply_patch" }] }).finalResponse()
    expect(final.output).toEqual([expect.objectContaining({ type: "custom_tool_call", name: "apply_patch", input: "*** Begin Patch\n*** End Patch\n", status: "completed" })])
    expect(final.output[0]).not.toHaveProperty("namespace")
  })

  it("calls a tool of Codex's additional_tools namespaces under its own name and namespace", async () => {
    fake.enqueue({ kind: "tool_calls", calls: [{ name: "exec", arguments: { input: "text(1)" } }] })
    const additional = { type: "additional_tools", role: "developer", tools: [{ type: "namespace", name: "functions", description: "", tools: [{ type: "custom", name: "exec" }] }] }
    const response = await fetch(`${fake.url}/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "gpt-5", stream: true, input: [additional, { role: "user", content: "x" }] })
    })
    const text = await response.text()
    expect(response.status, text).toBe(200)
    const events = text.split("\n\n").filter((frame) => frame.includes("data: ")).map((frame) => JSON.parse(frame.slice(frame.indexOf("data: ") + 6)))
    expect(events.filter((e) => e.type === "response.custom_tool_call_input.delta").map((e) => e.delta).join("")).toBe("text(1)")
    expect(events.find((e) => e.type === "response.output_item.done").item).toMatchObject({ type: "custom_tool_call", name: "exec", namespace: "functions", input: "text(1)" })
  })

  it("keeps stored responses for previous_response_id, and refuses ids it does not hold", async () => {
    const first = await client.responses.create({ model: "gpt-5", input: "remember me" })
    const next = await client.responses.create({ model: "gpt-5", previous_response_id: first.id, input: [{ type: "message", role: "assistant", content: "ok" }] })
    expect(next.output_text).toBe("echo: remember me")
    expect(next.previous_response_id).toBe(first.id)
    const unstored = await client.responses.create({ model: "gpt-5", input: "forget me", store: false })
    const error = await client.responses.create({ model: "gpt-5", previous_response_id: unstored.id, input: "x" }).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(OpenAI.BadRequestError)
    expect((error as InstanceType<typeof OpenAI.BadRequestError>).message).toContain(`Previous response with id '${unstored.id}' not found.`)
  })

  it("refuses what the real API refuses", async () => {
    const refused = async (body: Record<string, unknown>) => {
      const error = await client.responses.create(body as never).catch((e: unknown) => e)
      expect(error).toBeInstanceOf(OpenAI.BadRequestError)
      return (error as InstanceType<typeof OpenAI.BadRequestError>).error as { message: string; param: string | null }
    }
    expect(await refused({ model: "gpt-5", input: "x", temprature: 1 })).toMatchObject({ message: "Unknown parameter: 'temprature'.", param: "temprature" })
    expect(await refused({ model: "gpt-5", input: "x", tools: [{ type: "function", function: { name: "f" } }] })).toMatchObject({ param: "tools[0].name" })
    expect(await refused({ model: "gpt-5", input: [{ type: "function_call_output", call_id: "nope", output: "x" }] }))
      .toMatchObject({ message: "No tool call found for function call output with call_id nope." })
    expect(await refused({ model: "gpt-5", input: [{ type: "bogus" }] })).toMatchObject({ param: "input[0].type" })
    expect(await refused({ model: "gpt-5", input: "x", max_output_tokens: 5 })).toMatchObject({ param: "max_output_tokens" })
    expect(await refused({ input: "x" })).toMatchObject({ param: "model" })
  })

  it("truncates at max_output_tokens as an incomplete response", async () => {
    fake.enqueue({ kind: "text", text: Array.from({ length: 30 }, (_, i) => `w${i}`).join(" ") })
    const response = await client.responses.create({ model: "gpt-5", input: "x", max_output_tokens: 16 })
    expect(response.status).toBe("incomplete")
    expect(response.incomplete_details).toEqual({ reason: "max_output_tokens" })
    expect(response.output_text.split(" ")).toHaveLength(16)
  })

  it("fails a stream in-band: error event then response.failed, raised by the SDK", async () => {
    fake.enqueue({ kind: "mid_stream_error", message: "boom" })
    const error = await client.responses.stream({ model: "gpt-5", input: "x" }).finalResponse().catch((e: unknown) => e)
    expect(error).toBeInstanceOf(OpenAI.APIError)
    expect((error as Error).message).toContain("boom")
  })

  it("answers embeddings in base64 (the SDK default) and floats, deterministically", async () => {
    const base64 = await client.embeddings.create({ model: "text-embedding-3-small", input: ["a b", "c"], dimensions: 8 })
    expect(fake.requests[0]?.body).toMatchObject({ encoding_format: "base64" })
    expect(base64.data).toHaveLength(2)
    expect(base64.data[0]?.embedding).toHaveLength(8)
    expect(base64.usage).toEqual({ prompt_tokens: 3, total_tokens: 3 })
    const floats = await client.embeddings.create({ model: "text-embedding-3-small", input: "a b", dimensions: 8, encoding_format: "float" })
    expect(floats.data[0]?.embedding).toEqual(base64.data[0]?.embedding)
    const norm = Math.sqrt((floats.data[0]?.embedding ?? []).reduce((sum, value) => sum + value * value, 0))
    expect(norm).toBeCloseTo(1, 5)
  })

  it("refuses bad embeddings requests and unknown paths", async () => {
    const error = await client.embeddings.create({ model: "m", input: [], extra: 1 } as never).catch((e: unknown) => e)
    expect((error as InstanceType<typeof OpenAI.BadRequestError>).message).toContain("Unrecognized request argument supplied: extra")
    const empty = await client.embeddings.create({ model: "m", input: [] }).catch((e: unknown) => e)
    expect(empty).toBeInstanceOf(OpenAI.BadRequestError)
    const notFound = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "x" }] }).catch((e: unknown) => e)
    expect(notFound).toBeInstanceOf(OpenAI.NotFoundError)
    fake.enqueue({ kind: "error", status: 429 })
    const limited = await client.embeddings.create({ model: "m", input: "x" }).catch((e: unknown) => e)
    expect(limited).toBeInstanceOf(OpenAI.RateLimitError)
  })
})
