// A fake OpenAI upstream for `POST /v1/responses` and `POST /v1/embeddings`: validates requests
// the way api.openai.com does (unknown parameters, item and tool shapes, tool outputs without
// their call, unknown `previous_response_id`) and answers in the exact JSON and SSE formats the
// openai SDK's types describe. Like the real API it stores responses (unless `store: false`), so
// `previous_response_id` works when requests are forwarded to it unchanged.
//
// Its own server (`startFakeOpenAIResponses`), or its hooks (`openaiResponsesHooks`) for
// `startFake`. Scenarios are those of fake-common.ts; on /embeddings, `text` and `tool_calls`
// both mean "answer normally".
import { createHash } from "node:crypto"
import {
  countWords,
  isNumber,
  isRecord,
  longText,
  randomHex,
  randomId,
  splitFragments,
  splitWords,
  startFake,
  takeWords,
  writeFrames
} from "./fake-common.ts"
import type {
  FakeOptions,
  FakeUpstream,
  JsonBody,
  RecordedRequest,
  Refusal,
  ResponseContext,
  Scenario,
  TextScenario,
  ToolCallsScenario,
  VendorHooks
} from "./fake-common.ts"

export type * from "./fake-common.ts"

/** Top-level fields of `ResponseCreateParamsBase` (openai-node 7.57). */
const RESPONSES_PARAMS = new Set([
  "access_programs",
  "background",
  // Absent from the SDK's types, but Codex CLI sends it on every request and the API takes it.
  "client_metadata",
  "context_management",
  "conversation",
  "image",
  "include",
  "input",
  "instructions",
  "max_output_tokens",
  "max_tool_calls",
  "metadata",
  "model",
  "moderation",
  "parallel_tool_calls",
  "previous_response_id",
  "prompt",
  "prompt_cache_key",
  "prompt_cache_options",
  "prompt_cache_retention",
  "reasoning",
  "safety_identifier",
  "service_tier",
  "store",
  "stream",
  "stream_options",
  "temperature",
  "text",
  "tool_choice",
  "tools",
  "top_logprobs",
  "top_p",
  "truncation",
  "user"
])

const ITEM_TYPES = new Set([
  "message",
  "function_call",
  "function_call_output",
  "reasoning",
  "item_reference",
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
])

const TOOL_TYPES = new Set([
  "function",
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
])

const ROLES = new Set(["user", "assistant", "system", "developer"])
const PART_TYPES = new Set(["input_text", "input_image", "input_file", "output_text", "refusal"])
const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/
const EMBEDDING_PARAMS = new Set(["model", "input", "dimensions", "encoding_format", "user"])

interface Stored {
  /** Input items and output items of the response and of the responses it continued. */
  readonly history: ReadonlyArray<JsonBody>
}

export const openaiResponsesHooks = (options: FakeOptions): VendorHooks => {
  const stored = new Map<string, Stored>()
  // The respond hook sees the body, not the path: remember which endpoint each body came to.
  const embeddingBodies = new WeakSet<object>()
  return {
    basePath: "/v1",
    commonHeaders: () => ({
      "x-request-id": `req_${randomHex(16)}`,
      "openai-version": "2020-10-01",
      "openai-processing-ms": "7"
    }),
    refuse: (req) => {
      if (isRecord(req.body) && req.path.split("?")[0] === "/v1/embeddings") embeddingBodies.add(req.body)
      return refuse(req, options, stored)
    },
    defaultScenario: (body) =>
      embeddingBodies.has(body) ? { kind: "text", text: "" } : { kind: "text", text: `echo: ${lastUserText(body, stored)}` },
    respond: (ctx, scenario) => respond(ctx, scenario, stored, embeddingBodies.has(ctx.body))
  }
}

export const startFakeOpenAIResponses = (options: FakeOptions): Promise<FakeUpstream> =>
  startFake(options, openaiResponsesHooks(options))

// ---------------------------------------------------------------------------------------------
// Validation

const openaiError = (
  status: number,
  message: string,
  type: string,
  param: string | null = null,
  code: string | null = null
): Refusal => ({ status, body: { error: { message, type, param, code } } })

const invalid = (message: string, param: string | null = null, code: string | null = null): Refusal =>
  openaiError(400, message, "invalid_request_error", param, code)

const jsonType = (value: unknown): string =>
  value === null ? "null" : Array.isArray(value) ? "array" : typeof value === "number" ? "number" : typeof value

