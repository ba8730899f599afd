// A recording fake upstream for capturing what real coding clients send (Claude Code, opencode,
// Codex CLI). It accepts every request, records it (method, path, query, headers, decoded JSON
// body) and answers in the vendor's current wire format so the client carries on: Anthropic
// Messages (JSON and SSE, with thinking and tool_use turns), count_tokens and the models list;
// OpenAI Responses (the full streamed event sequence, with reasoning and function_call items);
// OpenAI Chat Completions (JSON and SSE, with tool calls). It never validates: the point is to
// see what clients send, including what a strict gateway would refuse.
//
// Response shapes follow the type definitions of the SDKs in package.json
// (@anthropic-ai/sdk resources/messages/messages.d.ts and models.d.ts, openai
// resources/responses/responses.d.ts and resources/chat/completions).
//
// Run alone: node scripts/capture/record.ts --port 4555 --out /tmp/requests.json
//   [--tool '{"Read":{"file_path":"/tmp/x/hello.txt"}}'] [--sequence '[{"name":"A","input":{}},...]']
// scripts/capture/capture.ts drives the clients against it and writes the fixtures.
import { randomBytes, randomUUID } from "node:crypto"
import { writeFileSync } from "node:fs"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { parseArgs } from "node:util"
import * as zlib from "node:zlib"

type Json = Record<string, any>

export interface CapturedRequest {
  readonly method: string
  /** Path without the query string. */
  readonly path: string
  /** Raw query string without the leading `?`; "" when there is none. */
  readonly query: string
  /** Header names lowercased, as Node delivers them. */
  readonly headers: Record<string, string>
  /** Parsed JSON body; the decoded text when it is not JSON; null when empty. */
  readonly body: unknown
}

export interface RecorderOptions {
  readonly port?: number
  /**
   * Tool calls the fake model makes, keyed by tool name: the first name the request offers as a
   * tool gets called with these arguments, once per user turn (never right after a tool result).
   */
  readonly toolCalls?: Readonly<Record<string, unknown>>
  /**
   * A chain of tool calls instead: the call made is the step whose index is the number of tool
   * results already in the conversation, when the request offers that tool (so a client can be
   * led through several tool turns, e.g. Claude Code's ToolSearch and then the tool it loaded).
   */
  readonly toolSequence?: ReadonlyArray<{ readonly name: string; readonly input: unknown }>
  /** Called after each request is recorded (the capture driver writes fixtures from here). */
  readonly onRequest?: (request: CapturedRequest) => void
}

export interface Recorder {
  readonly url: string
  readonly requests: ReadonlyArray<CapturedRequest>
  close(): Promise<void>
}

const MODEL_IDS = ["claude-sonnet-4-6", "claude-opus-4-7", "claude-haiku-4-5", "gpt-5.5", "gpt-5.5-mini"]

export const startRecorder = async (options: RecorderOptions = {}): Promise<Recorder> => {
  const requests: Array<CapturedRequest> = []
  const server = http.createServer((req, res) => {
    const chunks: Array<Buffer> = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", () => {
      const url = new URL(req.url ?? "/", "http://recorder")
      const headers: Record<string, string> = {}
      for (const [name, value] of Object.entries(req.headers)) {
        if (value !== undefined) headers[name] = Array.isArray(value) ? value.join(", ") : value
      }
      const captured: CapturedRequest = {
        method: req.method ?? "GET",
        path: url.pathname,
        query: url.search.replace(/^\?/, ""),
        headers,
        body: parseBody(Buffer.concat(chunks), headers["content-encoding"])
      }
      requests.push(captured)
      options.onRequest?.(captured)
      try {
        answer(captured, res, { calls: options.toolCalls ?? {}, sequence: options.toolSequence })
      } catch (error) {
        // The recorder must never take the client down with it; say what broke in-band.
        res.writeHead(500, { "content-type": "application/json" })
        res.end(JSON.stringify({ error: { type: "api_error", message: String(error) } }))
      }
    })
  })
  await new Promise<void>((resolve) => server.listen(options.port ?? 0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      })
  }
}

