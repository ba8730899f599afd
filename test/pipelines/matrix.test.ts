/**
 * The translation matrix of issue 4, every cell through the real server:
 * {openai SDK on /v1/chat/completions, Anthropic SDK on /v1/messages}
 *   x {openai-kind provider, anthropic-kind provider} x {non-streaming, streaming}
 *   x {plain text, a tool loop with two parallel tool calls and a follow-up turn}.
 *
 * Each cell drives the official SDK exactly as an application would (its stream helpers when
 * streaming), and asserts what the client sees (content, tool calls, stop reason, usage per the
 * reference tables 3.5 and 3.6), what the fake upstream received (field by field), and the audit
 * record of every call. A streaming cell also replays its conversation without streaming and
 * requires the SDK to have assembled the very same messages.
 *
 * Token counts are chosen per turn as disjoint buckets (uncached input, cache reads, cache
 * writes, output) and written into each vendor's own usage fields, so one expectation per client
 * format holds whichever provider answered.
 *
 * Around the matrix, on the same four client/provider pairs: truncation (length <-> max_tokens),
 * upstream errors before the first byte and mid-stream, upstream timeouts, and each SDK's own
 * tool runner. Streams that end early without their end marker are in matrix-cut-short.test.ts;
 * single translation rules in matrix-translations.test.ts.
 */
import Anthropic from "@anthropic-ai/sdk"
import { betaTool } from "@anthropic-ai/sdk/helpers/beta/json-schema"
import OpenAI from "openai"
import type { ChatCompletionStreamParams } from "openai/lib/ChatCompletionStream"
import { Effect } from "effect"
import { beforeAll, describe, expect, it } from "vitest"
import type { FakeUpstream, JsonBody, Scenario, UsageSpec } from "../support/fake-common.ts"
import { awaitKeyAudit, type TestGateway } from "../support/gateway.ts"
import { ANTHROPIC_KEY, OPENAI_KEY, useModelGateway } from "../support/model-gateway.ts"
import { anthropicFor, openaiFor } from "../support/sdk-clients.ts"

type OpenAIApiError = InstanceType<typeof OpenAI.APIError>
type AnthropicApiError = InstanceType<typeof Anthropic.APIError>

const GPT_ID = "gpt-4o-mini-2024-07-18"
const CLAUDE_ID = "claude-sonnet-4-5-20250929"
const GPT_SLOW_ID = "gpt-4o-2024-11-20"
const CLAUDE_SLOW_ID = "claude-opus-4-5-20251101"
const CAP = 1000
/** What the Anthropic SDK asks for; below the cap so it travels unchanged. */
const MESSAGES_MAX_TOKENS = 512
const IMPATIENT = { connect_ms: 1000, first_byte_ms: 500, idle_ms: 500 }

let openaiFake: FakeUpstream
let anthropicFake: FakeUpstream
let gw: TestGateway

const fixture = useModelGateway({
  gptId: GPT_ID,
  claudeId: CLAUDE_ID,
  cap: CAP,
  openaiModels: [GPT_ID, GPT_SLOW_ID],
  anthropicModels: [CLAUDE_ID, CLAUDE_SLOW_ID],
  providers: (defaults, urls) => [
    ...defaults,
    // The same upstreams behind short timeouts, for the timeout cells.
    { name: "up-openai-impatient", kind: "openai", base_url: urls.openai, api_key: OPENAI_KEY, timeouts: IMPATIENT },
    { name: "up-anthropic-impatient", kind: "anthropic", base_url: urls.anthropic, api_key: ANTHROPIC_KEY, timeouts: IMPATIENT }
  ],
  models: (defaults) => [
    ...defaults,
    { alias: "gpt-impatient", id: GPT_SLOW_ID, provider: "up-openai-impatient", max_tokens: CAP },
    { alias: "claude-impatient", id: CLAUDE_SLOW_ID, provider: "up-anthropic-impatient", max_tokens: CAP }
  ]
})

beforeAll(async () => {
  gw = fixture.gateway()
  openaiFake = fixture.openaiFake()
  anthropicFake = fixture.anthropicFake()
})

// --- the matrix axes ---------------------------------------------------------------------------

type ClientKind = "openai" | "anthropic"

/** The anthropic-version header the installed @anthropic-ai/sdk sends. */
const ANTHROPIC_SDK_VERSION = "2026-10-21"
type ProviderKind = "openai" | "anthropic"
type Mode = "non-streaming" | "streaming"
type ScenarioName = "plain text" | "tool loop"

interface ProviderAxis {
  readonly kind: ProviderKind
  readonly name: string
  readonly alias: string
  readonly modelId: string
  readonly fake: () => FakeUpstream
}

const PROVIDERS: ReadonlyArray<ProviderAxis> = [
  { kind: "openai", name: "up-openai", alias: "gpt", modelId: GPT_ID, fake: () => openaiFake },
  { kind: "anthropic", name: "up-anthropic", alias: "claude", modelId: CLAUDE_ID, fake: () => anthropicFake }
]

const CLIENTS = [
  { kind: "openai" as const, label: "openai SDK on /v1/chat/completions" },
  { kind: "anthropic" as const, label: "@anthropic-ai/sdk on /v1/messages" }
]

const MODES: ReadonlyArray<Mode> = ["non-streaming", "streaming"]
const SCENARIOS: ReadonlyArray<ScenarioName> = ["plain text", "tool loop"]

// --- the conversation, in neutral terms ----------------------------------------------------------

const SYSTEM = "You are a terse weather assistant."
const WEATHER_PARAMS = {
  type: "object",
  properties: { city: { type: "string", description: "City name" } },
  required: ["city"]
}
const WEATHER_DESCRIPTION = "Current weather for a city"

/** Token counts as disjoint buckets; see the file header. */
interface Tokens {
  readonly uncached: number
  readonly cacheRead: number
  readonly cacheWrite: number
  readonly output: number
}

