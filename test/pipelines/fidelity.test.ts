/**
 * Issue 24 items 5 and 6, as a client sees them through the real gateway: upstream pings kept on
 * Messages passthrough, an estimated `input_tokens` in a translated `message_start` corrected
 * by `message_delta`, the `model` an answer names, tool ids in the client vendor's spelling
 * mapped back on the next turn, `models[].reasoning` deciding whether reasoning fields are
 * translated, and a client that leaves a non-streaming request (upstream aborted, charge kept).
 */
import { Effect } from "effect"
import { beforeAll, describe, expect, it } from "vitest"
import type { JsonBody } from "../support/fake-common.ts"
import type { TestGateway } from "../support/gateway.ts"
import { CLAUDE_ID, GPT_ID, useModelGateway } from "../support/model-gateway.ts"
import { waitFor } from "../support/wait.ts"

const fixture = useModelGateway({
  openaiModels: "any",
  models: (defaults) => [
    ...defaults,
    // gpt-5 reasons by its id; gpt-4.1-mini does not; an operator may say otherwise.
    { alias: "gpt5", id: "gpt-5-mini", provider: "up-openai", credits: 3 },
    { alias: "mini", id: "gpt-4.1-mini", provider: "up-openai", credits: 2 },
    { alias: "local-reasoner", id: "qwq-32b", provider: "up-openai", reasoning: true }
  ]
})

let gw: TestGateway
let key: string
let keyId: string

beforeAll(async () => {
  gw = fixture.gateway()
  ;({ key, id: keyId } = await gw.createKey())
})

