/**
 * The Vertex kind through the real server and the fake Vertex AI (a token endpoint that verifies
 * the service account's signed assertion; Claude through rawPredict / streamRawPredict, refusing
 * a body with `model` or without `anthropic_version: vertex-2023-10-16`; Gemini through the
 * Google publisher routes): each client format x {a plain answer, a stream ending the way the
 * format ends, a tool call and its result turn, a vendor error}, on a Claude and a Gemini model,
 * and the token fetched once and reused.
 */
import Anthropic from "@anthropic-ai/sdk"
import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import OpenAI from "openai"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { type FakeVertex, startFakeVertex } from "../support/fake-vertex.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { anthropicFor, openaiFor } from "../support/sdk-clients.ts"

const PROJECT = "gateway-test-1"
const LOCATION = "us-east5"
const CLAUDE = "claude-sonnet-4-5@20250929"
const GEMINI = "gemini-2.5-pro"
const CAP = 1000

let fake: FakeVertex
let gw: TestGateway
let key: string

beforeAll(async () => {
  fake = await startFakeVertex({ project: PROJECT, location: LOCATION, claude: [CLAUDE], gemini: [GEMINI] })
  const dir = mkdtempSync(join(tmpdir(), "vertex-sa-"))
  const file = join(dir, "sa.json")
  writeFileSync(file, JSON.stringify(fake.serviceAccount))
  // The same account with another key: Google refuses its assertion.
  const other = await startFakeVertex({ project: PROJECT, location: LOCATION, claude: [], gemini: [] })
  const wrongFile = join(dir, "wrong.json")
  writeFileSync(wrongFile, JSON.stringify({ ...fake.serviceAccount, private_key: other.serviceAccount.private_key! }))
  await other.close()
  gw = await startGateway(
    testConfig({
      workspace: { credits: 1_000_000 },
      limits: { requests_per_minute: 100_000, concurrent_streams: 100 },
      providers: [
        { name: "up-vertex", kind: "vertex", base_url: fake.url, project: PROJECT, location: LOCATION, credentials_file: file },
        { name: "up-vertex-wrong", kind: "vertex", base_url: fake.url, project: PROJECT, location: LOCATION, credentials_file: wrongFile }
      ],
      models: [
        { alias: "claude-vx", id: CLAUDE, provider: "up-vertex", max_tokens: CAP },
        { alias: "gemini-vx", id: GEMINI, provider: "up-vertex", max_tokens: CAP },
        { alias: "claude-wrong", id: "claude-opus-4-1@20250805", provider: "up-vertex-wrong", max_tokens: CAP }
      ]
    })
  )
})

afterAll(async () => {
  await gw?.close()
  await fake?.close()
})

beforeEach(async () => {
  fake.reset()
  ;({ key } = await gw.createKey())
})

const openai = () => openaiFor(gw.url, key)
const anthropic = () => anthropicFor(gw.url, key)
const WEATHER = { type: "object", properties: { city: { type: "string" } }, required: ["city"], additionalProperties: false }
const predictions = () => fake.requests.filter((request) => request.path !== "/token")

