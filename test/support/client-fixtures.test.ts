// Keeps the captured client fixtures valid (shape, no leaked credentials, the turns each scenario
// promises) and checks that the recorder they were captured with answers in a format the
// official SDKs accept, so a recapture stays faithful.
import { readFileSync } from "node:fs"
import { join } from "node:path"
import Anthropic from "@anthropic-ai/sdk"
import OpenAI from "openai"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startRecorder } from "../../scripts/capture/record.ts"
import type { Recorder } from "../../scripts/capture/record.ts"
import {
  API_KEY_PLACEHOLDER,
  FIXTURES_DIR,
  listFixtures,
  loadFixture,
  modelRequests,
  parseFixture,
  replayHeaders,
  replayInit,
  replayUrl
} from "./client-fixtures.ts"
import type { ClientFixture, FixtureRequest } from "./client-fixtures.ts"
import { anthropicFor, openaiFor } from "./sdk-clients.ts"

const fixtures = listFixtures()

const isToolResultTurn = (request: FixtureRequest): boolean => {
  const body = request.body
  if (body === null) return false
  if (Array.isArray(body.messages)) {
    return body.messages.some(
      (m: any) => m.role === "tool" || (Array.isArray(m.content) && m.content.some((c: any) => c?.type === "tool_result"))
    )
  }
  // function_call_output, or custom_tool_call_output for Codex's apply_patch.
  return Array.isArray(body.input) && body.input.some((item: any) => /_call_output$/.test(String(item?.type)))
}

const credentialOf = (request: FixtureRequest): string | undefined =>
  request.headers["x-api-key"] ?? request.headers.authorization?.replace(/^Bearer /, "")

describe("client fixtures", () => {
  it("cover every client", () => {
    expect(new Set(fixtures.map((f) => f.client))).toEqual(new Set(["claude-code", "opencode", "codex"]))
  })

  it("hold a versioned capture of each client, taken through the gateway (scripts/live-clis.ts)", () => {
    expect(new Set(fixtures.filter((f) => f.set !== f.client).map((f) => f.client))).toEqual(new Set(["claude-code", "opencode", "codex"]))
  })

  describe.each(fixtures)("$set/$scenario", ({ client, set, scenario }) => {
    const file = join(FIXTURES_DIR, set, `${scenario}.json`)
    const raw = readFileSync(file, "utf8")
    let fixture: ClientFixture

    beforeAll(() => {
      fixture = loadFixture(set, scenario)
    })

    it("has the fixture shape and names itself after its file", () => {
      expect(() => parseFixture(JSON.parse(raw), file)).not.toThrow()
      expect(fixture.client).toBe(client)
      expect(fixture.scenario).toBe(scenario)
    })

    it("carries no credential, no real session id and no recorder address", () => {
      expect(raw).not.toMatch(/sk-[A-Za-z0-9_-]{16,}/)
      expect(raw).not.toMatch(/127\.0\.0\.1:\d+/)
      // Every UUID was replaced by a fixed one of the form 00000000-0000-4000-8000-<n>.
      const uuids = raw.match(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gi) ?? []
      for (const uuid of uuids) expect(uuid).toMatch(/^00000000-0000-4000-8000-[0-9a-f]{12}$/)
    })

    it("sends the key placeholder on every model request, each a JSON object naming a model", () => {
      const calls = modelRequests(fixture)
      expect(calls.length).toBeGreaterThan(0)
      for (const request of calls) {
        expect(credentialOf(request)).toBe(API_KEY_PLACEHOLDER)
        expect(request.path).toMatch(/^\/v1\/(messages|messages\/count_tokens|responses|chat\/completions)$/)
        if (request.path.startsWith("/v1/messages")) {
          expect(request.headers["anthropic-version"]).toBeDefined()
          expect(Array.isArray(request.body.messages)).toBe(true)
        } else if (request.path === "/v1/responses") {
          expect(request.body.input).toBeDefined()
        } else {
          expect(Array.isArray(request.body.messages)).toBe(true)
        }
      }
    })

    // Only tool scenarios have this test at all (a runIf here counted 15 "skipped" tests that could never run: issue 39.6).
    if (/(^|-)tool($|-)|apply-patch/.test(scenario)) {
      it("ends with the client sending the tool's result", () => {
        const last = modelRequests(fixture).at(-1)
        expect(last).toBeDefined()
        expect(isToolResultTurn(last!)).toBe(true)
      })
    }
  })

  it("substitutes a real key and model name, and replays without connection headers", () => {
    const fixture = loadFixture("claude-code", "tool", {
      apiKey: "sk-mg-ffffffffffffffffffffffffffffffff",
      model: (requested) => `alias-of-${requested}`
    })
    const [request] = modelRequests(fixture)
    expect(request?.headers["x-api-key"]).toBe("sk-mg-ffffffffffffffffffffffffffffffff")
    expect(request?.body.model).toMatch(/^alias-of-claude-/)
    const headers = replayHeaders(request!)
    expect(headers.host).toBeUndefined()
    expect(headers["content-length"]).toBeUndefined()
    expect(headers["anthropic-version"]).toBe("2023-06-01")
    expect(replayUrl("http://gw.test/", request!)).toBe("http://gw.test/v1/messages?beta=true")
    expect(JSON.parse(replayInit(request!).body as string)).toEqual(request?.body)
  })
})

