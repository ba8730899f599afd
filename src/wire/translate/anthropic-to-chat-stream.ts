/**
 * Anthropic stream events in, OpenAI chat chunks out (docs/wire-translation.md 3.9A).
 *
 * - Tool calls get their own counter: Anthropic block indices count text blocks too.
 * - A tool called without arguments still gets `"{}"`, so the client's concatenation parses.
 * - Every chunk carries the same id and created; the first delta carries the role, and is sent
 *   with the first content (message_start alone says nothing the client can use).
 * - With `includeUsage`, every chunk has `usage: null` and one last chunk with `choices: []`
 *   carries the totals.
 * - Thinking is streamed as `reasoning_content` deltas, the de facto field of OpenAI-compatible
 *   servers (the AI SDK and LangChain read it; others ignore it), which the Responses translator
 *   turns into a reasoning item. Signatures and redacted thinking have no place there and are
 *   dropped: a Chat or Responses client cannot replay them to Anthropic anyway.
 * - In JSON mode the forced tool's input is streamed as content. A wrapped schema (`{values}`)
 *   can only be unwrapped once complete, so that case is sent in one piece when the block ends.
 * - `error` events are ignored: the pipeline writes the error envelope itself.
 */
import type {
  AnthropicStreamEvent,
  ContentBlockDeltaEvent,
  ContentBlockStartEvent,
  MessageDeltaEvent,
  MessageStartEvent
} from "../anthropic-messages.ts"
import { openAIToolId } from "../ids.ts"
import type { ChatChunk, ChatDelta, ChatFinishReason } from "../openai-chat.ts"
import { type JsonMode, jsonTextFromRaw } from "./json-mode.ts"
import { finishReasonFromStopReason, finishReasonWithTools } from "./reasons.ts"
import { type AuditUsage, auditUsageFromAnthropic, chatUsageFromAudit, emptyAuditUsage } from "./usage.ts"

export interface AnthropicToChatStreamOptions {
  readonly id: string
  readonly model: string
  /** Unix seconds, the same on every chunk. */
  readonly created: number
  /** The client asked for `stream_options.include_usage`. */
  readonly includeUsage: boolean
  /** Set when the request used response_format (see `jsonModeOf`). */
  readonly jsonMode?: JsonMode | undefined
}

type Block =
  | { readonly kind: "text" }
  | { readonly kind: "tool"; readonly toolIndex: number; sawArguments: boolean }
  | { readonly kind: "json"; raw: string; streamed: boolean }
  | { readonly kind: "thinking" }
  | { readonly kind: "ignored" }

export class AnthropicToChatStream {
  readonly #options: AnthropicToChatStreamOptions
  readonly #blocks = new Map<number, Block>()
  #toolCalls = 0
  #usage: AuditUsage = emptyAuditUsage
  #reasoningTokens: number | undefined
  #started = false
  #finished = false
  #usageSent = false
  #stopped = false

  constructor(options: AnthropicToChatStreamOptions) {
    this.#options = options
  }

