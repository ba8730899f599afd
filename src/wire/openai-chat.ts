/**
 * The OpenAI Chat Completions wire format (`POST /v1/chat/completions`): the request schema the
 * gateway accepts, and the response, stream chunk and usage shapes it reads and writes.
 *
 * Fields the OpenAI SDKs type as `T | null` accept `null`, which means "not set", so bodies
 * built by those SDKs validate unchanged. Assistant messages also accept the response-only
 * fields (`annotations`, `audio: null`, `function_call: null`) that appear when a client appends
 * a returned message to its history unchanged; they are ignored.
 */
import { Schema, SchemaIssue } from "effect"
import {
  type DecodeResult,
  Int,
  JsonObject,
  makeDecoder,
  NonEmptyString,
  numberBetween,
  ObjectJsonSchema,
  PositiveInt,
  taggedUnion
} from "./decode.ts"

const FunctionName = Schema.String.check(
  Schema.isPattern(/^[a-zA-Z0-9_-]{1,64}$/, { expected: "a name matching ^[a-zA-Z0-9_-]{1,64}$" })
)

const TextPart = Schema.Struct({ type: Schema.Literal("text"), text: Schema.String })

const ImageUrlPart = Schema.Struct({
  type: Schema.Literal("image_url"),
  image_url: Schema.Struct({
    url: NonEmptyString,
    detail: Schema.optionalKey(Schema.Literals(["auto", "low", "high"]))
  })
})

const TextContent = Schema.Union([Schema.String, Schema.Array(taggedUnion("type", [TextPart]))]).annotate({
  expected: "a string or an array of text parts"
})

const UserContent = Schema.Union([Schema.String, Schema.Array(taggedUnion("type", [TextPart, ImageUrlPart]))])
  .annotate({ expected: "a string or an array of content parts" })

const ToolCall = Schema.Struct({
  id: NonEmptyString,
  type: Schema.Literal("function"),
  function: Schema.Struct({ name: Schema.String, arguments: Schema.String })
})

const SystemMessage = Schema.Struct({
  role: Schema.Literal("system"),
  content: TextContent,
  name: Schema.optionalKey(Schema.String)
})

const DeveloperMessage = Schema.Struct({
  role: Schema.Literal("developer"),
  content: TextContent,
  name: Schema.optionalKey(Schema.String)
})

const UserMessage = Schema.Struct({
  role: Schema.Literal("user"),
  content: UserContent,
  name: Schema.optionalKey(Schema.String)
})

const AssistantMessage = Schema.Struct({
  role: Schema.Literal("assistant"),
  content: Schema.optionalKey(Schema.NullOr(TextContent)),
  name: Schema.optionalKey(Schema.String),
  refusal: Schema.optionalKey(Schema.NullOr(Schema.String)),
  tool_calls: Schema.optionalKey(Schema.Array(ToolCall)),
  // What SDKs serialise when a client appends a returned message to its history as-is.
  annotations: Schema.optionalKey(Schema.NullOr(Schema.Array(JsonObject))),
  audio: Schema.optionalKey(Schema.Null),
  function_call: Schema.optionalKey(Schema.Null)
}).check(
  Schema.makeFilter((message) =>
    // OpenAI itself answers a refusal with `content: null` and the text in `refusal`.
    message.content == null && (message.tool_calls === undefined || message.tool_calls.length === 0) &&
      message.refusal == null
      ? { path: ["content"], issue: new SchemaIssue.InvalidValue({ message: "required unless tool_calls is present" }) }
      : undefined
  )
)

const ToolMessage = Schema.Struct({
  role: Schema.Literal("tool"),
  content: TextContent,
  tool_call_id: NonEmptyString
})

const Message = taggedUnion("role", [SystemMessage, UserMessage, AssistantMessage, ToolMessage, DeveloperMessage])

const Tool = Schema.Struct({
  type: Schema.Literal("function"),
  function: Schema.Struct({
    name: FunctionName,
    description: Schema.optionalKey(Schema.String),
    parameters: Schema.optionalKey(ObjectJsonSchema),
    strict: Schema.optionalKey(Schema.NullOr(Schema.Boolean))
  })
})

const NamedToolChoice = Schema.Struct({
  type: Schema.Literal("function"),
  function: Schema.Struct({ name: FunctionName })
})

const ToolChoice = Schema.Union([Schema.Literals(["auto", "none", "required"]), NamedToolChoice]).annotate({
  expected: 'one of auto, none, required or {"type": "function", "function": {"name": ...}}'
})

const ResponseFormat = taggedUnion("type", [
  Schema.Struct({ type: Schema.Literal("text") }),
  Schema.Struct({ type: Schema.Literal("json_object") }),
  Schema.Struct({
    type: Schema.Literal("json_schema"),
    json_schema: Schema.Struct({
      name: FunctionName,
      description: Schema.optionalKey(Schema.String),
      schema: Schema.optionalKey(JsonObject),
      strict: Schema.optionalKey(Schema.NullOr(Schema.Boolean))
    })
  })
])

