/**
 * The OpenAI Responses wire format (`POST /v1/responses`): the request schema the gateway accepts,
 * and the response object and stream events it writes.
 *
 * The field lists come from the `openai` SDK's type definitions (`ResponseCreateParamsBase` in
 * `resources/responses/responses.d.ts` of the version in package.json), not from memory.
 *
 * Two decoders:
 * - `decodeResponsesRequest` is strict, for translation: every field of the format is accepted
 *   (a field that is part of the format is never refused for being unknown), a field that is not
 *   is refused by name at any depth. The parts the translator reads (messages and their content
 *   parts, function calls and outputs, reasoning items, function tools, `text`, `reasoning`) are
 *   typed field by field; other item and tool types (computer calls, hosted tools...) are checked
 *   only for a known `type` and kept opaque, because the translator refuses them by name anyway.
 * - `decodeResponsesPassthrough` is for forwarding to a provider that serves `/responses` itself:
 *   it checks what the gateway needs (`model`, `stream`, the shape of `input`) and keeps the rest
 *   as sent, so the vendor judges its own format.
 *
 * Items may omit `type`: the SDK types a bare `{role, content}` as a message and a bare `{id}` as
 * an item reference. The strict decoder fills the type in before validating, so the decoded
 * items always carry it.
 */
import { Effect, Predicate, Schema } from "effect"
import {
  type DecodeResult,
  Int,
  JsonObject,
  makeDecoder,
  NonEmptyString,
  NonNegativeInt,
  numberBetween,
  ObjectJsonSchema,
  PositiveInt,
  taggedUnion
} from "./decode.ts"


// --- request: shared pieces --------------------------------------------------------------------

const nullable = <S extends Schema.Top>(schema: S) => Schema.optionalKey(Schema.NullOr(schema))

/** Keeps any other fields of an object whose `type` names a known, untyped-here variant. */
const opaque = <const T extends string>(type: T) =>
  Schema.StructWithRest(Schema.Struct({ type: Schema.Literal(type) }), [Schema.Record(Schema.String, Schema.Unknown)])

/**
 * A union told apart by `type` whose members include opaque ones (not plain structs, so
 * `taggedUnion` cannot read their literal). The annotation is the one `taggedUnion` sets: an
 * unknown `type` is reported as "expected one of ...".
 */
const unionByType = <const Members extends ReadonlyArray<Schema.Top>>(values: ReadonlyArray<string>, members: Members) =>
  Schema.Union(members).annotate({
    "modelgate/discriminator": { key: "type", values: [...new Set(values)] },
    expected: "an object"
  })

const ImageDetail = Schema.Literals(["low", "high", "auto", "original"])
const FileDetail = Schema.Literals(["auto", "low", "high"])
const ItemStatus = Schema.Literals(["in_progress", "completed", "incomplete"])

const InputTextPart = Schema.Struct({
  type: Schema.Literal("input_text"),
  text: Schema.String,
  prompt_cache_breakpoint: nullable(JsonObject)
})

const InputImagePart = Schema.Struct({
  type: Schema.Literal("input_image"),
  // Required by the SDK's input type, optional in the tool-output variant: accepted either way.
  detail: nullable(ImageDetail),
  file_id: nullable(Schema.String),
  image_url: nullable(Schema.String),
  prompt_cache_breakpoint: nullable(JsonObject)
})

const InputFilePart = Schema.Struct({
  type: Schema.Literal("input_file"),
  detail: Schema.optionalKey(FileDetail),
  file_data: nullable(Schema.String),
  file_id: nullable(Schema.String),
  file_url: nullable(Schema.String),
  filename: nullable(Schema.String),
  prompt_cache_breakpoint: nullable(JsonObject)
})

/** What assistant messages replayed from an earlier response carry. */
const OutputTextPart = Schema.Struct({
  type: Schema.Literal("output_text"),
  text: Schema.String,
  annotations: Schema.optionalKey(Schema.Array(JsonObject)),
  logprobs: Schema.optionalKey(Schema.Array(JsonObject))
})

const RefusalPart = Schema.Struct({ type: Schema.Literal("refusal"), refusal: Schema.String })

