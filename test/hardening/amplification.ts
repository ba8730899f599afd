/**
 * One expansion budget, every surface (issue 32): each model endpoint x each provider kind, plus
 * MCP and the admin API, gets its worst-case body just under the 1 MiB body limit (many items,
 * many `$ref`s to one big definition, many tools with big schemas, nesting up to the JSON depth
 * limit, long strings where a translation copies them, many stop sequences, many stored
 * references) and a hostile upstream answer (a huge answer, a stream of many tiny events, a
 * slowloris stream, a length claim of gigabytes, deeply nested JSON, a huge tool-call argument).
 * Each request must get a clean status (2xx, or the error envelope with a slug; never a 5xx for
 * the client's mistake, and a 5xx for the upstream's only as the envelope), must not block the
 * event loop past LOOP_BOUND_MS (monitorEventLoopDelay in this process, where the gateway runs,
 * with `/healthz` probed meanwhile), and must not leave the heap more than HEAP_BOUND_MIB larger
 * after a collection.
 *
 * THE TABLE IS THE CONTRACT: a new endpoint or provider kind gets its row(s) here as part of
 * being built (SURFACES for an endpoint with its worst-case bodies and hostile answers, KINDS and
 * the upstream's `answer` for a provider kind). A row that fails is a finding to fix in the
 * gateway; one that cannot be fixed yet is listed in TODO with its measured numbers (it then runs
 * as `it.fails`, so it turns red the day it is fixed and someone forgets to move it back).
 *
 * The upstream is one raw server in this process that answers in each kind's wire shape without
 * parsing what it was sent (the fakes of test/support validate whole bodies, and their own
 * parsing would count in the loop delay measured here).
 *
 * The table runs in two files, amplification-1.test.ts and amplification-2.test.ts, each a part
 * of the provider kinds (`defineAmplification`): each file's requests still go one after another
 * in its own process (each measured alone there: the loop's CPU is its own thread's), and the
 * two parts run beside each other instead of one file being the suite's longest (45-75 s at load).
 * The module's state is per file: each file's beforeAll starts its own upstream and gateway.
 */
import { generateKeyPairSync } from "node:crypto"
import { appendFileSync, mkdtempSync, writeFileSync } from "node:fs"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { monitorEventLoopDelay } from "node:perf_hooks"
import { getHeapStatistics, setFlagsFromString } from "node:v8"
import { runInNewContext } from "node:vm"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { encodeEventMessage, eventMessage } from "../support/fake-bedrock.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

/**
 * The most one request may block the loop, in CPU ms of the loop's thread. The issue's goal is
 * 50 ms, and every row meets it in the runs measured (2026-11-28, two cores at a load of 17-23:
 * the worst 45 ms, a whole answer over max_response_bytes; the first count_tokens estimate 5-9
 * ms, the 1 MiB Responses and chat bodies 20-35 ms, which measured 50-318 ms before the request
 * path learnt to give the loop turns: src/wire/turns.ts). The bound is not 50 ms because a run
 * of the whole suite measured up to three times what this file alone did (318 ms against
 * 108-215 ms), and the assertion must not flake: 150 ms is three times the worst seen. It still
 * catches any stage that does a 1 MiB body's work in one turn again.
 */
const LOOP_BOUND_MS = 150
/** The most the heap may have grown after one request, once collected. */
const HEAP_BOUND_MIB = 100
const BODY_LIMIT = 1_048_576
const CONVERSATION_BUDGET = 8 * 1_048_576
/** Worst-case bodies are built to just under the limit. */
const TARGET = BODY_LIMIT - 4_096

// A collector on demand without --expose-gc for the whole suite: the flag set at run time and the
// function taken from a fresh context (V8 installs `gc` on contexts made after the flag).
setFlagsFromString("--expose-gc")
const gc = runInNewContext("gc") as () => void
// The suite shares this process (no isolation): later contexts get no `gc` of their own.
setFlagsFromString("--no-expose-gc")

// ---------------------------------------------------------------------------------------------
// The hostile upstream: every kind's paths on one server, the answer chosen by the test.

type Hostile = "ok" | "huge" | "over" | "tiny" | "slow" | "claim" | "deep" | "bigtool" | "deeptool"
let answer: Hostile = "ok"

const MiB = 1_048_576
/**
 * Under providers[].max_response_bytes (16 MiB): the gateway reads, translates and relays it.
 * 4 MiB keeps the file's time small; the cost is linear in it (12 MiB: at most 120 ms of CPU).
 */
const HUGE_TEXT = "a".repeat(4 * MiB)
/** Each provider's max_response_bytes here: above HUGE_TEXT, below OVER_TEXT. */
const MAX_RESPONSE_BYTES = 6 * MiB
const OVER_TEXT = HUGE_TEXT + HUGE_TEXT
const BIG_ARGS = JSON.stringify({ q: "b".repeat(1 * MiB) })
const DEEP_DEPTH = 100_000
const deepJson = "[".repeat(DEEP_DEPTH) + "]".repeat(DEEP_DEPTH)
/** Tool-call arguments that parse to 100,000 levels: the answer around them is shallow, they are a string in it. */
const DEEP_ARGS = `{"q":${deepJson}}`
const TINY_EVENTS = 3_000
const SLOW_PIECES = 20
const SLOW_GAP_MS = 10

type Shape = "openai" | "responses" | "legacy" | "moderation" | "embeddings" | "anthropic" | "count" | "gemini" | "gemini-count" | "gemini-embed" | "bedrock" | "bedrock-count" | "titan"

interface Call {
  readonly shape: Shape
  readonly stream: boolean
  readonly raw: string
}

const shapeOf = (path: string, raw: string): Call | undefined => {
  // Not parsed (see the header): the gateway writes `"stream":true` compactly, and the bodies here hold no such text.
  const streamFlag = raw.includes(`"stream":true`)
  if (path.includes("/chat/completions")) return { shape: "openai", stream: streamFlag, raw }
  if (path.includes("/responses")) return { shape: "responses", stream: streamFlag, raw }
  if (path.includes("/completions")) return { shape: "legacy", stream: streamFlag, raw }
  if (path.includes("/moderations")) return { shape: "moderation", stream: false, raw }
  if (path.includes("/embeddings")) return { shape: "embeddings", stream: false, raw }
  if (path.includes("count-tokens:rawPredict") || path.endsWith("/v1/messages/count_tokens")) return { shape: "count", stream: false, raw }
  if (path.includes(":streamRawPredict")) return { shape: "anthropic", stream: true, raw }
  if (path.includes(":rawPredict") || path.endsWith("/v1/messages")) return { shape: "anthropic", stream: streamFlag, raw }
  if (path.includes(":streamGenerateContent")) return { shape: "gemini", stream: true, raw }
  if (path.includes(":generateContent")) return { shape: "gemini", stream: false, raw }
  if (path.includes(":countTokens")) return { shape: "gemini-count", stream: false, raw }
  if (path.includes(":batchEmbedContents")) return { shape: "gemini-embed", stream: false, raw }
  if (path.endsWith("/converse-stream")) return { shape: "bedrock", stream: true, raw }
  if (path.endsWith("/converse")) return { shape: "bedrock", stream: false, raw }
  if (path.endsWith("/count-tokens")) return { shape: "bedrock-count", stream: false, raw }
  if (path.endsWith("/invoke")) return { shape: "titan", stream: false, raw }
  return undefined
}

