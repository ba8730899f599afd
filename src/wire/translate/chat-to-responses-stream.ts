/**
 * OpenAI chat chunks in, OpenAI Responses stream events out.
 *
 * The sequence is the one OpenAI's own `/responses` sends: `response.created` and
 * `response.in_progress` first; each output item opened with `response.output_item.added` and
 * closed with `response.output_item.done`; a message's text inside a content part
 * (`content_part.added`, `output_text.delta`..., `output_text.done`, `content_part.done`); a
 * function call's arguments as `function_call_arguments.delta`... then `.done`; finally
 * `response.completed` (or `response.incomplete` for a length or content-filter stop) carrying
 * the whole response with usage. Every event has the next `sequence_number`, from 0.
 *
 * Other rules:
 * - Reasoning deltas (`reasoning_content` / `reasoning`, as in `reasoningTextOf`) become a
 *   `reasoning` item with a `reasoning_text` part; refusals a `refusal` part of the message.
 * - Text and reasoning items close when another kind of output starts, so at most one of them
 *   is open. Function-call items stay open until the finish (each has its own `output_index`, so
 *   providers that interleave fragments of parallel calls need no buffering). A call whose name
 *   has not arrived yet waits, its arguments buffered, until it does; one that never gets a name
 *   is dropped, as it could not be called.
 * - Providers that omit the tool-call `index` send one call at a time: an id starts the next.
 * - The terminal event waits for the usage chunk when one is expected (`awaitUsage`), or for
 *   `end()`. Nothing follows it.
 * - `fail()` gives the in-band failure: an `error` event and `response.failed` (see
 *   responses-stream.ts), and ends the stream.
 */
import { newFunctionCallId, newFunctionCallItemId, newOutputMessageId, newReasoningItemId, newResponseId } from "../ids.ts"
import type {
  ResponsesFunctionCall,
  ResponsesOutputContent,
  ResponsesOutputItem,
  ResponsesResponse,
  ResponsesStreamEvent
} from "../openai-responses.ts"
import type { ChatChunk, ChatDelta, ChatToolCallDelta, ChatUsage } from "../openai-chat.ts"
import { type ResponsesFailure, responsesFailureEvents } from "../responses-stream.ts"
import {
  reasoningTextOf,
  type ResponsesEchoOptions,
  responseShell,
  responsesOutcome,
  responsesUsageFromChat
} from "./chat-response-to-responses.ts"
import { nowSeconds } from "./responses.ts"
import { type AuditUsage, auditUsageFromChat, emptyAuditUsage } from "./usage.ts"

/** Event shapes without their sequence number; `#emit` adds it. */
type Unnumbered<E> = E extends unknown ? Omit<E, "sequence_number"> : never
type Draft = Unnumbered<ResponsesStreamEvent>

export interface ChatToResponsesStreamOptions extends ResponsesEchoOptions {
  /**
   * The upstream was asked for `stream_options.include_usage` (the request translator always
   * asks), so a usage chunk follows the finish reason: hold the terminal event until it comes
   * (or the stream ends). Default true.
   */
  readonly awaitUsage?: boolean
}

interface MessageState {
  readonly kind: "message"
  readonly id: string
  readonly outputIndex: number
  readonly parts: Array<{ type: "output_text"; text: string } | { type: "refusal"; refusal: string }>
  open: boolean
  /** Set when the item closes: what its `output_item.done` said. */
  status?: "completed" | "incomplete"
}

interface ReasoningState {
  readonly kind: "reasoning"
  readonly id: string
  readonly outputIndex: number
  text: string
  open: boolean
  status?: "completed" | "incomplete"
}

interface CallState {
  readonly kind: "function_call"
  readonly id: string
  readonly outputIndex: number
  readonly callId: string
  readonly name: string
  args: string
  open: boolean
  status?: "completed" | "incomplete"
}

type ItemState = MessageState | ReasoningState | CallState

/** A call seen before its name. */
interface PendingCall {
  readonly callId: string
  name: string | undefined
  args: string
}

export class ChatToResponsesStream {
  readonly #options: ChatToResponsesStreamOptions
  readonly #id: string
  readonly #createdAt: number
  readonly #awaitUsage: boolean
  #sequence = 0
  #started = false
  #done = false
  readonly #items: Array<ItemState> = []
  /** The open text or reasoning item, if any. */
  #current: MessageState | ReasoningState | undefined
  /** Tool-call index -> its item, or the call waiting for a name. */
  readonly #calls = new Map<number, CallState | PendingCall>()
  #lastToolIndex = -1
  #finishSeen = false
  #finishReason: string | null = null
  #chatUsage: ChatUsage | undefined