const MessageContentPart = taggedUnion("type", [InputTextPart, InputImagePart, InputFilePart, OutputTextPart, RefusalPart])

const MessageContent = Schema.Union([Schema.String, Schema.Array(MessageContentPart)]).annotate({
  expected: "a string or an array of content parts"
})

const ToolOutputPart = taggedUnion("type", [InputTextPart, InputImagePart, InputFilePart])

const Caller = nullable(JsonObject)

// --- request: input items ----------------------------------------------------------------------

/** `EasyInputMessage`, `ResponseInputItem.Message` and `ResponseOutputMessage` in one. */
const MessageItem = Schema.Struct({
  type: Schema.Literal("message"),
  role: Schema.Literals(["user", "assistant", "system", "developer"]),
  content: MessageContent,
  id: nullable(Schema.String),
  status: nullable(ItemStatus),
  phase: nullable(Schema.Literals(["commentary", "final_answer"]))
})

const FunctionCallItem = Schema.Struct({
  type: Schema.Literal("function_call"),
  call_id: Schema.String,
  name: Schema.String,
  arguments: Schema.String,
  // `id` and `status` are not nullable in the SDK's types; clients written in other languages
  // serialise their absent optionals as null, which means the same.
  id: nullable(Schema.String),
  async: Schema.optionalKey(Schema.Boolean),
  caller: Caller,
  namespace: Schema.optionalKey(Schema.String),
  status: nullable(ItemStatus)
})

const FunctionCallOutputItem = Schema.Struct({
  type: Schema.Literal("function_call_output"),
  output: Schema.Union([Schema.String, Schema.Array(ToolOutputPart)]).annotate({
    expected: "a string or an array of content parts"
  }),
  call_id: nullable(Schema.String),
  id: nullable(Schema.String),
  caller: Caller,
  name: nullable(Schema.String),
  namespace: nullable(Schema.String),
  status: nullable(ItemStatus)
})

const ReasoningItem = Schema.Struct({
  type: Schema.Literal("reasoning"),
  // Required by the SDK; clients that replay items they built themselves sometimes omit it, or
  // send absent optionals as null.
  id: nullable(Schema.String),
  summary: Schema.Array(Schema.Struct({ type: Schema.Literal("summary_text"), text: Schema.String })),
  content: nullable(Schema.Array(Schema.Struct({ type: Schema.Literal("reasoning_text"), text: Schema.String }))),
  encrypted_content: nullable(Schema.String),
  status: nullable(ItemStatus)
})

const ItemReference = Schema.Struct({ type: Schema.Literal("item_reference"), id: Schema.String })

/** Input item types of the format that the gateway does not model field by field. */
export const OPAQUE_ITEM_TYPES = [
  "file_search_call",
  "computer_call",
  "computer_call_output",
  "web_search_call",
  "tool_search_call",
  "tool_search_output",
  "additional_tools",
  "configuration_update",
  "compaction",
  "image_generation_call",
  "code_interpreter_call",
  "local_shell_call",
  "local_shell_call_output",
  "shell_call",
  "shell_call_output",
  "apply_patch_call",
  "apply_patch_call_output",
  "mcp_list_tools",
  "mcp_approval_request",
  "mcp_approval_response",
  "mcp_call",
  "custom_tool_call_output",
  "custom_tool_call",
  "compaction_trigger",
  "program",
  "program_output"
] as const

const InputItem = unionByType(
  ["message", "function_call", "function_call_output", "reasoning", "item_reference", ...OPAQUE_ITEM_TYPES],
  [MessageItem, FunctionCallItem, FunctionCallOutputItem, ReasoningItem, ItemReference, ...OPAQUE_ITEM_TYPES.map(opaque)]
)

// --- request: tools ----------------------------------------------------------------------------

