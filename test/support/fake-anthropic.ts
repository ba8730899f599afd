// A fake Anthropic Messages upstream: validates requests the way api.anthropic.com does and
// answers in its exact JSON and SSE wire format (reference: wire-formats.md sections 2 and 5).
import { randomUUID } from "node:crypto"
import {
  countWords,
  isNumber,
  isRecord,
  longText,
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
  Finish,
  JsonBody,
  RecordedRequest,
  Refusal,
  ResponseContext,
  Scenario,
  StreamOptions,
  TextScenario,
  ToolCallsScenario
} from "./fake-common.ts"

export type * from "./fake-common.ts"
export { countWords } from "./fake-common.ts"

// Fields accepted by every API version (the beta MessageCreateParams body fields; sdk-fields.test.ts
// checks the list against the installed SDK); the sampling parameters only exist before 2026-10-21.
export const KNOWN_FIELDS = new Set([
  "model",
  "messages",
  "max_tokens",
  "system",
  "stop_sequences",
  "stream",
  "metadata",
  "tools",
  "tool_choice",
  "thinking",
  "output_config",
  "output_format",
  "service_tier",
  "speed",
  "diagnostics",
  "container",
  "mcp_servers",
  "context_management",
  "cache_control",
  "inference_geo",
  "billing_policy",
  "compaction",
  "fallback_credit_token",
  "fallbacks",
  "thread"
])
const SAMPLING_FIELDS = new Set(["temperature", "top_p", "top_k"])

// 2023-06-01 is what most clients and gateways send; 2026-10-21 is what the SDK majors released that day
// send. The newer one drops the sampling parameters and tightens a few content rules.
const LEGACY_VERSION = "2023-06-01"
const CURRENT_VERSION = "2026-10-21"
const API_VERSIONS = new Set([LEGACY_VERSION, CURRENT_VERSION])
const BLOCK_TYPES = new Set([
  "text",
  "image",
  "document",
  "search_result",
  "tool_use",
  "tool_result",
  "thinking",
  "redacted_thinking",
  "server_tool_use",
  "web_search_tool_result",
  "web_fetch_tool_result",
  "code_execution_tool_result",
  "mcp_tool_use",
  "mcp_tool_result",
  "container_upload",
  "bash_code_execution_tool_result",
  "text_editor_code_execution_tool_result",
  "tool_search_tool_result",
  "advisor_tool_result",
  "mcp_tool_listing",
  "compaction",
  "fallback",
  "tool_addition",
  "tool_removal"
])
// The beta format has `role: "system"` messages (BetaSystemMessageParam), with their own fields.
const MESSAGE_FIELDS: Readonly<Record<string, ReadonlyArray<string>>> = {
  user: ["role", "content"],
  assistant: ["role", "content"],
  system: ["role", "content", "clear_at", "output_config"]
}
const TOOL_USE_ID = /^[a-zA-Z0-9_-]+$/
const TOOL_NAME = /^[a-zA-Z0-9_-]{1,128}$/
// Claude 4.5 and later refuse `temperature` together with `top_p`.
const SAMPLING_EXCLUSIVE_MODEL = /claude-(?:sonnet|haiku|opus)-4-(?:[5-9]|\d{2})(?:\D|$)/

export const startFakeAnthropic = (options: FakeOptions): Promise<FakeUpstream> =>
  startFake(options, {
    basePath: "",
    commonHeaders: () => ({
      "request-id": `req_011C${randomId(20)}`,
      "anthropic-organization-id": randomUUID()
    }),
    refuse: (req, headers) => {
      const refusal = refuse(req, options)
      if (refusal === undefined) return undefined
      return { ...refusal, body: { ...(refusal.body as JsonBody), request_id: headers["request-id"] } }
    },
    defaultScenario: (body) => ({ kind: "text", text: `echo: ${lastUserText(body)}` }),
    respond
  })

// ---------------------------------------------------------------------------------------------
// Validation

const anthropicError = (status: number, type: string, message: string): Refusal => ({
  status,
  body: { type: "error", error: { type, message } }
})

const invalid = (message: string): Refusal => anthropicError(400, "invalid_request_error", message)