  constructor(options: ChatToResponsesStreamOptions) {
    this.#options = options
    this.#id = options.id ?? newResponseId()
    this.#createdAt = options.createdAt ?? nowSeconds()
    this.#awaitUsage = options.awaitUsage ?? true
  }

  push(chunk: ChatChunk): Array<ResponsesStreamEvent> {
    if (this.#done) return []
    const out: Array<ResponsesStreamEvent> = []
    this.#start(out)
    for (const choice of chunk.choices ?? []) {
      if (choice.index !== undefined && choice.index !== 0) continue
      if (this.#finishSeen) continue
      this.#delta(choice.delta ?? {}, out)
      if (choice.finish_reason != null) {
        this.#finishSeen = true
        this.#finishReason = choice.finish_reason
      }
    }
    if (chunk.usage != null) this.#chatUsage = chunk.usage
    if (this.#finishSeen && (this.#chatUsage !== undefined || !this.#awaitUsage)) this.#finish(out)
    return out
  }

  /** The upstream ended ([DONE] or EOF): close whatever is open and send the terminal event. */
  end(): Array<ResponsesStreamEvent> {
    if (this.#done) return []
    const out: Array<ResponsesStreamEvent> = []
    this.#start(out)
    this.#finish(out)
    return out
  }

  /** The in-band failure: `error` then `response.failed`. Nothing once the stream has ended. */
  fail(failure: ResponsesFailure): Array<ResponsesStreamEvent> {
    if (this.#done) return []
    const out: Array<ResponsesStreamEvent> = []
    this.#start(out)
    this.#done = true
    const events = responsesFailureEvents({
      sequenceNumber: this.#sequence,
      response: { ...this.#shell(), output: this.#items.map((item) => this.#snapshot(item, "incomplete")) },
      failure
    })
    this.#sequence += events.length
    out.push(...events)
    return out
  }

  /** Whether the upstream sent a finish reason; false means its stream was cut short. */
  completed(): boolean {
    return this.#finishSeen
  }

  usage(): AuditUsage {
    return this.#chatUsage === undefined ? emptyAuditUsage : auditUsageFromChat(this.#chatUsage)
  }

  #emit(out: Array<ResponsesStreamEvent>, event: Draft): void {
    out.push({ ...event, sequence_number: this.#sequence++ } as ResponsesStreamEvent)
  }

  #shell(): ResponsesResponse {
    return responseShell({ ...this.#options, id: this.#id, createdAt: this.#createdAt })
  }

  #start(out: Array<ResponsesStreamEvent>): void {
    if (this.#started) return
    this.#started = true
    const response = this.#shell()
    this.#emit(out, { type: "response.created", response })
    this.#emit(out, { type: "response.in_progress", response })
  }

  #delta(delta: ChatDelta, out: Array<ResponsesStreamEvent>): void {
    const reasoning = reasoningTextOf(delta)
    if (reasoning !== "") this.#reasoning(reasoning, out)
    if (typeof delta.content === "string" && delta.content !== "") this.#text("output_text", delta.content, out)
    if (typeof delta.refusal === "string" && delta.refusal !== "") this.#text("refusal", delta.refusal, out)
    for (const call of delta.tool_calls ?? []) this.#toolFragment(call, out)
  }

  #reasoning(text: string, out: Array<ResponsesStreamEvent>): void {
    let item = this.#current
    if (item?.kind !== "reasoning") {
      this.#closeCurrent(out)
      item = { kind: "reasoning", id: newReasoningItemId(), outputIndex: this.#items.length, text: "", open: true }
      this.#items.push(item)
      this.#current = item
      this.#emit(out, {
        type: "response.output_item.added",
        output_index: item.outputIndex,
        item: { type: "reasoning", id: item.id, summary: [], content: [], status: "in_progress" }
      })
      this.#emit(out, {
        type: "response.content_part.added",
        item_id: item.id,
        output_index: item.outputIndex,
        content_index: 0,
        part: { type: "reasoning_text", text: "" }
      })
    }
    item.text += text
    this.#emit(out, {
      type: "response.reasoning_text.delta",
      item_id: item.id,
      output_index: item.outputIndex,
      content_index: 0,
      delta: text
    })
  }

  /** An answer with no output at all still gets its (empty) message, as when not streaming. */
  #emptyMessage(out: Array<ResponsesStreamEvent>): void {
    const item: MessageState = { kind: "message", id: newOutputMessageId(), outputIndex: 0, parts: [{ type: "output_text", text: "" }], open: true }
    this.#items.push(item)
    this.#current = item
    this.#emit(out, {
      type: "response.output_item.added",
      output_index: 0,
      item: { type: "message", id: item.id, role: "assistant", status: "in_progress", content: [] }
    })
    this.#emit(out, {
      type: "response.content_part.added",
      item_id: item.id,
      output_index: 0,
      content_index: 0,
      part: partOf({ type: "output_text", text: "" })
    })
  }

  #text(kind: "output_text" | "refusal", text: string, out: Array<ResponsesStreamEvent>): void {
    let item = this.#current
    if (item?.kind !== "message") {
      this.#closeCurrent(out)
      item = { kind: "message", id: newOutputMessageId(), outputIndex: this.#items.length, parts: [], open: true }
      this.#items.push(item)
      this.#current = item
      this.#emit(out, {
        type: "response.output_item.added",
        output_index: item.outputIndex,
        item: { type: "message", id: item.id, role: "assistant", status: "in_progress", content: [] }
      })
    }
    let part = item.parts.at(-1)
    if (part?.type !== kind) {
      this.#closePart(item, out)
      part = kind === "output_text" ? { type: "output_text", text: "" } : { type: "refusal", refusal: "" }
      item.parts.push(part)
      this.#emit(out, {
        type: "response.content_part.added",
        item_id: item.id,
        output_index: item.outputIndex,
        content_index: item.parts.length - 1,
        part: partOf(kind === "output_text" ? { type: "output_text", text: "" } : { type: "refusal", refusal: "" })
      })
    }
    const contentIndex = item.parts.length - 1
    if (part.type === "output_text") {
      part.text += text
      this.#emit(out, {
        type: "response.output_text.delta",
        item_id: item.id,
        output_index: item.outputIndex,
        content_index: contentIndex,
        delta: text,
        logprobs: []
      })
    } else {
      part.refusal += text
      this.#emit(out, {
        type: "response.refusal.delta",
        item_id: item.id,
        output_index: item.outputIndex,
        content_index: contentIndex,
        delta: text
      })
    }
  }

  #toolFragment(call: ChatToolCallDelta, out: Array<ResponsesStreamEvent>): void {
    const toolIndex = this.#toolIndexOf(call)
    const args = call.function?.arguments ?? ""
    const name = call.function?.name ?? undefined
    const known = this.#calls.get(toolIndex)
    if (known === undefined) {
      const pending: PendingCall = { callId: call.id ? call.id : newFunctionCallId(), name: name === "" ? undefined : name, args }
      this.#calls.set(toolIndex, pending)
      if (pending.name !== undefined) this.#openCall(toolIndex, pending, out)
      return
    }
    if (!("kind" in known)) {
      known.args += args
      if (known.name === undefined && name !== undefined && name !== "") {
        known.name = name
        this.#openCall(toolIndex, known, out)
      }
      return
    }
    if (args === "" || !known.open) return
    known.args += args
    this.#emit(out, {
      type: "response.function_call_arguments.delta",
      item_id: known.id,
      output_index: known.outputIndex,
      delta: args
    })
  }

  /** Same rule as the other stream translators: without `index`, an id starts the next call. */
  #toolIndexOf(call: ChatToolCallDelta): number {
    if (typeof call.index === "number") {
      this.#lastToolIndex = call.index
      return call.index
    }
    if (call.id || this.#lastToolIndex < 0) {
      this.#lastToolIndex = Math.max(-1, ...this.#calls.keys()) + 1
    }
    return this.#lastToolIndex
  }

  #openCall(toolIndex: number, pending: PendingCall, out: Array<ResponsesStreamEvent>): void {
    this.#closeCurrent(out)
    const item: CallState = {
      kind: "function_call",
      id: newFunctionCallItemId(),
      outputIndex: this.#items.length,
      callId: pending.callId,
      name: pending.name ?? "",
      args: pending.args,
      open: true
    }
    this.#items.push(item)
    this.#calls.set(toolIndex, item)
    this.#emit(out, {
      type: "response.output_item.added",
      output_index: item.outputIndex,
      item: { type: "function_call", id: item.id, call_id: item.callId, name: item.name, arguments: "", status: "in_progress" }
    })
    if (item.args !== "") {
      this.#emit(out, {
        type: "response.function_call_arguments.delta",
        item_id: item.id,
        output_index: item.outputIndex,
        delta: item.args
      })
    }
  }

  #closePart(item: MessageState, out: Array<ResponsesStreamEvent>): void {
    const part = item.parts.at(-1)
    if (part === undefined) return
    const contentIndex = item.parts.length - 1
    const base = { item_id: item.id, output_index: item.outputIndex, content_index: contentIndex }
    if (part.type === "output_text") {
      this.#emit(out, { type: "response.output_text.done", ...base, text: part.text, logprobs: [] })
    } else {
      this.#emit(out, { type: "response.refusal.done", ...base, refusal: part.refusal })
    }
    this.#emit(out, { type: "response.content_part.done", ...base, part: partOf(part) })
  }

  #closeCurrent(out: Array<ResponsesStreamEvent>, status: "completed" | "incomplete" = "completed"): void {
    const item = this.#current
    this.#current = undefined
    if (item === undefined || !item.open) return
    item.open = false
    item.status = status
    if (item.kind === "message") {
      this.#closePart(item, out)
    } else {
      const base = { item_id: item.id, output_index: item.outputIndex, content_index: 0 }
      this.#emit(out, { type: "response.reasoning_text.done", ...base, text: item.text })
      this.#emit(out, { type: "response.content_part.done", ...base, part: { type: "reasoning_text", text: item.text } })
    }
    this.#emit(out, { type: "response.output_item.done", output_index: item.outputIndex, item: this.#snapshot(item, status) })
  }

  #closeCall(item: CallState, out: Array<ResponsesStreamEvent>, status: "completed" | "incomplete"): void {
    if (!item.open) return
    item.open = false
    item.status = status
    // A call without arguments still parses on the client.
    if (item.args.trim() === "") {
      item.args = "{}"
      this.#emit(out, { type: "response.function_call_arguments.delta", item_id: item.id, output_index: item.outputIndex, delta: "{}" })
    }
    this.#emit(out, {
      type: "response.function_call_arguments.done",
      item_id: item.id,
      output_index: item.outputIndex,
      arguments: item.args
    })
    this.#emit(out, { type: "response.output_item.done", output_index: item.outputIndex, item: this.#snapshot(item, status) })
  }

  #snapshot(item: ItemState, status: "completed" | "incomplete"): ResponsesOutputItem {
    const itemStatus = item.open ? "in_progress" : item.status ?? status
    switch (item.kind) {
      case "message":
        return { type: "message", id: item.id, role: "assistant", status: itemStatus, content: item.parts.map(partOf) }
      case "reasoning":
        return {
          type: "reasoning",
          id: item.id,
          summary: [],
          content: [{ type: "reasoning_text", text: item.text }],
          status: itemStatus
        }
      case "function_call":
        return {
          type: "function_call",
          id: item.id,
          call_id: item.callId,
          name: item.name,
          arguments: item.args,
          status: itemStatus
        } satisfies ResponsesFunctionCall
    }
  }

  #finish(out: Array<ResponsesStreamEvent>): void {
    this.#done = true
    const { status, incomplete } = responsesOutcome(this.#finishReason)
    const itemStatus = status === "completed" ? "completed" : "incomplete"
    if (this.#items.length === 0) this.#emptyMessage(out)
    this.#closeCurrent(out, itemStatus)
    // Calls still waiting for a name were never shown to the client and are dropped; the rest close in order.
    for (const item of this.#items) {
      if (item.kind === "function_call") this.#closeCall(item, out, itemStatus)
    }
    const response: ResponsesResponse = {
      ...this.#shell(),
      status,
      completed_at: status === "completed" ? nowSeconds() : null,
      incomplete_details: incomplete === null ? null : { reason: incomplete },
      output: this.#items.map((item) => this.#snapshot(item, itemStatus)),
      usage: responsesUsageFromChat(this.#chatUsage)
    }
    this.#emit(out, { type: status === "completed" ? "response.completed" : "response.incomplete", response })
  }
}

const partOf = (
  part: { readonly type: "output_text"; readonly text: string } | { readonly type: "refusal"; readonly refusal: string }
): ResponsesOutputContent =>
  part.type === "output_text" ? { type: "output_text", text: part.text, annotations: [], logprobs: [] } : { type: "refusal", refusal: part.refusal }