const FunctionTool = Schema.Struct({
  type: Schema.Literal("function"),
  name: Schema.String.check(
    Schema.isPattern(/^[a-zA-Z0-9_-]{1,64}$/, { expected: "a name matching ^[a-zA-Z0-9_-]{1,64}$" })
  ),
  // Both required (nullable) by the SDK; optional here as clients commonly leave them out.
  parameters: nullable(ObjectJsonSchema),
  strict: nullable(Schema.Boolean),
  description: nullable(Schema.String),
  allowed_callers: nullable(Schema.Array(Schema.Literals(["direct", "programmatic"]))),
  async: Schema.optionalKey(Schema.Boolean),
  defer_loading: Schema.optionalKey(Schema.Boolean),
  output_schema: nullable(JsonObject)
})

/** Tool types of the format other than `function`: hosted tools, custom and namespaced tools. */
export const OPAQUE_TOOL_TYPES = [
  "file_search",
  "computer",
  "computer_use_preview",
  "web_search",
  "web_search_2025_08_26",
  "mcp",
  "code_interpreter",
  "programmatic_tool_calling",
  "image_generation",
  "local_shell",
  "shell",
  "custom",
  "namespace",
  "tool_search",
  "web_search_preview",
  "web_search_preview_2025_03_11",
  "apply_patch"
] as const

const Tool = unionByType(["function", ...OPAQUE_TOOL_TYPES], [FunctionTool, ...OPAQUE_TOOL_TYPES.map(opaque)])

const FunctionToolChoice = Schema.Struct({ type: Schema.Literal("function"), name: Schema.String })

const AllowedToolsChoice = Schema.Struct({
  type: Schema.Literal("allowed_tools"),
  mode: Schema.Literals(["auto", "required"]),
  tools: Schema.Array(JsonObject)
})

/** `tool_choice` objects that force a hosted, MCP, custom or shell tool. */
export const OPAQUE_TOOL_CHOICE_TYPES = [
  "file_search",
  "web_search_preview",
  "computer",
  "computer_use_preview",
  "computer_use",
  "web_search_preview_2025_03_11",
  "image_generation",
  "code_interpreter",
  "mcp",
  "custom",
  "apply_patch",
  "shell",
  "programmatic_tool_calling"
] as const

const ToolChoice = Schema.Union([
  Schema.Literals(["none", "auto", "required"]),
  unionByType(
    ["function", "allowed_tools", ...OPAQUE_TOOL_CHOICE_TYPES],
    [FunctionToolChoice, AllowedToolsChoice, ...OPAQUE_TOOL_CHOICE_TYPES.map(opaque)]
  )
]).annotate({ expected: 'one of none, auto, required or an object with a "type"' })

// --- request: text, reasoning and the rest -----------------------------------------------------

const TextFormat = taggedUnion("type", [
  Schema.Struct({ type: Schema.Literal("text") }),
  Schema.Struct({ type: Schema.Literal("json_object") }),
  Schema.Struct({
    type: Schema.Literal("json_schema"),
    name: Schema.String.check(
      Schema.isPattern(/^[a-zA-Z0-9_-]{1,64}$/, { expected: "a name matching ^[a-zA-Z0-9_-]{1,64}$" })
    ),
    schema: JsonObject,
    description: Schema.optionalKey(Schema.String),
    strict: nullable(Schema.Boolean)
  })
])

const TextConfig = Schema.Struct({
  format: Schema.optionalKey(TextFormat),
  verbosity: nullable(Schema.Literals(["low", "medium", "high"]))
})

export const REASONING_EFFORTS = ["none", "minimal", "low", "medium", "high", "xhigh", "max"] as const
export type ReasoningEffort = typeof REASONING_EFFORTS[number]

const Reasoning = Schema.Struct({
  effort: nullable(Schema.Literals(REASONING_EFFORTS)),
  summary: nullable(Schema.Literals(["auto", "concise", "detailed"])),
  generate_summary: nullable(Schema.Literals(["auto", "concise", "detailed"])),
  context: nullable(Schema.Literals(["auto", "current_turn", "all_turns"])),
  mode: Schema.optionalKey(Schema.String)
})

const Includable = Schema.Literals([
  "file_search_call.results",
  "web_search_call.results",
  "web_search_call.action.sources",
  "message.input_image.image_url",
  "computer_call_output.output.image_url",
  "code_interpreter_call.outputs",
  "reasoning.encrypted_content",
  "message.output_text.logprobs"
])

