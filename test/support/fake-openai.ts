// A fake OpenAI Chat Completions upstream: validates requests the way api.openai.com does and
// answers in its exact JSON and SSE wire format (reference: wire-formats.md sections 1 and 5).
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
  StreamOptions,
  TextScenario,
  ToolCallsScenario,
  UsageSpec
} from "./fake-common.ts"

export type * from "./fake-common.ts"
export { countWords } from "./fake-common.ts"

// The ChatCompletionCreateParams body fields (sdk-fields.test.ts checks them against the SDK).
export const KNOWN_PARAMS = new Set([
  "model",
  "messages",
  "stream",
  "stream_options",
  "max_tokens",
  "max_completion_tokens",
  "temperature",
  "top_p",
  "presence_penalty",
  "frequency_penalty",
  "n",
  "logprobs",
  "top_logprobs",
  "logit_bias",
  "seed",
  "stop",
  "tools",
  "tool_choice",
  "parallel_tool_calls",
  "response_format",
  "user",
  "metadata",
  "reasoning_effort",
  "verbosity",
  "service_tier",
  "store",
  "modalities",
  "audio",
  "prediction",
  "web_search_options",
  "prompt_cache_key",
  "prompt_cache_options",
  "prompt_cache_retention",
  "safety_identifier",
  "moderation",
  "functions",
  "function_call"
])

const ROLES = new Set(["developer", "system", "user", "assistant", "tool", "function"])
// Fields per message role. `name` on tool messages is not in the SDK's type, but the API accepts
// it (LangChain sends it); `annotations` is what a client replaying a returned message sends.
const MESSAGE_FIELDS: Readonly<Record<string, ReadonlyArray<string>>> = {
  developer: ["role", "content", "name"],
  system: ["role", "content", "name"],
  user: ["role", "content", "name"],
  assistant: ["role", "content", "name", "refusal", "tool_calls", "audio", "function_call", "annotations"],
  tool: ["role", "content", "tool_call_id", "name"],
  function: ["role", "content", "name"]
}
const USER_PART_TYPES = new Set(["text", "image_url", "input_audio", "file"])
const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/
// Fields of each content part (sdk-fields.test.ts checks them against the SDK).
export const PART_FIELDS: Readonly<Record<string, ReadonlyArray<string>>> = {
  text: ["type", "text", "prompt_cache_breakpoint"],
  image_url: ["type", "image_url", "prompt_cache_breakpoint"],
  input_audio: ["type", "input_audio", "prompt_cache_breakpoint"],
  file: ["type", "file", "prompt_cache_breakpoint"],
  refusal: ["type", "refusal"]
}

export const startFakeOpenAI = (options: FakeOptions): Promise<FakeUpstream> =>
  startFake(options, {
    basePath: "/v1",
    commonHeaders: () => ({
      "x-request-id": `req_${randomHex(16)}`,
      "openai-version": "2020-10-01",
      "openai-processing-ms": "7"
    }),
    refuse: (req) => refuse(req, options),
    defaultScenario: (body) => ({ kind: "text", text: `echo: ${lastUserText(body)}` }),
    respond
  })

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

const range = (param: string, value: unknown, min: number, max: number, integer = false): Refusal | undefined => {
  if (value === undefined || value === null) return undefined
  if (!isNumber(value) || (integer && !Number.isInteger(value))) {
    return wrongType(param, integer ? "an integer" : "a decimal", value)
  }
  const kind = integer ? "integer" : "decimal"
  if (value < min) {
    return invalid(
      `Invalid '${param}': ${kind} below minimum value. Expected a value >= ${min}, but got ${value} instead.`,
      param,
      `${kind}_below_min_value`
    )
  }
  if (value > max) {
    return invalid(
      `Invalid '${param}': ${kind} above maximum value. Expected a value <= ${max}, but got ${value} instead.`,
      param,
      `${kind}_above_max_value`
    )
  }
  return undefined
}

