/**
 * OpenAI chat request -> Anthropic messages request (docs/wire-translation.md 3.1, 3.3, 3.4, 3.7, 3.8).
 *
 * Every field of the chat format is translated, dropped or refused, field by field:
 *
 * Translated: `messages` (system and developer messages, wherever they sit, are hoisted into
 * `system`; tool messages become tool_result blocks; `file` parts become document blocks, or
 * image blocks for image files; assistant refusal parts become text), `max_completion_tokens` /
 * `max_tokens`, `temperature` (clamped to 1), `top_p`, `stop`, function `tools` (none sent with a
 * tool history: the history's tools, by name, as Anthropic refuses tool blocks without tools), `tool_choice`
 * (including `allowed_tools`, which narrows the tool list), `parallel_tool_calls`,
 * `response_format` (forced-tool emulation, see json-mode.ts), `user` / `safety_identifier`
 * (`metadata.user_id`), `reasoning_effort` (`output_config.effort`; `minimal` is `low`, `none`
 * sends no effort), `stream`.
 *
 * Dropped, because they only tune delivery and the answer is the same: `metadata`, `store`,
 * `service_tier`, `prompt_cache_key`, `prompt_cache_retention`, `prompt_cache_options`, parts'
 * `prompt_cache_breakpoint` (cache hints), `prediction` (predicted outputs only speed up the
 * reply), `stream_options` (Anthropic always streams usage), message `name`, image `detail`, tool
 * `strict`, `logprobs: false`, `top_logprobs: 0`, `modalities: ["text"]`, a zero penalty,
 * `verbosity` (a hint on how long to answer, not on what; Codex sends it on every request).
 *
 * Refused, naming the field: `seed`, non-zero `presence_penalty` / `frequency_penalty`,
 * `logit_bias`, `logprobs: true` and `top_logprobs` (no log probabilities), `audio` and audio
 * `modalities`, `input_audio` parts and assistant `audio` (no audio in or out),
 * `moderation`, `web_search_options`, the legacy `functions` / `function_call` and `function`
 * messages (the chat pipeline puts them in tools before this step, legacy-functions.ts: here they
 * would be answered in tools, which a legacy client does not read), `custom` tools, tool calls and tool choices (free-form grammars), `file` parts by
 * `file_id` (OpenAI file ids mean nothing to Anthropic) and `n` > 1 (by the schema).
 *
 * Other choices: with both `temperature` and `top_p`, the one left at its default (1) is dropped;
 * two non-default values are refused, as current Claude models reject the pair. A `user` that
 * looks like an email address or phone number is sent as its SHA-256, since Anthropic rejects
 * identifying `metadata.user_id` values.
 */
import { createHash } from "node:crypto"
import { Predicate } from "effect"
import type {
  MessagesAssistantBlock,
  MessagesDocumentBlock,
  MessagesImageBlock,
  MessagesRequest,
  MessagesTextBlock,
  MessagesTool,
  MessagesToolChoice,
  MessagesToolResultBlock,
  MessagesUserBlock
} from "../anthropic-messages.ts"
import { anthropicToolId } from "../ids.ts"
import type {
  ChatAssistantContent,
  ChatFunctionTool,
  ChatMessage,
  ChatRequest,
  ChatTextContent,
  ChatUserContent
} from "../openai-chat.ts"
import { type JsonMode, jsonModeOf, jsonResponseTool } from "./json-mode.ts"
import { refuse, type Translation, translating } from "./untranslatable.ts"
import { parseJsonWithin } from "../json-depth.ts"

export interface ChatToAnthropicOptions {
  /** Upstream model id sent to Anthropic. */
  readonly model: string
  /** The model's output-token cap: larger requests are clamped to it, requests without a limit get it. */
  readonly maxTokensCap: number
  /**
   * Whether the model reasons (`models[].reasoning`). When false `reasoning_effort` is left out:
   * a model that cannot reason answers without it rather than refusing the request.
   */
  readonly reasoning?: boolean
}