const ModerationMode = Schema.Struct({ mode: Schema.Literals(["score", "block"]) })

/** Every top-level field of `ResponseCreateParamsBase`. */
export const ResponsesRequestSchema = Schema.Struct({
  access_programs: Schema.optionalKey(
    Schema.Struct({ cyber: Schema.optionalKey(Schema.Literals(["standard", "daybreak_blue", "daybreak_red"])) })
  ),
  background: nullable(Schema.Boolean),
  context_management: nullable(
    Schema.Array(Schema.Struct({ type: Schema.String, compact_threshold: nullable(Schema.Number) }))
  ),
  conversation: nullable(Schema.Union([Schema.String, Schema.Struct({ id: Schema.String })])),
  image: Schema.optionalKey(
    Schema.Struct({ context_compression: Schema.optionalKey(Schema.Literals(["auto", "enabled", "disabled"])) })
  ),
  include: nullable(Schema.Array(Includable)),
  input: Schema.optionalKey(
    Schema.Union([Schema.String, Schema.Array(InputItem)]).annotate({ expected: "a string or an array of input items" })
  ),
  instructions: nullable(Schema.String),
  max_output_tokens: nullable(PositiveInt),
  max_tool_calls: nullable(NonNegativeInt),
  metadata: nullable(Schema.Record(Schema.String, Schema.String)),
  // Optional in the SDK (a stored prompt may name it); the gateway routes on it, so it is required.
  model: NonEmptyString,
  moderation: nullable(
    Schema.Struct({
      model: Schema.String,
      policy: nullable(Schema.Struct({ input: nullable(ModerationMode), output: nullable(ModerationMode) }))
    })
  ),
  parallel_tool_calls: nullable(Schema.Boolean),
  previous_response_id: nullable(Schema.String),
  prompt: nullable(
    Schema.Struct({
      id: Schema.String,
      variables: nullable(Schema.Record(Schema.String, Schema.Unknown)),
      version: nullable(Schema.String)
    })
  ),
  prompt_cache_key: nullable(Schema.String),
  /**
   * Not in the SDK's types, but sent by Codex CLI on every request (its installation, session
   * and turn ids) and accepted by the API: request tags that do not change the answer.
   */
  client_metadata: nullable(Schema.Record(Schema.String, Schema.String)),
  prompt_cache_options: Schema.optionalKey(
    Schema.Struct({
      comparison_response_id: nullable(Schema.String),
      mode: Schema.optionalKey(Schema.Literals(["implicit", "explicit"])),
      prewarm: Schema.optionalKey(Schema.Boolean),
      ttl: Schema.optionalKey(Schema.Literals(["30m", "12h"]))
    })
  ),
  prompt_cache_retention: nullable(Schema.Literals(["in_memory", "24h"])),
  reasoning: nullable(Reasoning),
  safety_identifier: nullable(Schema.String),
  service_tier: nullable(Schema.Literals(["auto", "default", "flex", "scale", "priority", "fast", "ultrafast"])),
  store: nullable(Schema.Boolean),
  stream: nullable(Schema.Boolean),
  stream_options: nullable(Schema.Struct({ include_obfuscation: Schema.optionalKey(Schema.Boolean) })),
  temperature: nullable(numberBetween(0, 2)),
  text: Schema.optionalKey(TextConfig),
  tool_choice: Schema.optionalKey(ToolChoice),
  tools: Schema.optionalKey(Schema.Array(Tool)),
  top_logprobs: nullable(Int.check(Schema.makeFilter((n: number) => n >= 0 && n <= 20, { expected: "an integer between 0 and 20" }))),
  top_p: nullable(numberBetween(0, 1)),
  truncation: nullable(Schema.Literals(["auto", "disabled"])),
  user: Schema.optionalKey(Schema.String)
})

/** The top-level request fields the format defines (the keys of `ResponseCreateParamsBase`). */
export const RESPONSES_REQUEST_FIELDS: ReadonlyArray<string> = Object.keys(ResponsesRequestSchema.fields)