const wrongType = (param: string, expected: string, value: unknown): Refusal =>
  invalid(`Invalid type for '${param}': expected ${expected}, but got ${jsonType(value)} instead.`, param, "invalid_type")

const missing = (param: string): Refusal => invalid(`Missing required parameter: '${param}'.`, param, "missing_required_parameter")

const unknownParameter = (param: string): Refusal => invalid(`Unknown parameter: '${param}'.`, param, "unknown_parameter")

const range = (param: string, value: unknown, min: number, max: number, integer = false): Refusal | undefined => {
  if (value === undefined || value === null) return undefined
  if (!isNumber(value) || (integer && !Number.isInteger(value))) return wrongType(param, integer ? "an integer" : "a decimal", value)
  const kind = integer ? "integer" : "decimal"
  if (value < min) {
    return invalid(`Invalid '${param}': ${kind} below minimum value. Expected a value >= ${min}, but got ${value} instead.`, param, `${kind}_below_min_value`)
  }
  if (value > max) {
    return invalid(`Invalid '${param}': ${kind} above maximum value. Expected a value <= ${max}, but got ${value} instead.`, param, `${kind}_above_max_value`)
  }
  return undefined
}

const maskKey = (key: string): string => (key.length <= 8 ? "*".repeat(key.length) : `${key.slice(0, 3)}*****${key.slice(-4)}`)

const refuse = (req: RecordedRequest, options: FakeOptions, stored: Map<string, Stored>): Refusal | undefined => {
  const pathname = req.path.split("?")[0]
  const known = pathname === "/v1/responses" || pathname === "/v1/embeddings"
  if (req.method !== "POST" || !known) return openaiError(404, `Invalid URL (${req.method} ${pathname})`, "invalid_request_error")
  const auth = req.headers.authorization
  const key = auth === undefined ? undefined : /^Bearer (.+)$/.exec(auth)?.[1]?.trim()
  if (key !== options.apiKey) {
    return openaiError(
      401,
      key === undefined
        ? "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
        : `Incorrect API key provided: ${maskKey(key)}. You can find your API key at https://platform.openai.com/account/api-keys.`,
      "invalid_request_error",
      null,
      "invalid_api_key"
    )
  }
  const body = req.body
  if (!isRecord(body)) {
    return invalid("We could not parse the JSON body of your request. The OpenAI API expects a JSON payload.")
  }
  const refusal = pathname === "/v1/embeddings" ? validateEmbeddings(body) : validateResponses(body, stored)
  if (refusal !== undefined) return refusal
  if (options.models !== undefined && !options.models.includes(String(body.model))) {
    return openaiError(404, `The model \`${body.model}\` does not exist or you do not have access to it.`, "invalid_request_error", null, "model_not_found")
  }
  return undefined
}

const validateResponses = (body: JsonBody, stored: Map<string, Stored>): Refusal | undefined => {
  for (const key of Object.keys(body)) if (!RESPONSES_PARAMS.has(key)) return unknownParameter(key)
  if (body.model === undefined || body.model === null || body.model === "") return missing("model")
  if (typeof body.model !== "string") return wrongType("model", "a string", body.model)
  if (body.stream != null && typeof body.stream !== "boolean") return wrongType("stream", "a boolean", body.stream)
  const numeric =
    range("temperature", body.temperature, 0, 2) ??
    range("top_p", body.top_p, 0, 1) ??
    range("max_output_tokens", body.max_output_tokens, 16, Number.MAX_SAFE_INTEGER, true) ??
    range("top_logprobs", body.top_logprobs, 0, 20, true)
  if (numeric !== undefined) return numeric

  let history: ReadonlyArray<JsonBody> = []
  if (body.previous_response_id != null) {
    const previous = stored.get(String(body.previous_response_id))
    if (previous === undefined) {
      return invalid(`Previous response with id '${body.previous_response_id}' not found.`, "previous_response_id", "previous_response_not_found")
    }
    history = previous.history
  }
  if (body.input === undefined && body.prompt == null && body.previous_response_id == null) return missing("input")
  const input = body.input
  if (input !== undefined && typeof input !== "string") {
    if (!Array.isArray(input)) return wrongType("input", "a string or array", input)
    const calls = new Set(history.filter((item) => item.type === "function_call").map((item) => item.call_id))
    for (let i = 0; i < input.length; i++) {
      const refusal = validateItem(input[i], `input[${i}]`, calls)
      if (refusal !== undefined) return refusal
    }
  }
  return validateTools(body) ?? validateText(body)
}