describe("recorder answers in formats the official SDKs accept", () => {
  let recorder: Recorder
  const tool = { name: "lookup", description: "Looks a word up.", input_schema: { type: "object" as const, properties: {} } }

  beforeAll(async () => {
    recorder = await startRecorder({ toolCalls: { lookup: { word: "pineapple" } } })
  })
  afterAll(() => recorder.close())

  it("Anthropic Messages: a streamed tool_use turn with thinking, then text after the tool result", async () => {
    const client = anthropicFor(recorder.url, "k")
    const first = await client.messages
      .stream({
        model: "claude-x",
        max_tokens: 100,
        thinking: { type: "adaptive" },
        tools: [tool],
        messages: [{ role: "user", content: "look it up" }]
      })
      .finalMessage()
    expect(first.stop_reason).toBe("tool_use")
    expect(first.content.map((block) => block.type)).toEqual(["thinking", "text", "tool_use"])
    const call = first.content.find((block) => block.type === "tool_use")
    expect(call?.type === "tool_use" && call.input).toEqual({ word: "pineapple" })
    const second = await client.messages.create({
      model: "claude-x",
      max_tokens: 100,
      tools: [tool],
      messages: [
        { role: "user", content: "look it up" },
        { role: "assistant", content: first.content },
        { role: "user", content: [{ type: "tool_result", tool_use_id: call!.id, content: "a fruit" }] }
      ]
    })
    expect(second.stop_reason).toBe("end_turn")
    expect(await client.messages.countTokens({ model: "claude-x", messages: [{ role: "user", content: "hi" }] })).toMatchObject({
      input_tokens: expect.any(Number)
    })
    const page = await client.models.list()
    expect(page.data[0]).toMatchObject({ type: "model", display_name: expect.any(String) })
  })

  it("OpenAI Responses: a streamed function_call turn with reasoning, then text after the output", async () => {
    const client = openaiFor(recorder.url, "k")
    const tools = [{ type: "function" as const, name: "lookup", parameters: { type: "object", properties: {} }, strict: false }]
    const stream = client.responses.stream({ model: "gpt-x", input: "look it up", tools, reasoning: { effort: "low" } })
    const first = await stream.finalResponse()
    expect(first.output.map((item) => item.type)).toEqual(["reasoning", "message", "function_call"])
    const call = first.output.find((item) => item.type === "function_call")
    const second = await client.responses.create({
      model: "gpt-x",
      tools,
      input: [
        { role: "user", content: "look it up" },
        { type: "function_call_output", call_id: call!.type === "function_call" ? call!.call_id : "", output: "a fruit" }
      ]
    })
    expect(second.output_text).toMatch(/recording fake upstream/)
  })

  it("OpenAI Chat Completions: a streamed tool call, then text after the tool message", async () => {
    const client = openaiFor(recorder.url, "k")
    const tools = [{ type: "function" as const, function: { name: "lookup", parameters: { type: "object", properties: {} } } }]
    const first = await client.chat.completions
      .stream({ model: "gpt-x", messages: [{ role: "user", content: "look it up" }], tools, stream_options: { include_usage: true } })
      .finalChatCompletion()
    const call = first.choices[0]?.message.tool_calls?.[0]
    expect(call?.type === "function" && JSON.parse(call.function.arguments)).toEqual({ word: "pineapple" })
    expect(first.usage?.total_tokens).toBeGreaterThan(0)
    const second = await client.chat.completions.create({
      model: "gpt-x",
      tools,
      messages: [
        { role: "user", content: "look it up" },
        first.choices[0]!.message,
        { role: "tool", tool_call_id: call!.id, content: "a fruit" }
      ]
    })
    expect(second.choices[0]?.finish_reason).toBe("stop")
  })
})