export type ResponsesRequest = typeof ResponsesRequestSchema.Type
export type ResponsesInputItem = Extract<ResponsesRequest["input"], ReadonlyArray<unknown>>[number]
export type ResponsesMessageItem = typeof MessageItem.Type
export type ResponsesMessagePart = typeof MessageContentPart.Type
export type ResponsesFunctionCallItem = typeof FunctionCallItem.Type
export type ResponsesFunctionCallOutputItem = typeof FunctionCallOutputItem.Type
export type ResponsesToolOutputPart = typeof ToolOutputPart.Type
export type ResponsesTool = typeof Tool.Type
export type ResponsesFunctionTool = typeof FunctionTool.Type
export type ResponsesToolChoice = typeof ToolChoice.Type
export type ResponsesTextFormat = typeof TextFormat.Type

/** A bare `{role, content}` is a message, a bare `{id}` an item reference (SDK types). */
const withItemTypes = (body: unknown): unknown => {
  if (!Predicate.isObject(body) || !Array.isArray(body["input"])) return body
  const input = (body["input"] as ReadonlyArray<unknown>).map((item) => {
    if (!Predicate.isObject(item) || (item["type"] !== undefined && item["type"] !== null)) return item
    return { ...item, type: "role" in item ? "message" : "item_reference" }
  })
  return { ...body, input }
}

const decodeStrict = makeDecoder(ResponsesRequestSchema)

/** Validates a `/v1/responses` body for translation; a failure names the offending field's path. */
export const decodeResponsesRequest = (body: unknown): DecodeResult<ResponsesRequest> => decodeStrict(withItemTypes(body))

/**
 * Items or tools decoded per turn of the event loop by `decodeResponsesRequestInSlices`: a 1 MiB
 * body holds up to about 20,000 items, which decoded at once held the loop 50-200 ms (issue 32).
 */
export const DECODE_SLICE = 256

const decodeItemSlice = makeDecoder(Schema.Array(InputItem))
const decodeToolSlice = makeDecoder(Schema.Array(Tool))

/**
 * `decodeResponsesRequest`, giving the event loop a turn every DECODE_SLICE items and tools. The
 * same value and the same refusals (path and message), except which problem is named first when
 * a body has several: the fields other than `input` and `tools` are checked first.
 */
export const decodeResponsesRequestInSlices: (body: unknown) => Effect.Effect<DecodeResult<ResponsesRequest>> = Effect.fnUntraced(function*(body: unknown) {
  const typed = withItemTypes(body)
  if (!Predicate.isObject(typed) || Array.isArray(typed)) return decodeStrict(typed)
  const sliced = (["input", "tools"] as const).filter((field) => Array.isArray(typed[field]) && (typed[field] as Array<unknown>).length > DECODE_SLICE)
  if (sliced.length === 0) return decodeStrict(typed)
  const rest: Record<string, unknown> = { ...typed }
  for (const field of sliced) rest[field] = []
  const head = decodeStrict(rest)
  if (!head.ok) return head
  const value: Record<string, unknown> = { ...head.value }
  for (const field of sliced) {
    const all = typed[field] as ReadonlyArray<unknown>
    const decoded: Array<unknown> = []
    for (let start = 0; start < all.length; start += DECODE_SLICE) {
      yield* Effect.yieldNow
      const slice = (field === "input" ? decodeItemSlice : decodeToolSlice)(all.slice(start, start + DECODE_SLICE))
      if (!slice.ok) {
        // The slice's path starts with the index in the slice: the body's is `field.(start + index)`.
        const [index, ...inner] = slice.path.split(".")
        const path = [field, String(start + Number(index)), ...inner].join(".")
        return { ok: false, path, message: path + slice.message.slice(slice.path.length) }
      }
      for (const item of slice.value) decoded.push(item)
    }
    value[field] = decoded
  }
  return { ok: true, value: value as ResponsesRequest }
})

const PassthroughSchema = Schema.StructWithRest(
  Schema.Struct({
    model: NonEmptyString,
    stream: nullable(Schema.Boolean),
    input: Schema.optionalKey(
      Schema.Union([Schema.String, Schema.Array(JsonObject)]).annotate({ expected: "a string or an array of input items" })
    )
  }),
  [Schema.Record(Schema.String, Schema.Unknown)]
)

