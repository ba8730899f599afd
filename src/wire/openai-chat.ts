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

const nullable = <S extends Schema.Top>(schema: S) => Schema.optionalKey(Schema.NullOr(schema))

/** Explicit prompt-cache breakpoint on a content part: a caching hint, never changes the answer. */
const PromptCacheBreakpoint = Schema.Struct({
  mode: Schema.Literal("explicit"),
  ttl: Schema.optionalKey(Schema.String)
})

const cacheBreakpoint = { prompt_cache_breakpoint: Schema.optionalKey(PromptCacheBreakpoint) }

const TextPart = Schema.Struct({ type: Schema.Literal("text"), text: Schema.String, ...cacheBreakpoint })

const ImageUrlPart = Schema.Struct({
  type: Schema.Literal("image_url"),
  image_url: Schema.Struct({
    url: NonEmptyString,
    detail: Schema.optionalKey(Schema.String)
  }),
  ...cacheBreakpoint
})

const InputAudioPart = Schema.Struct({
  type: Schema.Literal("input_audio"),
  input_audio: Schema.Struct({ data: Schema.String, format: Schema.String }),
  ...cacheBreakpoint
})

const FilePart = Schema.Struct({
  type: Schema.Literal("file"),
  file: Schema.Struct({
    file_data: Schema.optionalKey(Schema.String),
    file_id: Schema.optionalKey(Schema.String),
    filename: Schema.optionalKey(Schema.String)
  }),
  ...cacheBreakpoint
})

const RefusalPart = Schema.Struct({ type: Schema.Literal("refusal"), refusal: Schema.String })

const TextContent = Schema.Union([Schema.String, Schema.Array(taggedUnion("type", [TextPart]))]).annotate({
  expected: "a string or an array of text parts"
})

const UserContent = Schema.Union([
  Schema.String,
  Schema.Array(taggedUnion("type", [TextPart, ImageUrlPart, InputAudioPart, FilePart]))
]).annotate({ expected: "a string or an array of content parts" })

const AssistantContent = Schema.Union([Schema.String, Schema.Array(taggedUnion("type", [TextPart, RefusalPart]))])
  .annotate({ expected: "a string or an array of text and refusal parts" })

const FunctionToolCall = Schema.Struct({
  id: NonEmptyString,
  type: Schema.Literal("function"),
  function: Schema.Struct({ name: Schema.String, arguments: Schema.String })
})

const CustomToolCall = Schema.Struct({
  id: NonEmptyString,
  type: Schema.Literal("custom"),
  custom: Schema.Struct({ name: Schema.String, input: Schema.String })
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
  content: Schema.optionalKey(Schema.NullOr(AssistantContent)),
  name: Schema.optionalKey(Schema.String),
  refusal: Schema.optionalKey(Schema.NullOr(Schema.String)),
  tool_calls: Schema.optionalKey(Schema.Array(taggedUnion("type", [FunctionToolCall, CustomToolCall]))),
  audio: Schema.optionalKey(Schema.NullOr(Schema.Struct({ id: Schema.String }))),
  function_call: Schema.optionalKey(Schema.NullOr(Schema.Struct({ name: Schema.String, arguments: Schema.String }))),
  // Response-only: what SDKs serialise when a client appends a returned message to its history as-is.
  annotations: Schema.optionalKey(Schema.NullOr(Schema.Array(JsonObject)))
}).check(
  Schema.makeFilter((message) =>
    // OpenAI itself answers a refusal with `content: null` and the text in `refusal`.
    message.content == null && (message.tool_calls === undefined || message.tool_calls.length === 0) &&
      message.refusal == null && message.function_call == null && message.audio == null
      ? { path: ["content"], issue: new SchemaIssue.InvalidValue({ message: "required unless tool_calls is present" }) }
      : undefined
  )
)

const ToolMessage = Schema.Struct({
  role: Schema.Literal("tool"),
  content: TextContent,
  tool_call_id: NonEmptyString,
  // Not in the SDK's type, but the API accepts it and LangChain sends it on every tool result.
  name: Schema.optionalKey(Schema.String)
})

/** The legacy result of a `functions` call. */
const FunctionMessage = Schema.Struct({
  role: Schema.Literal("function"),
  content: Schema.NullOr(Schema.String),
  name: Schema.String
})

const Message = taggedUnion("role", [
  SystemMessage,
  UserMessage,
  AssistantMessage,
  ToolMessage,
  DeveloperMessage,
  FunctionMessage
])

const FunctionDefinition = Schema.Struct({
  name: FunctionName,
  description: Schema.optionalKey(Schema.String),
  parameters: Schema.optionalKey(ObjectJsonSchema),
  strict: Schema.optionalKey(Schema.NullOr(Schema.Boolean))
})