interface ModelTurn {
  readonly text: string
  readonly calls: ReadonlyArray<{ readonly key: string; readonly city: string }>
  readonly tokens: Tokens
}

interface Script {
  /** User text before each model turn; `undefined` where the turn answers tool results instead. */
  readonly users: ReadonlyArray<string | undefined>
  readonly turns: ReadonlyArray<ModelTurn>
  readonly tools: boolean
}

const TOOL_RESULTS: Record<string, string> = {
  Paris: JSON.stringify({ sky: "sunny", celsius: 21 }),
  London: JSON.stringify({ sky: "rain", celsius: 14 })
}

const SCRIPTS: Record<ScenarioName, Script> = {
  "plain text": {
    users: ["What is the capital of France?"],
    turns: [{ text: "Paris is the capital of France.", calls: [], tokens: { uncached: 14, cacheRead: 6, cacheWrite: 2, output: 6 } }],
    tools: false
  },
  "tool loop": {
    users: ["What is the weather in Paris and London right now?", undefined, "Which city is warmer?"],
    turns: [
      {
        text: "Checking both cities.",
        calls: [{ key: "paris", city: "Paris" }, { key: "london", city: "London" }],
        tokens: { uncached: 30, cacheRead: 0, cacheWrite: 10, output: 18 }
      },
      { text: "Paris is sunny at 21°C; London has rain at 14°C.", calls: [], tokens: { uncached: 25, cacheRead: 40, cacheWrite: 0, output: 12 } },
      { text: "Paris is warmer.", calls: [], tokens: { uncached: 8, cacheRead: 64, cacheWrite: 3, output: 4 } }
    ],
    tools: true
  }
}

/** Tool-call ids in each provider's own style, fixed so streamed and non-streamed runs compare equal. */
const toolId = (provider: ProviderKind, key: string) => (provider === "openai" ? `call_${key}Xq81` : `toolu_01${key}Vb7`)
/** The same id as a client of the other vendor sees it: in its vendor's own prefix (src/wire/ids.ts). */
const clientToolId = (client: ProviderKind, provider: ProviderKind, key: string) =>
  client === "openai" ? toolId(provider, key).replace(/^toolu_/, "call_") : toolId(provider, key).replace(/^call_/, "toolu_")

/** The usage a fake writes, in its vendor's semantics (OpenAI's prompt_tokens include the cache). */
const usageSpec = (provider: ProviderKind, t: Tokens): UsageSpec => ({
  input: provider === "openai" ? t.uncached + t.cacheRead + t.cacheWrite : t.uncached,
  output: t.output,
  cacheRead: t.cacheRead,
  cacheWrite: t.cacheWrite
})

/**
 * Streams come with the quirks real upstreams have, which must change nothing the client sees:
 * SSE comment keep-alives between frames (OpenRouter) and the usage frame sent twice.
 */
const fakeScenario = (provider: ProviderKind, turn: ModelTurn, mode: Mode = "non-streaming"): Scenario => {
  const quirks = mode === "streaming" ? { keepAlive: true, extraUsageChunk: true } : {}
  return turn.calls.length === 0
    ? { kind: "text", text: turn.text, usage: usageSpec(provider, turn.tokens), ...quirks }
    : {
      kind: "tool_calls",
      text: turn.text,
      calls: turn.calls.map((call) => ({ id: toolId(provider, call.key), name: "get_weather", arguments: { city: call.city } })),
      usage: usageSpec(provider, turn.tokens),
      ...quirks
    }
}

// --- what each client sees, projected to what must not differ between modes ----------------------

interface ChatView {
  readonly model: string
  readonly finish_reason: string | null
  readonly message: { role: string; content: string | null; tool_calls?: Array<{ id: string; type: string; function: { name: string; arguments: string } }> }
  readonly usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number; cached_tokens: number | undefined; cache_write_tokens: number | undefined }
}

const chatView = (completion: OpenAI.Chat.ChatCompletion): ChatView => {
  expect(completion.id).toMatch(/^chatcmpl-/)
  expect(completion.object).toBe("chat.completion")
  expect(Number.isInteger(completion.created)).toBe(true)
  expect(completion.choices).toHaveLength(1)
  const choice = completion.choices[0]!
  expect(choice.index).toBe(0)
  const message = choice.message
  const usage = completion.usage!
  const details = usage.prompt_tokens_details as { cached_tokens?: number; cache_write_tokens?: number } | undefined
  return {
    model: completion.model,
    finish_reason: choice.finish_reason,
    message: {
      role: message.role,
      content: message.content,
      ...(message.tool_calls === undefined || message.tool_calls.length === 0
        ? {}
        : {
          tool_calls: message.tool_calls.map((call) => {
            if (call.type !== "function") throw new Error(`unexpected tool call type ${call.type}`)
            return { id: call.id, type: call.type, function: { name: call.function.name, arguments: call.function.arguments } }
          })
        })
    },
    usage: {
      prompt_tokens: usage.prompt_tokens,
      completion_tokens: usage.completion_tokens,
      total_tokens: usage.total_tokens,
      cached_tokens: details?.cached_tokens,
      cache_write_tokens: details?.cache_write_tokens
    }
  }
}

const expectedChatView = (provider: ProviderAxis, turn: ModelTurn): ChatView => {
  const t = turn.tokens
  const prompt = t.uncached + t.cacheRead + t.cacheWrite
  return {
    // Every answer names the provider's model, translated or not (README "The model an answer names").
    model: provider.modelId,
    finish_reason: turn.calls.length > 0 ? "tool_calls" : "stop",
    message: {
      role: "assistant",
      content: turn.text,
      ...(turn.calls.length === 0 ? {} : {
        tool_calls: turn.calls.map((call) => ({
          id: clientToolId("openai", provider.kind, call.key),
          type: "function",
          function: { name: "get_weather", arguments: JSON.stringify({ city: call.city }) }
        }))
      })
    },
    usage: {
      prompt_tokens: prompt,
      completion_tokens: t.output,
      total_tokens: prompt + t.output,
      cached_tokens: t.cacheRead,
      cache_write_tokens: t.cacheWrite
    }
  }
}

