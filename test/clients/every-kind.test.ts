/**
 * Issue 34: a field a client sends on its own never fails a request on any provider kind. Every
 * committed capture of Claude Code (/v1/messages, count_tokens included), Codex CLI
 * (/v1/responses) and opencode (Messages, Responses and Chat) is replayed as sent, only the key
 * and the model substituted, against a model of each of the seven provider kinds: OpenAI (Chat
 * Completions), Anthropic, Bedrock, Vertex (Claude), Vertex (Gemini), Gemini and Azure (its
 * Responses API for Responses clients). The fakes refuse what the vendors refuse (Azure refuses
 * `client_metadata`, Vertex's Claude refuses `output_config` and a mid-conversation system turn,
 * Bedrock refuses tool blocks without toolConfig, Gemini unknown fields...), so every request
 * answered 200 with a complete answer means every client field was forwarded, translated or
 * dropped as that vendor needs. What was dropped is named in `x-modelgate-dropped`.
 */
import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Effect } from "effect"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { type ClientName, type FixtureRequest, listFixtures, loadFixture, modelRequests, replayInit, replayUrl } from "../support/client-fixtures.ts"
import { startFakeAnthropic } from "../support/fake-anthropic.ts"
import { type FakeAzure, startFakeAzure } from "../support/fake-azure.ts"
import { type FakeBedrock, startFakeBedrock } from "../support/fake-bedrock.ts"
import type { FakeUpstream } from "../support/fake-common.ts"
import { type FakeGemini, startFakeGemini } from "../support/fake-gemini.ts"
import { startFakeOpenAI } from "../support/fake-openai.ts"
import { type FakeVertex, startFakeVertex } from "../support/fake-vertex.ts"
import { awaitAuditOf, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

const OPENAI_KEY = "sk-fake-openai-0123456789abcdef"
const ANTHROPIC_KEY = "sk-ant-fake-0123456789abcdef"
const GEMINI_KEY = "AIzaSyFAKE-gemini-key-0123456789abcdef"
const AZURE_KEY = "3f9a1c0e7b2d4a6f8e1c3b5d7f9a2c4e"
const REGION = "us-east-1"
const KEY_ID = "AKIAREPLAYEVERYKIND01"
const SECRET = "every/kind+0123456789abcdefghijklmnop"
const PROJECT = "every-kind-1"
const LOCATION = "us-east5"
const CAP = 64_000

let openai: FakeUpstream
let anthropic: FakeUpstream
let bedrock: FakeBedrock
let vertex: FakeVertex
let gemini: FakeGemini
let azure: FakeAzure
let gateway: TestGateway
let key: string

beforeAll(async () => {
  ;[openai, anthropic, bedrock, vertex, gemini, azure] = await Promise.all([
    startFakeOpenAI({ apiKey: OPENAI_KEY, models: ["gpt-5.5"] }),
    startFakeAnthropic({ apiKey: ANTHROPIC_KEY, models: ["claude-sonnet-4-5-20250929"] }),
    startFakeBedrock({ region: REGION, accessKeyId: KEY_ID, secretAccessKey: SECRET }),
    startFakeVertex({ project: PROJECT, location: LOCATION, claude: ["claude-sonnet-4-5@20250929"], gemini: ["gemini-2.5-pro"] }),
    startFakeGemini({ apiKey: GEMINI_KEY, models: ["gemini-2.5-flash"] }),
    startFakeAzure({ apiKey: AZURE_KEY, deployments: ["gpt-5.5-prod"] })
  ])
  const credentials = join(mkdtempSync(join(tmpdir(), "every-kind-")), "sa.json")
  writeFileSync(credentials, JSON.stringify(vertex.serviceAccount))
  gateway = await startGateway(testConfig({
    workspace: { credits: 1_000_000 },
    limits: { requests_per_minute: 100_000, concurrent_streams: 100 },
    providers: [
      { name: "openai", kind: "openai", base_url: openai.url, api_key: OPENAI_KEY },
      { name: "anthropic", kind: "anthropic", base_url: anthropic.url, api_key: ANTHROPIC_KEY },
      { name: "bedrock", kind: "bedrock", region: REGION, base_url: bedrock.url, access_key_id: KEY_ID, secret_access_key: SECRET },
      { name: "vertex", kind: "vertex", base_url: vertex.url, project: PROJECT, location: LOCATION, credentials_file: credentials },
      { name: "gemini", kind: "gemini", base_url: gemini.url, api_key: GEMINI_KEY },
      { name: "azure", kind: "azure", base_url: azure.url, api_key: AZURE_KEY, api_version: "2025-04-01-preview" }
    ],
    models: [
      { alias: "on-openai", id: "gpt-5.5", provider: "openai", max_tokens: CAP },
      { alias: "on-anthropic", id: "claude-sonnet-4-5-20250929", provider: "anthropic", max_tokens: CAP },
      { alias: "on-bedrock", id: "us.anthropic.claude-sonnet-4-5-20250929-v1:0", provider: "bedrock", max_tokens: CAP },
      { alias: "on-vertex-claude", id: "claude-sonnet-4-5@20250929", provider: "vertex", max_tokens: CAP },
      { alias: "on-vertex-gemini", id: "gemini-2.5-pro", provider: "vertex", max_tokens: CAP },
      { alias: "on-gemini", id: "gemini-2.5-flash", provider: "gemini", max_tokens: CAP },
      { alias: "on-azure", id: "gpt-5.5-prod", provider: "azure", max_tokens: CAP }
    ]
  }))
  key = (await gateway.createKey()).key
})

afterAll(async () => {
  await gateway?.close()
  await Promise.all([openai?.close(), anthropic?.close(), bedrock?.close(), vertex?.close(), gemini?.close(), azure?.close()])
})

beforeEach(() => {
  for (const fake of [openai, anthropic, bedrock, vertex, gemini, azure]) fake.reset()
})

const KINDS = ["openai", "anthropic", "bedrock", "vertex-claude", "vertex-gemini", "gemini", "azure"] as const
const CLIENTS: ReadonlyArray<ClientName> = ["claude-code", "codex", "opencode"]

const ended = (path: string): RegExp =>
  path.endsWith("/chat/completions") ? /data: \[DONE\]/ : path.endsWith("/responses") ? /event: response\.completed\ndata: / : /event: message_stop/

type Replayed = FixtureRequest & { body: Record<string, any> }

/** Replays the requests in order; each must be answered 200 with a complete answer. The last response. */
const replayAll = async (requests: ReadonlyArray<Replayed>): Promise<Response> => {
  expect(requests.length).toBeGreaterThan(0)
  let last: Response | undefined
  for (const request of requests) {
    const response = await fetch(replayUrl(gateway.url, request), replayInit(request))
    const text = await response.text()
    expect(response.status, `${request.path}: ${text.slice(0, 600)}`).toBe(200)
    if (request.path.endsWith("/count_tokens")) {
      expect(JSON.parse(text).input_tokens).toBeGreaterThan(0)
    } else if (request.body.stream === true) {
      expect(text, text.slice(-600)).not.toMatch(/event: error|"error":"/)
      expect(text).toMatch(ended(request.path))
    }
    last = response
  }
  return last!
}

/** The audit record of one request, once written (a stream's is written as it ends). */
const recordOf = async (requestId: string) => {
  const [record] = await awaitAuditOf(gateway, requestId)
  if (record === undefined) throw new Error(`no audit record of ${requestId}`)
  return record
}

describe.each(listFixtures().filter((f) => CLIENTS.includes(f.client)))("$set $scenario", ({ set, scenario }) => {
  it.each(KINDS)("every request is served on a %s model", async (kind) => {
    await replayAll(modelRequests(loadFixture(set, scenario, { apiKey: key, model: `on-${kind}` })))
  })
})

/**
 * Claude Code 2.1.332 (measured in issue 34, not in the committed captures, which are 2.1.197)
 * sends a per-turn effort: `output_config.effort` on the `role: "system"` message it puts inside
 * `messages`. The committed tool capture, with that one field added to its system turns.
 */
const perTurnEffort = (kind: string): Array<Replayed> =>
  modelRequests(loadFixture("claude-code", "tool", { apiKey: key, model: `on-${kind}` })).map((request) => ({
    ...request,
    body: {
      ...request.body,
      messages: request.body.messages.map((message: Record<string, unknown>) => message.role === "system" ? { ...message, output_config: { effort: "low" } } : message)
    }
  }))

describe("Claude Code's per-turn effort and mid-conversation system turn", () => {
  it.each(KINDS)("are translated for a %s model", async (kind) => {
    const requests = perTurnEffort(kind)
    expect(requests.some((request) => request.body.messages.some((m: Record<string, any>) => m.output_config?.effort === "low"))).toBe(true)
    await replayAll(requests)
  })

  it.each(KINDS)("are counted by count_tokens for a %s model", async (kind) => {
    const counts = modelRequests(loadFixture("claude-code", "context", { apiKey: key, model: `on-${kind}` }))
      .filter((request) => request.path.endsWith("/count_tokens"))
      .slice(0, 2)
      .map((request) => ({
        ...request,
        body: {
          ...request.body,
          messages: [...request.body.messages, { role: "system", content: "Answer briefly.", output_config: { effort: "low" } }, { role: "user", content: "And now?" }]
        }
      }))
    expect(counts.length).toBeGreaterThan(0)
    await replayAll(counts)
  })

  it("Vertex's Claude gets the system turn in `system` and the per-turn effort as the request's", async () => {
    const requests = perTurnEffort("vertex-claude")
    const response = await replayAll(requests)
    expect(response.headers.get("x-modelgate-dropped")).toBeNull()
    const last = vertex.requests.filter((r) => /:(rawPredict|streamRawPredict)$/.test(r.path)).at(-1)!.body!
    const sent = requests.at(-1)!.body
    expect(last.messages.map((m: Record<string, unknown>) => m.role)).toEqual(["user", "assistant", "user"])
    expect(last.output_config.effort).toBe("low")
    const systemTurn = sent.messages.find((m: Record<string, unknown>) => m.role === "system").content
    expect(last.system.at(-1)).toEqual({ type: "text", text: systemTurn })
    expect(last.system.slice(0, -1)).toEqual(sent.system)
  })

  it("on Vertex, what has no equivalent there is left out and named: a system turn's tool-list change", async () => {
    const response = await fetch(`${gateway.url}/v1/messages`, {
      method: "POST",
      headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" },
      body: JSON.stringify({
        model: "on-vertex-claude",
        max_tokens: 100,
        system: "Be brief.",
        messages: [
          { role: "user", content: "Hi" },
          { role: "system", content: [{ type: "text", text: "Now answer in French." }, { type: "tool_removal", tool_names: ["Read"] }], output_config: { effort: "medium" } },
          { role: "user", content: "Hello?" }
        ]
      })
    })
    expect(response.status, await response.clone().text()).toBe(200)
    expect(response.headers.get("x-modelgate-dropped")).toBe("messages.1.content.1")
    const record = await recordOf(response.headers.get("x-request-id")!)
    expect(record.details).toMatchObject({ dropped: ["messages.1.content.1"] })
    const reached = vertex.requests.filter((r) => /:(rawPredict|streamRawPredict)$/.test(r.path)).at(-1)!.body!
    expect(reached.system).toEqual([{ type: "text", text: "Be brief." }, { type: "text", text: "Now answer in French." }])
    expect(reached.output_config).toEqual({ effort: "medium" })
    expect(reached.messages).toEqual([{ role: "user", content: "Hi" }, { role: "user", content: "Hello?" }])
  })

  it("Bedrock gets the per-turn effort as outputConfig.effort", async () => {
    await replayAll(perTurnEffort("bedrock"))
    expect(bedrock.requests.at(-1)!.body!.outputConfig.effort).toBe("low")
  })

  it("an OpenAI-kind model gets it as reasoning_effort", async () => {
    await replayAll(perTurnEffort("openai"))
    expect(openai.requests.at(-1)!.body!.reasoning_effort).toBe("low")
  })
})

describe("Codex on Azure", () => {
  it("client_metadata, which Azure refuses, is left out and named in x-modelgate-dropped and the audit record", async () => {
    const requests = modelRequests(loadFixture("codex", "tool", { apiKey: key, model: "on-azure" }))
    expect(requests.every((request) => "client_metadata" in request.body)).toBe(true)
    const response = await replayAll(requests)
    expect(response.headers.get("x-modelgate-dropped")).toBe("client_metadata")
    const reached = azure.requests.filter((r) => r.path.startsWith("/openai/responses"))
    expect(reached).toHaveLength(requests.length)
    for (const request of reached) expect(request.body).not.toHaveProperty("client_metadata")
    const record = await recordOf(response.headers.get("x-request-id")!)
    expect(record.details).toMatchObject({ dropped: ["client_metadata"] })
  })

})

describe("what a translation leaves out is named", () => {
  it.each(["openai", "anthropic", "bedrock", "vertex-claude", "gemini"])("Codex's request tags and cache hints on a %s model", async (kind) => {
    const [request] = modelRequests(loadFixture("codex", "plain", { apiKey: key, model: `on-${kind}` }))
    const response = await replayAll([request!])
    expect(response.headers.get("x-modelgate-dropped")).toBe("client_metadata,include,prompt_cache_key,tools.tool_search,tools.web_search")
  })

  it.each(["openai", "bedrock", "vertex-gemini"])("Claude Code's context_management on a %s model", async (kind) => {
    const requests = modelRequests(loadFixture("claude-code", "tool", { apiKey: key, model: `on-${kind}` }))
    const response = await replayAll(requests)
    const expected = kind === "bedrock" ? "context_management,metadata" : "context_management"
    expect(response.headers.get("x-modelgate-dropped")).toBe(expected)
    expect((await recordOf(response.headers.get("x-request-id")!)).details).toMatchObject({ dropped: expected.split(",") })
  })

  it("nothing on passthrough to the client's own vendor", async () => {
    const response = await replayAll(modelRequests(loadFixture("claude-code", "tool", { apiKey: key, model: "on-anthropic" })))
    expect(response.headers.get("x-modelgate-dropped")).toBeNull()
  })
})

describe("a tool history without tools (the OpenAI SDK's follow-up turn)", () => {
  it.each(KINDS)("is served on a %s model", async (kind) => {
    const response = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({
        model: `on-${kind}`,
        messages: [
          { role: "user", content: "Weather in Oslo?" },
          { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "weather", arguments: "{\"city\":\"Oslo\"}" } }] },
          { role: "tool", tool_call_id: "call_1", content: "21 C" },
          { role: "user", content: "Thanks, and in one word?" }
        ]
      })
    })
    expect(response.status, await response.clone().text()).toBe(200)
    if (kind === "bedrock") {
      expect(bedrock.requests.at(-1)!.body!.toolConfig).toMatchObject({ tools: [{ toolSpec: { name: "weather", inputSchema: { json: { type: "object" } } } }] })
    }
  })

  it("is served on a Bedrock model from a Messages client too (Converse requires toolConfig)", async () => {
    const response = await fetch(`${gateway.url}/v1/messages`, {
      method: "POST",
      headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" },
      body: JSON.stringify({
        model: "on-bedrock",
        max_tokens: 100,
        messages: [
          { role: "user", content: "Weather in Oslo?" },
          { role: "assistant", content: [{ type: "tool_use", id: "toolu_01", name: "weather", input: { city: "Oslo" } }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_01", content: "21 C" }, { type: "text", text: "In one word?" }] }
        ]
      })
    })
    expect(response.status, await response.clone().text()).toBe(200)
    expect(bedrock.requests.at(-1)!.body!.toolConfig).toEqual({ tools: [{ toolSpec: { name: "weather", inputSchema: { json: { type: "object" } } } }] })
  })
})

