/**
 * Codex's tools on translated providers (issue 24 item 2), with Codex's captured request shape
 * (test/fixtures/clients/codex/apply-patch.json) routed to an Anthropic-kind and a Chat-kind
 * model: its `custom` apply_patch tool is offered as a function with one `input` string and a
 * call comes back as a `custom_tool_call` (streamed as `custom_tool_call_input` events); tools
 * sent the way Codex's own models get them (an `additional_tools` input item holding a
 * `namespace` with custom and function tools) are flattened and mapped back by name; an earlier
 * custom call and its output are sent back upstream as the function call they were.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { loadFixture, modelRequests, replayHeaders } from "../support/client-fixtures.ts"
import { startFakeAnthropic } from "../support/fake-anthropic.ts"
import type { FakeUpstream, JsonBody } from "../support/fake-common.ts"
import { startFakeOpenAI } from "../support/fake-openai.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { sseFrames } from "../support/sse.ts"

const OPENAI_KEY = "sk-fake-openai-0123456789abcdef"
const ANTHROPIC_KEY = "sk-ant-fake-0123456789abcdef"

let chatFake: FakeUpstream
let anthropicFake: FakeUpstream
let gateway: TestGateway
let key: string

beforeAll(async () => {
  ;[chatFake, anthropicFake] = await Promise.all([startFakeOpenAI({ apiKey: OPENAI_KEY, models: ["gpt-4o-mini-2024-07-18"] }), startFakeAnthropic({ apiKey: ANTHROPIC_KEY })])
  gateway = await startGateway(testConfig({
    workspace: { credits: 1_000_000 },
    limits: { requests_per_minute: 100_000, concurrent_streams: 100 },
    providers: [
      { name: "openai-chat", kind: "openai", base_url: chatFake.url, api_key: OPENAI_KEY },
      { name: "anthropic", kind: "anthropic", base_url: anthropicFake.url, api_key: ANTHROPIC_KEY }
    ],
    models: [
      { alias: "gpt-c", id: "gpt-4o-mini-2024-07-18", provider: "openai-chat", max_tokens: 16000 },
      // Codex's default model names, routed to Claude.
      { alias: "gpt-6.1-sol", id: "claude-sonnet-4-5-20250929", provider: "anthropic", max_tokens: 16000 }
    ]
  }))
  key = (await gateway.createKey()).key
})

afterAll(async () => {
  await gateway?.close()
  await Promise.all([chatFake?.close(), anthropicFake?.close()])
})

beforeEach(() => {
  chatFake.reset()
  anthropicFake.reset()
})

interface Frame {
  readonly event: string
  readonly data: JsonBody
}

const frames = (text: string): Array<Frame> =>
  sseFrames(text).flatMap((frame) => (frame.data === undefined ? [] : [{ event: frame.event ?? "", data: JSON.parse(frame.data) as JsonBody }]))

const PATCH = "*** Begin Patch\n*** Add File: greeting.txt\n+hello\n*** End Patch\n"

/** Codex's first request of its apply-patch run, for `model`. */
const codexRequest = (model: string) => {
  const fixture = loadFixture("codex", "apply-patch", { apiKey: key, model })
  const request = modelRequests(fixture)[0]!
  return { headers: replayHeaders(request), body: request.body as JsonBody }
}

const send = async (headers: Record<string, string>, body: JsonBody) => {
  const response = await fetch(`${gateway.url}/v1/responses`, { method: "POST", headers, body: JSON.stringify(body) })
  const text = await response.text()
  expect(response.status, text.slice(0, 400)).toBe(200)
  return frames(text)
}

/** Upstream tool names, whatever the vendor's format. */
const upstreamTools = (body: JsonBody): Array<JsonBody> =>
  (body.tools as Array<JsonBody>).map((tool) => tool.function ?? tool)

const ROUTES = [
  { name: "Anthropic-kind", model: "gpt-6.1-sol", fake: () => anthropicFake, schemaOf: (tool: JsonBody) => tool.input_schema },
  { name: "Chat-kind", model: "gpt-c", fake: () => chatFake, schemaOf: (tool: JsonBody) => tool.parameters }
]