export const chatRequestToAnthropic = (
  request: ChatRequest,
  options: ChatToAnthropicOptions
): Translation<MessagesRequest> =>
  translating(() => {
    refuseUnsupportedParameters(request)
    const mode = jsonModeOf(request)
    const { system, messages } = conversation(request.messages)
    const allowed = allowedFunctionTools(request)
    const tools = anthropicTools(allowed, request, mode)
    const toolChoice = anthropicToolChoice(request, allowed.length > 0, mode)
    const stopSequences = anthropicStopSequences(request.stop)
    const user = request.safety_identifier ?? request.user
    const userId = user == null || user === "" ? undefined : opaqueUserId(user)
    const effort = options.reasoning === false ? undefined : anthropicEffort(request.reasoning_effort)
    return {
      model: options.model,
      max_tokens: maxTokens(request, options.maxTokensCap),
      messages,
      ...(system.length > 0 ? { system } : {}),
      ...(tools.length > 0 ? { tools } : {}),
      ...(toolChoice === undefined ? {} : { tool_choice: toolChoice }),
      ...sampling(request),
      ...(stopSequences.length > 0 ? { stop_sequences: stopSequences } : {}),
      ...(userId === undefined ? {} : { metadata: { user_id: userId } }),
      ...(effort === undefined ? {} : { output_config: { effort } }),
      ...(request.stream === true ? { stream: true } : {})
    }
  })

const refuseUnsupportedParameters = (request: ChatRequest): void => {
  if (request.seed != null) refuse("seed", "not supported by Anthropic models; remove it")
  if (request.presence_penalty != null && request.presence_penalty !== 0) {
    refuse("presence_penalty", "not supported by Anthropic models; remove it or set it to 0")
  }
  if (request.frequency_penalty != null && request.frequency_penalty !== 0) {
    refuse("frequency_penalty", "not supported by Anthropic models; remove it or set it to 0")
  }
  if (request.logit_bias != null && Object.keys(request.logit_bias).length > 0) {
    refuse("logit_bias", "Anthropic models cannot bias tokens; remove it")
  }
  if (request.logprobs === true) refuse("logprobs", "Anthropic models return no log probabilities; remove it")
  if (request.top_logprobs != null && request.top_logprobs !== 0) {
    refuse("top_logprobs", "Anthropic models return no log probabilities; remove it")
  }
  if (request.audio != null) refuse("audio", "Anthropic models do not answer with audio; remove it")
  if (request.modalities != null && request.modalities.some((modality) => modality !== "text")) {
    refuse("modalities", "Anthropic models answer with text only; remove it or send [\"text\"]")
  }
  if (request.moderation != null) refuse("moderation", "OpenAI moderation cannot be applied to Anthropic models; remove it")
  if (request.web_search_options !== undefined) {
    refuse("web_search_options", "web search is not translated to Anthropic models; remove it")
  }
  if (request.functions !== undefined) {
    refuse("functions", "the legacy functions API is not translated to Anthropic models; send tools instead")
  }
  if (request.function_call !== undefined) {
    refuse("function_call", "the legacy functions API is not translated to Anthropic models; send tool_choice instead")
  }
}

/** Anthropic's efforts are OpenAI's minus the lowest two: `none` asks for no reasoning at all. */
const anthropicEffort = (effort: string | null | undefined): string | undefined => {
  switch (effort) {
    case undefined:
    case null:
    case "none":
      return undefined
    case "minimal":
      return "low"
    case "low":
    case "medium":
    case "high":
    case "xhigh":
    case "max":
      return effort
    default:
      return refuse("reasoning_effort", `"${effort}" has no Anthropic equivalent (low, medium, high, xhigh, max)`)
  }
}

const maxTokens = (request: ChatRequest, cap: number): number => {
  const requested = request.max_completion_tokens ?? request.max_tokens ?? undefined
  return requested === undefined ? cap : Math.min(requested, cap)
}

const sampling = (request: ChatRequest): { temperature?: number; top_p?: number } => {
  const temperature = request.temperature ?? undefined
  const topP = request.top_p ?? undefined
  if (temperature !== undefined && topP !== undefined) {
    if (topP === 1) return { temperature: Math.min(temperature, 1) }
    if (temperature === 1) return { top_p: topP }
    refuse("top_p", "Anthropic models accept temperature or top_p, not both; send only one of them")
  }
  return {
    ...(temperature === undefined ? {} : { temperature: Math.min(temperature, 1) }),
    ...(topP === undefined ? {} : { top_p: topP })
  }
}

const anthropicStopSequences = (stop: ChatRequest["stop"]): Array<string> => {
  if (stop == null) return []
  const all = typeof stop === "string" ? [stop] : stop
  // Anthropic rejects whitespace-only stop sequences.
  return all.filter((sequence) => sequence.trim() !== "")
}

const looksPersonal = (id: string): boolean =>
  /^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(id) || /^\+?[\d\s().-]{7,}$/.test(id)

