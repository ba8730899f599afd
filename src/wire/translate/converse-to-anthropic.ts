/**
 * Bedrock Converse answers -> Anthropic messages answers, whole and streamed. Converse was shaped
 * after Messages, so each block has its twin: text, toolUse (tool_use), reasoningContent
 * (thinking with its signature, or redacted_thinking), citationsContent (its text; the citation
 * locations have no place in a plain text block).
 *
 * The stream differs in three ways this undoes: text and reasoning blocks start with their first
 * delta (only tool use has a start event), so a block's start is made when it is first seen;
 * block indices are renumbered so they run 0, 1, 2... with no overlap; and the token counts come
 * only in the last event (`metadata`, after `messageStop`), so `message_delta` (stop reason and
 * usage, input tokens included) and `message_stop` wait for it.
 */
import type {
  AnthropicContentBlock,
  AnthropicResponse,
  AnthropicStopReason,
  AnthropicStreamEvent,
  AnthropicUsage
} from "../anthropic-messages.ts"
import type { ConverseResponse, ConverseStreamEvent, ConverseUsage } from "../bedrock-converse.ts"
import { newMessageId } from "../ids.ts"
import { type AuditUsage, auditUsageFromAnthropic } from "./usage.ts"

/** Converse `stopReason` -> Anthropic `stop_reason`. */
export const stopReasonFromConverse = (stop: string | undefined): AnthropicStopReason => {
  switch (stop) {
    case "tool_use":
      return "tool_use"
    case "max_tokens":
      return "max_tokens"
    case "stop_sequence":
      return "stop_sequence"
    case "model_context_window_exceeded":
      return "model_context_window_exceeded"
    case "guardrail_intervened":
    case "content_filtered":
      return "refusal"
    default:
      // end_turn, malformed output, and anything newer: the turn is over.
      return "end_turn"
  }
}

const count = (n: number | undefined): number => (typeof n === "number" && Number.isFinite(n) && n >= 0 ? n : 0)

export const anthropicUsageFromConverse = (usage: ConverseUsage | undefined): AnthropicUsage => ({
  input_tokens: count(usage?.inputTokens),
  output_tokens: count(usage?.outputTokens),
  cache_creation_input_tokens: count(usage?.cacheWriteInputTokens),
  cache_read_input_tokens: count(usage?.cacheReadInputTokens)
})

/** Converse's counts as the audit trail's disjoint buckets (Claude's `inputTokens` exclude the cache). */
export const auditUsageFromConverse = (usage: ConverseUsage | undefined): AuditUsage => auditUsageFromAnthropic(anthropicUsageFromConverse(usage))

export interface ConverseToAnthropicOptions {
  /** Model name reported to the client (the provider's model id: README "The model an answer names"). */
  readonly model: string
  readonly id?: string
  /** Input tokens announced in a stream's `message_start` (an estimate); `message_delta` corrects it. */
  readonly estimatedInputTokens?: number
}

export const converseResponseToAnthropic = (response: ConverseResponse, options: ConverseToAnthropicOptions): AnthropicResponse => {
  const content: Array<AnthropicContentBlock> = []
  for (const block of response.output?.message?.content ?? []) {
    if (typeof block.text === "string") {
      if (block.text !== "") content.push({ type: "text", text: block.text })
    } else if (block.toolUse !== undefined) {
      content.push({
        type: "tool_use",
        id: block.toolUse.toolUseId ?? "",
        name: block.toolUse.name ?? "",
        input: typeof block.toolUse.input === "object" && block.toolUse.input !== null ? block.toolUse.input as Record<string, unknown> : {}
      })
    } else if (block.reasoningContent !== undefined) {
      const reasoning = block.reasoningContent
      if (reasoning.reasoningText !== undefined) {
        content.push({ type: "thinking", thinking: reasoning.reasoningText.text ?? "", signature: reasoning.reasoningText.signature ?? "" })
      } else if (typeof reasoning.redactedContent === "string") {
        content.push({ type: "redacted_thinking", data: reasoning.redactedContent })
      }
    } else if (block.citationsContent !== undefined) {
      const text = (block.citationsContent.content ?? []).map((part) => part.text ?? "").join("")
      if (text !== "") content.push({ type: "text", text })
    }
  }
  const stop = stopReasonFromConverse(response.stopReason)
  return {
    id: options.id ?? newMessageId(),
    type: "message",
    role: "assistant",
    model: options.model,
    content,
    // A tool stop without a tool call (a forced-tool JSON answer unwrapped later, say) stays as Converse said.
    stop_reason: stop,
    stop_sequence: null,
    usage: anthropicUsageFromConverse(response.usage)
  }
}

type OpenBlock =
  | { readonly kind: "text"; readonly index: number }
  | { readonly kind: "thinking"; readonly index: number }
  | { readonly kind: "tool"; readonly index: number }
  | { readonly kind: "redacted"; readonly index: number }

/** Converse stream events in, Anthropic stream events out; `end()` flushes what a cut stream still owes. */
export class ConverseToAnthropicStream {
  readonly #options: ConverseToAnthropicOptions
  readonly #id: string
  /** Converse block index -> the block as the client knows it. */
  readonly #open = new Map<number, OpenBlock>()
  #next = 0
  #started = false
  #stopReason: string | undefined
  #stopped = false
  #finished = false
  #usageSeen = false
  #usage: AnthropicUsage = { input_tokens: 0, output_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 }

  constructor(options: ConverseToAnthropicOptions) {
    this.#options = options
    this.#id = options.id ?? newMessageId()
  }

  /** The usage as last reported (the metadata event's, once it came). */
  usage(): AnthropicUsage {
    return this.#usage
  }

