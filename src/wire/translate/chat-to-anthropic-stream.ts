/**
 * OpenAI chat chunks in, Anthropic stream events out (docs/wire-translation.md 3.9B).
 *
 * Anthropic content blocks are sequential and cannot be reopened, while OpenAI-compatible
 * upstreams may interleave fragments of parallel tool calls. So one block is open at a time and
 * streams live; anything that starts while the open tool call's arguments are still incomplete
 * JSON waits in `pending` (in arrival order) and is emitted, buffered content first, as soon as
 * the open call's arguments parse. OpenAI's own sequential tool calls, and providers that send a
 * whole call per chunk (Gemini, Ollama, xAI), therefore stream without delay; only real
 * interleaving is buffered.
 *
 * Other rules: `message_start` comes first; arguments arriving with the tool name are sent at
 * once; blank deltas and `tool_calls: []` are ignored; whitespace-only text never opens a block
 * on its own (Anthropic rejects such blocks when replayed); a stop with tool calls is `tool_use`;
 * the stop is held until the usage chunk when usage was requested; exactly one `message_delta`
 * and `message_stop` are sent, and nothing after them. Reasoning deltas (`reasoning_content`)
 * are dropped: without an Anthropic signature a thinking block could not be replayed.
 */
import type { AnthropicStopReason, AnthropicStreamEvent } from "../anthropic-messages.ts"
import { anthropicToolId, newMessageId, newToolUseId } from "../ids.ts"
import type { ChatChunk, ChatDelta, ChatToolCallDelta } from "../openai-chat.ts"
import { stopReasonFromFinishReason, stopReasonWithTools } from "./reasons.ts"
import { matchedStopSequence } from "./responses.ts"
import { type AuditUsage, auditUsageFromChat, emptyAuditUsage } from "./usage.ts"
import { parseJsonWithin } from "../json-depth.ts"

export interface ChatToAnthropicStreamOptions {
  /** Model name reported to the client. */
  readonly model: string
  /** Message id; a fresh `msg_` id by default. */
  readonly id?: string
  /**
   * The upstream was asked for `stream_options.include_usage`, so a usage chunk should follow the
   * finish reason: hold `message_delta` until it comes (or the stream ends). Default true.
   */
  readonly awaitUsage?: boolean
  /**
   * Input tokens to announce in `message_start` (the count_tokens estimate of the request): the
   * upstream counts them only at the end, and clients that size their context from
   * `message_start` (Claude Code's `/context`) would otherwise see 0. `message_delta` carries
   * the upstream's own count, which corrects it.
   */
  readonly estimatedInputTokens?: number
}

type Open =
  | { readonly kind: "text"; readonly index: number }
  | { readonly kind: "tool"; readonly index: number; readonly toolIndex: number; args: string }

type Pending =
  | { readonly kind: "text"; text: string }
  | { readonly kind: "tool"; readonly toolIndex: number; readonly id: string; name: string | undefined; args: string }

type ToolState = "open" | "pending" | "closed"

export class ChatToAnthropicStream {
  readonly #model: string
  readonly #id: string
  readonly #awaitUsage: boolean
  readonly #estimatedInput: number
  #started = false
  #done = false
  #nextIndex = 0
  #open: Open | undefined
  readonly #pending: Array<Pending> = []
  readonly #tools = new Map<number, ToolState>()
  #lastToolIndex = -1
  #blankText = ""
  #sawToolUse = false
  #finishSeen = false
  #finishReason: string | null = null
  #matchedStop: string | null = null
  #usage: AuditUsage = emptyAuditUsage
  #usageSeen = false

  constructor(options: ChatToAnthropicStreamOptions) {
    this.#model = options.model
    this.#id = options.id ?? newMessageId()
    this.#awaitUsage = options.awaitUsage ?? true
    this.#estimatedInput = options.estimatedInputTokens ?? 0
  }