const refuse = (req: RecordedRequest, options: FakeOptions): Refusal | undefined => {
  const pathname = req.path.split("?")[0]
  if (req.method !== "POST" || pathname !== "/v1/chat/completions") {
    return openaiError(404, `Invalid URL (${req.method} ${pathname})`, "invalid_request_error")
  }
  const auth = req.headers.authorization
  if (auth === undefined || auth.trim() === "") {
    return openaiError(
      401,
      "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
      "invalid_request_error",
      null,
      "invalid_api_key"
    )
  }
  const key = /^Bearer (.+)$/.exec(auth)?.[1]?.trim()
  if (key !== options.apiKey) {
    return openaiError(
      401,
      `Incorrect API key provided: ${maskKey(key ?? auth)}. You can find your API key at https://platform.openai.com/account/api-keys.`,
      "invalid_request_error",
      null,
      "invalid_api_key"
    )
  }
  const body = req.body
  if (!isRecord(body)) {
    return invalid(
      "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)"
    )
  }
  return validateBody(body, options)
}

const maskKey = (key: string): string => (key.length <= 8 ? "*".repeat(key.length) : `${key.slice(0, 3)}*****${key.slice(-4)}`)

const validateBody = (body: JsonBody, options: FakeOptions): Refusal | undefined => {
  for (const key of Object.keys(body)) {
    if (!KNOWN_PARAMS.has(key)) return invalid(`Unrecognized request argument supplied: ${key}`)
  }
  if (body.model === undefined || body.model === null || body.model === "") {
    return invalid("you must provide a model parameter")
  }
  if (typeof body.model !== "string") return wrongType("model", "a string", body.model)
  if (body.messages === undefined) {
    return invalid("Missing required parameter: 'messages'.", "messages", "missing_required_parameter")
  }
  if (!Array.isArray(body.messages)) return wrongType("messages", "an array", body.messages)
  if (body.messages.length === 0) {
    return invalid(
      "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.",
      "messages",
      "empty_array"
    )
  }
  const messagesRefusal = validateMessages(body.messages)
  if (messagesRefusal !== undefined) return messagesRefusal

  if (body.stream !== undefined && body.stream !== null && typeof body.stream !== "boolean") {
    return wrongType("stream", "a boolean", body.stream)
  }
  if (body.stream_options !== undefined && body.stream_options !== null) {
    if (body.stream !== true) {
      return invalid("The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options")
    }
    if (!isRecord(body.stream_options)) return wrongType("stream_options", "an object", body.stream_options)
    for (const key of Object.keys(body.stream_options)) {
      if (key !== "include_usage" && key !== "include_obfuscation") {
        return invalid(`Unrecognized request argument supplied: stream_options.${key}`)
      }
    }
  }

  const numeric =
    range("temperature", body.temperature, 0, 2) ??
    range("top_p", body.top_p, 0, 1) ??
    range("presence_penalty", body.presence_penalty, -2, 2) ??
    range("frequency_penalty", body.frequency_penalty, -2, 2) ??
    range("n", body.n, 1, 128, true) ??
    range("top_logprobs", body.top_logprobs, 0, 20, true) ??
    range("max_tokens", body.max_tokens, 1, Number.MAX_SAFE_INTEGER, true) ??
    range("max_completion_tokens", body.max_completion_tokens, 1, Number.MAX_SAFE_INTEGER, true) ??
    range("seed", body.seed, Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER, true)
  if (numeric !== undefined) return numeric
  if (body.top_logprobs !== undefined && body.top_logprobs !== null && body.logprobs !== true) {
    return invalid("Invalid value for 'top_logprobs': 'logprobs' must be set to true.", "top_logprobs")
  }
  if (body.logit_bias !== undefined && body.logit_bias !== null) {
    if (!isRecord(body.logit_bias)) return wrongType("logit_bias", "an object", body.logit_bias)
    for (const [token, bias] of Object.entries(body.logit_bias)) {
      const refusal = range(`logit_bias.${token}`, bias, -100, 100)
      if (refusal !== undefined) return refusal
    }
  }
  if (body.stop !== undefined && body.stop !== null) {
    const stops: Array<unknown> = typeof body.stop === "string" ? [body.stop] : Array.isArray(body.stop) ? body.stop : []
    if (typeof body.stop !== "string" && !Array.isArray(body.stop)) return wrongType("stop", "a string or array", body.stop)
    if (stops.length > 4) {
      return invalid(
        `Invalid 'stop': array too long. Expected an array with maximum length 4, but got an array with length ${stops.length} instead.`,
        "stop",
        "array_above_max_length"
      )
    }
    if (stops.some((stop) => typeof stop !== "string")) return wrongType("stop", "an array of strings", body.stop)
  }
  if (body.user !== undefined && body.user !== null && typeof body.user !== "string") {
    return wrongType("user", "a string", body.user)
  }
  if (body.metadata !== undefined && body.metadata !== null) {
    if (!isRecord(body.metadata)) return wrongType("metadata", "an object", body.metadata)
    if (Object.keys(body.metadata).length > 16) {
      return invalid("Invalid 'metadata': too many properties. Expected an object with at most 16 properties.", "metadata")
    }
    for (const [key, value] of Object.entries(body.metadata)) {
      if (typeof value !== "string") return wrongType(`metadata.${key}`, "a string", value)
    }
  }

  const toolsRefusal = validateTools(body)
  if (toolsRefusal !== undefined) return toolsRefusal
  const formatRefusal = validateResponseFormat(body)
  if (formatRefusal !== undefined) return formatRefusal

  if (options.models !== undefined && !options.models.includes(body.model)) {
    return openaiError(
      404,
      `The model \`${body.model}\` does not exist or you do not have access to it.`,
      "invalid_request_error",
      null,
      "model_not_found"
    )
  }
  return undefined
}