const validateItem = (item: unknown, path: string, calls: Set<unknown>): Refusal | undefined => {
  if (!isRecord(item)) return wrongType(path, "an object", item)
  const type = item.type ?? ("role" in item ? "message" : "item_reference")
  if (typeof type !== "string" || !ITEM_TYPES.has(type)) {
    return invalid(`Invalid value: '${String(type)}'. Supported values are: ${[...ITEM_TYPES].map((t) => `'${t}'`).join(", ")}.`, `${path}.type`, "invalid_value")
  }
  switch (type) {
    case "message": {
      if (typeof item.role !== "string" || !ROLES.has(item.role)) {
        return invalid(`Invalid value: '${String(item.role)}'. Supported values are: 'user', 'assistant', 'system', and 'developer'.`, `${path}.role`, "invalid_value")
      }
      if (typeof item.content === "string") return undefined
      if (!Array.isArray(item.content)) return wrongType(`${path}.content`, "a string or array", item.content)
      for (let j = 0; j < item.content.length; j++) {
        const part: unknown = item.content[j]
        if (!isRecord(part) || typeof part.type !== "string" || !PART_TYPES.has(part.type)) {
          return invalid(
            `Invalid value: '${isRecord(part) ? String(part.type) : jsonType(part)}'. Supported values are: 'input_text', 'input_image', 'input_file', 'output_text' and 'refusal'.`,
            `${path}.content[${j}].type`,
            "invalid_value"
          )
        }
        if ((part.type === "input_text" || part.type === "output_text") && typeof part.text !== "string") return missing(`${path}.content[${j}].text`)
      }
      return undefined
    }
    case "function_call":
      for (const field of ["call_id", "name", "arguments"]) if (typeof item[field] !== "string") return missing(`${path}.${field}`)
      calls.add(item.call_id)
      return undefined
    case "function_call_output":
      if (typeof item.call_id !== "string") return missing(`${path}.call_id`)
      if (item.output === undefined) return missing(`${path}.output`)
      if (!calls.has(item.call_id)) {
        return invalid(`No tool call found for function call output with call_id ${item.call_id}.`, "input")
      }
      return undefined
    case "item_reference":
      return invalid(`Item with id '${String(item.id)}' not found.`, "input")
    default:
      return undefined
  }
}

const validateTools = (body: JsonBody): Refusal | undefined => {
  const tools: unknown = body.tools
  if (tools === undefined || tools === null) return undefined
  if (!Array.isArray(tools)) return wrongType("tools", "an array", tools)
  for (let i = 0; i < tools.length; i++) {
    const tool: unknown = tools[i]
    const path = `tools[${i}]`
    if (!isRecord(tool)) return wrongType(path, "an object", tool)
    if (typeof tool.type !== "string" || !TOOL_TYPES.has(tool.type)) {
      return invalid(`Invalid value: '${String(tool.type)}'. Supported values are: ${[...TOOL_TYPES].map((t) => `'${t}'`).join(", ")}.`, `${path}.type`, "invalid_value")
    }
    if (tool.type !== "function") continue
    // The chat completions shape (`{type, function: {...}}`) is the classic mistake here.
    if (tool.name === undefined) return missing(`${path}.name`)
    if (typeof tool.name !== "string" || !TOOL_NAME.test(tool.name)) {
      return invalid(`Invalid '${path}.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.`, `${path}.name`, "invalid_value")
    }
    if (tool.function !== undefined) return unknownParameter(`${path}.function`)
    if (tool.parameters != null && !isRecord(tool.parameters)) return wrongType(`${path}.parameters`, "an object", tool.parameters)
  }
  return undefined
}

const validateText = (body: JsonBody): Refusal | undefined => {
  const format: unknown = isRecord(body.text) ? body.text.format : undefined
  if (format === undefined || format === null) return undefined
  if (!isRecord(format)) return wrongType("text.format", "an object", format)
  if (format.type === "text" || format.type === "json_object") return undefined
  if (format.type !== "json_schema") {
    return invalid(`Invalid value: '${String(format.type)}'. Supported values are: 'text', 'json_object' and 'json_schema'.`, "text.format.type", "invalid_value")
  }
  if (typeof format.name !== "string") return missing("text.format.name")
  if (!isRecord(format.schema)) return missing("text.format.schema")
  return undefined
}