const refuse = (req: RecordedRequest, options: FakeOptions): Refusal | undefined => {
  const pathname = req.path.split("?")[0]
  const counting = pathname === "/v1/messages/count_tokens"
  if (req.method !== "POST" || (pathname !== "/v1/messages" && !counting)) return anthropicError(404, "not_found_error", "Not Found")
  // The API takes the key from `x-api-key` or, as the 2026 SDK majors send it, from a Bearer
  // token; when both are present `x-api-key` wins.
  const xApiKey = req.headers["x-api-key"]
  const bearer = /^Bearer (.+)$/.exec(req.headers.authorization ?? "")?.[1]?.trim()
  const key = xApiKey !== undefined && xApiKey !== "" ? xApiKey : bearer
  if (key === undefined || key === "") return anthropicError(401, "authentication_error", "x-api-key header is required")
  if (key !== options.apiKey) {
    return anthropicError(401, "authentication_error", key === bearer ? "invalid bearer token" : "invalid x-api-key")
  }
  const version = req.headers["anthropic-version"]
  if (version === undefined || version === "") return invalid("anthropic-version: header is required")
  if (typeof version !== "string" || !API_VERSIONS.has(version)) {
    return invalid(`anthropic-version: invalid version '${String(version)}'`)
  }
  const body = req.body
  if (!isRecord(body)) return invalid("There was an error parsing the body of your request: expected a JSON object")
  // count_tokens has no scenarios: it is answered here, with the words of what it was given.
  if (counting) {
    if (typeof body.model !== "string" || !Array.isArray(body.messages)) return invalid("model and messages: Field required")
    if ("max_tokens" in body || "stream" in body) return invalid(`${"max_tokens" in body ? "max_tokens" : "stream"}: Extra inputs are not permitted`)
    const text = JSON.stringify([body.system ?? "", body.messages, body.tools ?? []])
    return { status: 200, body: { input_tokens: Math.max(1, countWords(text)) } }
  }
  return validateBody(body, version, options)
}