const validateContent = (
  content: unknown,
  path: string,
  allowedParts: ReadonlySet<string>
): Refusal | undefined => {
  if (typeof content === "string") return undefined
  if (!Array.isArray(content)) return wrongType(path, "one of a string or array of objects", content)
  for (let j = 0; j < content.length; j++) {
    const part: unknown = content[j]
    const partPath = `${path}[${j}]`
    if (!isRecord(part)) return wrongType(partPath, "an object", part)
    if (typeof part.type !== "string" || !allowedParts.has(part.type)) {
      return invalid(
        `Invalid value: '${String(part.type)}'. Supported values are: ${[...allowedParts].map((t) => `'${t}'`).join(", ")}.`,
        `${partPath}.type`,
        "invalid_value"
      )
    }
    const fields = PART_FIELDS[part.type] ?? []
    const extra = Object.keys(part).find((key) => !fields.includes(key))
    if (extra !== undefined) {
      return invalid(`Additional properties are not allowed ('${extra}' was unexpected) - '${partPath}'`, `${partPath}.${extra}`)
    }
    if (part.type === "text" && typeof part.text !== "string") {
      return invalid(`Missing required parameter: '${partPath}.text'.`, `${partPath}.text`, "missing_required_parameter")
    }
    if (part.type === "image_url" && !(isRecord(part.image_url) && typeof part.image_url.url === "string")) {
      return invalid(
        `Missing required parameter: '${partPath}.image_url.url'.`,
        `${partPath}.image_url.url`,
        "missing_required_parameter"
      )
    }
  }
  return undefined
}

const TEXT_ONLY = new Set(["text"])
const ASSISTANT_PARTS = new Set(["text", "refusal"])