interface MessageView {
  readonly type: string
  readonly role: string
  readonly model: string
  readonly content: Array<unknown>
  readonly stop_reason: string | null
  readonly stop_sequence: string | null
  readonly usage: {
    input_tokens: number
    output_tokens: number
    cache_read_input_tokens: number | null | undefined
    cache_creation_input_tokens: number | null | undefined
  }
}

const messageView = (message: Anthropic.Message): MessageView => {
  expect(message.id).toMatch(/^msg_[a-zA-Z0-9_-]+$/)
  return {
    type: message.type,
    role: message.role,
    model: message.model,
    content: message.content.map((block) => ({ ...block })),
    stop_reason: message.stop_reason,
    stop_sequence: message.stop_sequence,
    usage: {
      input_tokens: message.usage.input_tokens,
      output_tokens: message.usage.output_tokens,
      cache_read_input_tokens: message.usage.cache_read_input_tokens,
      cache_creation_input_tokens: message.usage.cache_creation_input_tokens
    }
  }
}

const expectedMessageView = (provider: ProviderAxis, turn: ModelTurn): MessageView => ({
  type: "message",
  role: "assistant",
  model: provider.modelId,
  content: [
    { type: "text", text: turn.text },
    ...turn.calls.map((call) => ({ type: "tool_use", id: clientToolId("anthropic", provider.kind, call.key), name: "get_weather", input: { city: call.city } }))
  ],
  stop_reason: turn.calls.length > 0 ? "tool_use" : "end_turn",
  stop_sequence: null,
  usage: {
    input_tokens: turn.tokens.uncached,
    output_tokens: turn.tokens.output,
    cache_read_input_tokens: turn.tokens.cacheRead,
    cache_creation_input_tokens: turn.tokens.cacheWrite
  }
})

// --- stream invariants, checked on what the SDK's helper saw -------------------------------------

const checkChatChunks = (chunks: ReadonlyArray<OpenAI.Chat.ChatCompletionChunk>) => {
  expect(chunks.length).toBeGreaterThan(2)
  const first = chunks[0]!
  for (const chunk of chunks) {
    expect(chunk.object).toBe("chat.completion.chunk")
    expect(chunk.id).toBe(first.id)
    expect(chunk.created).toBe(first.created)
  }
  expect(first.id).toMatch(/^chatcmpl-/)
  expect(first.choices[0]!.delta.role).toBe("assistant")
  const finishes = chunks.flatMap((chunk) => chunk.choices.filter((c) => c.finish_reason !== null))
  expect(finishes).toHaveLength(1)
  // include_usage: one last chunk with no choices carries the totals, every other has usage null.
  const last = chunks.at(-1)!
  expect(last.choices).toEqual([])
  expect(last.usage).toBeTruthy()
  for (const chunk of chunks.slice(0, -1)) expect(chunk.usage ?? null).toBeNull()
  // Each tool call's identity travels once, in its first fragment.
  const starts = chunks.flatMap((chunk) => chunk.choices.flatMap((c) => c.delta.tool_calls ?? []).filter((t) => t.id !== undefined))
  expect(new Set(starts.map((t) => t.index)).size).toBe(starts.length)
}

const checkMessageEvents = (events: ReadonlyArray<Anthropic.RawMessageStreamEvent>) => {
  const types = events.map((event) => event.type)
  expect(types[0]).toBe("message_start")
  expect(types.at(-1)).toBe("message_stop")
  expect(types.at(-2)).toBe("message_delta")
  expect(types.filter((t) => t === "message_start")).toHaveLength(1)
  expect(types.filter((t) => t === "message_delta")).toHaveLength(1)
  // Blocks are sequential, never overlapping, indexed 0, 1, 2... in order of their start.
  let open: number | undefined
  let next = 0
  for (const event of events) {
    if (event.type === "content_block_start") {
      expect(open).toBeUndefined()
      expect(event.index).toBe(next)
      open = event.index
      next++
    } else if (event.type === "content_block_delta") {
      expect(event.index).toBe(open)
    } else if (event.type === "content_block_stop") {
      expect(event.index).toBe(open)
      open = undefined
    }
  }
  expect(open).toBeUndefined()
  const start = events[0] as Anthropic.RawMessageStartEvent
  expect(start.message.id).toMatch(/^msg_/)
  expect(start.message.stop_reason).toBeNull()
}

// --- running a cell --------------------------------------------------------------------------

interface Cell {
  readonly client: ClientKind
  readonly provider: ProviderAxis
  readonly keyId: string
  readonly openai: OpenAI
  readonly anthropic: Anthropic
  /** Request bodies exactly as the SDK sent them to the gateway. */
  readonly sent: Array<JsonBody>
}

const openCell = async (client: ClientKind, provider: ProviderAxis): Promise<Cell> => {
  const { key, id } = await gw.createKey()
  const sent: Array<JsonBody> = []
  const recordingFetch: typeof fetch = (input, init) => {
    if (typeof init?.body === "string") sent.push(JSON.parse(init.body) as JsonBody)
    return fetch(input, init)
  }
  return {
    client,
    provider,
    keyId: id,
    sent,
    openai: openaiFor(gw.url, key, { fetch: recordingFetch }),
    anthropic: anthropicFor(gw.url, key, { fetch: recordingFetch })
  }
}

const chatTool: OpenAI.Chat.ChatCompletionFunctionTool = {
  type: "function",
  function: { name: "get_weather", description: WEATHER_DESCRIPTION, parameters: WEATHER_PARAMS }
}

const anthropicTool: Anthropic.Tool = {
  name: "get_weather",
  description: WEATHER_DESCRIPTION,
  input_schema: WEATHER_PARAMS as Anthropic.Tool.InputSchema
}