const validateEmbeddings = (body: JsonBody): Refusal | undefined => {
  for (const key of Object.keys(body)) if (!EMBEDDING_PARAMS.has(key)) return invalid(`Unrecognized request argument supplied: ${key}`)
  if (body.model === undefined || body.model === "") return invalid("you must provide a model parameter")
  if (typeof body.model !== "string") return wrongType("model", "a string", body.model)
  const input: unknown = body.input
  if (input === undefined) return missing("input")
  const valid = (typeof input === "string" && input !== "") ||
    (Array.isArray(input) && input.length > 0 && input.length <= 2048 &&
      (input.every((item) => typeof item === "string" && item !== "") ||
        input.every((item) => Number.isInteger(item)) ||
        input.every((item) => Array.isArray(item) && item.length > 0 && item.every((token) => Number.isInteger(token)))))
  if (!valid) {
    return invalid("'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference.", "input")
  }
  if (body.encoding_format !== undefined && body.encoding_format !== "float" && body.encoding_format !== "base64") {
    return invalid(`Invalid value: '${String(body.encoding_format)}'. Supported values are: 'float' and 'base64'.`, "encoding_format", "invalid_value")
  }
  return range("dimensions", body.dimensions, 1, 3072, true)
}

// ---------------------------------------------------------------------------------------------
// Answers

const itemsOf = (body: JsonBody): Array<JsonBody> =>
  typeof body.input === "string"
    ? [{ type: "message", role: "user", content: body.input }]
    : Array.isArray(body.input)
    ? body.input.filter(isRecord)
    : []

const textOf = (content: unknown): string => {
  if (typeof content === "string") return content
  if (!Array.isArray(content)) return ""
  return content
    .filter((part): part is JsonBody => isRecord(part) && typeof part.text === "string")
    .map((part) => part.text as string)
    .join("\n")
}

const itemText = (item: JsonBody): string => {
  const type = item.type ?? ("role" in item ? "message" : undefined)
  if (type === "message") return textOf(item.content)
  if (type === "function_call_output") return textOf(item.output)
  if (type === "function_call") return `${item.name} ${item.arguments}`
  return ""
}

/** Text of the last user message or tool output; what the default scenario echoes. */
const lastUserText = (body: JsonBody, stored: Map<string, Stored>): string => {
  const items = [...historyOf(body, stored), ...itemsOf(body)]
  for (let i = items.length - 1; i >= 0; i--) {
    const item = items[i]!
    const type = item.type ?? ("role" in item ? "message" : undefined)
    if ((type === "message" && item.role === "user") || type === "function_call_output") return itemText(item)
  }
  return ""
}

const historyOf = (body: JsonBody, stored: Map<string, Stored>): ReadonlyArray<JsonBody> =>
  body.previous_response_id == null ? [] : stored.get(String(body.previous_response_id))?.history ?? []

interface Answer {
  readonly text: string
  readonly calls: ReadonlyArray<{ readonly callId: string; readonly name: string; readonly arguments: string }>
  readonly incomplete: boolean
  readonly inputTokens: number
  readonly outputTokens: number
}

const answerOf = (body: JsonBody, scenario: TextScenario | ToolCallsScenario, stored: Map<string, Stored>): Answer => {
  const promptItems = [...historyOf(body, stored), ...itemsOf(body)]
  const prompt = countWords(typeof body.instructions === "string" ? body.instructions : "") +
    promptItems.reduce((sum, item) => sum + countWords(itemText(item)), 0)
  if (scenario.kind === "text") {
    let text = scenario.text
    let incomplete = scenario.finish === "length"
    // Tokens are words here, so a word budget below the answer's length truncates it like the real model.
    if (scenario.finish === undefined && typeof body.max_output_tokens === "number" && countWords(text) > body.max_output_tokens) {
      text = takeWords(text, body.max_output_tokens)
      incomplete = true
    }
    return {
      text,
      calls: [],
      incomplete,
      inputTokens: scenario.usage?.input ?? prompt,
      outputTokens: scenario.usage?.output ?? Math.max(1, countWords(text))
    }
  }
  const calls = scenario.calls.map((call) => ({ callId: call.id ?? `call_${randomId(24)}`, name: call.name, arguments: JSON.stringify(call.arguments) }))
  const text = scenario.text ?? ""
  const output = countWords(text) + calls.reduce((sum, call) => sum + countWords(`${call.name} ${call.arguments}`), 0)
  return { text, calls, incomplete: false, inputTokens: scenario.usage?.input ?? prompt, outputTokens: scenario.usage?.output ?? Math.max(1, output) }
}