const validateMessages = (messages: ReadonlyArray<unknown>): Refusal | undefined => {
  // Tool call ids of the latest assistant message still waiting for their tool messages, and
  // where that assistant message sits (the real API points at it when answers are missing).
  let pending: Set<string> | undefined
  let pendingAt = -1
  let answerable: Set<string> = new Set()

  const unanswered = (): Refusal =>
    invalid(
      `An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: ${[...(pending ?? [])].join(", ")}`,
      `messages.[${pendingAt}].role`
    )

  for (let i = 0; i < messages.length; i++) {
    const message: unknown = messages[i]
    const path = `messages[${i}]`
    if (!isRecord(message)) return wrongType(path, "an object", message)
    const role = message.role
    if (role === undefined) return invalid(`Missing required parameter: '${path}.role'.`, `${path}.role`, "missing_required_parameter")
    if (typeof role !== "string" || !ROLES.has(role)) {
      return invalid(
        `Invalid value: '${String(role)}'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.`,
        `${path}.role`,
        "invalid_value"
      )
    }
    for (const key of Object.keys(message)) {
      if (!MESSAGE_FIELDS[role]!.includes(key)) {
        return invalid(`Additional properties are not allowed ('${key}' was unexpected) - '${path}'`, `${path}.${key}`)
      }
    }

    if (role === "tool") {
      if (typeof message.tool_call_id !== "string") {
        return invalid(
          `Missing required parameter: '${path}.tool_call_id'.`,
          `${path}.tool_call_id`,
          "missing_required_parameter"
        )
      }
      if (!answerable.has(message.tool_call_id)) {
        return invalid(
          "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.",
          `messages.[${i}].role`
        )
      }
      pending?.delete(message.tool_call_id)
      if (message.content === undefined || message.content === null) {
        return invalid(`Missing required parameter: '${path}.content'.`, `${path}.content`, "missing_required_parameter")
      }
      const refusal = validateContent(message.content, `${path}.content`, TEXT_ONLY)
      if (refusal !== undefined) return refusal
      continue
    }

    // Any other message closes the tool-answer window of the previous assistant message.
    if (pending !== undefined && pending.size > 0) return unanswered()
    pending = undefined
    answerable = new Set()

    if (role === "assistant") {
      const toolCalls = message.tool_calls
      const hasToolCalls = Array.isArray(toolCalls) && toolCalls.length > 0
      if (toolCalls !== undefined && toolCalls !== null && !Array.isArray(toolCalls)) {
        return wrongType(`${path}.tool_calls`, "an array", toolCalls)
      }
      if ((message.content === undefined || message.content === null) && !hasToolCalls && message.function_call == null) {
        return invalid(
          `Invalid value for '${path}.content': expected a string or array when 'tool_calls' is absent, got null.`,
          `${path}.content`
        )
      }
      if (message.content !== undefined && message.content !== null) {
        const refusal = validateContent(message.content, `${path}.content`, ASSISTANT_PARTS)
        if (refusal !== undefined) return refusal
      }
      if (hasToolCalls) {
        const ids = new Set<string>()
        for (let j = 0; j < toolCalls.length; j++) {
          const call: unknown = toolCalls[j]
          const callPath = `${path}.tool_calls[${j}]`
          if (!isRecord(call)) return wrongType(callPath, "an object", call)
          if (typeof call.id !== "string") {
            return invalid(`Missing required parameter: '${callPath}.id'.`, `${callPath}.id`, "missing_required_parameter")
          }
          if (call.type === "custom") {
            ids.add(call.id)
            continue
          }
          if (call.type !== "function") {
            return invalid(
              `Invalid value: '${String(call.type)}'. Supported values are: 'function' and 'custom'.`,
              `${callPath}.type`,
              "invalid_value"
            )
          }
          if (!isRecord(call.function) || typeof call.function.name !== "string") {
            return invalid(
              `Missing required parameter: '${callPath}.function.name'.`,
              `${callPath}.function.name`,
              "missing_required_parameter"
            )
          }
          if (typeof call.function.arguments !== "string") {
            return invalid(
              `Missing required parameter: '${callPath}.function.arguments'.`,
              `${callPath}.function.arguments`,
              "missing_required_parameter"
            )
          }
          ids.add(call.id)
        }
        pending = new Set(ids)
        answerable = ids
        pendingAt = i
      }
      continue
    }

    if (message.content === undefined || message.content === null) {
      return invalid(`Missing required parameter: '${path}.content'.`, `${path}.content`, "missing_required_parameter")
    }
    const refusal = validateContent(message.content, `${path}.content`, role === "user" ? USER_PART_TYPES : TEXT_ONLY)
    if (refusal !== undefined) return refusal
  }
  if (pending !== undefined && pending.size > 0) return unanswered()
  return undefined
}

