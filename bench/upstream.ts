/**
 * The benchmark's fake model provider, run as its own process so it never shares an event loop
 * with the load generator or the gateway. It answers from canned bodies as fast as node:http
 * allows; the only request parsing is a substring test for `"stream":true`.
 *
 * The URL path carries the scenario, so each gateway provider entry (one base URL each) is one
 * scenario and the request body needs no inspection:
 *
 *   POST /d<delay ms>/n<chunks>[/g<gap ms>]/v1/chat/completions   OpenAI Chat Completions
 *   POST /d<delay ms>/n<chunks>/v1/messages           Anthropic Messages
 *   POST /d<delay ms>/n<chunks>/v1/responses          OpenAI Responses (a fresh response id each answer, so a
 *                                                     gateway that stores responses keeps one per request)
 *   POST /v1/traces                                   an OTLP/HTTP collector that keeps nothing (the ladder's tracing rung)
 *
 * `delay` is waited before the status line (time to first byte); a streamed answer then sends
 * `chunks` content deltas back to back, one write each, the way a provider flushes tokens.
 *
 * Started by bench/run.ts, it prints `listening on <url>` and exits when its stdin closes, so it
 * cannot outlive a benchmark that died without cleaning up.
 */
import * as http from "node:http"
import type { AddressInfo } from "node:net"

interface Canned {
  readonly json: string
  /** SSE frames, written one by one. */
  readonly frames: ReadonlyArray<string>
  /** Responses: RESPONSE_ID replaced by a new id in every answer. */
  readonly freshId?: boolean
}

const WORD = " token"
const CREATED = Math.floor(Date.now() / 1000)

const openaiCanned = (chunks: number): Canned => {
  const id = "chatcmpl-bench0000000000000000000000000"
  const usage = { prompt_tokens: 12, completion_tokens: chunks, total_tokens: 12 + chunks }
  const json = JSON.stringify({
    id,
    object: "chat.completion",
    created: CREATED,
    model: "bench-upstream",
    choices: [{
      index: 0,
      message: { role: "assistant", content: "Hello from the benchmark upstream.", refusal: null, annotations: [] },
      logprobs: null,
      finish_reason: "stop"
    }],
    usage: { prompt_tokens: 12, completion_tokens: 7, total_tokens: 19 },
    service_tier: "default",
    system_fingerprint: "fp_bench"
  })
  const frame = (choices: ReadonlyArray<unknown>, withUsage: boolean) =>
    `data: ${
      JSON.stringify({
        id,
        object: "chat.completion.chunk",
        created: CREATED,
        model: "bench-upstream",
        system_fingerprint: "fp_bench",
        choices,
        usage: withUsage ? usage : null
      })
    }\n\n`
  const frames: Array<string> = []
  for (let i = 0; i < chunks; i++) {
    const delta = i === 0 ? { role: "assistant", content: WORD } : { content: WORD }
    frames.push(frame([{ index: 0, delta, logprobs: null, finish_reason: null }], false))
  }
  frames.push(frame([{ index: 0, delta: {}, logprobs: null, finish_reason: "stop" }], false))
  frames.push(frame([], true))
  frames.push("data: [DONE]\n\n")
  return { json, frames }
}

