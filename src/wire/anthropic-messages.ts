/**
 * The Anthropic Messages wire format (`POST /v1/messages`): the request schema the gateway
 * accepts, the response, and every stream event.
 *
 * Beyond the request fields themselves, the schema accepts what the Anthropic SDKs put on
 * content blocks when a client replays a previous response as history (`citations` on text,
 * `caller` on tool_use, thinking blocks), so the usual "append response.content" loop validates.
 */
import { Schema, SchemaIssue } from "effect"
import {
  type DecodeResult,
  discriminatedBy,
  JsonObject,
  makeDecoder,
  NonEmptyString,
  NonNegativeInt,
  numberBetween,
  openStruct,
  PositiveInt,
  RequiredObjectJsonSchema,
  taggedUnion
} from "./decode.ts"
import { clampOutputBudget, MIN_THINKING_BUDGET } from "./output-budget.ts"

const ToolUseId = Schema.String.check(
  Schema.isPattern(/^[a-zA-Z0-9_-]+$/, { expected: "an id matching ^[a-zA-Z0-9_-]+$" })
)

const ToolName = Schema.String.check(
  Schema.isPattern(/^[a-zA-Z0-9_-]{1,128}$/, { expected: "a name matching ^[a-zA-Z0-9_-]{1,128}$" })
)

const nullable = <S extends Schema.Top>(schema: S) => Schema.optionalKey(Schema.NullOr(schema))

const CacheControl = Schema.NullOr(
  Schema.Struct({
    type: Schema.Literal("ephemeral"),
    ttl: Schema.optionalKey(Schema.String)
  })
)

const cacheControl = { cache_control: Schema.optionalKey(CacheControl) }

const TextBlock = Schema.Struct({
  type: Schema.Literal("text"),
  text: Schema.String.check(Schema.isMinLength(1, { message: "text content blocks must be non-empty" })),
  ...cacheControl,
  // Citations replayed from an earlier response: references into documents, carried as sent.
  citations: Schema.optionalKey(Schema.NullOr(Schema.Array(JsonObject)))
})

const ImageMediaType = Schema.Literals(["image/jpeg", "image/png", "image/gif", "image/webp"])

const FileSource = Schema.Struct({ type: Schema.Literal("file"), file_id: NonEmptyString })

const ImageSource = taggedUnion("type", [
  Schema.Struct({ type: Schema.Literal("base64"), media_type: ImageMediaType, data: NonEmptyString }),
  Schema.Struct({ type: Schema.Literal("url"), url: NonEmptyString }),
  FileSource
])

const ImageBlock = Schema.Struct({
  type: Schema.Literal("image"),
  source: ImageSource,
  transformations: nullable(Schema.Struct({ oversized_image: nullable(Schema.String) })),
  ...cacheControl
})

const CitationsConfig = nullable(Schema.Struct({ enabled: Schema.optionalKey(Schema.Boolean) }))

const DocumentSource = taggedUnion("type", [
  Schema.Struct({ type: Schema.Literal("base64"), media_type: Schema.Literal("application/pdf"), data: NonEmptyString }),
  Schema.Struct({ type: Schema.Literal("text"), media_type: Schema.Literal("text/plain"), data: Schema.String }),
  Schema.Struct({
    type: Schema.Literal("content"),
    content: Schema.Union([Schema.String, Schema.Array(taggedUnion("type", [TextBlock, ImageBlock]))])
  }),
  Schema.Struct({ type: Schema.Literal("url"), url: NonEmptyString }),
  FileSource
])

const DocumentBlock = Schema.Struct({
  type: Schema.Literal("document"),
  source: DocumentSource,
  title: nullable(Schema.String),
  context: nullable(Schema.String),
  citations: CitationsConfig,
  ...cacheControl
})

const SearchResultBlock = Schema.Struct({
  type: Schema.Literal("search_result"),
  source: Schema.String,
  title: Schema.String,
  content: Schema.Array(TextBlock),
  citations: CitationsConfig,
  ...cacheControl
})

const ToolUseCaller = taggedUnion("type", [
  Schema.Struct({ type: Schema.Literal("direct") }),
  Schema.Struct({ type: Schema.Literal("code_execution_20250825"), tool_id: Schema.String }),
  Schema.Struct({ type: Schema.Literal("code_execution_20260120"), tool_id: Schema.String })
])

const ToolUseBlock = Schema.Struct({
  type: Schema.Literal("tool_use"),
  id: ToolUseId,
  name: NonEmptyString,
  input: JsonObject,
  caller: Schema.optionalKey(ToolUseCaller),
  toolset_name: nullable(Schema.String),
  ...cacheControl
})

/**
 * A client-side tool search's answer (Claude Code's ToolSearch): the named deferred tool is now
 * loaded into the model's context.
 */
