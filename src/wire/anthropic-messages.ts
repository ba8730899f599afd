/**
 * The Anthropic Messages wire format (`POST /v1/messages`): the request schema the gateway
 * accepts, the response, and every stream event.
 *
 * Beyond the request fields themselves, the schema accepts what the Anthropic SDKs put on
 * content blocks when a client replays a previous response as history (`citations` on text,
 * `caller` on tool_use, thinking blocks), so the usual "append response.content" loop validates.
 */
import { Schema } from "effect"
import {
  type DecodeResult,
  JsonObject,
  makeDecoder,
  NonEmptyString,
  NonNegativeInt,
  numberBetween,
  PositiveInt,
  RequiredObjectJsonSchema,
  taggedUnion
} from "./decode.ts"

const ToolUseId = Schema.String.check(
  Schema.isPattern(/^[a-zA-Z0-9_-]+$/, { expected: "an id matching ^[a-zA-Z0-9_-]+$" })
)

const CacheControl = Schema.NullOr(
  Schema.Struct({
    type: Schema.Literal("ephemeral"),
    ttl: Schema.optionalKey(Schema.Literals(["5m", "1h"]))
  })
)

const TextBlock = Schema.Struct({
  type: Schema.Literal("text"),
  text: Schema.String.check(Schema.isMinLength(1, { message: "text content blocks must be non-empty" })),
  cache_control: Schema.optionalKey(CacheControl),
  citations: Schema.optionalKey(Schema.NullOr(Schema.Array(JsonObject)))
})

const ImageMediaType = Schema.Literals(["image/jpeg", "image/png", "image/gif", "image/webp"])

const ImageSource = taggedUnion("type", [
  Schema.Struct({ type: Schema.Literal("base64"), media_type: ImageMediaType, data: NonEmptyString }),
  Schema.Struct({ type: Schema.Literal("url"), url: NonEmptyString })
])

const ImageBlock = Schema.Struct({
  type: Schema.Literal("image"),
  source: ImageSource,
  cache_control: Schema.optionalKey(CacheControl)
})

const ToolUseBlock = Schema.Struct({
  type: Schema.Literal("tool_use"),
  id: ToolUseId,
  name: NonEmptyString,
  input: JsonObject,
  cache_control: Schema.optionalKey(CacheControl),
  caller: Schema.optionalKey(Schema.Struct({ type: Schema.String, tool_id: Schema.optionalKey(Schema.String) }))
})

const ToolResultBlock = Schema.Struct({
  type: Schema.Literal("tool_result"),
  tool_use_id: ToolUseId,
  content: Schema.optionalKey(
    Schema.Union([Schema.String, Schema.Array(taggedUnion("type", [TextBlock, ImageBlock]))]).annotate({
      expected: "a string or an array of text and image blocks"
    })
  ),
  is_error: Schema.optionalKey(Schema.Boolean),
  cache_control: Schema.optionalKey(CacheControl)
})

const ThinkingBlock = Schema.Struct({
  type: Schema.Literal("thinking"),
  thinking: Schema.String,
  signature: Schema.String
})

const RedactedThinkingBlock = Schema.Struct({
  type: Schema.Literal("redacted_thinking"),
  data: Schema.String
})

const UserMessage = Schema.Struct({
  role: Schema.Literal("user"),
  content: Schema.Union([
    Schema.String,
    Schema.Array(taggedUnion("type", [TextBlock, ImageBlock, ToolResultBlock]))
  ]).annotate({ expected: "a string or an array of content blocks" })
})

const AssistantMessage = Schema.Struct({
  role: Schema.Literal("assistant"),
  content: Schema.Union([
    Schema.String,
    Schema.Array(taggedUnion("type", [TextBlock, ToolUseBlock, ThinkingBlock, RedactedThinkingBlock]))
  ]).annotate({ expected: "a string or an array of content blocks" })
})

const Message = taggedUnion("role", [UserMessage, AssistantMessage])

const Tool = Schema.Struct({
  // First, so that a server tool (web_search, bash...) is reported by its type, not by what it lacks.
  type: Schema.optionalKey(Schema.NullOr(Schema.Literal("custom"))),
  name: Schema.String.check(
    Schema.isPattern(/^[a-zA-Z0-9_-]{1,128}$/, { expected: "a name matching ^[a-zA-Z0-9_-]{1,128}$" })
  ),
  description: Schema.optionalKey(Schema.String),
  input_schema: RequiredObjectJsonSchema,
  cache_control: Schema.optionalKey(CacheControl)
})

const disableParallel = Schema.optionalKey(Schema.Boolean)

const ToolChoice = taggedUnion("type", [
  Schema.Struct({ type: Schema.Literal("auto"), disable_parallel_tool_use: disableParallel }),
  Schema.Struct({ type: Schema.Literal("any"), disable_parallel_tool_use: disableParallel }),
  Schema.Struct({ type: Schema.Literal("tool"), name: NonEmptyString, disable_parallel_tool_use: disableParallel }),
  Schema.Struct({ type: Schema.Literal("none") })
])

const Thinking = taggedUnion("type", [
  Schema.Struct({
    type: Schema.Literal("enabled"),
    budget_tokens: Schema.Number.check(
      Schema.makeFilter((n: number) => Number.isInteger(n) && n >= 1024, { expected: "an integer >= 1024" })
    )
  }),
  Schema.Struct({ type: Schema.Literal("disabled") }),
  Schema.Struct({ type: Schema.Literal("adaptive") })
])