interface Built {
  readonly response: JsonBody
  /** Output items with their ids, as `output_item.done` shows them. */
  readonly items: ReadonlyArray<JsonBody>
}

/**
 * The request's free-form (`custom`) tools by name, with the namespace that holds them: in
 * `tools`, in namespaces there, or in an `additional_tools` input item (as Codex sends them for
 * its own default models). A call to one comes back as a `custom_tool_call` item.
 */
const customTools = (body: JsonBody): Map<string, { readonly namespace?: string }> => {
  const found = new Map<string, { readonly namespace?: string }>()
  const visit = (tools: unknown, namespace: string | undefined): void => {
    if (!Array.isArray(tools)) return
    for (const tool of tools) {
      if (!isRecord(tool)) continue
      if (tool.type === "namespace" && typeof tool.name === "string") visit(tool.tools, tool.name)
      else if (tool.type === "custom" && typeof tool.name === "string") found.set(tool.name, namespace === undefined ? {} : { namespace })
    }
  }
  visit(body.tools, undefined)
  if (Array.isArray(body.input)) for (const item of body.input) if (isRecord(item) && item.type === "additional_tools") visit(item.tools, undefined)
  return found
}

const buildResponse = (body: JsonBody, answer: Answer, scenario: TextScenario | ToolCallsScenario): Built => {
  const itemStatus = answer.incomplete ? "incomplete" : "completed"
  const items: Array<JsonBody> = []
  if (answer.text !== "" || answer.calls.length === 0) {
    items.push({
      id: `msg_${randomHex(24)}`,
      type: "message",
      status: itemStatus,
      content: [{ type: "output_text", annotations: [], logprobs: [], text: answer.text }],
      role: "assistant"
    })
  }
  const custom = customTools(body)
  for (const call of answer.calls) {
    const free = custom.get(call.name)
    if (free !== undefined) {
      // A free-form tool is called with its raw text (a scenario names it as `{ input: "..." }`).
      const parsed: unknown = JSON.parse(call.arguments)
      const input = isRecord(parsed) && typeof parsed.input === "string" ? parsed.input : call.arguments
      items.push({
        id: `ctc_${randomHex(24)}`,
        type: "custom_tool_call",
        status: "completed",
        call_id: call.callId,
        name: call.name,
        input,
        ...(free.namespace !== undefined ? { namespace: free.namespace } : {})
      })
      continue
    }
    items.push({ id: `fc_${randomHex(24)}`, type: "function_call", status: "completed", arguments: call.arguments, call_id: call.callId, name: call.name })
  }
  const cached = scenario.usage?.cacheRead ?? 0
  const response: JsonBody = {
    id: `resp_${randomHex(24)}`,
    object: "response",
    created_at: Math.floor(Date.now() / 1000),
    status: answer.incomplete ? "incomplete" : "completed",
    background: false,
    completed_at: answer.incomplete ? null : Math.floor(Date.now() / 1000),
    error: null,
    incomplete_details: answer.incomplete ? { reason: "max_output_tokens" } : null,
    instructions: body.instructions ?? null,
    max_output_tokens: body.max_output_tokens ?? null,
    max_tool_calls: body.max_tool_calls ?? null,
    model: body.model,
    output: items,
    parallel_tool_calls: body.parallel_tool_calls ?? true,
    previous_response_id: body.previous_response_id ?? null,
    prompt_cache_key: body.prompt_cache_key ?? null,
    reasoning: { effort: body.reasoning?.effort ?? null, summary: body.reasoning?.summary ?? null },
    safety_identifier: body.safety_identifier ?? null,
    service_tier: "default",
    store: body.store ?? true,
    temperature: body.temperature ?? 1,
    text: { format: body.text?.format ?? { type: "text" }, verbosity: body.text?.verbosity ?? "medium" },
    tool_choice: body.tool_choice ?? "auto",
    tools: body.tools ?? [],
    top_logprobs: body.top_logprobs ?? 0,
    top_p: body.top_p ?? 1,
    truncation: body.truncation ?? "disabled",
    usage: {
      input_tokens: answer.inputTokens,
      input_tokens_details: { cached_tokens: cached, cache_write_tokens: scenario.usage?.cacheWrite ?? 0 },
      output_tokens: answer.outputTokens,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: answer.inputTokens + answer.outputTokens
    },
    user: body.user ?? null,
    metadata: body.metadata ?? {}
  }
  return { response, items }
}