/** Runs the script with the openai SDK; returns what the client saw per turn. */
const runChat = async (cell: Cell, script: Script, mode: Mode): Promise<Array<ChatView>> => {
  const messages: Array<OpenAI.Chat.ChatCompletionMessageParam> = [{ role: "system", content: SYSTEM }]
  const views: Array<ChatView> = []
  for (let i = 0; i < script.turns.length; i++) {
    const user = script.users[i]
    if (user !== undefined) messages.push({ role: "user", content: user })
    cell.provider.fake().enqueue(fakeScenario(cell.provider.kind, script.turns[i]!, mode))
    const params = { model: cell.provider.alias, messages: [...messages], ...(script.tools ? { tools: [chatTool] } : {}) }
    let completion: OpenAI.Chat.ChatCompletion
    if (mode === "non-streaming") {
      completion = await cell.openai.chat.completions.create(params)
    } else {
      const stream = cell.openai.chat.completions.stream({ ...params, stream_options: { include_usage: true } })
      const chunks: Array<OpenAI.Chat.ChatCompletionChunk> = []
      stream.on("chunk", (chunk) => chunks.push(chunk))
      completion = await stream.finalChatCompletion()
      checkChatChunks(chunks)
    }
    views.push(chatView(completion))
    const message = completion.choices[0]!.message
    // The request-side shape of the answer: what a client replays as history.
    messages.push({
      role: "assistant",
      content: message.content,
      ...(message.tool_calls?.length
        ? {
          tool_calls: message.tool_calls.map((call) => {
            if (call.type !== "function") throw new Error("unexpected tool call type")
            return { id: call.id, type: "function" as const, function: { name: call.function.name, arguments: call.function.arguments } }
          })
        }
        : {})
    })
    for (const call of message.tool_calls ?? []) {
      if (call.type !== "function") continue
      const { city } = JSON.parse(call.function.arguments) as { city: string }
      messages.push({ role: "tool", tool_call_id: call.id, content: TOOL_RESULTS[city]! })
    }
  }
  return views
}

/** Runs the script with the Anthropic SDK; returns what the client saw per turn. */
const runMessages = async (cell: Cell, script: Script, mode: Mode): Promise<Array<MessageView>> => {
  const messages: Array<Anthropic.MessageParam> = []
  const views: Array<MessageView> = []
  let pendingResults: Array<Anthropic.ToolResultBlockParam> = []
  for (let i = 0; i < script.turns.length; i++) {
    const user = script.users[i]
    if (pendingResults.length > 0) messages.push({ role: "user", content: pendingResults })
    else if (user !== undefined) messages.push({ role: "user", content: user })
    pendingResults = []
    cell.provider.fake().enqueue(fakeScenario(cell.provider.kind, script.turns[i]!, mode))
    const params = {
      model: cell.provider.alias,
      max_tokens: MESSAGES_MAX_TOKENS,
      system: SYSTEM,
      messages: [...messages],
      ...(script.tools ? { tools: [anthropicTool] } : {})
    }
    let message: Anthropic.Message
    if (mode === "non-streaming") {
      message = await cell.anthropic.messages.create(params)
    } else {
      const stream = cell.anthropic.messages.stream(params)
      const events: Array<Anthropic.RawMessageStreamEvent> = []
      // The accumulator mutates message_start's message in place: keep each event as it arrived.
      stream.on("streamEvent", (event) => events.push(structuredClone(event)))
      message = await stream.finalMessage()
      checkMessageEvents(events)
    }
    views.push(messageView(message))
    // The documented loop: the answer's content goes back verbatim, then one tool_result per tool_use.
    messages.push({ role: "assistant", content: message.content })
    for (const block of message.content) {
      if (block.type !== "tool_use") continue
      const { city } = block.input as { city: string }
      pendingResults.push({ type: "tool_result", tool_use_id: block.id, content: TOOL_RESULTS[city]! })
    }
  }
  return views
}

// --- what the upstream must have received ----------------------------------------------------------

/** The conversation as the Anthropic API wants it, for a chat client translated to an anthropic provider. */
const anthropicHistory = (script: Script, upTo: number): Array<JsonBody> => {
  const history: Array<JsonBody> = []
  for (let i = 0; i <= upTo; i++) {
    const user = script.users[i]
    const previous = script.turns[i - 1]
    if (previous !== undefined && previous.calls.length > 0) {
      // Both tool messages became one user turn.
      history.push({
        role: "user",
        content: previous.calls.map((call) => ({ type: "tool_result", tool_use_id: toolId("anthropic", call.key), content: TOOL_RESULTS[call.city] }))
      })
    } else if (user !== undefined) {
      history.push({ role: "user", content: [{ type: "text", text: user }] })
    }
    if (i === upTo) break
    const turn = script.turns[i]!
    history.push({
      role: "assistant",
      content: [
        { type: "text", text: turn.text },
        ...turn.calls.map((call) => ({ type: "tool_use", id: toolId("anthropic", call.key), name: "get_weather", input: { city: call.city } }))
      ]
    })
  }
  return history
}

/** The conversation as Chat Completions wants it, for an Anthropic client translated to an openai provider. */
const chatHistory = (script: Script, upTo: number): Array<JsonBody> => {
  const history: Array<JsonBody> = [{ role: "system", content: SYSTEM }]
  for (let i = 0; i <= upTo; i++) {
    const user = script.users[i]
    const previous = script.turns[i - 1]
    if (previous !== undefined && previous.calls.length > 0) {
      for (const call of previous.calls) {
        // Tool messages are named after the tool they answer (some OpenAI-compatible upstreams need it).
        history.push({ role: "tool", tool_call_id: toolId("openai", call.key), content: TOOL_RESULTS[call.city], name: "get_weather" })
      }
    } else if (user !== undefined) {
      history.push({ role: "user", content: user })
    }
    if (i === upTo) break
    const turn = script.turns[i]!
    history.push(
      turn.calls.length === 0
        ? { role: "assistant", content: turn.text }
        : {
          role: "assistant",
          content: turn.text,
          tool_calls: turn.calls.map((call) => ({
            id: toolId("openai", call.key),
            type: "function",
            function: { name: "get_weather", arguments: JSON.stringify({ city: call.city }) }
          }))
        }
    )
  }
  return history
}