// Clients compress request bodies when they think the server takes it (Codex can send zstd).
export const parseBody = (raw: Buffer, encoding: string | undefined): unknown => {
  if (raw.length === 0) return null
  let bytes = raw
  try {
    if (encoding === "gzip") bytes = zlib.gunzipSync(raw)
    else if (encoding === "deflate") bytes = zlib.inflateSync(raw)
    else if (encoding === "br") bytes = zlib.brotliDecompressSync(raw)
    else if (encoding === "zstd") bytes = zlib.zstdDecompressSync(raw)
  } catch {
    bytes = raw
  }
  const text = bytes.toString("utf8")
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}

// ---------------------------------------------------------------------------------------------
// Routing

interface ToolPlan {
  readonly calls: Readonly<Record<string, unknown>>
  readonly sequence: RecorderOptions["toolSequence"]
}

const answer = (req: CapturedRequest, res: http.ServerResponse, plan: ToolPlan): void => {
  const body = (typeof req.body === "object" && req.body !== null ? req.body : {}) as Json
  const path = req.path.replace(/\/+$/, "")
  if (req.method === "POST" && path.endsWith("/messages/count_tokens")) {
    return sendJson(res, 200, { input_tokens: estimateTokens(body) }, anthropicHeaders())
  }
  if (req.method === "POST" && path.endsWith("/messages")) return anthropicMessages(body, res, plan)
  if (req.method === "POST" && path.endsWith("/responses")) return openaiResponses(body, res, plan)
  if (req.method === "POST" && path.endsWith("/chat/completions")) return chatCompletions(body, res, plan)
  if (req.method === "GET" && /\/models(\/[^/]+)?$/.test(path)) return models(req, path, res)
  // Anything else (OAuth probes, telemetry, update checks) gets the vendor's 404 so the client
  // moves on; the request is recorded all the same.
  sendJson(res, 404, { type: "error", error: { type: "not_found_error", message: `no route for ${req.method} ${path}` } })
}

const anthropicShaped = (req: CapturedRequest): boolean =>
  req.headers["anthropic-version"] !== undefined || req.headers["x-api-key"] !== undefined

const models = (req: CapturedRequest, path: string, res: http.ServerResponse): void => {
  const single = /\/models\/([^/]+)$/.exec(path)?.[1]
  const ids = single !== undefined ? [decodeURIComponent(single)] : MODEL_IDS
  if (anthropicShaped(req)) {
    const data = ids.map((id) => ({
      type: "model",
      id,
      display_name: id.replace(/-/g, " "),
      created_at: "2026-01-01T00:00:00Z"
    }))
    if (single !== undefined) return sendJson(res, 200, data[0], anthropicHeaders())
    return sendJson(
      res,
      200,
      { data, has_more: false, first_id: data[0]?.id ?? null, last_id: data.at(-1)?.id ?? null },
      anthropicHeaders()
    )
  }
  const data = ids.map((id) => ({ id, object: "model", created: 1767225600, owned_by: "recorder" }))
  if (single !== undefined) return sendJson(res, 200, data[0])
  sendJson(res, 200, { object: "list", data })
}

// ---------------------------------------------------------------------------------------------
// What the fake model says

interface Plan {
  readonly thinking?: string
  readonly text: string
  readonly toolCall?: { readonly id: string; readonly name: string; readonly input: unknown }
}

const TEXT_REPLY = "Done. This reply comes from the recording fake upstream."
const TOOL_PREAMBLE = "Let me look at that."

const toolNames = (tools: unknown): Array<string> =>
  Array.isArray(tools)
    ? tools.flatMap((tool: Json) => {
        const name = tool?.name ?? tool?.function?.name
        return typeof name === "string" ? [name] : []
      })
    : []

const chooseTool = (
  offered: ReadonlyArray<string>,
  plan: ToolPlan,
  toolResults: number,
  afterToolResult: boolean,
  idPrefix: string
): Plan["toolCall"] => {
  const make = (name: string, input: unknown) => ({ id: `${idPrefix}${randomBytes(12).toString("hex")}`, name, input })
  if (plan.sequence !== undefined) {
    const step = plan.sequence[toolResults]
    return step !== undefined && offered.includes(step.name) ? make(step.name, step.input) : undefined
  }
  if (afterToolResult) return undefined
  const name = Object.keys(plan.calls).find((candidate) => offered.includes(candidate))
  return name === undefined ? undefined : make(name, plan.calls[name])
}

const estimateTokens = (body: Json): number => Math.max(1, Math.ceil(JSON.stringify(body).length / 4))