const validateTools = (body: JsonBody): Refusal | undefined => {
  const tools: unknown = body.tools
  const hasTools = Array.isArray(tools) && tools.length > 0
  if (tools !== undefined && tools !== null) {
    if (!Array.isArray(tools)) return wrongType("tools", "an array", tools)
    if (tools.length === 0) {
      return invalid(
        "Invalid 'tools': empty array. Expected an array with minimum length 1, but got an empty array instead.",
        "tools",
        "empty_array"
      )
    }
    for (let i = 0; i < tools.length; i++) {
      const tool: unknown = tools[i]
      const path = `tools[${i}]`
      if (!isRecord(tool)) return wrongType(path, "an object", tool)
      if (tool.type === "custom") continue
      if (tool.type !== "function") {
        return invalid(
          `Invalid value: '${String(tool.type)}'. Supported values are: 'function' and 'custom'.`,
          `${path}.type`,
          "invalid_value"
        )
      }
      if (!isRecord(tool.function) || tool.function.name === undefined) {
        return invalid(
          `Missing required parameter: '${path}.function.name'.`,
          `${path}.function.name`,
          "missing_required_parameter"
        )
      }
      if (typeof tool.function.name !== "string" || !TOOL_NAME.test(tool.function.name)) {
        return invalid(
          `Invalid '${path}.function.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.`,
          `${path}.function.name`,
          "invalid_value"
        )
      }
      const parameters = tool.function.parameters
      if (parameters !== undefined && !isRecord(parameters)) {
        return wrongType(`${path}.function.parameters`, "an object", parameters)
      }
    }
  }
  if (body.tool_choice !== undefined && body.tool_choice !== null) {
    if (!hasTools) {
      return invalid(
        "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified.",
        "tool_choice"
      )
    }
    const choice: unknown = body.tool_choice
    if (typeof choice === "string") {
      if (!["none", "auto", "required"].includes(choice)) {
        return invalid(
          `Invalid value: '${choice}'. Supported values are: 'none', 'auto', and 'required'.`,
          "tool_choice",
          "invalid_value"
        )
      }
    } else if (!isRecord(choice) || typeof choice.type !== "string") {
      return wrongType("tool_choice", "a string or object", choice)
    } else if (choice.type === "function") {
      const name = isRecord(choice.function) ? choice.function.name : undefined
      if (typeof name !== "string") {
        return invalid(
          "Missing required parameter: 'tool_choice.function.name'.",
          "tool_choice.function.name",
          "missing_required_parameter"
        )
      }
      const declared = (tools as Array<JsonBody>).some((tool) => tool.type === "function" && tool.function?.name === name)
      if (!declared) {
        return invalid(`Invalid value for 'tool_choice': function '${name}' not found in 'tools'.`, "tool_choice")
      }
    }
  }
  if (body.parallel_tool_calls !== undefined && body.parallel_tool_calls !== null && !hasTools) {
    return invalid(
      "Invalid value for 'parallel_tool_calls': 'parallel_tool_calls' is only allowed when 'tools' are specified.",
      "parallel_tool_calls"
    )
  }
  return undefined
}

const validateResponseFormat = (body: JsonBody): Refusal | undefined => {
  const format: unknown = body.response_format
  if (format === undefined || format === null) return undefined
  if (!isRecord(format)) return wrongType("response_format", "an object", format)
  if (format.type === "text") return undefined
  if (format.type === "json_object") {
    const mentionsJson = (body.messages as Array<JsonBody>).some((message) => /json/i.test(messageText(message)))
    if (!mentionsJson) {
      return invalid(
        "'messages' must contain the word 'json' in some form, to use 'response_format' of type 'json_object'.",
        "messages"
      )
    }
    return undefined
  }
  if (format.type === "json_schema") {
    if (!isRecord(format.json_schema) || typeof format.json_schema.name !== "string") {
      return invalid(
        "Missing required parameter: 'response_format.json_schema.name'.",
        "response_format.json_schema.name",
        "missing_required_parameter"
      )
    }
    return undefined
  }
  return invalid(
    `Invalid value: '${String(format.type)}'. Supported values are: 'json_object', 'json_schema', and 'text'.`,
    "response_format.type",
    "invalid_value"
  )
}

// ---------------------------------------------------------------------------------------------
// Answers

const messageText = (message: JsonBody): string => {
  const content: unknown = message.content
  if (typeof content === "string") return content
  if (Array.isArray(content)) {
    return content
      .filter((part): part is JsonBody => isRecord(part) && typeof part.text === "string")
      .map((part) => part.text as string)
      .join("\n")
  }
  return ""
}

/** Text of the last `user` (or `tool`) message; what the default scenario echoes. */
const lastUserText = (body: JsonBody): string => {
  const messages = body.messages as Array<JsonBody>
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i]!
    if (message.role === "user" || message.role === "tool") return messageText(message)
  }
  return ""
}

/** Prompt tokens: words of every message's text, plus tool call names and arguments. */
const promptWords = (body: JsonBody): number => {
  let words = 0
  for (const message of body.messages as Array<JsonBody>) {
    words += countWords(messageText(message))
    if (Array.isArray(message.tool_calls)) {
      for (const call of message.tool_calls as Array<JsonBody>) {
        words += countWords(`${call.function?.name ?? ""} ${call.function?.arguments ?? ""}`)
      }
    }
  }
  return words
}