const expectedUpstreamBody = (cell: Cell, script: Script, mode: Mode, turn: number): JsonBody => {
  const streaming = mode === "streaming"
  const clientBody = cell.sent[turn]!
  if (cell.client === "openai" && cell.provider.kind === "openai") {
    // Passthrough: the provider's model id, usage always asked for so the audit has tokens, and
    // the model's cap when the client named no limit (issue 22, finding 2).
    const limited = typeof clientBody.max_tokens === "number" || typeof clientBody.max_completion_tokens === "number"
    return {
      ...clientBody,
      model: GPT_ID,
      ...(limited ? {} : { max_completion_tokens: CAP }),
      ...(streaming ? { stream_options: { include_usage: true } } : {})
    }
  }
  if (cell.client === "anthropic" && cell.provider.kind === "anthropic") {
    return { ...clientBody, model: CLAUDE_ID }
  }
  if (cell.client === "openai") {
    return {
      model: CLAUDE_ID,
      // The chat client gave no limit and Anthropic requires one: the model's cap.
      max_tokens: CAP,
      system: [{ type: "text", text: SYSTEM }],
      messages: anthropicHistory(script, turn),
      ...(script.tools ? { tools: [{ name: "get_weather", description: WEATHER_DESCRIPTION, input_schema: WEATHER_PARAMS }] } : {}),
      ...(streaming ? { stream: true } : {})
    }
  }
  return {
    model: GPT_ID,
    messages: chatHistory(script, turn),
    max_completion_tokens: MESSAGES_MAX_TOKENS,
    ...(script.tools ? { tools: [{ type: "function", function: { name: "get_weather", description: WEATHER_DESCRIPTION, parameters: WEATHER_PARAMS } }] } : {}),
    ...(streaming ? { stream: true, stream_options: { include_usage: true } } : {})
  }
}

const checkUpstream = (cell: Cell, script: Script, mode: Mode) => {
  const fake = cell.provider.fake()
  const other = cell.provider.kind === "openai" ? anthropicFake : openaiFake
  expect(other.requests).toHaveLength(0)
  expect(fake.requests).toHaveLength(script.turns.length)
  expect(cell.sent).toHaveLength(script.turns.length)
  fake.requests.forEach((request, turn) => {
    expect(request.path).toBe(cell.provider.kind === "openai" ? "/v1/chat/completions" : "/v1/messages")
    if (cell.provider.kind === "openai") {
      expect(request.headers.authorization).toBe(`Bearer ${OPENAI_KEY}`)
    } else {
      expect(request.headers["x-api-key"]).toBe(ANTHROPIC_KEY)
      // A Messages client's own anthropic-version is forwarded on passthrough (the vendor judges
      // its format); a translated request carries the provider's configured version.
      expect(request.headers["anthropic-version"]).toBe(cell.client === "anthropic" ? ANTHROPIC_SDK_VERSION : "2023-06-01")
    }
    expect(request.body).toEqual(expectedUpstreamBody(cell, script, mode, turn))
  })
}

/** The cell's audit records, oldest first, once all of them (streams write theirs at the end) are in. */
const auditRecords = (keyId: string, count: number) => awaitKeyAudit(gw, keyId, count)

const checkAudit = async (cell: Cell, script: Script, mode: Mode) => {
  const records = await auditRecords(cell.keyId, script.turns.length)
  expect(records).toHaveLength(script.turns.length)
  records.forEach((record, i) => {
    const t = script.turns[i]!.tokens
    expect(record).toMatchObject({
      endpoint: cell.client === "openai" ? "/v1/chat/completions" : "/v1/messages",
      status: 200,
      error: null,
      model: cell.provider.modelId,
      provider: cell.provider.name,
      prompt_tokens: t.uncached + t.cacheRead + t.cacheWrite,
      completion_tokens: t.output,
      stream: mode === "streaming"
    })
  })
}

// --- the matrix ---------------------------------------------------------------------------------

describe.each(CLIENTS)("$label", ({ kind: client }) => {
  describe.each(PROVIDERS)("x $kind-kind provider", (provider) => {
    describe.each(MODES)("x %s", (mode) => {
      it.each(SCENARIOS)("x %s", async (scenario) => {
        const script = SCRIPTS[scenario]
        const cell = await openCell(client, provider)
        const views = client === "openai" ? await runChat(cell, script, mode) : await runMessages(cell, script, mode)
        const expected = script.turns.map((turn) => (client === "openai" ? expectedChatView(provider, turn) : expectedMessageView(provider, turn)))
        expect(views).toEqual(expected)
        checkUpstream(cell, script, mode)
        await checkAudit(cell, script, mode)

        if (mode === "streaming") {
          // The SDK's stream helper must have assembled exactly what the plain call returns.
          provider.fake().reset()
          const reference = await openCell(client, provider)
          const plain = client === "openai" ? await runChat(reference, script, "non-streaming") : await runMessages(reference, script, "non-streaming")
          expect(views).toEqual(plain)
        }
      })
    })
  })
})

// --- stop reasons beyond the matrix: truncation ----------------------------------------------------