const opaqueUserId = (user: string): string =>
  looksPersonal(user) ? createHash("sha256").update(user).digest("hex") : user

// --- tools -----------------------------------------------------------------------------------

/**
 * The function tools the model may call, with their index in the request (for error paths):
 * custom (free-form) tools are refused, and `tool_choice: allowed_tools` narrows the list.
 */
const allowedFunctionTools = (request: ChatRequest): Array<{ readonly tool: ChatFunctionTool; readonly index: number }> => {
  const tools = (request.tools ?? []).map((tool, index) => {
    if (tool.type === "custom") {
      return refuse(`tools.${index}`, "custom (free-form) tools have no Anthropic equivalent; send function tools")
    }
    return { tool, index }
  })
  const choice = request.tool_choice
  if (typeof choice !== "object" || choice.type !== "allowed_tools") return tools
  const names = new Set(choice.allowed_tools.tools.flatMap((entry, index) => {
    const fn = entry["function"]
    const name = entry["type"] === "function" && typeof fn === "object" && fn !== null ? (fn as Record<string, unknown>)["name"] : undefined
    return typeof name === "string"
      ? [name]
      : refuse(`tool_choice.allowed_tools.tools.${index}`, 'expected {"type": "function", "function": {"name": ...}}')
  }))
  return tools.filter(({ tool }) => names.has(tool.function.name))
}

const anthropicTools = (
  allowed: ReadonlyArray<{ readonly tool: ChatFunctionTool; readonly index: number }>,
  request: ChatRequest,
  mode: JsonMode | undefined
): Array<MessagesTool> => {
  const tools: Array<MessagesTool> = allowed.map(({ tool, index }) => {
    if (mode !== undefined && tool.function.name === mode.tool) {
      refuse(`tools.${index}.function.name`, `"${mode.tool}" is reserved for response_format on Anthropic models`)
    }
    return {
      name: tool.function.name,
      ...(tool.function.description === undefined ? {} : { description: tool.function.description }),
      input_schema: tool.function.parameters === undefined
        ? { type: "object", properties: {} }
        : { ...tool.function.parameters, type: "object" }
    }
  })
  if ((request.tools ?? []).length === 0) tools.push(...historyTools(request.messages))
  if (mode !== undefined) tools.push(jsonResponseTool(request, mode))
  return tools
}

/**
 * Anthropic (and Bedrock, Vertex) refuse tool_use / tool_result blocks in a request that defines
 * no tools, while OpenAI takes a tool history without `tools` (the OpenAI SDK's follow-up turns
 * send one). The history's own tools are then declared, by name with an open schema: the model
 * was already calling them.
 */
const historyTools = (messages: ChatRequest["messages"]): Array<MessagesTool> => {
  const names = new Set<string>()
  for (const message of messages) {
    if (message.role !== "assistant") continue
    for (const call of message.tool_calls ?? []) if (call.type === "function") names.add(call.function.name)
  }
  return [...names].map((name) => ({ name, input_schema: { type: "object", properties: {} } }))
}

const anthropicToolChoice = (
  request: ChatRequest,
  hasClientTools: boolean,
  mode: JsonMode | undefined
): MessagesToolChoice | undefined => {
  const requested = request.tool_choice
  if (typeof requested === "object" && requested.type === "custom") {
    refuse("tool_choice", "custom (free-form) tools have no Anthropic equivalent")
  }
  // allowed_tools has narrowed the tool list already; what remains is its mode.
  const choice = typeof requested === "object" && requested.type === "allowed_tools"
    ? requested.allowed_tools.mode
    : requested as Exclude<typeof requested, { type: "allowed_tools" | "custom" }>
  const parallel = request.parallel_tool_calls === false ? { disable_parallel_tool_use: true } : {}
  if (mode !== undefined) {
    if (typeof choice === "object") return { type: "tool", name: choice.function.name, ...parallel }
    // The answer must come through the JSON tool; with client tools the model may still call those first.
    if (choice === "none" || !hasClientTools) return { type: "tool", name: mode.tool, ...parallel }
    return { type: "any", ...parallel }
  }
  if (!hasClientTools) {
    if (choice === "required" || typeof choice === "object") refuse("tool_choice", "requires tools")
    return undefined
  }
  switch (choice) {
    case undefined:
      return request.parallel_tool_calls === false ? { type: "auto", disable_parallel_tool_use: true } : undefined
    case "auto":
      return { type: "auto", ...parallel }
    case "none":
      return { type: "none" }
    case "required":
      return { type: "any", ...parallel }
    default:
      return { type: "tool", name: choice.function.name, ...parallel }
  }
}