  push(event: AnthropicStreamEvent): Array<ChatChunk> {
    if (this.#stopped) return []
    switch (event.type) {
      case "message_start":
        return this.#messageStart(event)
      case "content_block_start":
        return this.#blockStart(event)
      case "content_block_delta":
        return this.#blockDelta(event)
      case "content_block_stop":
        return this.#blockStop(event.index)
      case "message_delta":
        return this.#messageDelta(event)
      case "message_stop":
        this.#stopped = true
        return this.#usageChunk()
      default:
        return []
    }
  }

  /** Flushes what is still owed after the upstream ended (the usage chunk if message_stop was missing). */
  end(): Array<ChatChunk> {
    this.#stopped = true
    return this.#usageChunk()
  }

  /** Whether a finish_reason was sent; false means the upstream stream was cut short. */
  completed(): boolean {
    return this.#finished
  }

  usage(): AuditUsage {
    return this.#usage
  }

  #chunk(delta: ChatDelta, finishReason: ChatFinishReason | null = null): ChatChunk {
    return {
      id: this.#options.id,
      object: "chat.completion.chunk",
      created: this.#options.created,
      model: this.#options.model,
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
      ...(this.#options.includeUsage ? { usage: null } : {})
    }
  }

  /**
   * The role goes in the first delta. Like OpenAI, content is null there when the answer starts
   * with a tool call, so the assembled message has `content: null` exactly as when not streaming.
   */
  #emit(delta: ChatDelta, finishReason: ChatFinishReason | null = null): Array<ChatChunk> {
    if (this.#started) return [this.#chunk(delta, finishReason)]
    this.#started = true
    const content = delta.tool_calls === undefined ? "" : null
    return [this.#chunk({ role: "assistant", content, ...delta }, finishReason)]
  }

  #messageStart(event: MessageStartEvent): Array<ChatChunk> {
    this.#usage = auditUsageFromAnthropic(event.message.usage)
    this.#reasoningTokens = event.message.usage.output_tokens_details?.reasoning_tokens ?? undefined
    return []
  }

  #blockStart(event: ContentBlockStartEvent): Array<ChatChunk> {
    const block = event.content_block
    if (block.type === "text") {
      this.#blocks.set(event.index, { kind: "text" })
      return block.text === "" ? [] : this.#emit({ content: block.text })
    }
    if (block.type === "thinking") {
      this.#blocks.set(event.index, { kind: "thinking" })
      return block.thinking === "" ? [] : this.#emit({ reasoning_content: block.thinking })
    }
    if (block.type !== "tool_use") {
      this.#blocks.set(event.index, { kind: "ignored" })
      return []
    }
    // Synthesised streams may put the whole input on the start event.
    const initial = block.input !== undefined && Object.keys(block.input).length > 0 ? JSON.stringify(block.input) : ""
    const mode = this.#options.jsonMode
    if (mode !== undefined && block.name === mode.tool) {
      this.#blocks.set(event.index, { kind: "json", raw: "", streamed: false })
      return initial === "" ? [] : this.#jsonFragment(event.index, initial)
    }
    const toolIndex = this.#toolCalls++
    this.#blocks.set(event.index, { kind: "tool", toolIndex, sawArguments: initial !== "" })
    return this.#emit({
      tool_calls: [{ index: toolIndex, id: openAIToolId(block.id), type: "function", function: { name: block.name, arguments: initial } }]
    })
  }

  #blockDelta(event: ContentBlockDeltaEvent): Array<ChatChunk> {
    const block = this.#blocks.get(event.index)
    const delta = event.delta
    if (block === undefined) {
      // A delta without its start: text is still worth passing on, anything else cannot be placed.
      return delta.type === "text_delta" && delta.text !== "" ? this.#emit({ content: delta.text }) : []
    }
    switch (block.kind) {
      case "text":
        return delta.type === "text_delta" && delta.text !== "" ? this.#emit({ content: delta.text }) : []
      case "tool":
        // The empty first partial_json is noise: the start chunk already sent arguments "".
        if (delta.type !== "input_json_delta" || delta.partial_json === "") return []
        block.sawArguments = true
        return this.#emit({ tool_calls: [{ index: block.toolIndex, function: { arguments: delta.partial_json } }] })
      case "json":
        return delta.type === "input_json_delta" && delta.partial_json !== ""
          ? this.#jsonFragment(event.index, delta.partial_json)
          : []
      case "thinking":
        return delta.type === "thinking_delta" && delta.thinking !== "" ? this.#emit({ reasoning_content: delta.thinking }) : []
      case "ignored":
        return []
    }
  }

  #jsonFragment(index: number, fragment: string): Array<ChatChunk> {
    const block = this.#blocks.get(index)
    if (block?.kind !== "json") return []
    block.raw += fragment
    if (this.#options.jsonMode?.wrapped === true) return []
    block.streamed = true
    return this.#emit({ content: fragment })
  }

  #blockStop(index: number): Array<ChatChunk> {
    const block = this.#blocks.get(index)
    this.#blocks.delete(index)
    if (block === undefined) return []
    if (block.kind === "tool" && !block.sawArguments) {
      return this.#emit({ tool_calls: [{ index: block.toolIndex, function: { arguments: "{}" } }] })
    }
    const mode = this.#options.jsonMode
    if (block.kind === "json" && mode !== undefined && (mode.wrapped || !block.streamed)) {
      return this.#emit({ content: jsonTextFromRaw(block.raw, mode) })
    }
    return []
  }

  #messageDelta(event: MessageDeltaEvent): Array<ChatChunk> {
    const usage = event.usage
    this.#usage = {
      input_tokens: usage.input_tokens ?? this.#usage.input_tokens,
      output_tokens: usage.output_tokens ?? this.#usage.output_tokens,
      cache_read_tokens: usage.cache_read_input_tokens ?? this.#usage.cache_read_tokens,
      cache_write_tokens: usage.cache_creation_input_tokens ?? this.#usage.cache_write_tokens
    }
    this.#reasoningTokens = usage.output_tokens_details?.reasoning_tokens ?? this.#reasoningTokens
    if (this.#finished) return []
    this.#finished = true
    const finish = finishReasonWithTools(finishReasonFromStopReason(event.delta.stop_reason), this.#toolCalls > 0)
    return this.#emit({}, finish)
  }

  #usageChunk(): Array<ChatChunk> {
    if (!this.#options.includeUsage || !this.#finished || this.#usageSent) return []
    this.#usageSent = true
    return [{
      id: this.#options.id,
      object: "chat.completion.chunk",
      created: this.#options.created,
      model: this.#options.model,
      choices: [],
      usage: chatUsageFromAudit(this.#usage, this.#reasoningTokens)
    }]
  }
}