describe.each(CLIENTS)("$label, truncated by the client's limit", ({ kind: client }) => {
  it.each(PROVIDERS.flatMap((provider) => MODES.map((mode) => ({ provider, mode }))))(
    "x $provider.kind-kind provider x $mode: length <-> max_tokens, text cut at the limit",
    async ({ provider, mode }) => {
      const cell = await openCell(client, provider)
      provider.fake().enqueue({ kind: "text", text: "one two three four five six seven" })
      const limit = 3
      if (client === "openai") {
        const params = { model: provider.alias, messages: [{ role: "user" as const, content: "count to seven" }], max_tokens: limit }
        const completion = mode === "streaming"
          ? await cell.openai.chat.completions.stream(params).finalChatCompletion()
          : await cell.openai.chat.completions.create(params)
        expect(completion.choices[0]!.finish_reason).toBe("length")
        expect(completion.choices[0]!.message.content).toBe("one two three")
      } else {
        const params = { model: provider.alias, max_tokens: limit, messages: [{ role: "user" as const, content: "count to seven" }] }
        const message = mode === "streaming"
          ? await cell.anthropic.messages.stream(params).finalMessage()
          : await cell.anthropic.messages.create(params)
        expect(message.stop_reason).toBe("max_tokens")
        expect(message.stop_sequence).toBeNull()
        expect(message.content).toEqual([{ type: "text", text: "one two three" }])
      }
      const sent = provider.fake().requests[0]!.body!
      // The limit reaches the upstream in its own field.
      if (provider.kind === "anthropic") expect(sent.max_tokens).toBe(limit)
      else expect(sent.max_completion_tokens ?? sent.max_tokens).toBe(limit)
    }
  )
})

// --- errors ---------------------------------------------------------------------------------------

/** Each vendor's own error, as its API sends it before any byte of an answer. */
const VENDOR_ERRORS = {
  openai: {
    scenario: { kind: "error", status: 429, retryAfter: 7 } as Scenario,
    upstream: {
      upstream_status: 429,
      upstream_error: { type: "requests", code: "rate_limit_exceeded", message: "Rate limit reached for requests. Please try again in 1s." }
    },
    retryAfter: "7",
    // Its Retry-After (7 s) is longer than routing's max_retry_wait_ms (2 s): the gateway answers at once.
    attempts: 1
  },
  anthropic: {
    // With `retry-after-ms` beside Retry-After (the precise form the router prefers), so the two
    // waits between attempts take 50 ms each rather than a second.
    scenario: { kind: "error", status: 529, headers: { "retry-after-ms": "50" } } as Scenario,
    upstream: { upstream_status: 529, upstream_error: { type: "overloaded_error", code: null, message: "Overloaded" } },
    retryAfter: "1",
    // The wait it asks for is short: the one deployment is tried again after it, 1 + routing.retries times in all.
    attempts: 3
  }
} as const

/** The vendor's error, once for every attempt the gateway makes of one client request. */
const enqueueFailures = (provider: ProviderAxis, requests: number) => {
  const vendor = VENDOR_ERRORS[provider.kind]
  provider.fake().enqueue(...Array.from({ length: requests * vendor.attempts }, () => vendor.scenario))
}

const rawRequest = (client: ClientKind, key: string, body: JsonBody) =>
  fetch(`${gw.url}/v1/${client === "openai" ? "chat/completions" : "messages"}`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
    body: JSON.stringify(body)
  })

const minimalBody = (client: ClientKind, provider: ProviderAxis, stream: boolean): JsonBody =>
  client === "openai"
    ? { model: provider.alias, messages: [{ role: "user", content: "hello there" }], ...(stream ? { stream: true } : {}) }
    : { model: provider.alias, max_tokens: 64, messages: [{ role: "user", content: "hello there" }], ...(stream ? { stream: true } : {}) }

const CLIENT_PROVIDER_PAIRS = CLIENTS.flatMap((c) => PROVIDERS.map((provider) => ({ client: c.kind, label: c.label, provider })))