export type ResponsesPassthroughRequest = typeof PassthroughSchema.Type

const decodePassthrough = makeDecoder(PassthroughSchema)

/**
 * Validates a `/v1/responses` body that will be forwarded to a provider serving `/responses`:
 * only `model`, `stream` and the shape of `input`; every other field is kept as sent.
 */
export const decodeResponsesPassthrough = (body: unknown): DecodeResult<ResponsesPassthroughRequest> => {
  // Input items are only checked to be objects: with a loop rather than the schema, which held the
  // event loop for tens of milliseconds on the 20,000 items a 1 MiB body can hold (issue 32).
  if (Predicate.isObject(body) && !Array.isArray(body) && Array.isArray(body["input"]) && (body["input"] as Array<unknown>).every(isJsonObject)) {
    const { input, ...rest } = body as Record<string, unknown>
    const decoded = decodePassthrough(rest)
    return decoded.ok ? { ok: true, value: { ...decoded.value, input: input as ResponsesPassthroughRequest["input"] } } : decoded
  }
  return decodePassthrough(body)
}

const isJsonObject = (value: unknown): boolean => typeof value === "object" && value !== null && !Array.isArray(value)

// --- response object ---------------------------------------------------------------------------

export type ResponsesStatus = "completed" | "failed" | "in_progress" | "cancelled" | "queued" | "incomplete"

export interface ResponsesOutputText {
  readonly type: "output_text"
  readonly text: string
  readonly annotations: ReadonlyArray<unknown>
  readonly logprobs: ReadonlyArray<unknown>
}

export interface ResponsesOutputRefusal {
  readonly type: "refusal"
  readonly refusal: string
}

export type ResponsesOutputContent = ResponsesOutputText | ResponsesOutputRefusal

export interface ResponsesOutputMessage {
  readonly type: "message"
  readonly id: string
  readonly role: "assistant"
  readonly status: "in_progress" | "completed" | "incomplete"
  readonly content: ReadonlyArray<ResponsesOutputContent>
}

export interface ResponsesFunctionCall {
  readonly type: "function_call"
  readonly id: string
  readonly call_id: string
  readonly name: string
  readonly arguments: string
  readonly status: "in_progress" | "completed" | "incomplete"
}

export interface ResponsesReasoningText {
  readonly type: "reasoning_text"
  readonly text: string
}

export interface ResponsesReasoning {
  readonly type: "reasoning"
  readonly id: string
  readonly summary: ReadonlyArray<{ readonly type: "summary_text"; readonly text: string }>
  readonly content?: ReadonlyArray<ResponsesReasoningText>
  readonly encrypted_content?: string | null
  readonly status?: "in_progress" | "completed" | "incomplete"
}

export type ResponsesOutputItem = ResponsesOutputMessage | ResponsesFunctionCall | ResponsesReasoning

export interface ResponsesUsage {
  readonly input_tokens: number
  readonly input_tokens_details: { readonly cached_tokens: number; readonly cache_write_tokens: number }
  readonly output_tokens: number
  readonly output_tokens_details: { readonly reasoning_tokens: number }
  readonly total_tokens: number
}

export type ResponsesIncompleteReason = "max_output_tokens" | "content_filter"

/** `ResponseError`; `code` also carries the gateway's own slugs on a failed stream. */
export interface ResponsesError {
  readonly code: string
  readonly message: string
}

export interface ResponsesResponse {
  readonly id: string
  readonly object: "response"
  readonly created_at: number
  readonly status: ResponsesStatus
  readonly completed_at?: number | null
  readonly background: boolean
  readonly error: ResponsesError | null
  readonly incomplete_details: { readonly reason: ResponsesIncompleteReason } | null
  readonly instructions: string | null
  readonly max_output_tokens: number | null
  readonly max_tool_calls: number | null
  readonly model: string
  readonly output: ReadonlyArray<ResponsesOutputItem>
  readonly parallel_tool_calls: boolean
  readonly previous_response_id: string | null
  readonly prompt_cache_key: string | null
  readonly reasoning: { readonly effort: string | null; readonly summary: string | null }
  readonly safety_identifier: string | null
  readonly service_tier: string | null
  readonly store: boolean
  readonly temperature: number | null
  readonly text: { readonly format: unknown; readonly verbosity: string | null }
  readonly tool_choice: unknown
  readonly tools: ReadonlyArray<unknown>
  readonly top_logprobs: number | null
  readonly top_p: number | null
  readonly truncation: "auto" | "disabled"
  readonly usage: ResponsesUsage | null
  readonly user: string | null
  readonly metadata: Readonly<Record<string, string>>
}