// --- messages --------------------------------------------------------------------------------

interface Turn {
  readonly role: "user" | "assistant"
  /** tool_result blocks, kept apart because Anthropic wants them first in their user turn. */
  readonly results: Array<MessagesToolResultBlock>
  readonly blocks: Array<MessagesUserBlock | MessagesAssistantBlock>
}

type AnthropicMessage = MessagesRequest["messages"][number]

/**
 * Walks the chat transcript once: system and developer messages are hoisted into `system`,
 * consecutive tool messages and the user message after them become one user turn, and messages
 * with nothing to say are skipped (Anthropic rejects empty text blocks and empty turns).
 */
const conversation = (
  chat: ChatRequest["messages"]
): { system: Array<MessagesTextBlock>; messages: Array<AnthropicMessage> } => {
  const system: Array<MessagesTextBlock> = []
  const turns: Array<Turn> = []
  const append = (
    role: Turn["role"],
    blocks: ReadonlyArray<Turn["blocks"][number]>,
    results: ReadonlyArray<MessagesToolResultBlock> = []
  ) => {
    if (blocks.length === 0 && results.length === 0) return
    let turn = turns.at(-1)
    if (turn === undefined || turn.role !== role) {
      turn = { role, results: [], blocks: [] }
      turns.push(turn)
    }
    turn.results.push(...results)
    turn.blocks.push(...blocks)
  }
  chat.forEach((message, index) => {
    const path = `messages.${index}`
    switch (message.role) {
      case "system":
      case "developer":
        system.push(...textBlocks(message.content))
        break
      case "user":
        append("user", userBlocks(message.content, `${path}.content`))
        break
      case "assistant":
        append("assistant", assistantBlocks(message, path))
        break
      case "tool":
        append("user", [], [toolResult(message)])
        break
      case "function":
        refuse(`${path}.role`, "legacy function messages are not translated to Anthropic models; send tool messages")
    }
  })
  trimFinalAssistantTurn(turns)
  if (turns.length === 0) refuse("messages", "no user or assistant message with content to send")
  return {
    system,
    messages: turns.map((turn) => ({ role: turn.role, content: [...turn.results, ...turn.blocks] }) as AnthropicMessage)
  }
}

const textBlock = (text: string): MessagesTextBlock => ({ type: "text", text })

/** Anthropic rejects empty and whitespace-only text blocks, so such text is left out. */
const hasText = (text: string): boolean => text.trim() !== ""

const textBlocks = (content: ChatTextContent): Array<MessagesTextBlock> => {
  const texts = typeof content === "string" ? [content] : content.map((part) => part.text)
  return texts.filter(hasText).map(textBlock)
}

const userBlocks = (content: ChatUserContent, path: string): Array<MessagesUserBlock> => {
  if (typeof content === "string") return hasText(content) ? [textBlock(content)] : []
  return content.flatMap((part, index): Array<MessagesUserBlock> => {
    const partPath = `${path}.${index}`
    switch (part.type) {
      case "text":
        return hasText(part.text) ? [textBlock(part.text)] : []
      case "image_url":
        return [imageBlock(part.image_url.url, `${partPath}.image_url.url`)]
      case "file":
        return [fileBlock(part.file, `${partPath}.file`)]
      case "input_audio":
        return refuse(`${partPath}`, "audio input is not supported by Anthropic models")
    }
  })
}

/** A `file` part: PDFs and plain text become document blocks, images image blocks. */
const fileBlock = (
  file: { readonly file_data?: string; readonly file_id?: string; readonly filename?: string },
  path: string
): MessagesDocumentBlock | MessagesImageBlock => {
  if (file.file_data === undefined) {
    return refuse(file.file_id === undefined ? `${path}.file_data` : `${path}.file_id`, file.file_id === undefined
      ? "required: Anthropic models need the file's content"
      : "OpenAI file ids cannot be read by Anthropic models; send the content as file_data")
  }
  const dataUri = /^data:([^;,]+);base64,(.+)$/s.exec(file.file_data)
  if (dataUri === null) return refuse(`${path}.file_data`, "expected a base64 data: URI")
  const mediaType = (dataUri[1] ?? "").toLowerCase()
  const data = dataUri[2] ?? ""
  const title = file.filename === undefined || file.filename === "" ? {} : { title: file.filename }
  if (mediaType === "application/pdf") {
    return { type: "document", source: { type: "base64", media_type: "application/pdf", data }, ...title }
  }
  if (mediaType === "text/plain") {
    return {
      type: "document",
      source: { type: "text", media_type: "text/plain", data: Buffer.from(data, "base64").toString("utf8") },
      ...title
    }
  }
  if (imageMediaTypes.has(mediaType)) return imageBlock(file.file_data, `${path}.file_data`)
  return refuse(`${path}.file_data`, `file type ${mediaType} is not supported by Anthropic models (pdf, plain text, images)`)
}