const Stop = Schema.Union([
  Schema.String,
  Schema.Array(Schema.String).check(
    Schema.makeFilter((stops: ReadonlyArray<string>) => stops.length >= 1 && stops.length <= 4, {
      expected: "an array of 1 to 4 strings"
    })
  )
]).annotate({ expected: "a string or an array of 1 to 4 strings" })

const nullable = <S extends Schema.Top>(schema: S) => Schema.optionalKey(Schema.NullOr(schema))

export const ChatRequestSchema = Schema.Struct({
  model: NonEmptyString,
  messages: Schema.Array(Message).check(
    Schema.makeFilter((messages: ReadonlyArray<unknown>) => messages.length > 0, { expected: "a non-empty array" })
  ),
  stream: nullable(Schema.Boolean),
  stream_options: nullable(Schema.Struct({ include_usage: Schema.optionalKey(Schema.Boolean) })),
  temperature: nullable(numberBetween(0, 2)),
  top_p: nullable(numberBetween(0, 1)),
  max_tokens: nullable(PositiveInt),
  max_completion_tokens: nullable(PositiveInt),
  stop: nullable(Stop),
  tools: Schema.optionalKey(Schema.Array(Tool)),
  tool_choice: Schema.optionalKey(ToolChoice),
  parallel_tool_calls: Schema.optionalKey(Schema.Boolean),
  response_format: Schema.optionalKey(ResponseFormat),
  user: Schema.optionalKey(Schema.String),
  n: Schema.optionalKey(Schema.NullOr(Schema.Literal(1)).annotate({ message: "only n = 1 is supported" })),
  seed: nullable(Int),
  presence_penalty: nullable(numberBetween(-2, 2)),
  frequency_penalty: nullable(numberBetween(-2, 2)),
  metadata: nullable(Schema.Record(Schema.String, Schema.String))
}).check(
  Schema.makeFilter((request) =>
    request.stream_options != null && request.stream !== true
      ? { path: ["stream_options"], issue: new SchemaIssue.InvalidValue({ message: "only allowed when stream is true" }) }
      : undefined
  )
)

export type ChatRequest = typeof ChatRequestSchema.Type
export type ChatMessage = ChatRequest["messages"][number]
export type ChatTextContent = typeof TextContent.Type
export type ChatUserContent = typeof UserContent.Type
export type ChatUserPart = Extract<ChatUserContent, ReadonlyArray<unknown>>[number]
export type ChatTool = typeof Tool.Type
export type ChatToolChoice = typeof ToolChoice.Type
export type ChatResponseFormat = typeof ResponseFormat.Type

const decodeRequest = makeDecoder(ChatRequestSchema)

/** Validates a `/v1/chat/completions` body; a failure names the offending field's path. */
export const decodeChatRequest = (body: unknown): DecodeResult<ChatRequest> => decodeRequest(body)

export type ChatFinishReason = "stop" | "length" | "tool_calls" | "content_filter" | "function_call"

export interface ChatUsage {
  readonly prompt_tokens: number
  readonly completion_tokens: number
  readonly total_tokens: number
  readonly prompt_tokens_details?: {
    readonly cached_tokens?: number | null
    readonly cache_write_tokens?: number | null
  } | null
  readonly completion_tokens_details?: {
    readonly reasoning_tokens?: number | null
  } | null
}

export interface ChatToolCall {
  readonly id: string
  readonly type: "function"
  readonly function: { readonly name: string; readonly arguments: string }
}

export interface ChatResponseMessage {
  readonly role: "assistant"
  readonly content: string | null
  readonly refusal?: string | null
  readonly tool_calls?: ReadonlyArray<ChatToolCall>
}

export interface ChatChoice {
  readonly index: number
  readonly message: ChatResponseMessage
  readonly finish_reason: ChatFinishReason | null
  readonly logprobs?: null
  /** vLLM's non-standard field naming the stop string that matched. */
  readonly stop_reason?: string | number | null
}

export interface ChatResponse {
  readonly id: string
  readonly object: "chat.completion"
  readonly created: number
  readonly model: string
  readonly choices: ReadonlyArray<ChatChoice>
  readonly usage?: ChatUsage | null
  readonly system_fingerprint?: string | null
}

export interface ChatToolCallDelta {
  readonly index?: number
  readonly id?: string | null
  readonly type?: "function" | null
  readonly function?: { readonly name?: string | null; readonly arguments?: string | null } | null
}

export interface ChatDelta {
  readonly role?: "assistant" | null
  readonly content?: string | null
  readonly refusal?: string | null
  readonly tool_calls?: ReadonlyArray<ChatToolCallDelta> | null
}

export interface ChatChunkChoice {
  readonly index: number
  readonly delta: ChatDelta
  readonly finish_reason: ChatFinishReason | null
  readonly logprobs?: null
  readonly stop_reason?: string | number | null
}

export interface ChatChunk {
  readonly id: string
  readonly object: "chat.completion.chunk"
  readonly created: number
  readonly model: string
  readonly choices: ReadonlyArray<ChatChunkChoice>
  readonly usage?: ChatUsage | null
  readonly system_fingerprint?: string | null
}