const anthropicCanned = (chunks: number): Canned => {
  const id = "msg_01bench000000000000000000"
  const json = JSON.stringify({
    id,
    type: "message",
    role: "assistant",
    model: "bench-upstream",
    content: [{ type: "text", text: "Hello from the benchmark upstream." }],
    stop_reason: "end_turn",
    stop_sequence: null,
    usage: { input_tokens: 12, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 7 }
  })
  const event = (type: string, data: Record<string, unknown>) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`
  const frames: Array<string> = [
    event("message_start", {
      message: {
        id,
        type: "message",
        role: "assistant",
        model: "bench-upstream",
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { input_tokens: 12, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 1 }
      }
    }),
    event("content_block_start", { index: 0, content_block: { type: "text", text: "" } }),
    event("ping", {})
  ]
  for (let i = 0; i < chunks; i++) {
    frames.push(event("content_block_delta", { index: 0, delta: { type: "text_delta", text: WORD } }))
  }
  frames.push(
    event("content_block_stop", { index: 0 }),
    event("message_delta", { delta: { stop_reason: "end_turn", stop_sequence: null }, usage: { output_tokens: chunks } }),
    event("message_stop", {})
  )
  return { json, frames }
}

/**
 * OpenAI Responses: the JSON answer and the SSE event sequence (created, in_progress, output item
 * and content part added, N text deltas, the done events, completed). Every answer carries a fresh
 * `resp_` id (`ID` below is replaced): the ladder's stored-conversation rung stores each one, and
 * a vendor never answers two requests with one id.
 */
const RESPONSE_ID = "resp_bench00000000000000000000000000000000"
const responsesCanned = (chunks: number): Canned => {
  const message = (text: string, status: string) => ({
    id: "msg_bench0000000000000000000000000000000000",
    type: "message",
    status,
    role: "assistant",
    content: [{ type: "output_text", text, annotations: [], logprobs: [] }]
  })
  const response = (status: string, output: ReadonlyArray<unknown>, usage: unknown) => ({
    id: RESPONSE_ID,
    object: "response",
    created_at: CREATED,
    status,
    error: null,
    incomplete_details: null,
    instructions: null,
    max_output_tokens: null,
    model: "bench-upstream",
    output,
    parallel_tool_calls: true,
    previous_response_id: null,
    reasoning: { effort: null, summary: null },
    store: false,
    temperature: 1,
    text: { format: { type: "text" } },
    tool_choice: "auto",
    tools: [],
    top_p: 1,
    truncation: "disabled",
    usage,
    metadata: {}
  })
  const usageOf = (output: number) => ({
    input_tokens: 12,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: 12 + output
  })
  const json = JSON.stringify(response("completed", [message("Hello from the benchmark upstream.", "completed")], usageOf(7)))
  let sequence = 0
  const event = (type: string, data: Record<string, unknown>) =>
    `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: sequence++, ...data })}\n\n`
  const text = WORD.repeat(chunks)
  const frames: Array<string> = [
    event("response.created", { response: response("in_progress", [], null) }),
    event("response.in_progress", { response: response("in_progress", [], null) }),
    event("response.output_item.added", { output_index: 0, item: { ...message("", "in_progress"), content: [] } }),
    event("response.content_part.added", { item_id: message("", "").id, output_index: 0, content_index: 0, part: { type: "output_text", text: "", annotations: [] } })
  ]
  for (let i = 0; i < chunks; i++) {
    frames.push(event("response.output_text.delta", { item_id: message("", "").id, output_index: 0, content_index: 0, delta: WORD, logprobs: [] }))
  }
  frames.push(
    event("response.output_text.done", { item_id: message("", "").id, output_index: 0, content_index: 0, text, logprobs: [] }),
    event("response.content_part.done", { item_id: message("", "").id, output_index: 0, content_index: 0, part: { type: "output_text", text, annotations: [] } }),
    event("response.output_item.done", { output_index: 0, item: message(text, "completed") }),
    event("response.completed", { response: response("completed", [message(text, "completed")], usageOf(chunks)) })
  )
  return { json, frames, freshId: true }
}

interface Route {
  readonly delayMs: number
  /** Between a streamed answer's writes; undefined: back to back. */
  readonly gapMs: number | undefined
  readonly canned: Canned
}

const ROUTE = /^\/d(\d+)\/n(\d+)(?:\/g(\d+))?\/v1\/(chat\/completions|messages|responses)$/
const routes = new Map<string, Route | null>()

const routeOf = (url: string): Route | null => {
  let route = routes.get(url)
  if (route !== undefined) return route
  const match = ROUTE.exec(url)
  route = match === null ? null : {
    delayMs: Number(match[1]),
    gapMs: match[3] === undefined ? undefined : Number(match[3]),
    canned: match[4] === "messages"
      ? anthropicCanned(Number(match[2]))
      : match[4] === "responses"
      ? responsesCanned(Number(match[2]))
      : openaiCanned(Number(match[2]))
  }
  routes.set(url, route)
  return route
}

const JSON_HEADERS = { "content-type": "application/json" }
const SSE_HEADERS = { "content-type": "text/event-stream", "cache-control": "no-cache" }

let responseCount = 0
/** A `resp_` id of the canned one's length, new for every answer. */
const freshResponseId = () => `resp_bench${(++responseCount).toString(16).padStart(RESPONSE_ID.length - 10, "0")}`

const respond = (res: http.ServerResponse, canned: Canned, stream: boolean, gapMs: number | undefined) => {
  const id = canned.freshId === true ? freshResponseId() : undefined
  const fresh = (text: string) => id === undefined ? text : text.replaceAll(RESPONSE_ID, id)
  if (!stream) {
    const json = fresh(canned.json)
    res.writeHead(200, { ...JSON_HEADERS, "content-length": Buffer.byteLength(json) })
    res.end(json)
    return
  }
  res.writeHead(200, SSE_HEADERS)
  if (gapMs !== undefined) {
    let next = 0
    const write = () => {
      if (next === canned.frames.length) return void res.end()
      res.write(fresh(canned.frames[next++]!))
      setTimeout(write, gapMs)
    }
    return write()
  }
  for (const frame of canned.frames) res.write(fresh(frame))
  res.end()
}

const server = http.createServer({ keepAliveTimeout: 120_000, requestTimeout: 0 }, (req, res) => {
  const route = req.method === "POST" ? routeOf(req.url ?? "") : null
  let body = ""
  req.setEncoding("utf8")
  req.on("data", (chunk: string) => (body += chunk))
  req.on("end", () => {
    // The cost ladder's tracing rung sends its spans here: taken and dropped, as a collector would answer.
    if (req.method === "POST" && req.url === "/v1/traces") {
      res.writeHead(200, JSON_HEADERS)
      res.end("{}")
      return
    }
    if (route === null) {
      res.writeHead(404, JSON_HEADERS)
      res.end(JSON.stringify({ error: { type: "not_found", message: `no bench route ${req.method} ${req.url}` } }))
      return
    }
    // The gateway serialises with JSON.stringify and the bench sends compact JSON: no spaces.
    const stream = body.includes("\"stream\":true")
    if (route.delayMs === 0) respond(res, route.canned, stream, route.gapMs)
    else setTimeout(() => respond(res, route.canned, stream, route.gapMs), route.delayMs)
  })
})

server.listen(0, "127.0.0.1", () => {
  const { port } = server.address() as AddressInfo
  process.stdout.write(`listening on http://127.0.0.1:${port}\n`)
})

process.stdin.on("end", () => process.exit(0))
process.stdin.resume()