  push(chunk: ChatChunk): Array<AnthropicStreamEvent> {
    if (this.#done) return []
    const out: Array<AnthropicStreamEvent> = []
    this.#start(out)
    for (const choice of chunk.choices ?? []) {
      if (choice.index !== undefined && choice.index !== 0) continue
      if (this.#finishSeen) continue
      this.#delta(choice.delta ?? {}, out)
      if (choice.finish_reason != null) {
        this.#finishSeen = true
        this.#finishReason = choice.finish_reason
        this.#matchedStop = matchedStopSequence(choice.finish_reason, choice.stop_reason)
        this.#closeAll(out)
      }
    }
    if (chunk.usage != null) {
      this.#usage = auditUsageFromChat(chunk.usage)
      this.#usageSeen = true
    }
    if (this.#finishSeen && (this.#usageSeen || !this.#awaitUsage)) this.#finishMessage(out)
    return out
  }

  /** The upstream ended ([DONE] or EOF): close whatever is open and finish the message. */
  end(): Array<AnthropicStreamEvent> {
    if (this.#done) return []
    const out: Array<AnthropicStreamEvent> = []
    this.#start(out)
    this.#closeAll(out)
    this.#finishMessage(out)
    return out
  }

  usage(): AuditUsage {
    return this.#usage
  }

  #start(out: Array<AnthropicStreamEvent>): void {
    if (this.#started) return
    this.#started = true
    out.push({
      type: "message_start",
      message: {
        id: this.#id,
        type: "message",
        role: "assistant",
        model: this.#model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        // The real counts only arrive with the last chunk; message_delta carries them.
        usage: { input_tokens: this.#estimatedInput, output_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 }
      }
    })
  }

  #delta(delta: ChatDelta, out: Array<AnthropicStreamEvent>): void {
    if (typeof delta.content === "string" && delta.content !== "") this.#text(delta.content, out)
    if (typeof delta.refusal === "string" && delta.refusal !== "") this.#text(delta.refusal, out)
    for (const call of delta.tool_calls ?? []) this.#toolFragment(call, out)
    this.#drain(out)
  }

  #text(text: string, out: Array<AnthropicStreamEvent>): void {
    if (this.#open?.kind === "text" && this.#pending.length === 0) {
      out.push({ type: "content_block_delta", index: this.#open.index, delta: { type: "text_delta", text } })
      return
    }
    if (text.trim() === "") {
      this.#blankText += text
      return
    }
    const full = this.#blankText + text
    this.#blankText = ""
    if (this.#canSwitch()) {
      this.#closeOpen(out)
      this.#openText(full, out)
      return
    }
    const last = this.#pending.at(-1)
    if (last?.kind === "text") last.text += full
    else this.#pending.push({ kind: "text", text: full })
  }

  #toolFragment(call: ChatToolCallDelta, out: Array<AnthropicStreamEvent>): void {
    const toolIndex = this.#toolIndexOf(call)
    const args = call.function?.arguments ?? ""
    const name = call.function?.name ?? undefined
    switch (this.#tools.get(toolIndex)) {
      case undefined: {
        const id = call.id ? anthropicToolId(call.id) : newToolUseId()
        this.#blankText = ""
        if (name !== undefined && name !== "" && this.#canSwitch()) {
          this.#closeOpen(out)
          this.#openTool(toolIndex, id, name, args, out)
        } else {
          this.#pending.push({ kind: "tool", toolIndex, id, name: name === "" ? undefined : name, args })
          this.#tools.set(toolIndex, "pending")
        }
        return
      }
      case "open": {
        const open = this.#open
        if (open?.kind !== "tool" || args === "") return
        open.args += args
        out.push({ type: "content_block_delta", index: open.index, delta: { type: "input_json_delta", partial_json: args } })
        return
      }
      case "pending": {
        const pending = this.#pending.find((item) => item.kind === "tool" && item.toolIndex === toolIndex)
        if (pending?.kind !== "tool") return
        pending.args += args
        if (pending.name === undefined && name !== undefined && name !== "") pending.name = name
        return
      }
      case "closed":
        // Its arguments already parsed as complete JSON; only whitespace can legally follow.
        return
    }
  }

  /** Providers that omit `index` send one call at a time: an id starts the next call. */
  #toolIndexOf(call: ChatToolCallDelta): number {
    if (typeof call.index === "number") {
      this.#lastToolIndex = call.index
      return call.index
    }
    if (call.id || this.#lastToolIndex < 0) {
      this.#lastToolIndex = Math.max(-1, ...this.#tools.keys()) + 1
    }
    return this.#lastToolIndex
  }

  /** A new block may start now only if nothing is waiting and the open block is complete. */
  #canSwitch(): boolean {
    return this.#pending.length === 0 && (this.#open === undefined || isComplete(this.#open))
  }

  #drain(out: Array<AnthropicStreamEvent>): void {
    while (this.#pending.length > 0 && (this.#open === undefined || isComplete(this.#open))) {
      const next = this.#pending[0]
      if (next === undefined || (next.kind === "tool" && next.name === undefined)) return
      this.#pending.shift()
      this.#closeOpen(out)
      this.#openPending(next, out)
    }
  }

  #openPending(item: Pending, out: Array<AnthropicStreamEvent>): void {
    if (item.kind === "text") this.#openText(item.text, out)
    else if (item.name !== undefined) this.#openTool(item.toolIndex, item.id, item.name, item.args, out)
    else this.#tools.set(item.toolIndex, "closed")
  }