describe("the legacy functions API on Anthropic's models", () => {
  const upstream: Record<string, () => FakeUpstream> = { anthropic: () => anthropic, bedrock: () => bedrock, "vertex-claude": () => vertex.anthropic }
  const WEATHER = { name: "weather", description: "The weather in a city", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }
  const post = (body: Record<string, unknown>) =>
    fetch(`${gateway.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify(body)
    })

  it.each(Object.keys(upstream))("is translated to tools on a %s model, and the call comes back as function_call", async (kind) => {
    upstream[kind]!().enqueue({ kind: "tool_calls", calls: [{ name: "weather", arguments: { city: "Oslo" } }] })
    const first = await post({ model: `on-${kind}`, messages: [{ role: "user", content: "Weather in Oslo?" }], functions: [WEATHER], function_call: { name: "weather" } })
    const answer = (await first.json()) as Record<string, any>
    expect(first.status, JSON.stringify(answer)).toBe(200)
    expect(answer.choices[0].finish_reason).toBe("function_call")
    expect(answer.choices[0].message).not.toHaveProperty("tool_calls")
    expect(answer.choices[0].message.function_call.name).toBe("weather")
    expect(JSON.parse(answer.choices[0].message.function_call.arguments)).toEqual({ city: "Oslo" })

    // The result turn, in the legacy shape, and a stream.
    const second = await post({
      model: `on-${kind}`,
      stream: true,
      functions: [WEATHER],
      messages: [
        { role: "user", content: "Weather in Oslo?" },
        { role: "assistant", content: null, function_call: answer.choices[0].message.function_call },
        { role: "function", name: "weather", content: "21 C" }
      ]
    })
    const text = await second.text()
    expect(second.status, text).toBe(200)
    expect(text).toMatch(/data: \[DONE\]/)
    const reached = upstream[kind]!().requests.at(-1)!.body!
    expect(JSON.stringify(reached)).toMatch(kind === "bedrock" ? /"toolResult"/ : /"tool_result"/)
  })

  it("streams the call as delta.function_call", async () => {
    anthropic.enqueue({ kind: "tool_calls", calls: [{ name: "weather", arguments: { city: "Oslo" } }] })
    const response = await post({ model: "on-anthropic", stream: true, messages: [{ role: "user", content: "Weather in Oslo?" }], functions: [WEATHER], function_call: "auto" })
    const text = await response.text()
    expect(response.status, text).toBe(200)
    const chunks = text.split("\n\n").filter((frame) => frame.startsWith("data: {")).map((frame) => JSON.parse(frame.slice(6)))
    expect(chunks.some((chunk) => chunk.choices[0]?.delta?.tool_calls !== undefined)).toBe(false)
    const args = chunks.map((chunk) => chunk.choices[0]?.delta?.function_call?.arguments ?? "").join("")
    expect(chunks.find((chunk) => chunk.choices[0]?.delta?.function_call?.name)?.choices[0].delta.function_call.name).toBe("weather")
    expect(JSON.parse(args)).toEqual({ city: "Oslo" })
    expect(chunks.map((chunk) => chunk.choices[0]?.finish_reason).filter(Boolean)).toEqual(["function_call"])
  })

  it("logprobs, which the user chose and no Anthropic model has, stays refused by name", async () => {
    const response = await post({ model: "on-anthropic", messages: [{ role: "user", content: "Hi" }], logprobs: true })
    expect(response.status).toBe(400)
    expect(((await response.json()) as Record<string, any>).details).toMatchObject({ field: "logprobs", reason: "untranslatable" })
  })
})