const usageOpenAI = { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 }
const anthropicUsage = { input_tokens: 3, output_tokens: 2 }
const geminiUsage = { promptTokenCount: 3, candidatesTokenCount: 2, totalTokenCount: 5 }
const bedrockUsage = { inputTokens: 3, outputTokens: 2, totalTokens: 5 }

/** The whole (non-streamed) answer of a shape: `text`, a tool call with `args` (JSON text), `extra` spliced in raw. */
const wholeAnswer = (call: Call, text: string, args: string | undefined, extra: string | undefined): string => {
  const x = extra === undefined ? "" : `,"deep":${extra}`
  const t = JSON.stringify(text)
  switch (call.shape) {
    case "openai": {
      const tools = args === undefined ? "" : `,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":${JSON.stringify(args)}}}]`
      return `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":${t}${tools}},"finish_reason":"${args === undefined ? "stop" : "tool_calls"}"}],"usage":${JSON.stringify(usageOpenAI)}${x}}`
    }
    case "responses": {
      const tool = args === undefined ? "" : `,{"type":"function_call","id":"fc_1","call_id":"call_1","name":"f","arguments":${JSON.stringify(args)},"status":"completed"}`
      return `{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":"m","output":[{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":${t},"annotations":[]}]}${tool}],"usage":{"input_tokens":3,"output_tokens":2,"total_tokens":5}${x}}`
    }
    case "legacy":
      return `{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"text":${t},"index":0,"logprobs":null,"finish_reason":"stop"}],"usage":${JSON.stringify(usageOpenAI)}${x}}`
    case "moderation":
      return `{"id":"modr-1","model":"m","results":[{"flagged":false,"categories":{},"category_scores":{},"note":${t}}]${x}}`
    case "embeddings":
      return `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,0.2],"note":${t}}],"model":"m","usage":{"prompt_tokens":3,"total_tokens":3}${x}}`
    case "anthropic": {
      const tool = args === undefined ? "" : `,{"type":"tool_use","id":"toolu_1","name":"f","input":${args}}`
      return `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":${t}}${tool}],"stop_reason":"${args === undefined ? "end_turn" : "tool_use"}","stop_sequence":null,"usage":${JSON.stringify(anthropicUsage)}${x}}`
    }
    case "count":
      return `{"input_tokens":5,"note":${t}${x}}`
    case "gemini": {
      const tool = args === undefined ? "" : `,{"functionCall":{"name":"f","args":${args}}}`
      return `{"candidates":[{"content":{"role":"model","parts":[{"text":${t}}${tool}]},"finishReason":"STOP","index":0}],"usageMetadata":${JSON.stringify(geminiUsage)},"modelVersion":"m"${x}}`
    }
    case "gemini-count":
      return `{"totalTokens":5,"note":${t}${x}}`
    case "gemini-embed":
      return `{"embeddings":[{"values":[0.1,0.2],"note":${t}}]${x}}`
    case "bedrock": {
      const tool = args === undefined ? "" : `,{"toolUse":{"toolUseId":"tu_1","name":"f","input":${args}}}`
      return `{"output":{"message":{"role":"assistant","content":[{"text":${t}}${tool}]}},"stopReason":"${args === undefined ? "end_turn" : "tool_use"}","usage":${JSON.stringify(bedrockUsage)},"metrics":{"latencyMs":1}${x}}`
    }
    case "bedrock-count":
      return `{"inputTokens":5,"note":${t}${x}}`
    case "titan":
      return `{"embedding":[0.1,0.2],"inputTextTokenCount":3,"note":${t}${x}}`
  }
}

/** Where jsonInPieces puts the text: the marker, and how it appears in an answer's JSON. */
const MARK = "\u0001TEXT\u0001"
const QUOTED_MARK = JSON.stringify(MARK)

const sse = (data: string, event?: string) => `${event === undefined ? "" : `event: ${event}\n`}data: ${data}\n\n`