const validateBody = (body: JsonBody, version: string, options: FakeOptions): Refusal | undefined => {
  const legacy = version === LEGACY_VERSION
  for (const key of Object.keys(body)) {
    if (!KNOWN_FIELDS.has(key) && !(legacy && SAMPLING_FIELDS.has(key))) {
      return invalid(`${key}: Extra inputs are not permitted`)
    }
  }
  if (body.model === undefined) return invalid("model: Field required")
  if (typeof body.model !== "string") return invalid("model: Input should be a valid string")
  if (body.max_tokens === undefined) return invalid("max_tokens: Field required")
  if (!Number.isInteger(body.max_tokens)) return invalid("max_tokens: Input should be a valid integer")
  if (body.max_tokens < 0) return invalid("max_tokens: Input should be greater than or equal to 0")
  if (body.messages === undefined) return invalid("messages: Field required")
  if (!Array.isArray(body.messages)) return invalid("messages: Input should be a valid list")
  if (body.messages.length === 0) return invalid("messages: at least one message is required")
  if (body.stream !== undefined && typeof body.stream !== "boolean") {
    return invalid("stream: Input should be a valid boolean")
  }

  const sampling = validateSampling(body)
  if (sampling !== undefined) return sampling
  const system = validateSystem(body.system)
  if (system !== undefined) return system
  const messages = validateMessages(body.messages, legacy)
  if (messages !== undefined) return messages
  const tools = validateTools(body)
  if (tools !== undefined) return tools
  const toolFlow = validateToolFlow(body)
  if (toolFlow !== undefined) return toolFlow

  if (body.metadata !== undefined && body.metadata !== null) {
    if (!isRecord(body.metadata)) return invalid("metadata: Input should be a valid dictionary")
    for (const key of Object.keys(body.metadata)) {
      if (key !== "user_id") return invalid(`metadata.${key}: Extra inputs are not permitted`)
    }
  }
  if (isRecord(body.thinking) && body.thinking.type === "enabled") {
    const budget: unknown = body.thinking.budget_tokens
    if (!Number.isInteger(budget)) return invalid("thinking.enabled.budget_tokens: Field required")
    if ((budget as number) < 1024) {
      return invalid("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
    }
    if ((budget as number) >= body.max_tokens) {
      return invalid("`max_tokens` must be greater than `thinking.budget_tokens`")
    }
  }
  if (options.models !== undefined && !options.models.includes(body.model)) {
    return anthropicError(404, "not_found_error", `model: ${body.model}`)
  }
  return undefined
}

const bounded = (field: string, value: unknown, min: number, max: number): Refusal | undefined => {
  if (value === undefined || value === null) return undefined
  if (!isNumber(value)) return invalid(`${field}: Input should be a valid number`)
  if (value < min) return invalid(`${field}: Input should be greater than or equal to ${min}`)
  if (value > max) return invalid(`${field}: Input should be less than or equal to ${max}`)
  return undefined
}

const validateSampling = (body: JsonBody): Refusal | undefined => {
  const numeric =
    bounded("temperature", body.temperature, 0, 1) ??
    bounded("top_p", body.top_p, 0, 1) ??
    bounded("top_k", body.top_k, 0, Number.MAX_SAFE_INTEGER)
  if (numeric !== undefined) return numeric
  if (
    body.temperature !== undefined &&
    body.temperature !== null &&
    body.top_p !== undefined &&
    body.top_p !== null &&
    SAMPLING_EXCLUSIVE_MODEL.test(body.model as string)
  ) {
    return invalid("`temperature` and `top_p` cannot both be specified for this model. Please use only one.")
  }
  if (body.stop_sequences !== undefined && body.stop_sequences !== null) {
    if (!Array.isArray(body.stop_sequences)) return invalid("stop_sequences: Input should be a valid list")
    for (let i = 0; i < body.stop_sequences.length; i++) {
      const stop: unknown = body.stop_sequences[i]
      if (typeof stop !== "string") return invalid(`stop_sequences.${i}: Input should be a valid string`)
      if (stop.trim() === "") return invalid("stop_sequences: each stop sequence must contain non-whitespace")
    }
  }
  return undefined
}

const textBlockRefusal = (text: unknown, where: string, field: string): Refusal | undefined => {
  if (typeof text !== "string") return invalid(`${field}: Input should be a valid string`)
  if (text === "") return invalid(`${where}: text content blocks must be non-empty`)
  if (text.trim() === "") return invalid(`${where}: text content blocks must contain non-whitespace text`)
  return undefined
}

const validateSystem = (system: unknown): Refusal | undefined => {
  if (system === undefined || system === null || typeof system === "string") return undefined
  if (!Array.isArray(system)) return invalid("system: Input should be a valid string or list")
  for (let i = 0; i < system.length; i++) {
    const block: unknown = system[i]
    if (!isRecord(block) || block.type !== "text") return invalid(`system.${i}.type: Input should be 'text'`)
    const refusal = textBlockRefusal(block.text, "system", `system.${i}.text`)
    if (refusal !== undefined) return refusal
  }
  return undefined
}

// Fields of the content blocks clients write themselves (sdk-fields.test.ts checks them against
// the SDK); server-tool blocks are taken as the API returned them.
export const BLOCK_FIELDS: Readonly<Record<string, ReadonlyArray<string>>> = {
  text: ["type", "text", "cache_control", "citations"],
  image: ["type", "source", "cache_control", "transformations"],
  document: ["type", "source", "title", "context", "citations", "cache_control"],
  search_result: ["type", "source", "title", "content", "citations", "cache_control"],
  tool_use: ["type", "id", "name", "input", "cache_control", "caller", "toolset_name"],
  tool_result: ["type", "tool_use_id", "content", "is_error", "cache_control", "toolset_name"],
  thinking: ["type", "thinking", "signature"],
  redacted_thinking: ["type", "data"]
}

const validateBlock = (block: unknown, role: string, path: string, legacy: boolean): Refusal | undefined => {
  if (!isRecord(block)) return invalid(`${path}: Input should be a valid dictionary`)
  if (typeof block.type !== "string" || !BLOCK_TYPES.has(block.type)) {
    return invalid(
      `${path}: Input tag '${String(block.type)}' found using 'type' does not match any of the expected tags: ${[...BLOCK_TYPES].map((t) => `'${t}'`).join(", ")}`
    )
  }
  const fields = BLOCK_FIELDS[block.type]
  const extra = fields === undefined ? undefined : Object.keys(block).find((key) => !fields.includes(key))
  if (extra !== undefined) return invalid(`${path}.${block.type}.${extra}: Extra inputs are not permitted`)
  switch (block.type) {
    case "text": {
      const refusal = textBlockRefusal(block.text, "messages", `${path}.text`)
      if (refusal !== undefined) return refusal
      if (!legacy && role === "user" && Array.isArray(block.citations) && block.citations.length > 0) {
        return invalid(`${path}.citations: citations are not permitted on text blocks in user messages`)
      }
      return undefined
    }
    case "document":
      if (!legacy && role === "assistant") return invalid(`${path}: document blocks are not permitted in assistant messages`)
      return undefined
    case "tool_use": {
      if (role !== "assistant") return invalid(`${path}: tool_use blocks are only allowed in assistant messages`)
      if (typeof block.id !== "string") return invalid(`${path}.tool_use.id: Field required`)
      if (!TOOL_USE_ID.test(block.id)) {
        return invalid(`${path}.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'`)
      }
      if (typeof block.name !== "string") return invalid(`${path}.tool_use.name: Field required`)
      if (!isRecord(block.input)) return invalid(`${path}.tool_use.input: Input should be a valid dictionary`)
      return undefined
    }
    case "tool_result": {
      if (role !== "user") return invalid(`${path}: tool_result blocks are only allowed in user messages`)
      if (typeof block.tool_use_id !== "string") return invalid(`${path}.tool_result.tool_use_id: Field required`)
      if (!TOOL_USE_ID.test(block.tool_use_id)) {
        return invalid(`${path}.tool_result.tool_use_id: String should match pattern '^[a-zA-Z0-9_-]+$'`)
      }
      if (block.is_error !== undefined && typeof block.is_error !== "boolean") {
        return invalid(`${path}.tool_result.is_error: Input should be a valid boolean`)
      }
      const content: unknown = block.content
      if (content === undefined || typeof content === "string") return undefined
      if (!Array.isArray(content)) return invalid(`${path}.tool_result.content: Input should be a valid string or list`)
      for (let k = 0; k < content.length; k++) {
        const inner: unknown = content[k]
        const innerPath = `${path}.tool_result.content.${k}`
        if (!isRecord(inner)) return invalid(`${innerPath}: Input should be a valid dictionary`)
        if (inner.cache_control !== undefined) {
          return invalid(`${innerPath}.cache_control: cache_control cannot be set on nested tool_result content`)
        }
        if (inner.type === "text") {
          const refusal = textBlockRefusal(inner.text, "messages", `${innerPath}.text`)
          if (refusal !== undefined) return refusal
        } else if (!["image", "document", "search_result", "tool_reference", "browser_state"].includes(String(inner.type))) {
          return invalid(`${innerPath}: Input tag '${String(inner.type)}' found using 'type' does not match any of the expected tags`)
        }
      }
      return undefined
    }
    case "image": {
      if (!isRecord(block.source)) return invalid(`${path}.image.source: Field required`)
      return undefined
    }
    default:
      return undefined
  }
}

const validateMessages = (messages: ReadonlyArray<unknown>, legacy: boolean): Refusal | undefined => {
  for (let i = 0; i < messages.length; i++) {
    const message: unknown = messages[i]
    const path = `messages.${i}`
    if (!isRecord(message)) return invalid(`${path}: Input should be a valid dictionary`)
    if (message.role === undefined) return invalid(`${path}.role: Field required`)
    const allowed = typeof message.role === "string" ? MESSAGE_FIELDS[message.role] : undefined
    if (allowed === undefined) return invalid(`${path}.role: Input should be 'user', 'assistant' or 'system'`)
    for (const key of Object.keys(message)) {
      if (!allowed.includes(key)) return invalid(`${path}.${key}: Extra inputs are not permitted`)
    }
    const content: unknown = message.content
    if (message.role === "system") {
      if (content === undefined && message.output_config == null) {
        return invalid(`${path}: a system message needs content or output_config`)
      }
      if (content !== undefined && typeof content !== "string" && !Array.isArray(content)) {
        return invalid(`${path}.content: Input should be a valid string or list`)
      }
      continue
    }
    if (content === undefined) return invalid(`${path}.content: Field required`)
    const isFinalAssistant = i === messages.length - 1 && message.role === "assistant"
    if ((content === "" || (Array.isArray(content) && content.length === 0)) && !isFinalAssistant) {
      return invalid(
        `${path}: all messages must have non-empty content except for the optional final assistant message`
      )
    }
    if (typeof content === "string") continue
    if (!Array.isArray(content)) return invalid(`${path}.content: Input should be a valid string or list`)
    for (let j = 0; j < content.length; j++) {
      const refusal = validateBlock(content[j], message.role as string, `${path}.content.${j}`, legacy)
      if (refusal !== undefined) return refusal
    }
  }
  const last = messages[messages.length - 1] as JsonBody
  if (last.role === "assistant") {
    const text = typeof last.content === "string"
      ? last.content
      : (last.content as Array<JsonBody>).filter((block) => block.type === "text").map((block) => block.text as string).at(-1)
    if (text !== undefined && text !== "" && /\s$/.test(text)) {
      return invalid("messages: final assistant content cannot end with trailing whitespace")
    }
  }
  return undefined
}

const validateTools = (body: JsonBody): Refusal | undefined => {
  const tools: unknown = body.tools
  if (tools !== undefined && tools !== null) {
    if (!Array.isArray(tools)) return invalid("tools: Input should be a valid list")
    for (let i = 0; i < tools.length; i++) {
      const tool: unknown = tools[i]
      if (!isRecord(tool)) return invalid(`tools.${i}: Input should be a valid dictionary`)
      // Server tools (web_search_*, bash_*, ...) carry a versioned type and no schema.
      if (tool.type !== undefined && tool.type !== null && tool.type !== "custom") continue
      if (typeof tool.name !== "string") return invalid(`tools.${i}.custom.name: Field required`)
      if (!TOOL_NAME.test(tool.name)) {
        return invalid(`tools.${i}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'`)
      }
      if (tool.input_schema === undefined) return invalid(`tools.${i}.custom.input_schema: Field required`)
      if (!isRecord(tool.input_schema) || tool.input_schema.type !== "object") {
        return invalid(`tools.${i}.custom.input_schema.type: Input should be 'object'`)
      }
      for (const key of Object.keys(tool)) {
        if (!["name", "description", "input_schema", "cache_control", "type", "strict", "defer_loading", "input_examples", "allowed_callers", "eager_input_streaming"].includes(key)) {
          return invalid(`tools.${i}.custom.${key}: Extra inputs are not permitted`)
        }
      }
    }
  }
  const choice: unknown = body.tool_choice
  if (choice !== undefined && choice !== null) {
    if (!isRecord(choice) || !["auto", "any", "tool", "none"].includes(String(choice.type))) {
      return invalid("tool_choice: Input tag found using 'type' does not match any of the expected tags: 'auto', 'any', 'tool', 'none'")
    }
    if (!Array.isArray(tools) || tools.length === 0) {
      return invalid("tool_choice may only be specified while providing tools.")
    }
    if (choice.type === "tool" && typeof choice.name !== "string") return invalid("tool_choice.tool.name: Field required")
    if (choice.type === "none" && choice.disable_parallel_tool_use !== undefined) {
      return invalid("tool_choice.none.disable_parallel_tool_use: Extra inputs are not permitted")
    }
  }
  return undefined
}

interface Turn {
  readonly role: string
  /** Index of the turn's first message in the request. */
  readonly index: number
  readonly blocks: Array<{ readonly block: JsonBody; readonly path: string }>
}

/** The API combines consecutive same-role messages into one turn before checking tool pairing. */
const turnsOf = (messages: ReadonlyArray<JsonBody>): Array<Turn> => {
  const turns: Array<Turn> = []
  messages.forEach((message, i) => {
    // System messages are instructions between turns; they take no part in tool pairing.
    if (message.role === "system") return
    const blocks = Array.isArray(message.content)
      ? (message.content as Array<JsonBody>).map((block, j) => ({ block, path: `messages.${i}.content.${j}` }))
      : []
    const previous = turns.at(-1)
    if (previous !== undefined && previous.role === message.role) previous.blocks.push(...blocks)
    else turns.push({ role: message.role as string, index: i, blocks })
  })
  return turns
}

const validateToolFlow = (body: JsonBody): Refusal | undefined => {
  const turns = turnsOf(body.messages as Array<JsonBody>)
  const usesTools = turns.some((turn) =>
    turn.blocks.some(({ block }) => block.type === "tool_use" || block.type === "tool_result")
  )
  const declaresTools = Array.isArray(body.tools) && body.tools.length > 0
  if (usesTools && !declaresTools) {
    return invalid("Requests which include `tool_use` or `tool_result` blocks must define tools.")
  }
  for (let t = 0; t < turns.length; t++) {
    const turn = turns[t]!
    if (turn.role === "user") {
      const previous = turns[t - 1]
      const offered = new Set(
        (previous?.blocks ?? []).filter(({ block }) => block.type === "tool_use").map(({ block }) => block.id as string)
      )
      for (const { block, path } of turn.blocks) {
        if (block.type === "tool_result" && !offered.has(block.tool_use_id as string)) {
          return invalid(
            `${path}: unexpected \`tool_use_id\` found in \`tool_result\` blocks: ${String(block.tool_use_id)}. Each \`tool_result\` block must have a corresponding \`tool_use\` block in the previous message.`
          )
        }
      }
      continue
    }
    const ids = turn.blocks.filter(({ block }) => block.type === "tool_use").map(({ block }) => block.id as string)
    if (ids.length === 0) continue
    const next = turns[t + 1]
    const answered = new Set(
      (next?.blocks ?? []).filter(({ block }) => block.type === "tool_result").map(({ block }) => block.tool_use_id as string)
    )
    const missing = ids.filter((id) => !answered.has(id))
    if (missing.length > 0) {
      return invalid(
        `messages.${turn.index}: \`tool_use\` ids were found without \`tool_result\` blocks immediately after: ${missing.join(", ")}. Each \`tool_use\` block must have a corresponding \`tool_result\` block in the next message.`
      )
    }
  }
  return undefined
}

// ---------------------------------------------------------------------------------------------
// Answers

const blockText = (block: JsonBody): string => {
  if (block.type === "text") return block.text as string
  if (block.type === "tool_use") return JSON.stringify(block.input)
  if (block.type === "tool_result") {
    if (typeof block.content === "string") return block.content
    if (Array.isArray(block.content)) return (block.content as Array<JsonBody>).map(blockText).join("\n")
  }
  return ""
}

const contentText = (content: unknown): string =>
  typeof content === "string"
    ? content
    : Array.isArray(content)
      ? (content as Array<JsonBody>).map(blockText).filter((text) => text !== "").join("\n")
      : ""

/**
 * What the default echoes: the text of the last user turn (consecutive user messages count as
 * one, as the API combines them), or its tool results when it has no text.
 */
const lastUserText = (body: JsonBody): string => {
  const messages = body.messages as Array<JsonBody>
  let end = messages.length - 1
  while (end >= 0 && messages[end]!.role !== "user") end--
  let start = end
  while (start > 0 && messages[start - 1]!.role === "user") start--
  const blocks = messages
    .slice(start, end + 1)
    .flatMap((message): Array<JsonBody> =>
      typeof message.content === "string" ? [{ type: "text", text: message.content }] : (message.content as Array<JsonBody>)
    )
  const texts = blocks.filter((block) => block.type === "text").map((block) => block.text as string)
  return texts.length > 0 ? texts.join("\n") : contentText(blocks)
}

/** Input tokens: words of the system prompt and of every message's text, tool inputs and results. */
const promptWords = (body: JsonBody): number => {
  let words = countWords(contentText(body.system))
  for (const message of body.messages as Array<JsonBody>) words += countWords(contentText(message.content))
  return words
}

const STOP_REASONS: Record<string, string> = {
  stop: "end_turn",
  length: "max_tokens",
  content_filter: "refusal",
  tool_calls: "tool_use"
}

const stopReason = (finish: Finish): string => STOP_REASONS[finish] ?? finish

interface Answer {
  readonly text: string
  readonly calls: ReadonlyArray<{ readonly id: string; readonly name: string; readonly input: Record<string, unknown> }>
  readonly stopReason: string
  readonly inputTokens: number
  readonly cacheRead: number
  readonly cacheWrite: number
  readonly outputTokens: number
}

const answerOf = (body: JsonBody, scenario: TextScenario | ToolCallsScenario): Answer => {
  const usage = scenario.usage
  const base = {
    inputTokens: usage?.input ?? promptWords(body),
    cacheRead: usage?.cacheRead ?? 0,
    cacheWrite: usage?.cacheWrite ?? 0
  }
  if (scenario.kind === "text") {
    let text = scenario.text
    let stop = stopReason(scenario.finish ?? "stop")
    // Tokens are words here, so a budget below the answer's length truncates it like the real model.
    if (scenario.finish === undefined && countWords(text) > (body.max_tokens as number)) {
      text = takeWords(text, body.max_tokens as number)
      stop = "max_tokens"
    }
    return { ...base, text, calls: [], stopReason: stop, outputTokens: usage?.output ?? Math.max(1, countWords(text)) }
  }
  const calls = scenario.calls.map((call) => ({
    id: call.id ?? `toolu_01${randomId(22)}`,
    name: call.name,
    input: call.arguments
  }))
  const text = scenario.text ?? ""
  const outputWords =
    countWords(text) + calls.reduce((sum, call) => sum + countWords(`${call.name} ${JSON.stringify(call.input)}`), 0)
  return { ...base, text, calls, stopReason: "tool_use", outputTokens: usage?.output ?? Math.max(1, outputWords) }
}

const inputUsage = (answer: Answer): JsonBody => ({
  input_tokens: answer.inputTokens,
  cache_creation_input_tokens: answer.cacheWrite,
  cache_read_input_tokens: answer.cacheRead
})

const fullUsage = (answer: Answer, outputTokens: number): JsonBody => ({
  ...inputUsage(answer),
  cache_creation: { ephemeral_5m_input_tokens: answer.cacheWrite, ephemeral_1h_input_tokens: 0 },
  output_tokens: outputTokens,
  service_tier: "standard"
})

const contentBlocks = (answer: Answer): Array<JsonBody> => [
  ...(answer.text === "" ? [] : [{ type: "text", text: answer.text }]),
  ...answer.calls.map((call) => ({ type: "tool_use", id: call.id, name: call.name, input: call.input }))
]

const messageObject = (body: JsonBody, answer: Answer): JsonBody => ({
  id: `msg_01${randomId(22)}`,
  type: "message",
  role: "assistant",
  model: body.model,
  content: contentBlocks(answer),
  stop_reason: answer.stopReason,
  stop_sequence: null,
  stop_details: null,
  usage: fullUsage(answer, answer.outputTokens)
})

const event = (type: string, data: JsonBody): string => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`

/** Every SSE frame of a streamed answer, in the order of wire-formats.md section 2.4. */
const streamFrames = (body: JsonBody, answer: Answer, options: StreamOptions): Array<string> => {
  const frames: Array<string> = []
  frames.push(
    event("message_start", {
      message: {
        id: `msg_01${randomId(22)}`,
        type: "message",
        role: "assistant",
        model: body.model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: fullUsage(answer, 1)
      }
    })
  )
  let index = 0
  const ping = () => {
    if (index === 0) frames.push(event("ping", {}))
  }
  if (answer.text !== "") {
    frames.push(event("content_block_start", { index, content_block: { type: "text", text: "" } }))
    ping()
    for (const word of splitWords(answer.text)) {
      frames.push(event("content_block_delta", { index, delta: { type: "text_delta", text: word } }))
    }
    frames.push(event("content_block_stop", { index }))
    index++
  }
  for (const call of answer.calls) {
    frames.push(
      event("content_block_start", { index, content_block: { type: "tool_use", id: call.id, name: call.name, input: {} } })
    )
    ping()
    frames.push(event("content_block_delta", { index, delta: { type: "input_json_delta", partial_json: "" } }))
    for (const fragment of splitFragments(JSON.stringify(call.input))) {
      frames.push(event("content_block_delta", { index, delta: { type: "input_json_delta", partial_json: fragment } }))
    }
    frames.push(event("content_block_stop", { index }))
    index++
  }
  if (index === 0) frames.push(event("ping", {}))
  const delta = event("message_delta", {
    delta: { stop_reason: answer.stopReason, stop_sequence: null, stop_details: null },
    usage: { ...inputUsage(answer), output_tokens: answer.outputTokens }
  })
  frames.push(delta)
  if (options.extraUsageChunk === true) frames.push(delta)
  frames.push(event("message_stop", {}))
  return frames
}

const ERROR_TYPES: Record<number, { type: string; message: string }> = {
  400: { type: "invalid_request_error", message: "Invalid request." },
  401: { type: "authentication_error", message: "invalid x-api-key" },
  402: { type: "billing_error", message: "Your credit balance is too low to access the Anthropic API." },
  403: { type: "permission_error", message: "Your API key does not have permission to use the specified resource." },
  404: { type: "not_found_error", message: "Not Found" },
  413: { type: "request_too_large", message: "Request exceeds the maximum allowed number of bytes." },
  429: { type: "rate_limit_error", message: "Number of request tokens has exceeded your per-minute rate limit." },
  500: { type: "api_error", message: "Internal server error" },
  504: { type: "timeout_error", message: "Request timed out" },
  529: { type: "overloaded_error", message: "Overloaded" }
}

const defaultErrorBody = (status: number, message: string | undefined, requestId: string | undefined): JsonBody => {
  const known = ERROR_TYPES[status] ?? {
    type: status >= 500 ? "api_error" : "invalid_request_error",
    message: `Error ${status}`
  }
  return { type: "error", error: { type: known.type, message: message ?? known.message }, request_id: requestId }
}

const firstWordFrames = 4 // message_start, content_block_start, ping, first text_delta

const respond = async (ctx: ResponseContext, scenario: Scenario): Promise<void> => {
  const body = ctx.body
  const streaming = body.stream === true
  switch (scenario.kind) {
    case "text":
    case "tool_calls": {
      const answer = answerOf(body, scenario)
      if (!streaming) return ctx.sendJson(200, messageObject(body, answer))
      ctx.startStream()
      await writeFrames(ctx, streamFrames(body, answer, scenario), scenario)
      return ctx.end()
    }
    case "error": {
      const headers: Record<string, string> = { ...scenario.headers }
      if (scenario.status === 429 || scenario.status === 529) headers["retry-after"] ??= String(scenario.retryAfter ?? 1)
      if (typeof scenario.body === "string") return ctx.sendText(scenario.status, scenario.body, headers)
      return ctx.sendJson(
        scenario.status,
        scenario.body ?? defaultErrorBody(scenario.status, scenario.message, ctx.headers["request-id"]),
        headers
      )
    }
    case "hang":
      return ctx.untilGone()
    case "delay":
      await ctx.sleep(scenario.ms)
      if (ctx.signal.aborted) return
      return respond(ctx, scenario.then)
    case "stall_after": {
      const answer = answerOf(body, scenario.of ?? { kind: "text", text: longText() })
      if (!streaming) {
        ctx.sendPartialJson(200, messageObject(body, answer))
      } else {
        const frames = streamFrames(body, answer, scenario)
        ctx.startStream()
        await writeFrames(ctx, frames.slice(0, Math.min(scenario.chunks, frames.length - 1)), scenario)
      }
      if (scenario.then === "destroy") return ctx.destroy()
      return ctx.untilGone()
    }
    case "mid_stream_error": {
      const type = scenario.errorType ?? "overloaded_error"
      const error = { type, message: scenario.message ?? (type === "overloaded_error" ? "Overloaded" : "Internal server error") }
      if (!streaming) {
        return ctx.sendJson(type === "overloaded_error" ? 529 : 500, {
          type: "error",
          error,
          request_id: ctx.headers["request-id"]
        })
      }
      const answer = answerOf(body, { kind: "text", text: scenario.text ?? longText() })
      const frames = streamFrames(body, answer, scenario)
      ctx.startStream()
      await writeFrames(
        ctx,
        [...frames.slice(0, Math.min(scenario.afterChunks ?? firstWordFrames, frames.length - 1)), event("error", { error })],
        scenario
      )
      return ctx.end()
    }
  }
}