const sendJson = (res: http.ServerResponse, status: number, payload: unknown, headers: Record<string, string> = {}): void => {
  res.writeHead(status, { "content-type": "application/json", ...headers })
  res.end(JSON.stringify(payload))
}

const startSse = (res: http.ServerResponse, headers: Record<string, string> = {}): void => {
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive", ...headers })
}

const words = (text: string): Array<string> => text.split(/(?<=\s)/)

// ---------------------------------------------------------------------------------------------
// Anthropic Messages

const anthropicHeaders = (): Record<string, string> => ({
  "request-id": `req_011C${randomBytes(12).toString("hex")}`,
  "anthropic-organization-id": randomUUID()
})

const lastAnthropicUserIsToolResult = (messages: unknown): boolean => {
  if (!Array.isArray(messages)) return false
  const last = [...messages].reverse().find((m: Json) => m?.role === "user")
  return Array.isArray(last?.content) && last.content.some((block: Json) => block?.type === "tool_result")
}

const countBlocks = (messages: unknown, match: (block: Json) => boolean): number =>
  Array.isArray(messages)
    ? messages.reduce((n: number, m: Json) => n + (Array.isArray(m?.content) ? m.content.filter(match).length : 0), 0)
    : 0

const anthropicMessages = (body: Json, res: http.ServerResponse, plan: ToolPlan): void => {
  const thinkingOn = body.thinking?.type === "enabled" || body.thinking?.type === "adaptive"
  const toolCall = chooseTool(
    toolNames(body.tools),
    plan,
    countBlocks(body.messages, (block) => block?.type === "tool_result"),
    lastAnthropicUserIsToolResult(body.messages),
    "toolu_01"
  )
  const reply: Plan = {
    ...(thinkingOn ? { thinking: "The user wants an answer; the recorder thinks briefly." } : {}),
    text: toolCall !== undefined ? TOOL_PREAMBLE : TEXT_REPLY,
    ...(toolCall !== undefined ? { toolCall } : {})
  }
  const model = typeof body.model === "string" ? body.model : "claude-sonnet-4-6"
  const id = `msg_01${randomBytes(12).toString("hex")}`
  const inputTokens = estimateTokens(body)
  const signature = randomBytes(48).toString("base64")
  const blocks: Array<Json> = [
    ...(reply.thinking !== undefined ? [{ type: "thinking", thinking: reply.thinking, signature }] : []),
    { type: "text", text: reply.text, citations: null },
    ...(reply.toolCall !== undefined
      ? [{ type: "tool_use", id: reply.toolCall.id, name: reply.toolCall.name, input: reply.toolCall.input, caller: { type: "direct" } }]
      : [])
  ]
  const outputTokens = Math.max(1, Math.ceil(JSON.stringify(blocks).length / 4))
  const stopReason = reply.toolCall !== undefined ? "tool_use" : "end_turn"
  const usage = (input: number, output: number): Json => ({
    input_tokens: input,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: 0,
    cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 },
    output_tokens: output,
    service_tier: "standard",
    inference_geo: "global"
  })
  const message = (content: Array<Json>, stop: string | null, output: number): Json => ({
    id,
    type: "message",
    role: "assistant",
    model,
    content,
    stop_reason: stop,
    stop_sequence: null,
    stop_details: null,
    container: null,
    usage: usage(inputTokens, output)
  })
  if (body.stream !== true) return sendJson(res, 200, message(blocks, stopReason, outputTokens), anthropicHeaders())

  startSse(res, anthropicHeaders())
  const event = (type: string, data: Json): void => {
    res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`)
  }
  event("message_start", { message: message([], null, 1) })
  blocks.forEach((block, index) => {
    if (block.type === "thinking") {
      event("content_block_start", { index, content_block: { type: "thinking", thinking: "", signature: "" } })
      for (const piece of words(block.thinking)) {
        event("content_block_delta", { index, delta: { type: "thinking_delta", thinking: piece } })
      }
      event("content_block_delta", { index, delta: { type: "signature_delta", signature: block.signature } })
    } else if (block.type === "text") {
      event("content_block_start", { index, content_block: { type: "text", text: "", citations: null } })
      if (index === 0) event("ping", {})
      for (const piece of words(block.text)) event("content_block_delta", { index, delta: { type: "text_delta", text: piece } })
    } else {
      event("content_block_start", {
        index,
        content_block: { type: "tool_use", id: block.id, name: block.name, input: {}, caller: { type: "direct" } }
      })
      const json = JSON.stringify(block.input)
      const cut = Math.ceil(json.length / 2)
      for (const piece of [json.slice(0, cut), json.slice(cut)]) {
        event("content_block_delta", { index, delta: { type: "input_json_delta", partial_json: piece } })
      }
    }
    event("content_block_stop", { index })
  })
  event("message_delta", {
    delta: { stop_reason: stopReason, stop_sequence: null, stop_details: null, container: null },
    usage: {
      input_tokens: inputTokens,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0,
      output_tokens: outputTokens
    }
  })
  event("message_stop", {})
  res.end()
}

// ---------------------------------------------------------------------------------------------
// OpenAI Responses

const lastResponsesInputIsToolOutput = (input: unknown): boolean => {
  if (!Array.isArray(input)) return false
  const last = [...input].reverse().find((item: Json) => item?.type !== "reasoning")
  return typeof last?.type === "string" && last.type.endsWith("_call_output")
}

const toolType = (tools: unknown, name: string): unknown =>
  Array.isArray(tools) ? tools.find((tool: Json) => tool?.name === name)?.type : undefined

const openaiResponses = (body: Json, res: http.ServerResponse, plan: ToolPlan): void => {
  const toolCall = chooseTool(
    toolNames(body.tools),
    plan,
    Array.isArray(body.input) ? body.input.filter((item: Json) => /_call_output$/.test(String(item?.type))).length : 0,
    lastResponsesInputIsToolOutput(body.input),
    "call_"
  )
  const reasoningOn = body.reasoning !== undefined && body.reasoning !== null
  const model = typeof body.model === "string" ? body.model : "gpt-5.5"
  const responseId = `resp_${randomBytes(24).toString("hex")}`
  const createdAt = Math.floor(Date.now() / 1000)
  const inputTokens = estimateTokens(body)
  const wantsEncrypted = Array.isArray(body.include) && body.include.includes("reasoning.encrypted_content")
  const text = toolCall !== undefined ? TOOL_PREAMBLE : TEXT_REPLY

  const items: Array<Json> = []
  if (reasoningOn) {
    items.push({
      type: "reasoning",
      id: `rs_${randomBytes(24).toString("hex")}`,
      summary: [{ type: "summary_text", text: "**Answering**\n\nThe recorder reasons briefly." }],
      ...(wantsEncrypted ? { encrypted_content: `gAAAAA${randomBytes(96).toString("base64")}` } : {})
    })
  }
  items.push({
    type: "message",
    id: `msg_${randomBytes(24).toString("hex")}`,
    role: "assistant",
    status: "completed",
    content: [{ type: "output_text", text, annotations: [], logprobs: [] }]
  })
  // A `custom` tool (Codex's apply_patch, a grammar-constrained free-text tool) is called with a
  // `custom_tool_call` item whose input is the raw text; everything else with `function_call`.
  const custom = toolCall !== undefined && toolType(body.tools, toolCall.name) === "custom"
  if (toolCall !== undefined && custom) {
    items.push({
      type: "custom_tool_call",
      id: `ctc_${randomBytes(24).toString("hex")}`,
      call_id: toolCall.id,
      name: toolCall.name,
      input: typeof toolCall.input === "string" ? toolCall.input : JSON.stringify(toolCall.input),
      status: "completed"
    })
  } else if (toolCall !== undefined) {
    items.push({
      type: "function_call",
      id: `fc_${randomBytes(24).toString("hex")}`,
      call_id: toolCall.id,
      name: toolCall.name,
      arguments: JSON.stringify(toolCall.input),
      status: "completed"
    })
  }
  const outputTokens = Math.max(1, Math.ceil(JSON.stringify(items).length / 4))
  const responseObject = (status: string, output: Array<Json>, withUsage: boolean): Json => ({
    id: responseId,
    object: "response",
    created_at: createdAt,
    status,
    background: false,
    completed_at: status === "completed" ? Math.floor(Date.now() / 1000) : null,
    error: null,
    incomplete_details: null,
    instructions: body.instructions ?? null,
    max_output_tokens: body.max_output_tokens ?? null,
    max_tool_calls: null,
    metadata: body.metadata ?? {},
    model,
    output,
    parallel_tool_calls: body.parallel_tool_calls ?? true,
    previous_response_id: body.previous_response_id ?? null,
    prompt_cache_key: body.prompt_cache_key ?? null,
    reasoning: body.reasoning ?? null,
    service_tier: "default",
    store: body.store ?? true,
    temperature: body.temperature ?? 1,
    text: body.text ?? { format: { type: "text" } },
    tool_choice: body.tool_choice ?? "auto",
    tools: body.tools ?? [],
    top_p: body.top_p ?? 1,
    truncation: "disabled",
    usage: withUsage
      ? {
          input_tokens: inputTokens,
          input_tokens_details: { cached_tokens: 0 },
          output_tokens: outputTokens,
          output_tokens_details: { reasoning_tokens: reasoningOn ? 8 : 0 },
          total_tokens: inputTokens + outputTokens
        }
      : null,
    user: body.user ?? null
  })
  if (body.stream !== true) return sendJson(res, 200, { ...responseObject("completed", items, true), output_text: text })

  startSse(res, { "x-request-id": `req_${randomBytes(16).toString("hex")}` })
  let sequence = 0
  const event = (type: string, data: Json): void => {
    res.write(`event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: sequence++, ...data })}\n\n`)
  }
  event("response.created", { response: responseObject("in_progress", [], false) })
  event("response.in_progress", { response: responseObject("in_progress", [], false) })
  items.forEach((item, outputIndex) => {
    if (item.type === "reasoning") {
      event("response.output_item.added", { output_index: outputIndex, item: { ...item, summary: [] } })
      item.summary.forEach((part: Json, summaryIndex: number) => {
        const base = { item_id: item.id, output_index: outputIndex, summary_index: summaryIndex }
        event("response.reasoning_summary_part.added", { ...base, part: { type: "summary_text", text: "" } })
        for (const piece of words(part.text)) event("response.reasoning_summary_text.delta", { ...base, delta: piece })
        event("response.reasoning_summary_text.done", { ...base, text: part.text })
        event("response.reasoning_summary_part.done", { ...base, part })
      })
      event("response.output_item.done", { output_index: outputIndex, item })
    } else if (item.type === "message") {
      event("response.output_item.added", {
        output_index: outputIndex,
        item: { ...item, status: "in_progress", content: [] }
      })
      const base = { item_id: item.id, output_index: outputIndex, content_index: 0 }
      event("response.content_part.added", { ...base, part: { type: "output_text", text: "", annotations: [], logprobs: [] } })
      for (const piece of words(text)) event("response.output_text.delta", { ...base, delta: piece, logprobs: [] })
      event("response.output_text.done", { ...base, text, logprobs: [] })
      event("response.content_part.done", { ...base, part: item.content[0] })
      event("response.output_item.done", { output_index: outputIndex, item })
    } else if (item.type === "custom_tool_call") {
      event("response.output_item.added", { output_index: outputIndex, item: { ...item, input: "", status: "in_progress" } })
      const cut = Math.ceil(item.input.length / 2)
      for (const piece of [item.input.slice(0, cut), item.input.slice(cut)]) {
        event("response.custom_tool_call_input.delta", { item_id: item.id, output_index: outputIndex, delta: piece })
      }
      event("response.custom_tool_call_input.done", { item_id: item.id, output_index: outputIndex, input: item.input })
      event("response.output_item.done", { output_index: outputIndex, item })
    } else {
      event("response.output_item.added", {
        output_index: outputIndex,
        item: { ...item, arguments: "", status: "in_progress" }
      })
      const cut = Math.ceil(item.arguments.length / 2)
      for (const piece of [item.arguments.slice(0, cut), item.arguments.slice(cut)]) {
        event("response.function_call_arguments.delta", { item_id: item.id, output_index: outputIndex, delta: piece })
      }
      event("response.function_call_arguments.done", {
        item_id: item.id,
        output_index: outputIndex,
        name: item.name,
        arguments: item.arguments
      })
      event("response.output_item.done", { output_index: outputIndex, item })
    }
  })
  event("response.completed", { response: responseObject("completed", items, true) })
  res.end()
}

// ---------------------------------------------------------------------------------------------
// OpenAI Chat Completions

const lastChatMessageIsTool = (messages: unknown): boolean =>
  Array.isArray(messages) && messages.length > 0 && (messages.at(-1) as Json)?.role === "tool"

const chatCompletions = (body: Json, res: http.ServerResponse, plan: ToolPlan): void => {
  const toolCall = chooseTool(
    toolNames(body.tools),
    plan,
    Array.isArray(body.messages) ? body.messages.filter((m: Json) => m?.role === "tool").length : 0,
    lastChatMessageIsTool(body.messages),
    "call_"
  )
  const model = typeof body.model === "string" ? body.model : "gpt-5.5"
  const id = `chatcmpl-${randomBytes(15).toString("base64url")}`
  const created = Math.floor(Date.now() / 1000)
  const text = toolCall !== undefined ? TOOL_PREAMBLE : TEXT_REPLY
  const promptTokens = estimateTokens(body)
  const completionTokens = Math.max(1, Math.ceil(text.length / 4) + (toolCall !== undefined ? 16 : 0))
  const usage = {
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    total_tokens: promptTokens + completionTokens,
    prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0, accepted_prediction_tokens: 0, rejected_prediction_tokens: 0 }
  }
  const finish = toolCall !== undefined ? "tool_calls" : "stop"
  const calls =
    toolCall !== undefined
      ? [{ id: toolCall.id, type: "function", function: { name: toolCall.name, arguments: JSON.stringify(toolCall.input) } }]
      : undefined
  if (body.stream !== true) {
    return sendJson(res, 200, {
      id,
      object: "chat.completion",
      created,
      model,
      choices: [
        {
          index: 0,
          message: { role: "assistant", content: text, refusal: null, annotations: [], ...(calls ? { tool_calls: calls } : {}) },
          logprobs: null,
          finish_reason: finish
        }
      ],
      usage,
      service_tier: "default",
      system_fingerprint: null
    })
  }
  startSse(res)
  const chunk = (delta: Json, finishReason: string | null, extra: Json = {}): void => {
    const payload = {
      id,
      object: "chat.completion.chunk",
      created,
      model,
      service_tier: "default",
      system_fingerprint: null,
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
      ...extra
    }
    res.write(`data: ${JSON.stringify(payload)}\n\n`)
  }
  const includeUsage = body.stream_options?.include_usage === true
  chunk({ role: "assistant", content: "", refusal: null }, null, includeUsage ? { usage: null } : {})
  for (const piece of words(text)) chunk({ content: piece }, null, includeUsage ? { usage: null } : {})
  if (calls !== undefined && toolCall !== undefined) {
    const args = calls[0]!.function.arguments
    const cut = Math.ceil(args.length / 2)
    chunk({ tool_calls: [{ index: 0, id: toolCall.id, type: "function", function: { name: toolCall.name, arguments: "" } }] }, null)
    chunk({ tool_calls: [{ index: 0, function: { arguments: args.slice(0, cut) } }] }, null)
    chunk({ tool_calls: [{ index: 0, function: { arguments: args.slice(cut) } }] }, null)
  }
  chunk({}, finish, includeUsage ? { usage: null } : {})
  if (includeUsage) {
    res.write(
      `data: ${JSON.stringify({ id, object: "chat.completion.chunk", created, model, service_tier: "default", system_fingerprint: null, choices: [], usage })}\n\n`
    )
  }
  res.write("data: [DONE]\n\n")
  res.end()
}

// ---------------------------------------------------------------------------------------------
// Stand-alone use: record into a JSON file, rewritten after every request.

if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      port: { type: "string", default: "0" },
      out: { type: "string" },
      tool: { type: "string" },
      sequence: { type: "string" }
    }
  })
  const out = values.out
  const recorder = await startRecorder({
    port: Number(values.port),
    ...(values.tool !== undefined ? { toolCalls: JSON.parse(values.tool) as Record<string, unknown> } : {}),
    ...(values.sequence !== undefined
      ? { toolSequence: JSON.parse(values.sequence) as Array<{ name: string; input: unknown }> }
      : {}),
    onRequest: (request) => {
      process.stderr.write(`${request.method} ${request.path}${request.query ? `?${request.query}` : ""}\n`)
      if (out !== undefined) writeFileSync(out, `${JSON.stringify(recorder.requests, null, 2)}\n`)
    }
  })
  process.stdout.write(`${recorder.url}\n`)
  const stop = (): void => void recorder.close().then(() => process.exit(0))
  process.on("SIGINT", stop)
  process.on("SIGTERM", stop)
}