interface Answer {
  readonly text: string
  readonly calls: ReadonlyArray<{ readonly id: string; readonly name: string; readonly arguments: string }>
  readonly finish: string
  readonly usage: JsonBody
}

const buildUsage = (body: JsonBody, outputWords: number, spec: UsageSpec | undefined, choices: number): JsonBody => {
  const prompt = spec?.input ?? promptWords(body)
  const completion = spec?.output ?? Math.max(1, outputWords) * choices
  const promptDetails: JsonBody = { cached_tokens: spec?.cacheRead ?? 0, audio_tokens: 0 }
  if (spec?.cacheWrite !== undefined) promptDetails.cache_write_tokens = spec.cacheWrite
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: promptDetails,
    completion_tokens_details: {
      reasoning_tokens: 0,
      audio_tokens: 0,
      accepted_prediction_tokens: 0,
      rejected_prediction_tokens: 0
    }
  }
}

const choiceCount = (body: JsonBody): number => (typeof body.n === "number" ? body.n : 1)

const answerOf = (body: JsonBody, scenario: TextScenario | ToolCallsScenario): Answer => {
  if (scenario.kind === "text") {
    const limit: unknown = body.max_completion_tokens ?? body.max_tokens
    let text = scenario.text
    let finish = scenario.finish ?? "stop"
    // Tokens are words here, so a word budget below the answer's length truncates it like the real model.
    if (scenario.finish === undefined && typeof limit === "number" && countWords(text) > limit) {
      text = takeWords(text, limit)
      finish = "length"
    }
    return { text, calls: [], finish, usage: buildUsage(body, countWords(text), scenario.usage, choiceCount(body)) }
  }
  const calls = scenario.calls.map((call) => ({
    id: call.id ?? `call_${randomId(24)}`,
    name: call.name,
    arguments: JSON.stringify(call.arguments)
  }))
  const text = scenario.text ?? ""
  const outputWords = countWords(text) + calls.reduce((sum, call) => sum + countWords(`${call.name} ${call.arguments}`), 0)
  return { text, calls, finish: "tool_calls", usage: buildUsage(body, outputWords, scenario.usage, choiceCount(body)) }
}

const completionObject = (body: JsonBody, answer: Answer): JsonBody => {
  const choices = Array.from({ length: choiceCount(body) }, (_, index) => {
    const message: JsonBody = {
      role: "assistant",
      content: answer.calls.length > 0 && answer.text === "" ? null : answer.text,
      refusal: null,
      annotations: []
    }
    if (answer.calls.length > 0) {
      message.tool_calls = answer.calls.map((call) => ({
        id: call.id,
        type: "function",
        function: { name: call.name, arguments: call.arguments }
      }))
    }
    return { index, message, logprobs: null, finish_reason: answer.finish }
  })
  return {
    id: `chatcmpl-${randomId(29)}`,
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model: body.model,
    choices,
    usage: answer.usage,
    service_tier: "default",
    system_fingerprint: "fp_fake0001"
  }
}

/** Every SSE frame of a streamed answer, `data: [DONE]` included. */
const streamFrames = (body: JsonBody, answer: Answer, options: StreamOptions): Array<string> => {
  const id = `chatcmpl-${randomId(29)}`
  const created = Math.floor(Date.now() / 1000)
  const streamOptions: JsonBody = isRecord(body.stream_options) ? body.stream_options : {}
  const obfuscate = streamOptions.include_obfuscation !== false
  const frame = (choices: Array<JsonBody>, usage: JsonBody | null = null): string => {
    const chunk: JsonBody = {
      id,
      object: "chat.completion.chunk",
      created,
      model: body.model,
      service_tier: "default",
      system_fingerprint: "fp_fake0001",
      choices,
      usage
    }
    if (obfuscate) chunk.obfuscation = randomId(4)
    return `data: ${JSON.stringify(chunk)}\n\n`
  }
  const choice = (index: number, delta: JsonBody, finish: string | null = null): JsonBody => ({
    index,
    delta,
    logprobs: null,
    finish_reason: finish
  })

  const frames: Array<string> = []
  for (let index = 0; index < choiceCount(body); index++) {
    const words = splitWords(answer.text)
    if (answer.text !== "" || answer.calls.length === 0) {
      frames.push(frame([choice(index, { role: "assistant", content: "", refusal: null })]))
      for (const word of words) frames.push(frame([choice(index, { content: word })]))
    }
    answer.calls.forEach((call, callIndex) => {
      const first: JsonBody = {
        tool_calls: [{ index: callIndex, id: call.id, type: "function", function: { name: call.name, arguments: "" } }]
      }
      // The role rides on the very first delta of the choice, whichever kind it is.
      const delta = callIndex === 0 && answer.text === "" ? { role: "assistant", content: null, ...first } : first
      frames.push(frame([choice(index, delta)]))
      for (const fragment of splitFragments(call.arguments)) {
        frames.push(frame([choice(index, { tool_calls: [{ index: callIndex, function: { arguments: fragment } }] })]))
      }
    })
    frames.push(frame([choice(index, {}, answer.finish)]))
  }
  if (streamOptions.include_usage === true || options.extraUsageChunk === true) {
    frames.push(frame([], answer.usage))
    if (options.extraUsageChunk === true) frames.push(frame([], answer.usage))
  }
  frames.push("data: [DONE]\n\n")
  return frames
}