const remember = (body: JsonBody, built: Built, stored: Map<string, Stored>): void => {
  if (body.store === false) return
  stored.set(built.response.id, { history: [...historyOf(body, stored), ...itemsOf(body), ...built.items] })
}

/** Every SSE frame of the streamed answer, in OpenAI's order. */
const streamFrames = (built: Built): Array<string> => {
  const events: Array<JsonBody> = []
  const inProgress = { ...built.response, status: "in_progress", completed_at: null, incomplete_details: null, output: [], usage: null }
  events.push({ type: "response.created", response: inProgress })
  events.push({ type: "response.in_progress", response: inProgress })
  built.items.forEach((item, outputIndex) => {
    if (item.type === "message") {
      const text: string = item.content[0].text
      events.push({ type: "response.output_item.added", output_index: outputIndex, item: { ...item, status: "in_progress", content: [] } })
      const base = { item_id: item.id, output_index: outputIndex, content_index: 0 }
      events.push({ type: "response.content_part.added", ...base, part: { type: "output_text", annotations: [], logprobs: [], text: "" } })
      for (const word of splitWords(text)) events.push({ type: "response.output_text.delta", ...base, delta: word, logprobs: [], obfuscation: randomId(4) })
      events.push({ type: "response.output_text.done", ...base, text, logprobs: [] })
      events.push({ type: "response.content_part.done", ...base, part: item.content[0] })
    } else if (item.type === "custom_tool_call") {
      events.push({ type: "response.output_item.added", output_index: outputIndex, item: { ...item, status: "in_progress", input: "" } })
      const base = { item_id: item.id, output_index: outputIndex }
      for (const fragment of splitFragments(item.input)) events.push({ type: "response.custom_tool_call_input.delta", ...base, delta: fragment, obfuscation: randomId(4) })
      events.push({ type: "response.custom_tool_call_input.done", ...base, input: item.input })
    } else {
      events.push({ type: "response.output_item.added", output_index: outputIndex, item: { ...item, status: "in_progress", arguments: "" } })
      const base = { item_id: item.id, output_index: outputIndex }
      for (const fragment of splitFragments(item.arguments)) events.push({ type: "response.function_call_arguments.delta", ...base, delta: fragment, obfuscation: randomId(4) })
      events.push({ type: "response.function_call_arguments.done", ...base, arguments: item.arguments })
    }
    events.push({ type: "response.output_item.done", output_index: outputIndex, item })
  })
  events.push({ type: built.response.status === "completed" ? "response.completed" : "response.incomplete", response: built.response })
  return events.map((event, index) => `event: ${event.type}\ndata: ${JSON.stringify({ ...event, sequence_number: index })}\n\n`)
}

const fakeVector = (input: unknown, dimensions: number): Array<number> => {
  const values: Array<number> = []
  let block = 0
  while (values.length < dimensions) {
    const digest = createHash("sha256").update(`fake-embedding:${JSON.stringify(input)}:${block++}`).digest()
    for (const byte of digest) if (values.length < dimensions) values.push(byte / 127.5 - 1)
  }
  const norm = Math.sqrt(values.reduce((sum, value) => sum + value * value, 0)) || 1
  return values.map((value) => Math.fround(value / norm))
}

const base64Floats = (vector: ReadonlyArray<number>): string => {
  const buffer = Buffer.alloc(vector.length * 4)
  vector.forEach((value, index) => buffer.writeFloatLE(value, index * 4))
  return buffer.toString("base64")
}

/** The answer of POST /v1/embeddings: 1536 dimensions unless asked otherwise, a token per word. */
export const fakeEmbeddings = (body: JsonBody): JsonBody => {
  const input: unknown = body.input
  const inputs: Array<unknown> = typeof input === "string" ? [input] : Array.isArray(input) && typeof input[0] === "number" ? [input] : (input as Array<unknown>)
  const dimensions = typeof body.dimensions === "number" ? body.dimensions : 1536
  const tokens = inputs.reduce<number>((sum, item) => sum + (typeof item === "string" ? Math.max(1, countWords(item)) : (item as Array<number>).length), 0)
  return {
    object: "list",
    data: inputs.map((item, index) => {
      const vector = fakeVector(item, dimensions)
      return { object: "embedding", index, embedding: body.encoding_format === "base64" ? base64Floats(vector) : vector }
    }),
    model: body.model,
    usage: { prompt_tokens: tokens, total_tokens: tokens }
  }
}