/** The frames of a streamed answer: `pieces` of text, then a tool call whose arguments come in `argPieces`. */
const streamFrames = (call: Call, pieces: ReadonlyArray<string>, argPieces: ReadonlyArray<string> | undefined, extra: string | undefined): Array<string | Uint8Array> => {
  const x = extra === undefined ? "" : `,"deep":${extra}`
  switch (call.shape) {
    case "openai":
    case "legacy": {
      const chunk = (delta: string, finish: string | null) =>
        call.shape === "legacy"
          ? sse(`{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"text":${delta === "" ? `""` : delta},"index":0,"logprobs":null,"finish_reason":${finish === null ? "null" : `"${finish}"`}}]${x}}`)
          : sse(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":${delta},"finish_reason":${finish === null ? "null" : `"${finish}"`}}]${x}}`)
      const frames = call.shape === "legacy"
        ? pieces.map((piece) => chunk(JSON.stringify(piece), null))
        : [chunk(`{"role":"assistant","content":""}`, null), ...pieces.map((piece) => chunk(`{"content":${JSON.stringify(piece)}}`, null))]
      if (argPieces !== undefined && call.shape === "openai") {
        frames.push(chunk(`{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}}]}`, null))
        for (const piece of argPieces) frames.push(chunk(`{"tool_calls":[{"index":0,"function":{"arguments":${JSON.stringify(piece)}}}]}`, null))
      }
      frames.push(chunk(call.shape === "legacy" ? `""` : "{}", argPieces === undefined ? "stop" : "tool_calls"))
      frames.push(sse(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":${JSON.stringify(usageOpenAI)}}`))
      frames.push("data: [DONE]\n\n")
      return frames
    }
    case "responses": {
      const response = (status: string, output: string) =>
        `{"id":"resp_1","object":"response","created_at":1,"status":"${status}","model":"m","output":[${output}],"usage":{"input_tokens":3,"output_tokens":2,"total_tokens":5}}`
      const frames = [sse(`{"type":"response.created","sequence_number":0,"response":${response("in_progress", "")}}`, "response.created")]
      frames.push(sse(`{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"type":"message","id":"msg_1","role":"assistant","status":"in_progress","content":[]}}`, "response.output_item.added"))
      for (const piece of pieces) frames.push(sse(`{"type":"response.output_text.delta","sequence_number":2,"item_id":"msg_1","output_index":0,"content_index":0,"delta":${JSON.stringify(piece)}${x}}`, "response.output_text.delta"))
      if (argPieces !== undefined) {
        for (const piece of argPieces) frames.push(sse(`{"type":"response.function_call_arguments.delta","sequence_number":3,"item_id":"fc_1","output_index":1,"delta":${JSON.stringify(piece)}}`, "response.function_call_arguments.delta"))
      }
      frames.push(sse(`{"type":"response.completed","sequence_number":4,"response":${response("completed", `{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"done","annotations":[]}]}`)}}`, "response.completed"))
      return frames
    }
    case "anthropic": {
      const frames = [
        sse(`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":0}}}`, "message_start"),
        sse(`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`, "content_block_start"),
        ...pieces.map((piece) => sse(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":${JSON.stringify(piece)}}${x}}`, "content_block_delta")),
        sse(`{"type":"content_block_stop","index":0}`, "content_block_stop")
      ]
      if (argPieces !== undefined) {
        frames.push(sse(`{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"f","input":{}}}`, "content_block_start"))
        for (const piece of argPieces) frames.push(sse(`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":${JSON.stringify(piece)}}}`, "content_block_delta"))
        frames.push(sse(`{"type":"content_block_stop","index":1}`, "content_block_stop"))
      }
      frames.push(sse(`{"type":"message_delta","delta":{"stop_reason":"${argPieces === undefined ? "end_turn" : "tool_use"}","stop_sequence":null},"usage":{"output_tokens":2}}`, "message_delta"))
      frames.push(sse(`{"type":"message_stop"}`, "message_stop"))
      return frames
    }
    case "gemini": {
      const event = (parts: string, finish?: string) =>
        `data: {"candidates":[{"content":{"role":"model","parts":[${parts}]}${finish === undefined ? "" : `,"finishReason":"${finish}"`},"index":0}],"usageMetadata":${JSON.stringify(geminiUsage)},"modelVersion":"m"${x}}\r\n\r\n`
      const frames = pieces.map((piece) => event(`{"text":${JSON.stringify(piece)}}`))
      // Gemini sends a function call whole: its arguments are one event.
      if (argPieces !== undefined) frames.push(event(`{"functionCall":{"name":"f","args":${argPieces.join("")}}}`))
      frames.push(event(`{"text":""}`, "STOP"))
      return frames
    }
    case "bedrock": {
      const frames: Array<Uint8Array> = [eventMessage("messageStart", { role: "assistant" })]
      for (const piece of pieces) frames.push(eventMessage("contentBlockDelta", { contentBlockIndex: 0, delta: { text: piece } }))
      frames.push(eventMessage("contentBlockStop", { contentBlockIndex: 0 }))
      if (argPieces !== undefined) {
        frames.push(eventMessage("contentBlockStart", { contentBlockIndex: 1, start: { toolUse: { toolUseId: "tu_1", name: "f" } } }))
        for (const piece of argPieces) frames.push(eventMessage("contentBlockDelta", { contentBlockIndex: 1, delta: { toolUse: { input: piece } } }))
        frames.push(eventMessage("contentBlockStop", { contentBlockIndex: 1 }))
      }
      if (extra !== undefined) {
        frames.push(encodeEventMessage({ ":event-type": "contentBlockDelta", ":content-type": "application/json", ":message-type": "event" }, Buffer.from(`{"contentBlockIndex":0,"delta":{"text":"x"}${x}}`)))
      }
      frames.push(eventMessage("messageStop", { stopReason: argPieces === undefined ? "end_turn" : "tool_use" }))
      frames.push(eventMessage("metadata", { usage: bedrockUsage, metrics: { latencyMs: 1 } }))
      return frames
    }
    default:
      return [wholeAnswer(call, "", undefined, extra)]
  }
}

const split = (text: string, size: number) => {
  const out: Array<string> = []
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size))
  return out
}

/** Whole frames concatenated into writes of about 64 KiB, as a fast upstream's socket delivers them. */
const batched = (frames: ReadonlyArray<string | Uint8Array>): Array<Buffer> => {
  const out: Array<Buffer> = []
  let pending: Array<Buffer> = []
  let size = 0
  for (const frame of frames) {
    const bytes = typeof frame === "string" ? Buffer.from(frame) : Buffer.from(frame)
    pending.push(bytes)
    size += bytes.length
    if (size >= 65_536) {
      out.push(Buffer.concat(pending))
      pending = []
      size = 0
    }
  }
  if (pending.length > 0) out.push(Buffer.concat(pending))
  return out
}

const contentType = (call: Call) =>
  call.shape === "bedrock" ? "application/vnd.amazon.eventstream" : "text/event-stream"

/** Resolves when the socket takes more, or is gone. */
const drained = (res: http.ServerResponse) =>
  new Promise<void>((resolve) => {
    const done = () => {
      res.off("drain", done)
      res.off("close", done)
      resolve()
    }
    res.on("drain", done)
    res.on("close", done)
  })

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

const respond = async (call: Call, res: http.ServerResponse) => {
  const json = (text: string, headers: Record<string, string> = {}) => {
    res.writeHead(200, { "content-type": "application/json", "content-length": String(Buffer.byteLength(text)), ...headers })
    res.end(text)
  }
  const stream = async (frames: ReadonlyArray<string | Uint8Array>, gapMs = 0) => {
    res.writeHead(200, { "content-type": contentType(call), "cache-control": "no-cache" })
    res.flushHeaders()
    for (const frame of gapMs > 0 ? frames : batched(frames)) {
      if (res.destroyed) return
      if (!res.write(frame)) await drained(res)
      if (gapMs > 0) await sleep(gapMs)
    }
    res.end()
  }
  /**
   * A whole answer whose text is megabytes, written a piece at a time as a socket would carry it:
   * built whole (a JSON.stringify of 8 MiB, then its encoding) it cost this process 20-30 ms of
   * one turn, which the loop bound would count against the gateway. `text` needs no escaping.
   */
  const jsonInPieces = async (text: string) => {
    const template = wholeAnswer(call, MARK, undefined, undefined)
    const at = template.indexOf(QUOTED_MARK)
    const head = template.slice(0, at + 1)
    const tail = template.slice(at + QUOTED_MARK.length - 1)
    res.writeHead(200, { "content-type": "application/json", "content-length": String(Buffer.byteLength(head) + text.length + Buffer.byteLength(tail)) })
    for (const piece of [head, ...split(text, MiB), tail]) {
      if (res.destroyed) return
      if (!res.write(piece)) await drained(res)
    }
    res.end()
  }
  // Embeddings whose count must match the inputs: the only bodies this upstream reads.
  if (answer === "ok" && call.shape === "gemini-embed") {
    const n = (JSON.parse(call.raw) as { requests: Array<unknown> }).requests.length
    return json(JSON.stringify({ embeddings: Array.from({ length: n }, () => ({ values: [0.1, 0.2] })) }))
  }
  if (answer === "ok" && call.shape === "embeddings") {
    const input = (JSON.parse(call.raw) as { input: unknown }).input
    const n = Array.isArray(input) && input.length > 0 && typeof input[0] !== "number" ? input.length : 1
    return json(JSON.stringify({ object: "list", data: Array.from({ length: n }, (_, index) => ({ object: "embedding", index, embedding: [0.1, 0.2] })), model: "m", usage: { prompt_tokens: 3, total_tokens: 3 } }))
  }
  switch (answer) {
    case "ok":
      return call.stream ? stream(streamFrames(call, ["ok"], undefined, undefined)) : json(wholeAnswer(call, "ok", undefined, undefined))
    case "over":
      // A whole answer over the provider's configured max_response_bytes (not the default 16 MiB).
      return jsonInPieces(OVER_TEXT)
    case "huge":
      return call.stream ? stream(streamFrames(call, split(HUGE_TEXT, 65_536), undefined, undefined)) : jsonInPieces(HUGE_TEXT)
    case "tiny":
      return call.stream ? stream(streamFrames(call, Array.from({ length: TINY_EVENTS }, () => "t"), undefined, undefined)) : json(wholeAnswer(call, "t".repeat(TINY_EVENTS), undefined, undefined))
    case "slow": {
      // A slowloris upstream: the answer a few bytes at a time, each write SLOW_GAP_MS apart.
      const bytes = Buffer.concat(streamFrames(call, ["slow ", "answer"], undefined, undefined).map((frame) => Buffer.from(frame)))
      const size = Math.ceil(bytes.length / SLOW_PIECES)
      const pieces = Array.from({ length: Math.ceil(bytes.length / size) }, (_, i) => bytes.subarray(i * size, (i + 1) * size))
      if (call.stream) return stream(pieces, SLOW_GAP_MS)
      const text = wholeAnswer(call, "slow answer", undefined, undefined)
      res.writeHead(200, { "content-type": "application/json", "content-length": String(Buffer.byteLength(text)) })
      for (const piece of split(text, Math.ceil(text.length / SLOW_PIECES))) {
        if (res.destroyed) return
        res.write(piece)
        await sleep(SLOW_GAP_MS)
      }
      return res.end()
    }
    case "claim": {
      // A length of 4 GiB claimed, then more than any bound the gateway sets for a whole answer.
      if (call.shape === "bedrock" && call.stream) {
        res.writeHead(200, { "content-type": contentType(call) })
        const prelude = Buffer.alloc(12)
        prelude.writeUInt32BE(0xffff_fff0, 0)
        prelude.writeUInt32BE(0, 4)
        res.write(prelude)
        res.write(Buffer.alloc(1 * MiB, 0x61))
        return res.end()
      }
      res.writeHead(200, { "content-type": call.stream ? contentType(call) : "application/json", "content-length": String(4 * 1024 * MiB) })
      // A whole answer is cut at max_response_bytes (16 MiB); a stream has no such bound (it is
      // relayed as it comes), so 4 MiB of it show that the claim is not believed.
      const block = call.stream ? Buffer.from(sse(`{"x":"${"c".repeat(65_000)}"}`)) : Buffer.from(`{"x":"${"c".repeat(MiB)}`)
      for (let sent = 0; sent < (call.stream ? 4 : 17) * MiB && !res.destroyed; sent += block.length) {
        if (!res.write(block)) await drained(res)
      }
      res.destroy()
      return
    }
    case "deep":
      return call.stream ? stream(streamFrames(call, ["deep"], undefined, deepJson)) : json(wholeAnswer(call, "deep", undefined, deepJson))
    case "bigtool":
      return call.stream ? stream(streamFrames(call, ["calling"], split(BIG_ARGS, 65_536), undefined)) : json(wholeAnswer(call, "calling", BIG_ARGS, undefined))
    case "deeptool":
      return call.stream ? stream(streamFrames(call, ["calling"], split(DEEP_ARGS, 65_536), undefined)) : json(wholeAnswer(call, "calling", DEEP_ARGS, undefined))
  }
}

let upstream: http.Server
let upstreamUrl: string

const startUpstream = async () => {
  upstream = http.createServer((req, res) => {
    res.on("error", () => {})
    req.on("error", () => {})
    const chunks: Array<Buffer> = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", () => {
      const path = (req.url ?? "/").split("?")[0]!
      if (path === "/vertex/token") {
        const text = JSON.stringify({ access_token: "ya29.hostile", expires_in: 3600, token_type: "Bearer" })
        res.writeHead(200, { "content-type": "application/json", "content-length": String(text.length) })
        return res.end(text)
      }
      const call = shapeOf(path, Buffer.concat(chunks).toString("utf8"))
      if (call === undefined) {
        res.writeHead(404, { "content-type": "application/json" })
        return res.end(JSON.stringify({ error: { message: `no route ${path}` } }))
      }
      respond(call, res).catch(() => res.destroy())
    })
  })
  await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve))
  upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`
}

// ---------------------------------------------------------------------------------------------
// The gateway: one provider of each kind, each in front of the hostile upstream.

export type Kind = "openai" | "azure" | "anthropic" | "bedrock" | "gemini" | "vertex" | "echo"
export const KINDS: ReadonlyArray<Kind> = ["openai", "azure", "anthropic", "bedrock", "gemini", "vertex", "echo"]
/** The chat and embeddings model of each kind (echo's are the built-in `echo`). */
const CHAT: Record<Kind, string> = { openai: "c-openai", azure: "c-azure", anthropic: "c-anthropic", bedrock: "c-bedrock", gemini: "c-gemini", vertex: "c-vertex", echo: "echo" }
const EMBED: Record<Kind, string> = { openai: "e-openai", azure: "e-azure", anthropic: "c-anthropic", bedrock: "e-bedrock", gemini: "e-gemini", vertex: "e-vertex", echo: "echo" }

let gateway: TestGateway
let key: string
let storedItem: string
let tokenizerLoad: Measured | undefined

const gatewayConfig = () => {
  const dir = mkdtempSync(join(tmpdir(), "amplification-"))
  const credentials = join(dir, "sa.json")
  const { privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 })
  writeFileSync(credentials, JSON.stringify({
    type: "service_account",
    project_id: "gateway-test-1",
    client_email: "gw@p.iam.gserviceaccount.com",
    private_key: privateKey.export({ type: "pkcs8", format: "pem" }).toString(),
    token_uri: `${upstreamUrl}/vertex/token`
  }))
  // Short waits so a hostile upstream that stops ends its request within the test's time.
  // responses.max_conversation_bytes is 8 MiB rather than the default 32 MiB to keep the file's
  // time small: what a request reads back is linear in it (at 32 MiB, 36 references to one
  // 900 KB item blocked the loop 112-174 ms of CPU per kind, inside the bound).
  const timeouts = { connect_ms: 2_000, first_byte_ms: 5_000, idle_ms: 3_000 }
  const bounds = { timeouts, max_response_bytes: MAX_RESPONSE_BYTES }
  return testConfig({
    workspace: { credits: 1_000_000_000 },
    limits: { requests_per_minute: 1_000_000, concurrent_streams: 100 },
    routing: { retries: 0, cooldown_seconds: 0 },
    responses: { max_conversation_bytes: CONVERSATION_BUDGET },
    moderations: { provider: "h-openai" },
    providers: [
      { name: "h-openai", kind: "openai", base_url: `${upstreamUrl}/openai/v1`, api_key: "sk-hostile", ...bounds },
      { name: "h-azure", kind: "azure", base_url: `${upstreamUrl}/azure`, api_key: "az-hostile", api_version: "2025-04-01-preview", ...bounds },
      { name: "h-anthropic", kind: "anthropic", base_url: `${upstreamUrl}/anthropic`, api_key: "sk-ant-hostile", ...bounds },
      { name: "h-bedrock", kind: "bedrock", region: "us-east-1", base_url: `${upstreamUrl}/bedrock`, access_key_id: "AKIAHOSTILE000000000", secret_access_key: "hostile/secret/000000000000000000000000", ...bounds },
      { name: "h-gemini", kind: "gemini", base_url: `${upstreamUrl}/gemini`, api_key: "g-hostile", ...bounds },
      { name: "h-vertex", kind: "vertex", base_url: `${upstreamUrl}/vertex`, project: "gateway-test-1", location: "us-central1", credentials_file: credentials, ...bounds }
    ],
    models: [
      { alias: "c-openai", id: "gpt-4.1", provider: "h-openai", max_tokens: 1000 },
      { alias: "c-azure", id: "gpt-4.1-deployment", provider: "h-azure", max_tokens: 1000 },
      { alias: "c-anthropic", id: "claude-sonnet-4-5", provider: "h-anthropic", max_tokens: 1000 },
      { alias: "c-bedrock", id: "us.anthropic.claude-sonnet-4-5-20250929-v1:0", provider: "h-bedrock", max_tokens: 1000 },
      { alias: "c-gemini", id: "gemini-2.5-pro", provider: "h-gemini", max_tokens: 1000 },
      { alias: "c-vertex", id: "gemini-2.5-flash", provider: "h-vertex", max_tokens: 1000 },
      { alias: "e-openai", id: "text-embedding-3-small", provider: "h-openai", endpoints: ["embeddings"] },
      { alias: "e-azure", id: "embedding-deployment", provider: "h-azure", endpoints: ["embeddings"] },
      { alias: "e-bedrock", id: "amazon.titan-embed-text-v2:0", provider: "h-bedrock", endpoints: ["embeddings"] },
      { alias: "e-gemini", id: "gemini-embedding-001", provider: "h-gemini", endpoints: ["embeddings"] },
      { alias: "e-vertex", id: "text-embedding-005", provider: "h-vertex", endpoints: ["embeddings"] },
      { alias: "echo", id: "echo-1", provider: "echo", credits: 0, max_tokens: 4096, endpoints: ["chat", "embeddings"] }
    ]
  })
}

// ---------------------------------------------------------------------------------------------
// Measuring one request.

interface Answer {
  readonly status: number
  readonly text: string
}

const post = async (path: string, body: unknown, headers: Record<string, string> = {}): Promise<Answer> => {
  const response = await fetch(gateway.url + path, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "anthropic-version": "2023-06-01", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body)
  })
  return { status: response.status, text: await response.text() }
}

interface Measured extends Answer {
  /**
   * The longest the event loop was away, in CPU time of this thread (process.threadCpuUsage
   * between two turns of a 1 ms timer): what one piece of synchronous work costs, whatever else
   * the machine runs. This is what is asserted: on a loaded two-core machine the wall-clock
   * delay below is mostly time the process waited for a core (it read 400-800 ms for a plain
   * 1 MiB passthrough at a load of 14), which says nothing about the gateway.
   */
  readonly blockedMs: number
  /** The longest the event loop was blocked in wall-clock time (monitorEventLoopDelay). */
  readonly loopMs: number
  /** The slowest `/healthz` answer meanwhile. */
  readonly healthzMs: number
  /** The highest heap seen meanwhile, above where the row started (collected). */
  readonly heapPeakMiB: number
  readonly wallMs: number
}

const threadCpuMs = () => {
  const { user, system } = process.threadCpuUsage()
  return (user + system) / 1000
}

/** The heap after a collection when the row started. */
let baseline = 0
/**
 * The heap right after the last row's closing collection, until the next row takes it as its
 * start. A forced collection is a full one, 60-120 ms of CPU here (51 of them were a third of
 * one part's CPU): the row that follows another starts from the heap that row's end collected.
 * Whatever is allocated in between (the runner's bookkeeping, a test's setup before its row
 * starts) is then counted against the next row, never for it. A row that ended early (an
 * assertion threw) leaves none, and the next row collects for itself.
 */
let collectedAfterRow: number | undefined

/** A row starts from a collected heap... */
const startRow = () => {
  const collected = collectedAfterRow
  collectedAfterRow = undefined
  if (collected !== undefined) {
    baseline = collected
    return
  }
  gc()
  baseline = process.memoryUsage().heapUsed
}

/**
 * ...and after its requests, collected again, has not grown past the bound: one collection
 * per row rather than per request keeps the file's time small, and a row's growth bounds each
 * of its requests' too.
 */
const endRow = (row: string) => {
  gc()
  const used = process.memoryUsage().heapUsed
  const growth = (used - baseline) / MiB
  rowGrowth.push({ row, heapGrowthMiB: round(growth) })
  expect.soft(growth, `${row}: heap growth after its requests (MiB)`).toBeLessThan(HEAP_BOUND_MIB)
  collectedAfterRow = used
}
const rowGrowth: Array<{ row: string; heapGrowthMiB: number }> = []

const measure = async (send: () => Promise<Answer>): Promise<Measured> => {
  const before = baseline
  let peak = before
  const histogram = monitorEventLoopDelay({ resolution: 5 })
  histogram.enable()
  let running = true
  let blockedMs = 0
  let lastCpu = threadCpuMs()
  let timer: ReturnType<typeof setTimeout> | undefined
  const tick = () => {
    const now = threadCpuMs()
    blockedMs = Math.max(blockedMs, now - lastCpu)
    lastCpu = now
    // The heap alone (what process.memoryUsage().heapUsed reads): memoryUsage() also reads the RSS
    // from /proc, 20-30 us a tick, every millisecond of every request in this file.
    peak = Math.max(peak, getHeapStatistics().used_heap_size)
    if (running) timer = setTimeout(tick, 1)
  }
  timer = setTimeout(tick, 1)
  let healthzMs = 0
  let wake = () => {}
  const probe = (async () => {
    while (running) {
      const started = performance.now()
      await (await fetch(`${gateway.url}/healthz`)).text()
      healthzMs = Math.max(healthzMs, performance.now() - started)
      // The pause ends early when the request is done, so the next measurement does not wait for it.
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 25)
        wake = () => {
          clearTimeout(timer)
          resolve()
        }
      })
    }
  })()
  const started = performance.now()
  let answer: Answer
  try {
    answer = await send()
  } finally {
    running = false
    clearTimeout(timer)
    wake()
    tick()
    histogram.disable()
    await probe
  }
  const wallMs = performance.now() - started
  const result = { ...answer, blockedMs, loopMs: histogram.max / 1e6, healthzMs, heapPeakMiB: (peak - before) / MiB, wallMs }
  if (process.env.AMPLIFY_TRACE) appendFileSync(process.env.AMPLIFY_TRACE, `${Math.round(wallMs)} ms ${answer.status} ${answer.text.length} ${answer.text.slice(0, 160).replaceAll("\n", " ")}\n`)
  return result
}

/** Every measurement, printed at the end (the numbers the issue asks to know). */
const measured: Array<{ row: string; case: string; status: number; slug: string | undefined; blockedMs: number; loopMs: number; healthzMs: number; heapPeakMiB: number; wallMs: number }> = []

const slugOf = (text: string): string | undefined => {
  try {
    const parsed = JSON.parse(text) as { error?: unknown }
    return typeof parsed.error === "string" ? parsed.error : undefined
  } catch {
    return undefined
  }
}

/**
 * The assertions every case of every row makes. `upstreamAtFault`: the upstream answered with
 * something hostile, so a 502/504 envelope is a clean answer; a client's body never earns a 5xx.
 */
const check = (row: string, name: string, result: Measured, upstreamAtFault: boolean) => {
  const slug = result.status >= 400 ? slugOf(result.text) : undefined
  if (process.env.AMPLIFY_TRACE) appendFileSync(process.env.AMPLIFY_TRACE, `  ^ ${row} / ${name}: blocked ${round(result.blockedMs)} ms cpu, ${round(result.loopMs)} ms wall, healthz ${round(result.healthzMs)} ms, heap peak +${round(result.heapPeakMiB)} MiB\n`)
  measured.push({ row, case: name, status: result.status, slug, blockedMs: round(result.blockedMs), loopMs: round(result.loopMs), healthzMs: round(result.healthzMs), heapPeakMiB: round(result.heapPeakMiB), wallMs: Math.round(result.wallMs) })
  const what = `${row} / ${name}: ${result.status} ${result.text.slice(0, 300)}`
  // Soft: a row goes on to its other cases, so one run measures them all.
  if (result.status >= 400) expect.soft(slug, what).toMatch(/^[a-z_]+$/)
  if (upstreamAtFault) expect.soft([200, 400, 413, 502, 504], what).toContain(result.status)
  else expect.soft(result.status, what).toBeLessThan(500)
  expect.soft(result.blockedMs, `${what}: event loop blocked (CPU ms)`).toBeLessThan(LOOP_BOUND_MS)
}

const round = (n: number) => Math.round(n * 10) / 10

// ---------------------------------------------------------------------------------------------
// Worst-case bodies: each fills the body limit with one kind of expansion.

/** As many copies of `item(i)` as fit in `room` bytes of JSON. */
const fill = <A>(room: number, item: (i: number) => A): Array<A> => {
  const out: Array<A> = []
  let size = 2
  for (let i = 0; ; i++) {
    const next = item(i)
    const bytes = JSON.stringify(next).length + 1
    if (size + bytes > room) return out
    out.push(next)
    size += bytes
  }
}

const ROOM = TARGET - 2_048
/** A definition with a long description, referenced by as many properties as fit. */
const refSchema = () => {
  const description = "d".repeat(60_000)
  const properties = Object.fromEntries(fill(ROOM - 61_000, (i) => [`p${i}`, { $ref: "#/$defs/big" }]))
  return { type: "object", $defs: { big: { type: "object", description, properties: { v: { type: "string", description } } } }, properties }
}
/** A schema nested as deep as the body's depth limit (64) allows inside a request. */
const deepSchema = (levels: number): Record<string, unknown> =>
  levels === 0 ? { type: "string" } : { type: "object", properties: { a: deepSchema(levels - 1) } }
const bigSchema = (i: number) => ({
  type: "object",
  description: `tool ${i} ` + "s".repeat(300),
  properties: Object.fromEntries(Array.from({ length: 8 }, (_, p) => [`f${p}`, { type: "string", description: "x".repeat(20), enum: ["a", "b", "c"] }]))
})
/** A string holding JSON nested far past the body's depth limit, which sees only the string. */
const DEEP_CLIENT_ARGS = `{"a":${"[".repeat(500_000)}${"]".repeat(500_000)}}`
const DEEP_LEVELS = 27 // each level is two JSON levels; the tool wrapping and the body add the rest under 64

const openaiTool = (name: string, parameters: unknown) => ({ type: "function", function: { name, description: "t", parameters } })
const anthropicTool = (name: string, input_schema: unknown) => ({ name, description: "t", input_schema })
const responsesTool = (name: string, parameters: unknown) => ({ type: "function", name, description: "t", parameters })

/** A worst-case body: its name, how it is built, and (when not every kind) the kinds it is sent to. */
type Bodies = ReadonlyArray<readonly [string, (model: string) => unknown, ReadonlyArray<Kind>?]>

/**
 * `$ref`s are inlined only for the kinds whose schema dialect has none (Gemini's, also on
 * Vertex); every other kind forwards a schema as it came, which the combined body's 1 MiB of
 * tool schemas already covers.
 */
const INLINING: ReadonlyArray<Kind> = ["gemini", "vertex"]

// A combined body fills the limit with several expansions at once (each a share of the room),
// so one request exercises them all; a body that one kind refuses by name (the `$ref` bomb for
// Gemini) is its own case, so the refusal does not hide the rest.
const turns = (room: number, text: (i: number) => unknown) => fill(room, (i) => ({ role: i % 2 === 0 ? "user" : "assistant", content: text(i) }))
const share = (fraction: number) => Math.floor(ROOM * fraction)

const chatBodies: Bodies = [
  ["many messages, tools, deep schemas, a long system prompt", (model) => ({
    model,
    messages: [{ role: "system", content: "y".repeat(share(0.2)) }, ...turns(share(0.35), (i) => `m${i}`)],
    tools: [...fill(share(0.25), (i) => openaiTool(`t${i}`, bigSchema(i))), ...fill(share(0.15), (i) => openaiTool(`d${i}`, deepSchema(DEEP_LEVELS)))]
  })],
  ["many $refs", (model) => ({ model, messages: [{ role: "user", content: "x" }], tools: [openaiTool("f", refSchema())] }), INLINING],
  ["tool-call arguments nested 500,000 deep", (model) => ({
    model,
    messages: [
      { role: "user", content: "x" },
      { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "f", arguments: DEEP_CLIENT_ARGS } }] },
      { role: "tool", tool_call_id: "call_1", content: "r" }
    ],
    tools: [openaiTool("f", { type: "object" })]
  })]
]

const messagesBodies: Bodies = [
  ["many messages and tool results, tools, deep schemas, many stops, a long system prompt", (model) => ({
    model,
    max_tokens: 100,
    system: [{ type: "text", text: "y".repeat(share(0.15)) }],
    stop_sequences: fill(share(0.1), (i) => `stop-${i}-` + "s".repeat(40)),
    messages: fill(share(0.3), (i) =>
      i % 2 === 0
        ? { role: "assistant", content: [{ type: "tool_use", id: `tu${i}`, name: "t0", input: { a: i } }] }
        : { role: "user", content: [{ type: "tool_result", tool_use_id: `tu${i - 1}`, content: "r" }] }),
    tools: [...fill(share(0.25), (i) => anthropicTool(`t${i}`, bigSchema(i))), ...fill(share(0.15), (i) => anthropicTool(`d${i}`, deepSchema(DEEP_LEVELS)))]
  })],
  ["many $refs", (model) => ({ model, max_tokens: 100, messages: [{ role: "user", content: "x" }], tools: [anthropicTool("f", refSchema())] }), INLINING]
]

/**
 * As many references to the ~900 KB stored item as CONVERSATION_BUDGET allows: that much stored
 * text is read back and translated for each kind.
 */
const REFERENCES_IN_BUDGET = 9
const responsesBodies: Bodies = [
  ["many items and calls, tools, deep schemas, long instructions", (model) => ({
    model,
    instructions: "y".repeat(share(0.2)),
    input: fill(share(0.35), (i) =>
      i % 3 === 0
        ? { role: "user", content: `m${i}` }
        : i % 3 === 1
        ? { type: "function_call", call_id: `c${i}`, name: "t0", arguments: "{}" }
        : { type: "function_call_output", call_id: `c${i - 1}`, output: "r" }),
    tools: [...fill(share(0.25), (i) => responsesTool(`t${i}`, bigSchema(i))), ...fill(share(0.15), (i) => responsesTool(`d${i}`, deepSchema(DEEP_LEVELS)))]
  })],
  ["many $refs", (model) => ({ model, input: "x", tools: [responsesTool("f", refSchema())] }), INLINING],
  ["tool-call arguments nested 500,000 deep", (model) => ({
    model,
    input: [
      { role: "user", content: "x" },
      { type: "function_call", call_id: "call_1", name: "f", arguments: DEEP_CLIENT_ARGS },
      { type: "function_call_output", call_id: "call_1", output: "r" }
    ],
    tools: [responsesTool("f", { type: "object" })]
  })],
  ["stored references up to the conversation budget", (model) => ({
    model,
    store: false,
    input: [...Array.from({ length: REFERENCES_IN_BUDGET }, () => ({ type: "item_reference", id: storedItem })), { role: "user", content: "and?" }]
  })],
  ["stored references far past the budget", (model) => ({ model, input: [...fill(ROOM, () => ({ type: "item_reference", id: storedItem })), { role: "user", content: "and?" }] })]
]

const embeddingsBodies: Bodies = [
  ["the most inputs, long ones", (model) => ({ model, input: Array.from({ length: 2_048 }, (_, i) => `input ${i} ` + "e".repeat(480)) })]
]

const countBodies: Bodies = [
  ["many messages, tools, a long CJK text", (model) => ({
    model,
    messages: [{ role: "user", content: "\u4e00".repeat(share(0.1)) }, ...turns(share(0.4), (i) => [{ type: "text", text: `m${i}` }])],
    tools: fill(share(0.4), (i) => anthropicTool(`t${i}`, bigSchema(i)))
  })],
  ["many $refs", (model) => ({ model, messages: [{ role: "user", content: "x" }], tools: [anthropicTool("f", refSchema())] }), INLINING]
]

const completionsBodies: Bodies = [
  ["many prompts and a long one", (model) => ({ model, prompt: [...fill(share(0.5), (i) => `p${i}`), "p ".repeat(share(0.2))] })]
]

const moderationsBodies: Bodies = [
  ["many inputs and a long one", () => ({ input: [...fill(share(0.5), (i) => `input ${i}`), "m ".repeat(share(0.2))] })]
]

// ---------------------------------------------------------------------------------------------
// The table. A row per surface x kind; a new surface or kind is added here when it is built.

/** A hostile answer, asked for with or without `stream`. */
type HostileCase = readonly [Hostile, boolean]

interface Surface {
  readonly path: string
  readonly kinds: ReadonlyArray<Kind>
  readonly model: (kind: Kind) => string
  readonly bodies: Bodies
  /** The small body a hostile answer is asked with. */
  readonly small: (model: string, stream: boolean) => unknown
  /**
   * The hostile answers this surface is asked to relay. The upstream's own parsers (SSE, AWS
   * event stream, a whole answer's bound) are per kind and do not depend on the surface, so the
   * slowloris stream and the length claims run on the chat surface only; what a surface builds
   * for its client (huge, tiny events, deep, a huge tool call) runs on every surface.
   */
  readonly hostile: ReadonlyArray<HostileCase>
}

const RELAYED: ReadonlyArray<HostileCase> = [["huge", false], ["deep", false], ["bigtool", false], ["deeptool", false], ["tiny", true], ["bigtool", true]]
const WHOLE: ReadonlyArray<HostileCase> = [["huge", false], ["deep", false]]

const SURFACES: ReadonlyArray<Surface> = [
  {
    path: "/v1/chat/completions",
    kinds: KINDS,
    model: (kind) => CHAT[kind],
    bodies: chatBodies,
    small: (model, stream) => ({ model, messages: [{ role: "user", content: "hi" }], stream }),
    hostile: [...RELAYED, ["deep", true], ["deeptool", true], ["slow", true], ["claim", false], ["claim", true], ["over", false]]
  },
  {
    path: "/v1/messages",
    kinds: KINDS,
    model: (kind) => CHAT[kind],
    bodies: messagesBodies,
    small: (model, stream) => ({ model, max_tokens: 100, messages: [{ role: "user", content: "hi" }], stream }),
    hostile: RELAYED
  },
  {
    path: "/v1/responses",
    kinds: KINDS,
    model: (kind) => CHAT[kind],
    bodies: responsesBodies,
    small: (model, stream) => ({ model, input: "hi", stream, store: false }),
    hostile: RELAYED
  },
  {
    path: "/v1/embeddings",
    kinds: KINDS,
    model: (kind) => EMBED[kind],
    bodies: embeddingsBodies,
    small: (model) => ({ model, input: "hi" }),
    hostile: WHOLE
  },
  {
    path: "/v1/messages/count_tokens",
    kinds: KINDS,
    model: (kind) => CHAT[kind],
    bodies: countBodies,
    small: (model) => ({ model, messages: [{ role: "user", content: "hi" }] }),
    hostile: WHOLE
  },
  {
    path: "/v1/completions",
    kinds: KINDS,
    model: (kind) => CHAT[kind],
    bodies: completionsBodies,
    small: (model, stream) => ({ model, prompt: "hi", stream }),
    hostile: [["huge", false], ["tiny", true]]
  },
  // Moderations go to the one provider `moderations.provider` names, whatever the model: one row.
  {
    path: "/v1/moderations",
    kinds: ["openai"],
    model: () => "omni-moderation-latest",
    bodies: moderationsBodies,
    small: () => ({ input: "hi" }),
    hostile: WHOLE
  }
]

/**
 * Rows that fail today, with what was measured: each runs as `it.fails` until fixed. Keep the
 * numbers and the reason; remove the entry with the fix.
 */
const TODO: Record<string, string> = {}

/** Bodies are built once per surface for a placeholder model, then given each row's model. */
const built = new Map<string, string>()
const PLACEHOLDER = "MODEL-PLACEHOLDER"
const bodyFor = (surface: Surface, name: string, build: (model: string) => unknown, model: string) => {
  const key = `${surface.path} ${name}`
  let text = built.get(key)
  if (text === undefined) {
    text = JSON.stringify(build(PLACEHOLDER))
    built.set(key, text)
  }
  return text.replace(`"model":"${PLACEHOLDER}"`, `"model":${JSON.stringify(model)}`)
}

const rowName = (surface: string, kind: string) => `${surface} x ${kind}`

/** A part of the table: the rows of these provider kinds, and MCP's and the admin API's or not. */
export interface AmplificationPart {
  readonly kinds: ReadonlyArray<Kind>
  readonly mcpAndAdmin: boolean
}

/** The table's parts, one per test file; together every kind once (checked when this module loads). */
export const PARTS: readonly [AmplificationPart, AmplificationPart] = [
  { kinds: ["openai", "azure", "anthropic", "echo"], mcpAndAdmin: false },
  { kinds: ["bedrock", "gemini", "vertex"], mcpAndAdmin: true }
]
{
  const covered = PARTS.flatMap((part) => part.kinds)
  const missing = KINDS.filter((kind) => covered.filter((k) => k === kind).length !== 1)
  if (missing.length > 0) throw new Error(`amplification.ts: PARTS must hold each of KINDS once; not so for ${missing.join(", ")}`)
}

/** Registers one part of the table in the calling test file, with its own upstream and gateway. */
export const defineAmplification = (part: AmplificationPart) => {
  beforeAll(async () => {
    // Module state, reused by the next file of the same worker: start from nothing.
    measured.length = 0
    rowGrowth.length = 0
    collectedAfterRow = undefined
    answer = "ok"
    await startUpstream()
    gateway = await startGateway(gatewayConfig())
    key = (await gateway.createKey()).key
    // A stored item of about 900 KB for the Responses rows to reference many times.
    const stored = await post("/v1/responses", { model: "echo", input: [{ type: "message", role: "user", content: [{ type: "input_text", text: "s".repeat(900_000) }] }] })
    expect(stored.status).toBe(200)
    const id = (JSON.parse(stored.text) as { id: string }).id
    const items = await fetch(`${gateway.url}/v1/responses/${id}/input_items`, { headers: { authorization: `Bearer ${key}` } })
    storedItem = ((await items.json()) as { data: Array<{ id: string }> }).data[0]!.id
    // The first estimate starts the tokenizer's thread (README, count_tokens), which loads the
    // encoding there (compiling o200k_base's ranks held this loop 140-300 ms when it was loaded
    // here): it is bound like any request. Printed with the results.
    startRow()
    tokenizerLoad = await measure(() => post("/v1/messages/count_tokens", { model: "echo", messages: [{ role: "user", content: "warm" }] }))
    expect(tokenizerLoad.status).toBe(200)
    expect(tokenizerLoad.blockedMs, "the first estimate: event loop blocked (CPU ms)").toBeLessThan(LOOP_BOUND_MS)
  }, 60_000)

  afterAll(async () => {
    await gateway?.close()
    await new Promise<void>((resolve) => {
      upstream?.close(() => resolve())
      upstream?.closeAllConnections()
    })
  })

  describe(`one expansion budget: every surface x ${part.kinds.join(", ")}, worst-case body and hostile upstream`, () => {
    for (const surface of SURFACES) {
      for (const kind of surface.kinds.filter((k) => part.kinds.includes(k))) {
        const row = rowName(surface.path, kind)
        const test = TODO[row] === undefined ? it : it.fails
        test(row, { timeout: 60_000 }, async () => {
          const model = surface.model(kind)
          answer = "ok"
          startRow()
          for (const [name, build, only] of surface.bodies) {
            if (only !== undefined && !only.includes(kind)) continue
            const body = bodyFor(surface, name, build, model)
            expect(body.length, `${row} / ${name}: the body is built under the limit`).toBeLessThan(BODY_LIMIT)
            check(row, name, await measure(() => post(surface.path, body)), false)
          }
          // Echo has no upstream to be hostile.
          for (const [hostile, stream] of kind === "echo" ? [] : surface.hostile) {
            answer = hostile
            const body = JSON.stringify(surface.small(model, stream))
            const result = await measure(() => post(surface.path, body))
            check(row, `upstream ${hostile}${stream ? " (stream)" : ""}`, result, true)
            if (hostile === "over") expect.soft(`${result.status} ${slugOf(result.text)}`, `${row}: an answer over max_response_bytes`).toBe("502 provider_error")
          }
          answer = "ok"
          endRow(row)
        })
      }
    }
  })

  // ---------------------------------------------------------------------------------------------
  // MCP and the admin API: the same bounds, their own worst cases.

  // In one part only (no skipped tests counted in the other).
  if (part.mcpAndAdmin) describe("one expansion budget: MCP and the admin API", () => {
    it("/v1/mcp: a 1 MiB statement, 1 MiB of arguments, deep arguments", async () => {
      const created = await gateway.admin("POST", "/api-keys", { name: "mcp", tools_enabled: true, connections: [] })
      expect(created.status).toBe(201)
      const toolsKey = ((await created.json()) as { key: string }).key
      const base = { authorization: `Bearer ${toolsKey}`, accept: "application/json, text/event-stream" }
      const init = await fetch(`${gateway.url}/v1/mcp`, {
        method: "POST",
        headers: { ...base, "content-type": "application/json" },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "amplify", version: "1" } } })
      })
      expect(init.status).toBe(200)
      await init.text()
      const headers = { ...base, "mcp-session-id": init.headers.get("mcp-session-id")!, "mcp-protocol-version": "2025-06-18" }
      const cases: ReadonlyArray<readonly [string, unknown]> = [
        ["one long statement", { jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "sql_run", arguments: { connection_id: 1, sql: "select " + "1+".repeat(ROOM / 2) + "1" } } }],
        ["many arguments", { jsonrpc: "2.0", id: 3, method: "tools/call", params: { name: "sql_run", arguments: { connection_id: 1, sql: "select 1", params: fill(ROOM, (i) => `p${i}`) } } }],
        ["deep arguments", { jsonrpc: "2.0", id: 4, method: "tools/call", params: { name: "sql_run", arguments: { connection_id: 1, sql: "select 1", x: deepSchema(DEEP_LEVELS), pad: "p".repeat(ROOM - 4_096) } } }],
        ["a long tools/list", { jsonrpc: "2.0", id: 5, method: "tools/list", params: { cursor: "c".repeat(ROOM - 1_024) } }]
      ]
      startRow()
      for (const [name, body] of cases) {
        const text = JSON.stringify(body)
        expect(text.length).toBeLessThan(BODY_LIMIT)
        check("/v1/mcp", name, await measure(() => post("/v1/mcp", text, headers)), false)
      }
      endRow("/v1/mcp")
    })

    it("admin API: 1 MiB key bodies, allow-lists, grants, connection URLs", async () => {
      const admin = (method: string, path: string, body: string) => async (): Promise<Answer> => {
        const response = await gateway.admin(method, path, body)
        return { status: response.status, text: await response.text() }
      }
      const created = await gateway.admin("POST", "/api-keys", { name: "target" })
      const id = ((await created.json()) as { id: string }).id
      const manyModels = fill(ROOM - 200, (i) => `model-${i}-*`)
      const cases: ReadonlyArray<readonly [string, string, string, unknown]> = [
        ["a long name", "POST", "/api-keys", { name: "n".repeat(ROOM) }],
        ["many grants", "POST", "/api-keys", { name: "g", tools_enabled: true, connections: fill(ROOM, (i) => ({ connection_id: i + 1, role: "read" })) }],
        ["an allow-list of 1 MiB", "POST", "/api-keys", { name: "m", allowed_models: [...manyModels, "echo"] }],
        ["an allow-list of 1 MiB, changed", "PATCH", `/api-keys/${id}`, { allowed_models: [...manyModels, "echo"] }],
        ["deep nesting", "PATCH", `/api-keys/${id}`, { name: "d", limits: deepSchema(DEEP_LEVELS), pad: "p".repeat(ROOM - 4_096) }],
        ["a long connection URL", "POST", "/connections", { name: "c", dialect: "postgres", url: `postgres://u:p@h/${"d".repeat(ROOM)}` }]
      ]
      startRow()
      let listed: string | undefined
      for (const [name, method, path, body] of cases) {
        const text = JSON.stringify(body)
        expect(text.length).toBeLessThan(BODY_LIMIT)
        const result = await measure(admin(method, path, text))
        check("admin API", name, result, false)
        if (name === "an allow-list of 1 MiB" && result.status === 201) listed = (JSON.parse(result.text) as { key: string }).key
      }
      // What the allow-list costs every request of its key afterwards, and the key list that shows it.
      if (listed !== undefined) {
        const chat = JSON.stringify({ model: "echo", messages: [{ role: "user", content: "hi" }] })
        const byKey = async (): Promise<Answer> => {
          const response = await fetch(`${gateway.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${listed}`, "content-type": "application/json" }, body: chat })
          return { status: response.status, text: await response.text() }
        }
        check("admin API", "a request by the key with the 1 MiB allow-list", await measure(byKey), false)
        check("admin API", "the key list", await measure(async () => {
          const response = await gateway.admin("GET", "/api-keys?limit=100")
          return { status: response.status, text: await response.text() }
        }), false)
      }
      endRow("admin API")
    })
  })

  afterAll(() => {
    // The measured numbers, worst first: what the report and the README quote.
    const worst = [...measured].sort((a, b) => b.blockedMs - a.blockedMs).slice(0, 15)
    const peak = [...measured].sort((a, b) => b.heapPeakMiB - a.heapPeakMiB).slice(0, 5)
    console.log(`amplification: the tokenizer's first load blocked ${round(tokenizerLoad?.blockedMs ?? 0)} ms cpu, ${round(tokenizerLoad?.loopMs ?? 0)} ms wall; ${measured.length} requests; worst loop delays:\n${worst.map((m) => `  ${m.blockedMs} ms cpu, ${m.loopMs} ms wall (healthz ${m.healthzMs} ms, heap +${m.heapPeakMiB} MiB peak) ${m.status}${m.slug ? ` ${m.slug}` : ""} ${m.row} / ${m.case}`).join("\n")}\nhighest heap peaks:\n${peak.map((m) => `  +${m.heapPeakMiB} MiB ${m.row} / ${m.case}`).join("\n")}\nlargest heap growth of a row: ${[...rowGrowth].sort((a, b) => b.heapGrowthMiB - a.heapGrowthMiB).slice(0, 3).map((r) => `+${r.heapGrowthMiB} MiB ${r.row}`).join(", ")}`)
  })
}