describe("Anthropic SDK on /v1/messages -> Claude on Vertex (Claude Code's path)", () => {
  it("plain: rawPredict with the model in the URL, anthropic_version in the body, a bearer token", async () => {
    fake.anthropic.enqueue({ kind: "text", text: "Paris.", usage: { input: 10, output: 1 } })
    const message = await anthropic().messages.create({ model: "claude-vx", max_tokens: 5000, messages: [{ role: "user", content: "Capital?" }] })
    expect(message).toMatchObject({ content: [{ type: "text", text: "Paris." }], usage: { input_tokens: 10, output_tokens: 1 } })
    const [call] = predictions()
    expect(call!.path).toBe(`/v1/projects/${PROJECT}/locations/${LOCATION}/publishers/anthropic/models/${CLAUDE}:rawPredict`)
    expect(call!.headers.authorization).toMatch(/^Bearer ya29\./)
    expect(call!.body).toEqual({ anthropic_version: "vertex-2023-10-16", max_tokens: CAP, messages: [{ role: "user", content: "Capital?" }] })
  })

  it("a stream through streamRawPredict ends with message_delta and message_stop; a tool turn; the token is fetched once", async () => {
    const before = fake.tokensIssued()
    fake.anthropic.enqueue({ kind: "text", text: "alpha beta" })
    const stream = anthropic().messages.stream({ model: "claude-vx", max_tokens: 100, messages: [{ role: "user", content: "go" }] })
    const types: Array<string> = []
    stream.on("streamEvent", (event) => types.push(event.type))
    expect((await stream.finalMessage()).content).toEqual([{ type: "text", text: "alpha beta" }])
    expect(types.slice(-2)).toEqual(["message_delta", "message_stop"])
    expect(predictions()[0]!.path).toMatch(/:streamRawPredict$/)

    fake.anthropic.enqueue(
      { kind: "tool_calls", calls: [{ id: "toolu_vx1", name: "Bash", arguments: { command: "ls" } }] },
      { kind: "text", text: "Two files." }
    )
    const tools: Array<Anthropic.Tool> = [{ name: "Bash", input_schema: { type: "object", properties: { command: { type: "string" } } } }]
    const messages: Array<Anthropic.MessageParam> = [{ role: "user", content: "List files" }]
    const first = await anthropic().messages.stream({ model: "claude-vx", max_tokens: 100, messages, tools }).finalMessage()
    expect(first.content).toEqual([{ type: "tool_use", id: "toolu_vx1", name: "Bash", input: { command: "ls" } }])
    messages.push({ role: "assistant", content: first.content }, { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_vx1", content: "a b" }] })
    const second = await anthropic().messages.create({ model: "claude-vx", max_tokens: 100, messages, tools }, { headers: { "anthropic-beta": "interleaved-thinking-2025-05-14" } })
    expect(second.content).toEqual([{ type: "text", text: "Two files." }])
    expect(predictions().at(-1)!.headers["anthropic-beta"]).toBe("interleaved-thinking-2025-05-14")
    expect(fake.tokensIssued() - before).toBeLessThanOrEqual(1)
  })

  it("vendor errors: Claude's overload is a 502; a key Google refuses is a 502 that echoes no credential", async () => {
    fake.anthropic.enqueue({ kind: "error", status: 529 })
    const overloaded = await anthropic().messages.create({ model: "claude-vx", max_tokens: 100, messages: [{ role: "user", content: "x" }] }).catch((e: unknown) => e)
    expect((overloaded as InstanceType<typeof Anthropic.APIError>).status).toBe(502)
    const response = await fetch(`${gw.url}/v1/messages`, {
      method: "POST",
      headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" },
      body: JSON.stringify({ model: "claude-wrong", max_tokens: 100, messages: [{ role: "user", content: "x" }] })
    })
    expect(response.status).toBe(502)
    const text = await response.text()
    expect(text).toContain("Invalid JWT Signature")
    expect(text).not.toContain("PRIVATE KEY")
  })
})

describe("openai SDK on /v1/responses -> Claude on Vertex (Codex's path)", () => {
  it("plain, streamed, a tool turn", async () => {
    fake.anthropic.enqueue({ kind: "text", text: "Hi." })
    expect((await openai().responses.create({ model: "claude-vx", input: "hello" })).output_text).toBe("Hi.")
    fake.anthropic.enqueue({ kind: "text", text: "streamed here" })
    const stream = openai().responses.stream({ model: "claude-vx", input: "go" })
    const types: Array<string> = []
    stream.on("event", (event) => types.push(event.type))
    expect((await stream.finalResponse()).output_text).toBe("streamed here")
    expect(types.at(-1)).toBe("response.completed")

    fake.anthropic.enqueue(
      { kind: "tool_calls", calls: [{ id: "toolu_cx1", name: "shell", arguments: { command: ["ls"] } }] },
      { kind: "text", text: "Done." }
    )
    const tools: Array<OpenAI.Responses.FunctionTool> = [{ type: "function", name: "shell", parameters: { type: "object", properties: { command: { type: "array", items: { type: "string" } } } }, strict: false }]
    const first = await openai().responses.create({ model: "claude-vx", input: "List", tools, stream: true }).then(async (s) => {
      let done: OpenAI.Responses.Response | undefined
      for await (const event of s) if (event.type === "response.completed") done = event.response
      return done!
    })
    const call = first.output.find((item) => item.type === "function_call")!
    // Codex sees an OpenAI-style call id; the next turn gives Claude its own id back.
    expect(call).toMatchObject({ name: "shell", call_id: "call_cx1" })
    const second = await openai().responses.create({ model: "claude-vx", input: [{ role: "user", content: "List" }, call, { type: "function_call_output", call_id: "call_cx1", output: "a b" }], tools })
    expect(second.output_text).toBe("Done.")
  })
})

describe("Gemini on Vertex, from every client format", () => {
  it("chat plain and streamed, messages with a tool turn, responses; the Google publisher route with the bearer token", async () => {
    fake.gemini.enqueue({ kind: "text", text: "Bonjour." })
    const completion = await openai().chat.completions.create({ model: "gemini-vx", messages: [{ role: "user", content: "hi" }] })
    expect(completion.choices[0]!.message.content).toBe("Bonjour.")
    const [call] = predictions()
    expect(call!.path).toBe(`/v1/projects/${PROJECT}/locations/${LOCATION}/publishers/google/models/${GEMINI}:generateContent`)
    expect(call!.headers.authorization).toMatch(/^Bearer ya29\./)

    fake.gemini.enqueue({ kind: "text", text: "one two" })
    const raw = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "gemini-vx", messages: [{ role: "user", content: "go" }], stream: true })
    })
    expect((await raw.text()).trimEnd().endsWith("data: [DONE]")).toBe(true)

    fake.gemini.enqueue({ kind: "tool_calls", calls: [{ name: "get_weather", arguments: { city: "Rome" } }] }, { kind: "text", text: "Warm." })
    const tools: Array<Anthropic.Tool> = [{ name: "get_weather", input_schema: WEATHER as Anthropic.Tool.InputSchema }]
    const messages: Array<Anthropic.MessageParam> = [{ role: "user", content: "Weather in Rome?" }]
    const first = await anthropic().messages.create({ model: "gemini-vx", max_tokens: 100, messages, tools })
    const use = first.content.find((block) => block.type === "tool_use")!
    messages.push({ role: "assistant", content: first.content }, { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "warm" }] })
    const second = await anthropic().messages.stream({ model: "gemini-vx", max_tokens: 100, messages, tools }).finalMessage()
    expect(second.content).toEqual([{ type: "text", text: "Warm." }])

    fake.gemini.enqueue({ kind: "error", status: 429 })
    const throttled = await openai().responses.create({ model: "gemini-vx", input: "x" }).catch((e: unknown) => e)
    expect((throttled as InstanceType<typeof OpenAI.APIError>).status).toBe(502)
  })
})

describe("count_tokens -> Vertex", () => {
  it("a Claude model through count-tokens:rawPredict, a Gemini model through :countTokens", async () => {
    const claude = await anthropic().messages.countTokens({ model: "claude-vx", messages: [{ role: "user", content: "three little words" }] })
    expect(claude.input_tokens).toBeGreaterThan(0)
    const [call] = predictions()
    expect(call!.path).toBe(`/v1/projects/${PROJECT}/locations/${LOCATION}/publishers/anthropic/models/count-tokens:rawPredict`)
    expect(call!.body).toMatchObject({ model: CLAUDE, anthropic_version: "vertex-2023-10-16" })
    const gemini = await anthropic().messages.countTokens({ model: "gemini-vx", messages: [{ role: "user", content: "three little words" }] })
    expect(gemini.input_tokens).toBe(3)
    expect(predictions()[1]!.path).toBe(`/v1/projects/${PROJECT}/locations/${LOCATION}/publishers/google/models/${GEMINI}:countTokens`)
    expect(predictions()[1]!.body).toEqual({ contents: [{ role: "user", parts: [{ text: "three little words" }] }] })
  })
})