const ToolReferenceBlock = Schema.Struct({
  type: Schema.Literal("tool_reference"),
  tool_name: NonEmptyString,
  ...cacheControl
})

/** Browser tool state, produced by Anthropic's browser toolset: carried whole. */
const OpaqueToolResultPart = openStruct({ type: Schema.Literal("browser_state") })

const ToolResultBlock = Schema.Struct({
  type: Schema.Literal("tool_result"),
  tool_use_id: ToolUseId,
  content: Schema.optionalKey(
    Schema.Union([
      Schema.String,
      Schema.Array(
        taggedUnion("type", [TextBlock, ImageBlock, DocumentBlock, SearchResultBlock, ToolReferenceBlock, OpaqueToolResultPart])
      )
    ]).annotate({ expected: "a string or an array of content blocks" })
  ),
  is_error: Schema.optionalKey(Schema.Boolean),
  toolset_name: nullable(Schema.String),
  ...cacheControl
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

/**
 * Blocks produced and consumed by Anthropic's own server-side machinery (server tools, MCP
 * connector, code execution, compaction, tool search...). A client replays them as it received
 * them; passthrough forwards them and translation refuses them by type, so their inside is not
 * modelled here.
 */
export const SERVER_BLOCK_TYPES = [
  "server_tool_use",
  "web_search_tool_result",
  "web_fetch_tool_result",
  "code_execution_tool_result",
  "bash_code_execution_tool_result",
  "text_editor_code_execution_tool_result",
  "tool_search_tool_result",
  "advisor_tool_result",
  "mcp_tool_use",
  "mcp_tool_result",
  "mcp_tool_listing",
  "container_upload",
  "compaction",
  "fallback",
  "tool_addition",
  "tool_removal"
] as const

const ServerBlock = openStruct({ type: Schema.Literals(SERVER_BLOCK_TYPES) })

/**
 * The beta types allow every block in either role; the API itself refuses misplaced ones (a
 * tool_result in an assistant turn). The translators do the same, by name.
 */
const ContentBlock = taggedUnion("type", [
  TextBlock,
  ImageBlock,
  DocumentBlock,
  SearchResultBlock,
  ToolUseBlock,
  ToolResultBlock,
  ThinkingBlock,
  RedactedThinkingBlock,
  ServerBlock
])

const Content = Schema.Union([Schema.String, Schema.Array(ContentBlock)]).annotate({
  expected: "a string or an array of content blocks"
})

const UserMessage = Schema.Struct({ role: Schema.Literal("user"), content: Content })

const AssistantMessage = Schema.Struct({ role: Schema.Literal("assistant"), content: Content })

const Effort = Schema.String

/**
 * A system message inside `messages` (beta `BetaSystemMessageParam`; Claude Code sends them):
 * instructions that take effect from that point of the conversation.
 */
const SystemMessage = Schema.Struct({
  role: Schema.Literal("system"),
  content: Schema.optionalKey(
    Schema.Union([
      Schema.String,
      Schema.Array(taggedUnion("type", [TextBlock, openStruct({ type: Schema.Literals(["tool_addition", "tool_removal"]) })]))
    ]).annotate({ expected: "a string or an array of text blocks" })
  ),
  clear_at: nullable(Schema.String),
  output_config: nullable(Schema.Struct({ effort: nullable(Effort) }))
})

const Message = taggedUnion("role", [UserMessage, AssistantMessage, SystemMessage])

const CustomTool = Schema.Struct({
  // First, so that a server tool type is reported by its type, not by what it lacks.
  type: Schema.optionalKey(Schema.NullOr(Schema.Literal("custom"))),
  name: ToolName,
  description: Schema.optionalKey(Schema.String),
  input_schema: RequiredObjectJsonSchema,
  input_examples: Schema.optionalKey(Schema.Array(JsonObject)),
  strict: Schema.optionalKey(Schema.Boolean),
  eager_input_streaming: nullable(Schema.Boolean),
  defer_loading: Schema.optionalKey(Schema.Boolean),
  allowed_callers: Schema.optionalKey(Schema.Array(Schema.String)),
  ...cacheControl
})

/**
 * Tools that Anthropic runs itself (web search, code execution, bash, computer use, MCP toolsets,
 * tool search...), each with its own options such as `max_uses`. Forwarded whole on passthrough,
 * refused by type when translating.
 */
export const SERVER_TOOL_TYPES = [
  "advisor_20260301",
  "bash_20241022",
  "bash_20250124",
  "browser_toolset_20260801",
  "code_execution_20250522",
  "code_execution_20250825",
  "code_execution_20260120",
  "code_execution_20260521",
  "computer_20241022",
  "computer_20250124",
  "computer_20251124",
  "computer_toolset_20260801",
  "mcp_toolset",
  "memory_20250818",
  "text_editor_20241022",
  "text_editor_20250124",
  "text_editor_20250429",
  "text_editor_20250728",
  "tool_search_tool_bm25",
  "tool_search_tool_bm25_20251119",
  "tool_search_tool_regex",
  "tool_search_tool_regex_20251119",
  "web_fetch_20250910",
  "web_fetch_20260209",
  "web_fetch_20260309",
  "web_fetch_20260318",
  "web_search_20250305",
  "web_search_20260209",
  "web_search_20260318"
] as const

const ServerTool = openStruct({ type: Schema.Literals(SERVER_TOOL_TYPES) })

const Tool = discriminatedBy(Schema.Union([CustomTool, ServerTool]), "type", ["custom", ...SERVER_TOOL_TYPES])

const disableParallel = Schema.optionalKey(Schema.Boolean)

const ToolChoice = taggedUnion("type", [
  Schema.Struct({ type: Schema.Literal("auto"), disable_parallel_tool_use: disableParallel }),
  Schema.Struct({ type: Schema.Literal("any"), disable_parallel_tool_use: disableParallel }),
  Schema.Struct({ type: Schema.Literal("tool"), name: NonEmptyString, disable_parallel_tool_use: disableParallel }),
  Schema.Struct({ type: Schema.Literal("none") })
])

const thinkingDelivery = {
  display: nullable(Schema.String),
  block_binding: nullable(Schema.Struct({ prefix_mismatch_behavior: nullable(Schema.String) }))
}

const Thinking = taggedUnion("type", [
  Schema.Struct({
    type: Schema.Literal("enabled"),
    budget_tokens: Schema.Number.check(
      Schema.makeFilter((n: number) => Number.isInteger(n) && n >= MIN_THINKING_BUDGET, {
        expected: `an integer >= ${MIN_THINKING_BUDGET}`
      })
    ),
    ...thinkingDelivery
  }),
  Schema.Struct({ type: Schema.Literal("disabled") }),
  Schema.Struct({ type: Schema.Literal("adaptive"), ...thinkingDelivery }),
  Schema.Struct({ type: Schema.Literal("between_tools") })
])

const JsonSchemaFormat = Schema.Struct({ type: Schema.Literal("json_schema"), schema: JsonObject })

const OutputConfig = Schema.Struct({
  effort: nullable(Effort),
  format: nullable(JsonSchemaFormat),
  task_budget: nullable(Schema.Struct({
    type: Schema.Literal("tokens"),
    total: PositiveInt,
    remaining: Schema.optionalKey(Schema.NullOr(NonNegativeInt))
  }))
})

const ContextEdit = openStruct({
  type: Schema.Literals(["clear_tool_uses_20250919", "clear_thinking_20251015", "compact_20260112"])
})

const McpServer = Schema.Struct({
  type: Schema.Literal("url"),
  url: NonEmptyString,
  name: NonEmptyString,
  authorization_token: nullable(Schema.String),
  tool_configuration: nullable(Schema.Struct({
    allowed_tools: nullable(Schema.Array(Schema.String)),
    enabled: nullable(Schema.Boolean)
  }))
})

const Container = Schema.Union([
  Schema.String,
  Schema.Struct({
    id: nullable(Schema.String),
    skills: nullable(Schema.Array(Schema.Struct({
      type: Schema.Literals(["anthropic", "custom"]),
      skill_id: Schema.String,
      version: Schema.optionalKey(Schema.String)
    })))
  })
])

/**
 * The body of `POST /v1/messages`: the beta `MessageCreateParams` of @anthropic-ai/sdk (checked
 * against the installed SDK by test/wire/sdk-fields.test.ts), minus its header params (`betas`,
 * `user_profile_id`, `workspace_id`), plus the sampling parameters (`temperature`, `top_p`,
 * `top_k`) that the newest types dropped but API version 2023-06-01 and every client still send.
 */
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
  thinking: Schema.optionalKey(Thinking),
  output_config: Schema.optionalKey(OutputConfig),
  output_format: nullable(JsonSchemaFormat),
  cache_control: Schema.optionalKey(CacheControl),
  context_management: nullable(Schema.Struct({ edits: Schema.optionalKey(Schema.Array(ContextEdit)) })),
  compaction: nullable(openStruct({ type: Schema.Literal("summarize") })),
  container: nullable(Container),
  mcp_servers: Schema.optionalKey(Schema.Array(McpServer)),
  service_tier: Schema.optionalKey(Schema.String),
  speed: nullable(Schema.String),
  inference_geo: nullable(Schema.String),
  diagnostics: nullable(Schema.Struct({ previous_message_id: nullable(Schema.String) })),
  billing_policy: nullable(openStruct({ type: Schema.Literal("billing_policy") })),
  fallback_credit_token: nullable(
    Schema.Union([Schema.String, Schema.Struct({ mode: Schema.optionalKey(Schema.String), token: Schema.String })])
  ),
  fallbacks: nullable(Schema.Array(JsonObject)),
  thread: nullable(openStruct({ type: Schema.Literals(["create", "continue"]) }))
}).check(
  Schema.makeFilter((request) =>
    request.thinking?.type === "enabled" && request.thinking.budget_tokens >= request.max_tokens
      ? {
        path: ["thinking", "budget_tokens"],
        issue: new SchemaIssue.InvalidValue({ message: "must be less than max_tokens" })
      }
      : undefined
  )
)