describe("upstream errors reach each client format as the envelope", () => {
  it.each(CLIENT_PROVIDER_PAIRS)("$label <- $provider.kind-kind provider error, before any byte (stream and not)", async ({ client, provider }) => {
    const cell = await openCell(client, provider)
    const vendor = VENDOR_ERRORS[provider.kind]
    for (const stream of [false, true]) {
      enqueueFailures(provider, 1)
      const { key } = await gw.createKey()
      const response = await rawRequest(client, key, minimalBody(client, provider, stream))
      const text = await response.text()
      // A stream that has not started yet fails like any request: a real status, so SDKs may retry.
      expect(response.status).toBe(502)
      expect(response.headers.get("content-type")).toMatch(/^application\/json/)
      expect(response.headers.get("retry-after")).toBe(vendor.retryAfter)
      const requestId = response.headers.get("x-request-id")
      expect(response.headers.get("request-id")).toBe(requestId)
      expect(JSON.parse(text)).toEqual({
        status: 502,
        error: "provider_error",
        message: expect.stringContaining(`"${provider.name}"`),
        request_id: requestId,
        details: { provider: provider.name, ...vendor.upstream }
      })
      expect(text).not.toContain(provider.kind === "openai" ? OPENAI_KEY : ANTHROPIC_KEY)
    }

    // The SDK surfaces it as its own API error carrying the gateway's status and request id.
    enqueueFailures(provider, 2)
    if (client === "openai") {
      const params = minimalBody("openai", provider, false) as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming
      const attempts = [
        () => cell.openai.chat.completions.create(params),
        () => cell.openai.chat.completions.stream(params as ChatCompletionStreamParams).finalChatCompletion()
      ]
      for (const attempt of attempts) {
        const error = await attempt().then(() => undefined, (e: unknown) => e)
        expect(error).toBeInstanceOf(OpenAI.InternalServerError)
        expect((error as OpenAIApiError).status).toBe(502)
        expect((error as OpenAIApiError).requestID).toMatch(/^req_/)
        expect((error as OpenAIApiError).error).toBe("provider_error")
      }
    } else {
      const params = minimalBody("anthropic", provider, false) as Anthropic.MessageCreateParamsNonStreaming
      const attempts = [() => cell.anthropic.messages.create(params), () => cell.anthropic.messages.stream(params).finalMessage()]
      for (const attempt of attempts) {
        const error = await attempt().then(() => undefined, (e: unknown) => e)
        expect(error).toBeInstanceOf(Anthropic.InternalServerError)
        const apiError = error as AnthropicApiError
        expect(apiError.status).toBe(502)
        expect(apiError.requestID).toMatch(/^req_/)
        expect(apiError.error).toMatchObject({ status: 502, error: "provider_error", request_id: apiError.requestID, details: { provider: provider.name } })
      }
    }
    expect(provider.fake().requests).toHaveLength(4 * vendor.attempts)
  })

  it.each(CLIENT_PROVIDER_PAIRS)("$label <- $provider.kind-kind provider failing before its first event: the 502 envelope, not a 200", async ({ client, provider }) => {
    // The upstream accepts the stream (200) and its first event is an in-band error: the gateway
    // reads that first event inside the attempt, so the client is answered with a status.
    provider.fake().enqueue({ kind: "mid_stream_error", afterChunks: 0 })
    const { key } = await gw.createKey()
    const response = await rawRequest(client, key, minimalBody(client, provider, true))
    expect(response.status).toBe(502)
    expect(response.headers.get("content-type")).toMatch(/^application\/json/)
    expect(await response.json()).toMatchObject({
      status: 502,
      error: "provider_error",
      message: expect.stringContaining("failed mid-stream"),
      details: { provider: provider.name, upstream_status: null }
    })
    // An upstream whose first event is a real one streams as before.
    const ok = await rawRequest(client, key, minimalBody(client, provider, true))
    expect(ok.status).toBe(200)
    expect(ok.headers.get("content-type")).toMatch(/^text\/event-stream/)
    const streamed = await ok.text()
    expect(streamed).toContain("hello")
    expect(streamed).not.toContain("provider_error")
  })

  it.each(CLIENT_PROVIDER_PAIRS)("$label <- $provider.kind-kind provider answering with a proxy's HTML page", async ({ client, provider }) => {
    const { key } = await gw.createKey()
    const page = "<html><body><h1>503 Service Temporarily Unavailable</h1></body></html>"
    provider.fake().enqueue({ kind: "error", status: 503, body: page })
    const response = await rawRequest(client, key, minimalBody(client, provider, false))
    expect(response.status).toBe(502)
    expect(await response.json()).toMatchObject({
      status: 502,
      error: "provider_error",
      details: { provider: provider.name, upstream_status: 503, upstream_error: { message: page } }
    })
  })

  it.each(CLIENT_PROVIDER_PAIRS)("$label <- $provider.kind-kind provider failing mid-stream: in-band envelope, then the end", async ({ client, provider }) => {
    const cell = await openCell(client, provider)
    const { key, id: keyId } = await gw.createKey()
    const upstreamError = provider.kind === "openai"
      ? { type: "server_error", code: null, message: "The server had an error while processing your request. Sorry about that!" }
      : { type: "overloaded_error", code: null, message: "Overloaded" }
    provider.fake().enqueue({ kind: "mid_stream_error", text: "alpha beta gamma delta epsilon zeta" })
    const response = await rawRequest(client, key, minimalBody(client, provider, true))
    expect(response.status).toBe(200)
    expect(response.headers.get("content-type")).toMatch(/^text\/event-stream/)
    const requestId = response.headers.get("x-request-id")
    const text = await response.text()
    const envelope = {
      status: 502,
      error: "provider_error",
      message: expect.stringContaining("mid-stream"),
      request_id: requestId,
      details: { provider: provider.name, upstream_status: null, upstream_error: upstreamError }
    }
    if (client === "openai") {
      expect(text).toMatch(/^(data: [^\n]*\n\n)+$/)
      const frames = text.split("\n\n").filter((frame) => frame !== "").map((frame) => frame.slice("data: ".length))
      expect(frames.at(-1)).toBe("[DONE]")
      expect(JSON.parse(frames.at(-2)!)).toEqual(envelope)
      // What came before is ordinary chunks, the first words of the answer among them.
      const chunks = frames.slice(0, -2).map((frame) => JSON.parse(frame) as OpenAI.Chat.ChatCompletionChunk)
      expect(chunks.length).toBeGreaterThan(0)
      expect(chunks.map((c) => c.choices[0]?.delta.content ?? "").join("")).toMatch(/^alpha/)
      expect(chunks.every((c) => c.choices.every((choice) => choice.finish_reason === null))).toBe(true)
    } else {
      expect(text).toMatch(/^(event: [a-z_]+\ndata: [^\n]*\n\n)+$/)
      const frames = text.split("\n\n").filter((frame) => frame !== "").map((frame) => {
        const [event, data] = frame.split("\n")
        return { event: event!.slice("event: ".length), data: JSON.parse(data!.slice("data: ".length)) as JsonBody }
      })
      expect(frames[0]!.event).toBe("message_start")
      const last = frames.at(-1)!
      expect(last.event).toBe("error")
      expect(last.data).toEqual({ type: "error", ...envelope })
      expect(frames.map((f) => f.event)).not.toContain("message_stop")
      for (const frame of frames) expect(frame.data.type).toBe(frame.event)
    }
    const [record] = await auditRecords(keyId, 1)
    expect(record).toMatchObject({ status: 200, error: "provider_error", stream: true, model: provider.modelId, provider: provider.name })

    // The SDK's stream helper rejects with the gateway's error instead of returning a partial answer.
    provider.fake().enqueue({ kind: "mid_stream_error", text: "alpha beta gamma delta epsilon zeta" })
    if (client === "openai") {
      const error = await cell.openai.chat.completions.stream(minimalBody("openai", provider, false) as ChatCompletionStreamParams)
        .finalChatCompletion().then(() => undefined, (e: unknown) => e)
      expect(error).toBeInstanceOf(OpenAI.APIError)
      expect((error as OpenAIApiError).error).toBe("provider_error")
    } else {
      const error = await cell.anthropic.messages.stream(minimalBody("anthropic", provider, false) as Anthropic.MessageCreateParamsNonStreaming)
        .finalMessage().then(() => undefined, (e: unknown) => e)
      expect(error).toBeInstanceOf(Anthropic.APIError)
      expect((error as AnthropicApiError).error).toMatchObject({ type: "error", status: 502, error: "provider_error", details: { provider: provider.name } })
    }
  })
})