// --- stream events -----------------------------------------------------------------------------

interface Sequenced {
  readonly sequence_number: number
}

export interface ResponsesLifecycleEvent extends Sequenced {
  readonly type: "response.created" | "response.in_progress" | "response.completed" | "response.incomplete" | "response.failed"
  readonly response: ResponsesResponse
}

export interface ResponsesOutputItemEvent extends Sequenced {
  readonly type: "response.output_item.added" | "response.output_item.done"
  readonly output_index: number
  readonly item: ResponsesOutputItem
}

export interface ResponsesContentPartEvent extends Sequenced {
  readonly type: "response.content_part.added" | "response.content_part.done"
  readonly item_id: string
  readonly output_index: number
  readonly content_index: number
  readonly part: ResponsesOutputContent | ResponsesReasoningText
}

export interface ResponsesTextDeltaEvent extends Sequenced {
  readonly type: "response.output_text.delta"
  readonly item_id: string
  readonly output_index: number
  readonly content_index: number
  readonly delta: string
  readonly logprobs: ReadonlyArray<unknown>
}

export interface ResponsesTextDoneEvent extends Sequenced {
  readonly type: "response.output_text.done"
  readonly item_id: string
  readonly output_index: number
  readonly content_index: number
  readonly text: string
  readonly logprobs: ReadonlyArray<unknown>
}

export interface ResponsesRefusalDeltaEvent extends Sequenced {
  readonly type: "response.refusal.delta"
  readonly item_id: string
  readonly output_index: number
  readonly content_index: number
  readonly delta: string
}

export interface ResponsesRefusalDoneEvent extends Sequenced {
  readonly type: "response.refusal.done"
  readonly item_id: string
  readonly output_index: number
  readonly content_index: number
  readonly refusal: string
}

export interface ResponsesReasoningDeltaEvent extends Sequenced {
  readonly type: "response.reasoning_text.delta"
  readonly item_id: string
  readonly output_index: number
  readonly content_index: number
  readonly delta: string
}

export interface ResponsesReasoningDoneEvent extends Sequenced {
  readonly type: "response.reasoning_text.done"
  readonly item_id: string
  readonly output_index: number
  readonly content_index: number
  readonly text: string
}

export interface ResponsesArgumentsDeltaEvent extends Sequenced {
  readonly type: "response.function_call_arguments.delta"
  readonly item_id: string
  readonly output_index: number
  readonly delta: string
}

export interface ResponsesArgumentsDoneEvent extends Sequenced {
  readonly type: "response.function_call_arguments.done"
  readonly item_id: string
  readonly output_index: number
  readonly arguments: string
}

/**
 * The in-band failure (`ResponseErrorEvent`). Extra fields (the gateway's error envelope) may
 * ride along: the SDKs read `code`, `message` and `param` and keep the rest on the error.
 */
export interface ResponsesErrorEvent extends Sequenced {
  readonly type: "error"
  readonly code: string | null
  readonly message: string
  readonly param: string | null
  readonly [extra: string]: unknown
}

export type ResponsesStreamEvent =
  | ResponsesLifecycleEvent
  | ResponsesOutputItemEvent
  | ResponsesContentPartEvent
  | ResponsesTextDeltaEvent
  | ResponsesTextDoneEvent
  | ResponsesRefusalDeltaEvent
  | ResponsesRefusalDoneEvent
  | ResponsesReasoningDeltaEvent
  | ResponsesReasoningDoneEvent
  | ResponsesArgumentsDeltaEvent
  | ResponsesArgumentsDoneEvent
  | ResponsesErrorEvent