const imageMediaTypes = new Set(["image/jpeg", "image/png", "image/gif", "image/webp"])

type ImageMediaType = Extract<MessagesImageBlock["source"], { type: "base64" }>["media_type"]

const imageBlock = (url: string, path: string): MessagesImageBlock => {
  const dataUri = /^data:([^;,]+);base64,(.+)$/s.exec(url)
  if (dataUri !== null) {
    const mediaType = (dataUri[1] ?? "").toLowerCase()
    if (!imageMediaTypes.has(mediaType)) {
      refuse(path, `image type ${mediaType} is not supported by Anthropic models (jpeg, png, gif, webp)`)
    }
    return {
      type: "image",
      source: { type: "base64", media_type: mediaType as ImageMediaType, data: dataUri[2] ?? "" }
    }
  }
  if (/^https?:\/\//i.test(url)) return { type: "image", source: { type: "url", url } }
  return refuse(path, "expected a base64 data: URI or an http(s) URL")
}

type AssistantChatMessage = Extract<ChatMessage, { role: "assistant" }>
type ToolChatMessage = Extract<ChatMessage, { role: "tool" }>

const assistantText = (content: ChatAssistantContent): Array<MessagesTextBlock> => {
  const texts = typeof content === "string"
    ? [content]
    : content.map((part) => (part.type === "text" ? part.text : part.refusal))
  return texts.filter(hasText).map(textBlock)
}

const assistantBlocks = (message: AssistantChatMessage, path: string): Array<MessagesAssistantBlock> => {
  if (message.audio != null) refuse(`${path}.audio`, "audio answers cannot be replayed to Anthropic models")
  if (message.function_call != null) {
    refuse(`${path}.function_call`, "the legacy functions API is not translated to Anthropic models; send tool_calls")
  }
  const texts = message.content == null ? [] : assistantText(message.content)
  // A refusal replayed from an earlier response is what the model said.
  if (texts.length === 0 && typeof message.refusal === "string" && hasText(message.refusal)) {
    texts.push(textBlock(message.refusal))
  }
  const toolUses = (message.tool_calls ?? []).map((call, index): MessagesAssistantBlock => {
    if (call.type === "custom") {
      return refuse(`${path}.tool_calls.${index}`, "custom (free-form) tool calls have no Anthropic equivalent")
    }
    return {
      type: "tool_use",
      id: anthropicToolId(call.id),
      name: call.function.name,
      input: parseArguments(call.function.arguments, `${path}.tool_calls.${index}.function.arguments`)
    }
  })
  return [...texts, ...toolUses]
}

const parseArguments = (text: string, path: string): Readonly<Record<string, unknown>> => {
  if (text.trim() === "") return {}
  let parsed: unknown
  try {
    parsed = parseJsonWithin(text)
  } catch {
    return refuse(path, "tool call arguments are not valid JSON")
  }
  return Predicate.isObject(parsed) ? parsed as Record<string, unknown> : refuse(path, "tool call arguments must be a JSON object")
}

const toolResult = (message: ToolChatMessage): MessagesToolResultBlock => {
  const base = { type: "tool_result" as const, tool_use_id: anthropicToolId(message.tool_call_id) }
  if (typeof message.content === "string") return hasText(message.content) ? { ...base, content: message.content } : base
  const blocks = textBlocks(message.content)
  return blocks.length === 0 ? base : { ...base, content: blocks }
}

/** A final assistant turn is a prefill, which Anthropic rejects when it ends in whitespace. */
const trimFinalAssistantTurn = (turns: Array<Turn>): void => {
  const last = turns.at(-1)
  if (last === undefined || last.role !== "assistant") return
  const block = last.blocks.at(-1)
  if (block === undefined || block.type !== "text") return
  const trimmed = block.text.trimEnd()
  last.blocks.pop()
  if (hasText(trimmed)) last.blocks.push(textBlock(trimmed))
  if (last.blocks.length === 0) turns.pop()
}