describe("upstream timeouts reach each client format as the envelope", () => {
  /** One client format against one provider kind, behind the short timeouts; the fake is silent. */
  const timeoutCell = async ({ client, provider }: (typeof CLIENT_PROVIDER_PAIRS)[number]) => {
    const { key } = await gw.createKey()
    const impatient = { ...provider, alias: `${provider.alias}-impatient`, name: `${provider.name}-impatient` }
    const [plain, streamed] = await Promise.all([
      rawRequest(client, key, minimalBody(client, impatient, false)),
      rawRequest(client, key, minimalBody(client, impatient, true))
    ])

    expect(plain.status).toBe(504)
    expect(await plain.json()).toEqual({
      status: 504,
      error: "upstream_timeout",
      message: expect.stringContaining(`"${impatient.name}"`),
      request_id: plain.headers.get("x-request-id"),
      details: expect.objectContaining({ provider: impatient.name, timeout: "first_byte" })
    })

    // Stalled after its first frames: the stream already said 200, so the envelope comes in-band.
    expect(streamed.status).toBe(200)
    const frames = (await streamed.text()).split("\n\n").filter((frame) => frame !== "")
    const envelope = {
      status: 504,
      error: "upstream_timeout",
      message: expect.stringContaining("idle"),
      request_id: streamed.headers.get("x-request-id"),
      details: expect.objectContaining({ provider: impatient.name, timeout: "idle" })
    }
    if (client === "openai") {
      expect(frames.at(-1)).toBe("data: [DONE]")
      expect(JSON.parse(frames.at(-2)!.slice("data: ".length))).toEqual(envelope)
    } else {
      const last = frames.at(-1)!
      expect(last.startsWith("event: error\ndata: ")).toBe(true)
      expect(JSON.parse(last.slice("event: error\ndata: ".length))).toEqual({ type: "error", ...envelope })
    }
  }

  // All four pairs at once: each waits out real timeouts, and waiting in turn would be slow.
  it("both client formats <- both provider kinds, silent before the headers (504) or mid-stream (in-band 504)", async () => {
    for (const fake of [openaiFake, anthropicFake]) {
      // Four frames: the first words included (Anthropic's first three are message_start,
      // content_block_start and a ping, which give a Chat client nothing yet; a stream that stalls
      // before its first event is answered with the 504 status instead, like a plain request).
      fake.setDefault((body) => (body.stream === true ? { kind: "stall_after", chunks: 4 } : { kind: "hang" }))
    }
    await Promise.all(CLIENT_PROVIDER_PAIRS.map(timeoutCell))
    expect(openaiFake.requests).toHaveLength(4)
    expect(anthropicFake.requests).toHaveLength(4)
  })
})

// --- the SDKs' own tool loops ------------------------------------------------------------------------

describe("each SDK's own tool runner holds the loop with either provider kind", () => {
  const cases = PROVIDERS.flatMap((provider) => MODES.map((mode) => ({ provider, mode })))

  it.each(cases)("openai runTools x $provider.kind-kind provider x $mode", async ({ provider, mode }) => {
    const cell = await openCell("openai", provider)
    provider.fake().enqueue(fakeScenario(provider.kind, SCRIPTS["tool loop"].turns[0]!), { kind: "text", text: "Paris is warmer." })
    const asked: Array<string> = []
    const tools = [{
      type: "function" as const,
      function: {
        name: "get_weather",
        description: WEATHER_DESCRIPTION,
        parameters: WEATHER_PARAMS,
        parse: (text: string) => JSON.parse(text) as { city: string },
        function: ({ city }: { city: string }) => {
          asked.push(city)
          return TOOL_RESULTS[city]!
        }
      }
    }]
    const messages = [{ role: "user" as const, content: "Which is warmer, Paris or London?" }]
    const runner = mode === "streaming"
      ? cell.openai.chat.completions.runTools({ model: provider.alias, messages, tools, stream: true })
      : cell.openai.chat.completions.runTools({ model: provider.alias, messages, tools })
    expect(await runner.finalContent()).toBe("Paris is warmer.")
    expect(asked).toEqual(["Paris", "London"])
    expect(provider.fake().requests).toHaveLength(2)
  })

  it.each(cases)("anthropic beta toolRunner (over ?beta=true) x $provider.kind-kind provider x $mode", async ({ provider, mode }) => {
    const cell = await openCell("anthropic", provider)
    provider.fake().enqueue(fakeScenario(provider.kind, SCRIPTS["tool loop"].turns[0]!), { kind: "text", text: "Paris is warmer." })
    const asked: Array<string> = []
    const weather = betaTool({
      name: "get_weather",
      description: WEATHER_DESCRIPTION,
      inputSchema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
      run: ({ city }) => {
        asked.push(city)
        return TOOL_RESULTS[city]!
      }
    })
    // `thread: false`: the client keeps the conversation; server-side threads are an Anthropic-only service.
    const final = await cell.anthropic.beta.messages.toolRunner({
      model: provider.alias,
      max_tokens: MESSAGES_MAX_TOKENS,
      messages: [{ role: "user", content: "Which is warmer, Paris or London?" }],
      tools: [weather],
      stream: mode === "streaming",
      thread: false
    }).runUntilDone()
    expect(final.content).toEqual([{ type: "text", text: "Paris is warmer." }])
    expect(final.stop_reason).toBe("end_turn")
    expect(asked).toEqual(["Paris", "London"])
    expect(provider.fake().requests).toHaveLength(2)
    expect(cell.sent).toHaveLength(2)
  })
})