const FunctionTool = Schema.Struct({ type: Schema.Literal("function"), function: FunctionDefinition })

const CustomTool = Schema.Struct({
  type: Schema.Literal("custom"),
  custom: Schema.Struct({
    name: FunctionName,
    description: Schema.optionalKey(Schema.String),
    format: Schema.optionalKey(taggedUnion("type", [
      Schema.Struct({ type: Schema.Literal("text") }),
      Schema.Struct({
        type: Schema.Literal("grammar"),
        grammar: Schema.Struct({ definition: Schema.String, syntax: Schema.String })
      })
    ]))
  })
})

const Tool = taggedUnion("type", [FunctionTool, CustomTool])

const NamedToolChoice = Schema.Struct({
  type: Schema.Literal("function"),
  function: Schema.Struct({ name: FunctionName })
})

const CustomToolChoice = Schema.Struct({
  type: Schema.Literal("custom"),
  custom: Schema.Struct({ name: FunctionName })
})

const AllowedToolsChoice = Schema.Struct({
  type: Schema.Literal("allowed_tools"),
  allowed_tools: Schema.Struct({
    mode: Schema.Literals(["auto", "required"]),
    tools: Schema.Array(JsonObject)
  })
})

const ToolChoice = Schema.Union([
  Schema.Literals(["auto", "none", "required"]),
  NamedToolChoice,
  CustomToolChoice,
  AllowedToolsChoice
]).annotate({
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

const PredictionText = Schema.Union([Schema.String, Schema.Array(taggedUnion("type", [TextPart]))])

const WebSearchOptions = Schema.Struct({
  search_context_size: Schema.optionalKey(Schema.String),
  user_location: nullable(Schema.Struct({
    type: Schema.Literal("approximate"),
    approximate: Schema.Struct({
      city: Schema.optionalKey(Schema.String),
      country: Schema.optionalKey(Schema.String),
      region: Schema.optionalKey(Schema.String),
      timezone: Schema.optionalKey(Schema.String)
    })
  }))
})

const ModerationMode = Schema.Struct({ mode: Schema.String })

/**
 * The request fields of `ChatCompletionCreateParams` (openai-node, see test/wire/sdk-fields.test.ts
 * for the check against the installed SDK). Value sets that OpenAI keeps growing (service tiers,
 * reasoning efforts, voices, cache TTLs) are plain strings: the vendor judges them on passthrough,
 * and a translator refuses a value it has no equivalent for.
 */
export const ChatRequestSchema = Schema.Struct({
  model: NonEmptyString,
  messages: Schema.Array(Message).check(
    Schema.makeFilter((messages: ReadonlyArray<unknown>) => messages.length > 0, { expected: "a non-empty array" })
  ),
  stream: nullable(Schema.Boolean),
  stream_options: nullable(Schema.Struct({
    include_usage: Schema.optionalKey(Schema.Boolean),
    include_obfuscation: Schema.optionalKey(Schema.Boolean)
  })),
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
  safety_identifier: nullable(Schema.String),
  n: Schema.optionalKey(Schema.NullOr(Schema.Literal(1)).annotate({ message: "only n = 1 is supported" })),
  seed: nullable(Int),
  presence_penalty: nullable(numberBetween(-2, 2)),
  frequency_penalty: nullable(numberBetween(-2, 2)),
  logit_bias: nullable(Schema.Record(Schema.String, numberBetween(-100, 100))),
  logprobs: nullable(Schema.Boolean),
  top_logprobs: nullable(Int),
  metadata: nullable(Schema.Record(Schema.String, Schema.String)),
  store: nullable(Schema.Boolean),
  service_tier: nullable(Schema.String),
  reasoning_effort: nullable(Schema.String),
  verbosity: nullable(Schema.String),
  modalities: nullable(Schema.Array(Schema.String)),
  audio: nullable(Schema.Struct({
    format: Schema.String,
    voice: Schema.Union([Schema.String, Schema.Struct({ id: Schema.String })])
  })),
  prediction: nullable(Schema.Struct({ type: Schema.Literal("content"), content: PredictionText })),
  prompt_cache_key: nullable(Schema.String),
  prompt_cache_retention: nullable(Schema.String),
  prompt_cache_options: Schema.optionalKey(Schema.Struct({
    mode: Schema.optionalKey(Schema.String),
    ttl: Schema.optionalKey(Schema.String)
  })),
  moderation: nullable(Schema.Struct({
    model: Schema.String,
    policy: nullable(Schema.Struct({ input: nullable(ModerationMode), output: nullable(ModerationMode) }))
  })),
  web_search_options: Schema.optionalKey(WebSearchOptions),
  functions: Schema.optionalKey(Schema.Array(FunctionDefinition.mapFields(({ strict: _, ...fields }) => fields))),
  function_call: Schema.optionalKey(
    Schema.Union([Schema.Literals(["none", "auto"]), Schema.Struct({ name: FunctionName })])
  )
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
export type ChatAssistantContent = typeof AssistantContent.Type
export type ChatTool = typeof Tool.Type
export type ChatFunctionTool = typeof FunctionTool.Type
export type ChatToolChoice = typeof ToolChoice.Type
export type ChatResponseFormat = typeof ResponseFormat.Type

const decodeRequest = makeDecoder(ChatRequestSchema)

/**
 * Validates a `/v1/chat/completions` body strictly: every field of the OpenAI format is accepted,
 * anything else is refused at any depth (spec 4.1); a failure names the offending field's path.
 */
export const decodeChatRequest = (body: unknown): DecodeResult<ChatRequest> => decodeRequest(body)

/**
 * What the gateway itself reads from a chat request it forwards unchanged: the model, the output
 * limits it clamps, streaming, the message roles and the tool names. Everything else stays in the
 * raw body (see `chatPassthroughBody`) for the upstream to judge.
 */
export const ChatPassthroughSchema = Schema.Struct({
  model: NonEmptyString,
  messages: Schema.Array(
    taggedUnion("role", ["system", "developer", "user", "assistant", "tool", "function"].map((role) =>
      Schema.Struct({ role: Schema.Literal(role) })
    ))
  ).check(
    Schema.makeFilter((messages: ReadonlyArray<unknown>) => messages.length > 0, { expected: "a non-empty array" })
  ),
  stream: nullable(Schema.Boolean),
  stream_options: nullable(Schema.Struct({ include_usage: Schema.optionalKey(Schema.Boolean) })),
  max_tokens: nullable(PositiveInt),
  max_completion_tokens: nullable(PositiveInt),
  tools: Schema.optionalKey(Schema.Array(Schema.Struct({
    type: Schema.String,
    function: Schema.optionalKey(Schema.Struct({ name: FunctionName }))
  })))
})

export type ChatPassthroughRequest = typeof ChatPassthroughSchema.Type

const decodePassthrough = makeDecoder(ChatPassthroughSchema, { excess: "ignore" })

/**
 * Validates only what the gateway relies on (`ChatPassthroughSchema`) and ignores the rest. For a
 * chat request bound for an OpenAI-kind provider whose fields the gateway does not police; the
 * `/v1/chat/completions` route itself stays strict (spec 4.1).
 */
export const decodeChatPassthrough = (body: unknown): DecodeResult<ChatPassthroughRequest> => decodePassthrough(body)

export interface PassthroughOptions {
  /** Upstream model id, replacing the one the client named. */
  readonly model: string
  /** The model's output-token cap. */
  readonly maxTokensCap: number
}

/**
 * The chat body to forward to an OpenAI-kind provider: the client's JSON as sent, with the model
 * id replaced, output limits above the cap clamped to it (the cap sent when there is none), and, on a stream, usage always asked
 * for, so the audit trail has tokens (the pipeline shows the usage chunk to the client only if it
 * asked too).
 */
export const chatPassthroughBody = (
  raw: Readonly<Record<string, unknown>>,
  options: PassthroughOptions
): Record<string, unknown> => {
  const body: Record<string, unknown> = { ...raw, model: options.model }
  let limited = false
  for (const field of ["max_tokens", "max_completion_tokens"]) {
    const value = raw[field]
    if (typeof value === "number") {
      limited = true
      if (value > options.maxTokensCap) body[field] = options.maxTokensCap
    } else if (value === null) {
      delete body[field]
    }
  }
  // The cap is the operator's cost ceiling (issue 22, finding 2): a request that names no limit
  // gets the cap, in the field OpenAI reads today (`max_tokens` is deprecated and refused by its
  // reasoning models), the same field the Messages translation sends.
  if (!limited) body["max_completion_tokens"] = options.maxTokensCap
  if (raw["stream"] === true) {
    const streamOptions = raw["stream_options"]
    body["stream_options"] = {
      ...(streamOptions !== null && typeof streamOptions === "object" ? streamOptions : {}),
      include_usage: true
    }
  }
  return body
}

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
  /**
   * Reasoning text as OpenAI-compatible servers stream it (vLLM, DeepSeek; not part of OpenAI's
   * own format, whose models keep reasoning hidden on this endpoint). The gateway writes it for
   * an Anthropic model's thinking; clients that do not know it ignore it.
   */
  readonly reasoning_content?: string | null
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