export type MessagesRequest = typeof MessagesRequestSchema.Type
export type MessagesMessage = MessagesRequest["messages"][number]
export type MessagesContentBlock = typeof ContentBlock.Type
/** Kept for the translators: every block may appear in either role. */
export type MessagesUserBlock = MessagesContentBlock
export type MessagesAssistantBlock = MessagesContentBlock
export type MessagesTextBlock = typeof TextBlock.Type
export type MessagesImageBlock = typeof ImageBlock.Type
export type MessagesDocumentBlock = typeof DocumentBlock.Type
export type MessagesSearchResultBlock = typeof SearchResultBlock.Type
export type MessagesToolResultBlock = typeof ToolResultBlock.Type
export type MessagesToolUseBlock = typeof ToolUseBlock.Type
export type MessagesTool = typeof Tool.Type
export type MessagesCustomTool = typeof CustomTool.Type
export type MessagesToolChoice = typeof ToolChoice.Type
export type MessagesThinking = typeof Thinking.Type

const decodeRequest = makeDecoder(MessagesRequestSchema)

/**
 * Validates a `/v1/messages` body strictly (for translation): every field of the Anthropic beta
 * format is accepted, anything else is refused at any depth; a failure names the field's path.
 */
export const decodeMessagesRequest = (body: unknown): DecodeResult<MessagesRequest> => decodeRequest(body)