  push(event: ConverseStreamEvent): Array<AnthropicStreamEvent> {
    if (this.#finished) return []
    const out = this.#start()
    switch (event.type) {
      case "messageStart":
        return out
      case "contentBlockStart": {
        const index = event.payload.contentBlockIndex ?? 0
        const toolUse = event.payload.start?.toolUse
        if (toolUse === undefined) return out
        out.push(...this.#closeOthers(index))
        const block: OpenBlock = { kind: "tool", index: this.#next++ }
        this.#open.set(index, block)
        out.push({
          type: "content_block_start",
          index: block.index,
          content_block: { type: "tool_use", id: toolUse.toolUseId ?? "", name: toolUse.name ?? "", input: {} }
        })
        return out
      }
      case "contentBlockDelta":
        return [...out, ...this.#delta(event.payload.contentBlockIndex ?? 0, event.payload.delta ?? {})]
      case "contentBlockStop":
        return [...out, ...this.#close(event.payload.contentBlockIndex ?? 0)]
      case "messageStop":
        this.#stopReason = event.payload.stopReason
        this.#stopped = true
        return [...out, ...this.#closeAll()]
      case "metadata":
        if (event.payload.usage !== undefined) {
          this.#usage = anthropicUsageFromConverse(event.payload.usage)
          this.#usageSeen = true
        }
        return [...out, ...this.#finish()]
    }
  }

  /** After the upstream ended: when the answer stopped but its metadata never came, the end is still owed. */
  end(): Array<AnthropicStreamEvent> {
    if (this.#finished || !this.#stopped) return []
    return this.#finish()
  }

  #start(): Array<AnthropicStreamEvent> {
    if (this.#started) return []
    this.#started = true
    return [{
      type: "message_start",
      message: {
        id: this.#id,
        type: "message",
        role: "assistant",
        model: this.#options.model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        // Converse tells the input tokens only at the end; message_delta carries them.
        usage: { input_tokens: this.#options.estimatedInputTokens ?? 0, output_tokens: 0 }
      }
    }]
  }

  #delta(index: number, delta: NonNullable<Extract<ConverseStreamEvent, { type: "contentBlockDelta" }>["payload"]["delta"]>): Array<AnthropicStreamEvent> {
    const out: Array<AnthropicStreamEvent> = []
    if (typeof delta.text === "string") {
      const block = this.#ensure(index, "text", out)
      if (delta.text !== "") out.push({ type: "content_block_delta", index: block.index, delta: { type: "text_delta", text: delta.text } })
    } else if (delta.toolUse !== undefined) {
      const block = this.#open.get(index)
      // Tool input without its start cannot be placed: no id, no name.
      if (block?.kind === "tool" && typeof delta.toolUse.input === "string" && delta.toolUse.input !== "") {
        out.push({ type: "content_block_delta", index: block.index, delta: { type: "input_json_delta", partial_json: delta.toolUse.input } })
      }
    } else if (delta.reasoningContent !== undefined) {
      const reasoning = delta.reasoningContent
      if (typeof reasoning.redactedContent === "string") {
        out.push(...this.#closeOthers(index))
        if (!this.#open.has(index)) {
          const block: OpenBlock = { kind: "redacted", index: this.#next++ }
          this.#open.set(index, block)
          out.push({ type: "content_block_start", index: block.index, content_block: { type: "redacted_thinking", data: reasoning.redactedContent } })
        }
      } else {
        const block = this.#ensure(index, "thinking", out)
        if (typeof reasoning.text === "string" && reasoning.text !== "") {
          out.push({ type: "content_block_delta", index: block.index, delta: { type: "thinking_delta", thinking: reasoning.text } })
        }
        if (typeof reasoning.signature === "string" && reasoning.signature !== "") {
          out.push({ type: "content_block_delta", index: block.index, delta: { type: "signature_delta", signature: reasoning.signature } })
        }
      }
    }
    return out
  }

  /** The open block at `index`, started now (as `kind`) if this is its first delta. */
  #ensure(index: number, kind: "text" | "thinking", out: Array<AnthropicStreamEvent>): OpenBlock {
    const open = this.#open.get(index)
    if (open !== undefined) return open
    out.push(...this.#closeOthers(index))
    const block: OpenBlock = { kind, index: this.#next++ }
    this.#open.set(index, block)
    out.push({
      type: "content_block_start",
      index: block.index,
      content_block: kind === "text" ? { type: "text", text: "" } : { type: "thinking", thinking: "", signature: "" }
    })
    return block
  }

  #close(index: number): Array<AnthropicStreamEvent> {
    const block = this.#open.get(index)
    if (block === undefined) return []
    this.#open.delete(index)
    return [{ type: "content_block_stop", index: block.index }]
  }

  /** Anthropic blocks never overlap: a block that starts closes any other still open. */
  #closeOthers(index: number): Array<AnthropicStreamEvent> {
    return [...this.#open.keys()].filter((other) => other !== index).flatMap((other) => this.#close(other))
  }

  #closeAll(): Array<AnthropicStreamEvent> {
    return [...this.#open.keys()].flatMap((index) => this.#close(index))
  }

  #finish(): Array<AnthropicStreamEvent> {
    if (this.#finished) return []
    this.#finished = true
    return [
      ...this.#closeAll(),
      {
        type: "message_delta",
        delta: { stop_reason: stopReasonFromConverse(this.#stopReason), stop_sequence: null },
        usage: {
          input_tokens: this.#usageSeen ? this.#usage.input_tokens : this.#options.estimatedInputTokens ?? 0,
          output_tokens: this.#usage.output_tokens,
          cache_creation_input_tokens: this.#usage.cache_creation_input_tokens ?? 0,
          cache_read_input_tokens: this.#usage.cache_read_input_tokens ?? 0
        }
      },
      { type: "message_stop" }
    ]
  }
}