  #openText(text: string, out: Array<AnthropicStreamEvent>): void {
    const index = this.#nextIndex++
    out.push({ type: "content_block_start", index, content_block: { type: "text", text: "" } })
    out.push({ type: "content_block_delta", index, delta: { type: "text_delta", text } })
    this.#open = { kind: "text", index }
  }

  #openTool(toolIndex: number, id: string, name: string, args: string, out: Array<AnthropicStreamEvent>): void {
    const index = this.#nextIndex++
    this.#sawToolUse = true
    this.#tools.set(toolIndex, "open")
    out.push({ type: "content_block_start", index, content_block: { type: "tool_use", id, name, input: {} } })
    if (args !== "") {
      out.push({ type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: args } })
    }
    this.#open = { kind: "tool", index, toolIndex, args }
  }

  #closeOpen(out: Array<AnthropicStreamEvent>): void {
    const open = this.#open
    if (open === undefined) return
    out.push({ type: "content_block_stop", index: open.index })
    if (open.kind === "tool") this.#tools.set(open.toolIndex, "closed")
    this.#open = undefined
  }

  /** At the finish everything left is complete as it will ever be: emit it in order. */
  #closeAll(out: Array<AnthropicStreamEvent>): void {
    this.#closeOpen(out)
    while (this.#pending.length > 0) {
      const next = this.#pending.shift()
      if (next === undefined) break
      this.#openPending(next, out)
      this.#closeOpen(out)
    }
    this.#blankText = ""
  }

  #finishMessage(out: Array<AnthropicStreamEvent>): void {
    this.#done = true
    const stopReason: AnthropicStopReason = this.#matchedStop !== null && !this.#sawToolUse
      ? "stop_sequence"
      : stopReasonWithTools(stopReasonFromFinishReason(this.#finishReason), this.#sawToolUse)
    out.push({
      type: "message_delta",
      delta: { stop_reason: stopReason, stop_sequence: stopReason === "stop_sequence" ? this.#matchedStop : null },
      usage: {
        // An upstream that never reported usage leaves the estimate standing rather than a 0.
        input_tokens: this.#usageSeen ? this.#usage.input_tokens : this.#estimatedInput,
        output_tokens: this.#usage.output_tokens,
        cache_creation_input_tokens: this.#usage.cache_write_tokens,
        cache_read_input_tokens: this.#usage.cache_read_tokens
      }
    })
    out.push({ type: "message_stop" })
  }
}

/** Text can always end; a tool call is done once its arguments parse. */
const isComplete = (open: Open): boolean => {
  if (open.kind === "text") return true
  const args = open.args.trimEnd()
  if (!args.endsWith("}")) return false
  try {
    parseJsonWithin(args)
    return true
  } catch {
    return false
  }
}