const ERROR_DEFAULTS: Record<number, { type: string; code: string | null; message: string }> = {
  400: { type: "invalid_request_error", code: null, message: "Invalid request." },
  401: { type: "invalid_request_error", code: "invalid_api_key", message: "Incorrect API key provided." },
  404: { type: "invalid_request_error", code: "model_not_found", message: "The model does not exist or you do not have access to it." },
  429: { type: "requests", code: "rate_limit_exceeded", message: "Rate limit reached for requests. Please try again in 1s." },
  500: { type: "server_error", code: null, message: "The server had an error while processing your request. Sorry about that!" },
  503: { type: "service_unavailable_error", code: "server_is_overloaded", message: "The engine is currently overloaded, please try again later." }
}

const defaultErrorBody = (status: number, message: string | undefined): JsonBody => {
  const known = ERROR_DEFAULTS[status] ?? { type: status >= 500 ? "server_error" : "invalid_request_error", code: null, message: `Error ${status}.` }
  return { error: { message: message ?? known.message, type: known.type, param: null, code: known.code } }
}

const respond = async (ctx: ResponseContext, scenario: Scenario, stored: Map<string, Stored>, embeddings: boolean): Promise<void> => {
  const body = ctx.body
  const streaming = body.stream === true && !embeddings
  switch (scenario.kind) {
    case "text":
    case "tool_calls": {
      if (embeddings) return ctx.sendJson(200, fakeEmbeddings(body))
      const built = buildResponse(body, answerOf(body, scenario, stored), scenario)
      remember(body, built, stored)
      if (!streaming) return ctx.sendJson(200, built.response)
      ctx.startStream()
      await writeFrames(ctx, streamFrames(built), scenario)
      return ctx.end()
    }
    case "error": {
      const headers: Record<string, string> = { ...scenario.headers }
      if (scenario.status === 429) headers["retry-after"] ??= String(scenario.retryAfter ?? 1)
      if (typeof scenario.body === "string") return ctx.sendText(scenario.status, scenario.body, headers)
      return ctx.sendJson(scenario.status, scenario.body ?? defaultErrorBody(scenario.status, scenario.message), headers)
    }
    case "hang":
      return ctx.untilGone()
    case "delay":
      await ctx.sleep(scenario.ms)
      if (ctx.signal.aborted) return
      return respond(ctx, scenario.then, stored, embeddings)
    case "stall_after": {
      if (embeddings) {
        ctx.sendPartialJson(200, fakeEmbeddings(body))
      } else {
        const built = buildResponse(body, answerOf(body, scenario.of ?? { kind: "text", text: longText() }, stored), scenario.of ?? { kind: "text", text: "" })
        if (!streaming) {
          ctx.sendPartialJson(200, built.response)
        } else {
          const frames = streamFrames(built)
          ctx.startStream()
          await writeFrames(ctx, frames.slice(0, Math.min(scenario.chunks, frames.length - 1)), scenario)
        }
      }
      if (scenario.then === "destroy") return ctx.destroy()
      return ctx.untilGone()
    }
    case "mid_stream_error": {
      const message = scenario.message ?? "The server had an error while processing your request. Sorry about that!"
      const code = scenario.errorType ?? "server_error"
      if (!streaming) return ctx.sendJson(500, { error: { message, type: code, param: null, code: null } })
      const built = buildResponse(body, answerOf(body, { kind: "text", text: scenario.text ?? longText() }, stored), { kind: "text", text: "" })
      const frames = streamFrames(built)
      const sent = Math.min(scenario.afterChunks ?? 4, frames.length - 1)
      // OpenAI ends a failed stream with an `error` event and then `response.failed`.
      const failed = { ...built.response, status: "failed", completed_at: null, error: { code, message }, usage: null }
      ctx.startStream()
      await writeFrames(
        ctx,
        [
          ...frames.slice(0, sent),
          `event: error\ndata: ${JSON.stringify({ type: "error", code, message, param: null, sequence_number: sent })}\n\n`,
          `event: response.failed\ndata: ${JSON.stringify({ type: "response.failed", response: failed, sequence_number: sent + 1 })}\n\n`
        ],
        scenario
      )
      return ctx.end()
    }
  }
}