export const MessagesRequestSchema = Schema.Struct({
  model: NonEmptyString,
  max_tokens: PositiveInt,
  messages: Schema.Array(Message).check(
    Schema.makeFilter((messages: ReadonlyArray<unknown>) => messages.length > 0, { expected: "a non-empty array" })
  ),
  system: Schema.optionalKey(
    Schema.Union([Schema.String, Schema.Array(taggedUnion("type", [TextBlock]))]).annotate({
      expected: "a string or an array of text blocks"
    })
  ),
  tools: Schema.optionalKey(Schema.Array(Tool)),
  tool_choice: Schema.optionalKey(ToolChoice),
  stop_sequences: Schema.optionalKey(Schema.Array(Schema.String)),
  temperature: Schema.optionalKey(numberBetween(0, 1)),
  top_p: Schema.optionalKey(numberBetween(0, 1)),
  top_k: Schema.optionalKey(NonNegativeInt),
  metadata: Schema.optionalKey(Schema.Struct({ user_id: Schema.optionalKey(Schema.NullOr(Schema.String)) })),
  stream: Schema.optionalKey(Schema.Boolean),
  thinking: Schema.optionalKey(Thinking)
})

export type MessagesRequest = typeof MessagesRequestSchema.Type
export type MessagesMessage = MessagesRequest["messages"][number]
export type MessagesUserBlock = Extract<(typeof UserMessage.Type)["content"], ReadonlyArray<unknown>>[number]
export type MessagesAssistantBlock = Extract<(typeof AssistantMessage.Type)["content"], ReadonlyArray<unknown>>[number]
export type MessagesTextBlock = typeof TextBlock.Type
export type MessagesImageBlock = typeof ImageBlock.Type
export type MessagesToolResultBlock = typeof ToolResultBlock.Type
export type MessagesToolUseBlock = typeof ToolUseBlock.Type
export type MessagesTool = typeof Tool.Type
export type MessagesToolChoice = typeof ToolChoice.Type

const decodeRequest = makeDecoder(MessagesRequestSchema)

/** Validates a `/v1/messages` body; a failure names the offending field's path. */
export const decodeMessagesRequest = (body: unknown): DecodeResult<MessagesRequest> => decodeRequest(body)

export type AnthropicStopReason =
  | "end_turn"
  | "max_tokens"
  | "stop_sequence"
  | "tool_use"
  | "pause_turn"
  | "refusal"
  | "model_context_window_exceeded"

export interface AnthropicUsage {
  readonly input_tokens: number
  readonly output_tokens: number
  readonly cache_creation_input_tokens?: number | null
  readonly cache_read_input_tokens?: number | null
  readonly output_tokens_details?: { readonly reasoning_tokens?: number | null } | null
}

export interface AnthropicTextBlock {
  readonly type: "text"
  readonly text: string
  readonly citations?: ReadonlyArray<unknown> | null
}

export interface AnthropicToolUseBlock {
  readonly type: "tool_use"
  readonly id: string
  readonly name: string
  readonly input: Readonly<Record<string, unknown>>
}

export interface AnthropicThinkingBlock {
  readonly type: "thinking"
  readonly thinking: string
  readonly signature: string
}

export interface AnthropicRedactedThinkingBlock {
  readonly type: "redacted_thinking"
  readonly data: string
}

export type AnthropicContentBlock =
  | AnthropicTextBlock
  | AnthropicToolUseBlock
  | AnthropicThinkingBlock
  | AnthropicRedactedThinkingBlock

export interface AnthropicResponse {
  readonly id: string
  readonly type: "message"
  readonly role: "assistant"
  readonly model: string
  readonly content: ReadonlyArray<AnthropicContentBlock>
  readonly stop_reason: AnthropicStopReason | null
  readonly stop_sequence: string | null
  readonly stop_details?: unknown
  readonly usage: AnthropicUsage
}

export interface MessageStartEvent {
  readonly type: "message_start"
  readonly message: AnthropicResponse
}

export interface ContentBlockStartEvent {
  readonly type: "content_block_start"
  readonly index: number
  readonly content_block: AnthropicContentBlock
}

export type AnthropicBlockDelta =
  | { readonly type: "text_delta"; readonly text: string }
  | { readonly type: "input_json_delta"; readonly partial_json: string }
  | { readonly type: "thinking_delta"; readonly thinking: string }
  | { readonly type: "signature_delta"; readonly signature: string }
  | { readonly type: "citations_delta"; readonly citation: unknown }

export interface ContentBlockDeltaEvent {
  readonly type: "content_block_delta"
  readonly index: number
  readonly delta: AnthropicBlockDelta
}

export interface ContentBlockStopEvent {
  readonly type: "content_block_stop"
  readonly index: number
}

export interface MessageDeltaUsage {
  readonly output_tokens: number
  readonly input_tokens?: number | null
  readonly cache_creation_input_tokens?: number | null
  readonly cache_read_input_tokens?: number | null
  readonly output_tokens_details?: { readonly reasoning_tokens?: number | null } | null
}

export interface MessageDeltaEvent {
  readonly type: "message_delta"
  readonly delta: {
    readonly stop_reason: AnthropicStopReason | null
    readonly stop_sequence: string | null
    readonly stop_details?: unknown
  }
  readonly usage: MessageDeltaUsage
}

export interface MessageStopEvent {
  readonly type: "message_stop"
}

export interface PingEvent {
  readonly type: "ping"
}

export interface ErrorEvent {
  readonly type: "error"
  readonly error: { readonly type: string; readonly message: string }
}

export type AnthropicStreamEvent =
  | MessageStartEvent
  | ContentBlockStartEvent
  | ContentBlockDeltaEvent
  | ContentBlockStopEvent
  | MessageDeltaEvent
  | MessageStopEvent
  | PingEvent
  | ErrorEvent