const ERROR_DEFAULTS: Record<number, { type: string; code: string | null; message: string }> = {
  400: { type: "invalid_request_error", code: null, message: "Invalid request." },
  401: { type: "invalid_request_error", code: "invalid_api_key", message: "Incorrect API key provided." },
  403: { type: "invalid_request_error", code: "unsupported_country_region_territory", message: "Country, region, or territory not supported" },
  404: { type: "invalid_request_error", code: "model_not_found", message: "The model does not exist or you do not have access to it." },
  409: { type: "invalid_request_error", code: null, message: "Conflict." },
  422: { type: "invalid_request_error", code: null, message: "Unprocessable entity." },
  429: { type: "requests", code: "rate_limit_exceeded", message: "Rate limit reached for requests. Please try again in 1s." },
  500: { type: "server_error", code: null, message: "The server had an error while processing your request. Sorry about that!" },
  502: { type: "server_error", code: null, message: "Bad gateway." },
  503: { type: "service_unavailable_error", code: "server_is_overloaded", message: "The engine is currently overloaded, please try again later." }
}

const defaultErrorBody = (status: number, message: string | undefined): JsonBody => {
  const known = ERROR_DEFAULTS[status] ?? {
    type: status >= 500 ? "server_error" : "invalid_request_error",
    code: null,
    message: `Error ${status}.`
  }
  return { error: { message: message ?? known.message, type: known.type, param: null, code: known.code } }
}

const respond = async (ctx: ResponseContext, scenario: Scenario): Promise<void> => {
  const body = ctx.body
  const streaming = body.stream === true
  switch (scenario.kind) {
    case "text":
    case "tool_calls": {
      const answer = answerOf(body, scenario)
      if (!streaming) return ctx.sendJson(200, completionObject(body, answer))
      ctx.startStream()
      await writeFrames(ctx, streamFrames(body, answer, scenario), scenario)
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
      return respond(ctx, scenario.then)
    case "stall_after": {
      const base = scenario.of ?? { kind: "text", text: longText() }
      const answer = answerOf(body, base)
      if (!streaming) {
        ctx.sendPartialJson(200, completionObject(body, answer))
      } else {
        const frames = streamFrames(body, answer, scenario)
        ctx.startStream()
        await writeFrames(ctx, frames.slice(0, Math.min(scenario.chunks, frames.length - 1)), scenario)
      }
      if (scenario.then === "destroy") return ctx.destroy()
      return ctx.untilGone()
    }
    case "mid_stream_error": {
      const error = {
        message: scenario.message ?? "The server had an error while processing your request. Sorry about that!",
        type: scenario.errorType ?? "server_error",
        param: null,
        code: null
      }
      if (!streaming) return ctx.sendJson(500, { error })
      const answer = answerOf(body, { kind: "text", text: scenario.text ?? longText() })
      const frames = streamFrames(body, answer, scenario)
      ctx.startStream()
      await writeFrames(
        ctx,
        [...frames.slice(0, Math.min(scenario.afterChunks ?? 2, frames.length - 1)), `data: ${JSON.stringify({ error })}\n\n`],
        scenario
      )
      return ctx.end()
    }
  }
}