const post = (path: string, body: unknown, signal?: AbortSignal) =>
  fetch(gw.url + path, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${key}`, "anthropic-version": "2023-06-01" },
    body: JSON.stringify(body),
    ...(signal === undefined ? {} : { signal })
  })

const framesOf = (text: string): Array<{ event: string; data: JsonBody }> =>
  text.split("\n\n").filter((f) => f !== "").map((frame) => {
    const [event, data] = frame.split("\n")
    return { event: event!.slice("event: ".length), data: JSON.parse(data!.slice("data: ".length)) as JsonBody }
  })

const lastSent = (fake: ReturnType<typeof fixture.openaiFake>) => fake.requests.at(-1)!.body!

describe("Messages streams", () => {
  it("keep the upstream's ping events on passthrough", async () => {
    fixture.anthropicFake().enqueue({ kind: "text", text: "Hello there." })
    const response = await post("/v1/messages", { model: "claude", max_tokens: 50, stream: true, messages: [{ role: "user", content: "hi" }] })
    expect(response.status).toBe(200)
    const events = framesOf(await response.text()).map((f) => f.event)
    expect(events).toContain("ping")
    expect(events[0]).toBe("message_start")
    expect(events.at(-1)).toBe("message_stop")
  })

  it("announce estimated input tokens in message_start when translated, and message_delta corrects them", async () => {
    fixture.openaiFake().enqueue({ kind: "text", text: "Short answer.", usage: { input: 4321, output: 3 } })
    const long = "Tell me about the tides of the Atlantic coast near Brest, in detail. ".repeat(20)
    const response = await post("/v1/messages", { model: "gpt", max_tokens: 50, stream: true, messages: [{ role: "user", content: long }] })
    const frames = framesOf(await response.text())
    const start = frames.find((f) => f.event === "message_start")!.data
    // The count_tokens estimate: well above 0, in the range of the text's length.
    expect(start.message.usage.input_tokens).toBeGreaterThan(100)
    expect(start.message.usage.input_tokens).toBeLessThan(1000)
    const delta = frames.find((f) => f.event === "message_delta")!.data
    expect(delta.usage.input_tokens).toBe(4321)
  })
})

describe("the model an answer names", () => {
  it("is the provider's model on passthrough and when translated, streamed or not", async () => {
    fixture.openaiFake().enqueue({ kind: "text", text: "a" }, { kind: "text", text: "b" })
    fixture.anthropicFake().enqueue({ kind: "text", text: "c" }, { kind: "text", text: "d" })
    const translated = (await (await post("/v1/messages", { model: "gpt", max_tokens: 20, messages: [{ role: "user", content: "x" }] })).json()) as JsonBody
    expect(translated.model).toBe(GPT_ID)
    const chat = (await (await post("/v1/chat/completions", { model: "claude", messages: [{ role: "user", content: "x" }] })).json()) as JsonBody
    expect(chat.model).toBe(CLAUDE_ID)
    const streamed = framesOf(await (await post("/v1/messages", { model: "gpt", max_tokens: 20, stream: true, messages: [{ role: "user", content: "x" }] })).text())
    expect(streamed[0]!.data.message.model).toBe(GPT_ID)
    const passthrough = (await (await post("/v1/messages", { model: "claude", max_tokens: 20, messages: [{ role: "user", content: "x" }] })).json()) as JsonBody
    expect(passthrough.model).toBe(CLAUDE_ID)
  })
})

describe("tool ids", () => {
  const tool = { name: "lookup", input_schema: { type: "object", properties: { q: { type: "string" } } } }

  it("reach an Anthropic client as toolu_ and go back to an OpenAI upstream as the call_ it sent", async () => {
    const openai = fixture.openaiFake()
    openai.enqueue({ kind: "tool_calls", calls: [{ id: "call_Zx81", name: "lookup", arguments: { q: "tides" } }] }, { kind: "text", text: "High tide at noon." })
    const first = (await (await post("/v1/messages", { model: "gpt", max_tokens: 50, tools: [tool], messages: [{ role: "user", content: "tide?" }] })).json()) as JsonBody
    const use = first.content.find((b: JsonBody) => b.type === "tool_use")
    expect(use.id).toBe("toolu_Zx81")
    const second = await post("/v1/messages", {
      model: "gpt",
      max_tokens: 50,
      tools: [tool],
      messages: [
        { role: "user", content: "tide?" },
        { role: "assistant", content: first.content },
        { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "noon" }] }
      ]
    })
    expect(second.status).toBe(200)
    const sent = lastSent(openai).messages as Array<JsonBody>
    expect(sent.find((m) => m.role === "assistant")!.tool_calls[0].id).toBe("call_Zx81")
    expect(sent.find((m) => m.role === "tool")!.tool_call_id).toBe("call_Zx81")
  })

  it("reach an OpenAI client as call_ (streamed too) and go back to an Anthropic upstream as the toolu_ it sent", async () => {
    const anthropic = fixture.anthropicFake()
    const fn = { type: "function", function: { name: "lookup", parameters: tool.input_schema } }
    anthropic.enqueue({ kind: "tool_calls", calls: [{ id: "toolu_01Qp", name: "lookup", arguments: { q: "moon" } }] })
    const streamed = await (await post("/v1/chat/completions", { model: "claude", stream: true, tools: [fn], messages: [{ role: "user", content: "moon?" }] })).text()
    const ids = streamed.split("\n\n").filter((f) => f.startsWith("data: {")).flatMap((f) => JSON.parse(f.slice(6)).choices[0]?.delta?.tool_calls ?? [])
      .map((c: JsonBody) => c.id).filter((id: unknown) => id !== undefined)
    expect(ids).toEqual(["call_01Qp"])
    anthropic.enqueue({ kind: "text", text: "Full moon." })
    const second = await post("/v1/chat/completions", {
      model: "claude",
      tools: [fn],
      messages: [
        { role: "user", content: "moon?" },
        { role: "assistant", content: null, tool_calls: [{ id: "call_01Qp", type: "function", function: { name: "lookup", arguments: "{\"q\":\"moon\"}" } }] },
        { role: "tool", tool_call_id: "call_01Qp", content: "full" }
      ]
    })
    expect(second.status).toBe(200)
    const sent = lastSent(anthropic).messages as Array<JsonBody>
    expect(sent[1]!.content.find((b: JsonBody) => b.type === "tool_use").id).toBe("toolu_01Qp")
    expect(sent[2]!.content[0].tool_use_id).toBe("toolu_01Qp")
  })
})

describe("models[].reasoning", () => {
  const thinking = (model: string) => ({
    model,
    max_tokens: 8000,
    thinking: { type: "enabled", budget_tokens: 2048 },
    messages: [{ role: "user", content: "think" }]
  })

  it("sends reasoning_effort only to a model that reasons (by its id, or as configured)", async () => {
    const openai = fixture.openaiFake()
    for (const [alias, reasons] of [["mini", false], ["gpt5", true], ["local-reasoner", true]] as const) {
      openai.enqueue({ kind: "text", text: "ok" })
      const response = await post("/v1/messages", thinking(alias))
      expect(response.status, alias).toBe(200)
      expect("reasoning_effort" in lastSent(openai), alias).toBe(reasons)
    }
  })

  it("drops a Responses client's reasoning.effort for a model that does not reason", async () => {
    const openai = fixture.openaiFake()
    openai.enqueue({ kind: "text", text: "ok" }, { kind: "text", text: "ok" })
    const body = (model: string) => ({ model, input: "hi", reasoning: { effort: "low" }, store: false })
    expect((await post("/v1/responses", body("mini"))).status).toBe(200)
    expect("reasoning_effort" in lastSent(openai)).toBe(false)
    expect((await post("/v1/responses", body("gpt5"))).status).toBe(200)
    expect(lastSent(openai).reasoning_effort).toBe("low")
  })
})

describe("a client that leaves a non-streaming request", () => {
  it.each(["gpt", "claude"])("aborts the upstream call and keeps the charge (%s, Messages client)", async (model) => {
    const fake = model === "gpt" ? fixture.openaiFake() : fixture.anthropicFake()
    fake.enqueue({ kind: "hang" })
    const controller = new AbortController()
    const pending = post("/v1/messages", { model, max_tokens: 20, messages: [{ role: "user", content: "wait" }] }, controller.signal)
      .catch((e: unknown) => e)
    await waitFor("upstream request open", () => fake.openStreams() === 1)
    controller.abort()
    expect(await pending).toBeInstanceOf(Error)
    await waitFor("upstream aborted", () => fake.aborted === 1 && fake.openStreams() === 0)
    let record: JsonBody | undefined
    for (let i = 0; i < 50 && record === undefined; i++) {
      await Effect.runPromise(gw.audit.flush)
      const page = await Effect.runPromise(gw.store.audit.queryAudit({ key_id: keyId, error: "client_closed_request", limit: 50 }))
      record = page.items.find((r) => r.model === (model === "gpt" ? GPT_ID : CLAUDE_ID) && !r.stream && r.endpoint === "/v1/messages")
      if (record === undefined) await new Promise((resolve) => setTimeout(resolve, 50))
    }
    // The provider may have started (and billed) the work: the charge is kept (README).
    // One credit, in the audit trail's micro-credits.
    expect(record).toMatchObject({ status: 499, error: "client_closed_request", credits: 1_000_000 })
  })
})