describe.each(ROUTES)("Codex on a $name model", (route) => {
  it("edits with apply_patch: offered as a function, answered as a custom_tool_call", async () => {
    route.fake().enqueue({ kind: "tool_calls", calls: [{ name: "apply_patch", arguments: { input: PATCH } }] })
    const { headers, body } = codexRequest(route.model)
    const events = await send(headers, body)

    const offered = upstreamTools(route.fake().requests[0]!.body!).find((tool) => tool.name === "apply_patch")!
    expect(route.schemaOf(offered)).toMatchObject({ type: "object", properties: { input: { type: "string" } }, required: ["input"] })
    expect(route.schemaOf(offered).properties.input.description).toContain("grammar")

    const added = events.find((frame) => frame.event === "response.output_item.added" && frame.data.item.type === "custom_tool_call")!
    expect(added.data.item).toMatchObject({ type: "custom_tool_call", name: "apply_patch", input: "" })
    const itemId = added.data.item.id
    expect(events.filter((frame) => frame.event === "response.function_call_arguments.delta")).toHaveLength(0)
    const deltas = events.filter((frame) => frame.event === "response.custom_tool_call_input.delta")
    expect(deltas.map((frame) => frame.data.delta).join("")).toBe(PATCH)
    expect(events.find((frame) => frame.event === "response.custom_tool_call_input.done")!.data).toMatchObject({ item_id: itemId, input: PATCH })
    expect(events.find((frame) => frame.event === "response.output_item.done" && frame.data.item.id === itemId)!.data.item)
      .toMatchObject({ type: "custom_tool_call", name: "apply_patch", input: PATCH, status: "completed" })
    const completed = events.find((frame) => frame.event === "response.completed")!
    expect(completed.data.response.output).toContainEqual(expect.objectContaining({ type: "custom_tool_call", name: "apply_patch", input: PATCH }))
    // Numbered without gaps, as the SDKs expect.
    const numbers = events.map((frame) => frame.data.sequence_number as number)
    expect(numbers).toEqual(numbers.map((_, i) => numbers[0]! + i))
  })

  it("answers a custom tool call in a whole (non-streamed) response too", async () => {
    route.fake().enqueue({ kind: "tool_calls", calls: [{ name: "apply_patch", arguments: { input: PATCH } }] })
    const { headers, body } = codexRequest(route.model)
    const response = await fetch(`${gateway.url}/v1/responses`, {
      method: "POST",
      headers: { ...headers, accept: "application/json" },
      body: JSON.stringify({ ...body, stream: false })
    })
    expect(response.status).toBe(200)
    const answer = await response.json() as { output: Array<JsonBody> }
    expect(answer.output).toContainEqual(expect.objectContaining({ type: "custom_tool_call", name: "apply_patch", input: PATCH }))
    expect(answer.output.some((item) => item.type === "function_call")).toBe(false)
  })

  it("takes tools from an additional_tools namespace and maps calls back to their names", async () => {
    route.fake().enqueue({
      kind: "tool_calls",
      calls: [{ name: "codex__exec", arguments: { input: "ls -la" } }, { name: "codex__view_image", arguments: { path: "a.png" } }]
    })
    const { headers, body } = codexRequest(route.model)
    const { tools, ...rest } = body
    const request = {
      ...rest,
      input: [
        {
          type: "additional_tools",
          role: "developer",
          tools: [{
            type: "namespace",
            name: "codex",
            description: "Codex's workspace tools",
            tools: [
              { type: "custom", name: "exec", description: "Runs a shell command", format: { type: "text" } },
              { type: "function", name: "view_image", description: "Shows an image", parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] } }
            ]
          }]
        },
        ...(body.input as Array<JsonBody>)
      ],
      tools: (tools as Array<JsonBody>).filter((tool) => tool.type === "function")
    }
    const events = await send(headers, request)
    const names = upstreamTools(route.fake().requests[0]!.body!).map((tool) => tool.name)
    expect(names).toEqual(expect.arrayContaining(["codex__exec", "codex__view_image", "exec_command"]))
    const output = events.find((frame) => frame.event === "response.completed")!.data.response.output as Array<JsonBody>
    expect(output).toContainEqual(expect.objectContaining({ type: "custom_tool_call", name: "exec", namespace: "codex", input: "ls -la" }))
    expect(output).toContainEqual(expect.objectContaining({ type: "function_call", name: "view_image", namespace: "codex", arguments: "{\"path\":\"a.png\"}" }))

    // The next turn sends the calls and their outputs back: upstream they are the functions they were.
    const calls = output.filter((item) => item.type !== "message")
    const custom = calls.find((item) => item.type === "custom_tool_call")!
    const fn = calls.find((item) => item.type === "function_call")!
    const next = {
      ...request,
      input: [
        ...request.input,
        ...calls,
        { type: "custom_tool_call_output", call_id: custom.call_id, output: "total 0" },
        { type: "function_call_output", call_id: fn.call_id, output: "an image" }
      ]
    }
    await send(headers, next)
    const replayed = JSON.stringify(route.fake().requests[1]!.body)
    expect(replayed).toContain("codex__exec")
    expect(replayed).toContain("codex__view_image")
    expect(replayed).toContain("total 0")
  })

  it("sends tools whose flattened names would collide under distinct names, and maps each call back to its own tool (issue 32.8)", async () => {
    const { headers, body } = codexRequest(route.model)
    const object = { type: "object", properties: { n: { type: "string" } } }
    const request = {
      ...body,
      tools: [
        { type: "function", name: "a__b__c", description: "plain", parameters: object },
        { type: "namespace", name: "a", description: "ns a", tools: [{ type: "function", name: "b__c", description: "in a", parameters: object }] },
        { type: "namespace", name: "a__b", description: "ns a__b", tools: [{ type: "custom", name: "c", description: "in a__b" }] }
      ]
    }
    await send(headers, request)
    const names = upstreamTools(route.fake().requests[0]!.body!).map((tool) => tool.name as string)
    expect(names).toHaveLength(3)
    expect(new Set(names).size).toBe(3)
    expect(names[0]).toBe("a__b__c") // a plain function keeps its name
    for (const name of names) expect(name).toMatch(/^[a-zA-Z0-9_-]{1,64}$/)

    // The model calls each of them by the name it was offered: each comes back as the tool it is.
    route.fake().enqueue({
      kind: "tool_calls",
      calls: [{ name: names[0]!, arguments: { n: "plain" } }, { name: names[1]!, arguments: { n: "ns" } }, { name: names[2]!, arguments: { input: "free text" } }]
    })
    const events = await send(headers, request)
    const output = events.find((frame) => frame.event === "response.completed")!.data.response.output as Array<JsonBody>
    const calls = output.filter((item) => item.type !== "message").map((item) => [item.type, item.name, item.namespace, item.arguments ?? item.input])
    expect(calls).toEqual([
      ["function_call", "a__b__c", undefined, "{\"n\":\"plain\"}"],
      ["function_call", "b__c", "a", "{\"n\":\"ns\"}"],
      ["custom_tool_call", "c", "a__b", "free text"]
    ])
  })
})