/**
 * What the gateway itself reads from a messages request it forwards unchanged: the model, the
 * output limit and thinking budget it clamps, streaming, the message roles and the tool names.
 */
export const MessagesPassthroughSchema = Schema.Struct({
  model: NonEmptyString,
  max_tokens: PositiveInt,
  messages: Schema.Array(
    taggedUnion("role", ["user", "assistant", "system"].map((role) => Schema.Struct({ role: Schema.Literal(role) })))
  ).check(
    Schema.makeFilter((messages: ReadonlyArray<unknown>) => messages.length > 0, { expected: "a non-empty array" })
  ),
  stream: Schema.optionalKey(Schema.Boolean),
  tools: Schema.optionalKey(Schema.Array(Schema.Struct({ name: Schema.optionalKey(ToolName) }))),
  thinking: Schema.optionalKey(Schema.Struct({
    type: Schema.String,
    budget_tokens: Schema.optionalKey(PositiveInt)
  }))
})

export type MessagesPassthroughRequest = typeof MessagesPassthroughSchema.Type

const decodePassthrough = makeDecoder(MessagesPassthroughSchema, { excess: "ignore" })

/**
 * Validates only what the gateway relies on (`MessagesPassthroughSchema`) and ignores the rest:
 * for a request forwarded to an Anthropic-kind provider, which judges its own format.
 */
export const decodeMessagesPassthrough = (body: unknown): DecodeResult<MessagesPassthroughRequest> =>
  decodePassthrough(body)

/**
 * The messages body to forward to an Anthropic-kind provider: the client's JSON as sent, with the
 * model id replaced and `max_tokens` clamped to the model's cap, the thinking budget kept below it
 * (see `clampOutputBudget`). Fails, naming `thinking.budget_tokens`, when no valid budget is left.
 */
export const messagesPassthroughBody = (
  raw: Readonly<Record<string, unknown>>,
  options: { readonly model: string; readonly maxTokensCap: number }
): DecodeResult<Record<string, unknown>> => {
  const maxTokens = raw["max_tokens"]
  if (typeof maxTokens !== "number") return { ok: true, value: { ...raw, model: options.model } }
  const thinking = raw["thinking"]
  const thinkingObject = thinking !== null && typeof thinking === "object" ? thinking as Record<string, unknown> : undefined
  const budget = thinkingObject?.["type"] === "enabled" && typeof thinkingObject["budget_tokens"] === "number"
    ? thinkingObject["budget_tokens"]
    : undefined
  const clamped = clampOutputBudget({ max_tokens: maxTokens, budget_tokens: budget }, options.maxTokensCap)
  if (!clamped.ok) return clamped
  const body: Record<string, unknown> = { ...raw, model: options.model, max_tokens: clamped.value.max_tokens }
  if (thinkingObject !== undefined && clamped.value.budget_tokens !== budget) {
    body["thinking"] = { ...thinkingObject, budget_tokens: clamped.value.budget_tokens }
  }
  return { ok: true, value: body }
}

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
