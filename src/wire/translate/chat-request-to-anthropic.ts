/**
 * OpenAI chat request -> Anthropic messages request (reference 3.1, 3.3, 3.4, 3.7, 3.8).
 *
 * Choices worth knowing:
 * - `seed` and non-zero penalties are refused: Anthropic has nothing that behaves alike.
 * - `metadata`, message `name`, image `detail` and tool `strict` are dropped: they do not change
 *   what the model writes (metadata stays available to the gateway for logging).
 * - `temperature` above 1 is clamped to 1. With both `temperature` and `top_p`, the one left at its
 *   default (1) is dropped; two non-default values are refused, as current Claude models reject
 *   the pair.
 * - A `user` that looks like an email address or phone number is sent as its SHA-256, since
 *   Anthropic rejects identifying `metadata.user_id` values.
 */
import { createHash } from "node:crypto"
import { Predicate } from "effect"
import type {
  MessagesAssistantBlock,
  MessagesImageBlock,
  MessagesRequest,
  MessagesTextBlock,
  MessagesTool,
  MessagesToolChoice,
  MessagesToolResultBlock,
  MessagesUserBlock
} from "../anthropic-messages.ts"
import { sanitizeToolId } from "../ids.ts"
import type { ChatMessage, ChatRequest, ChatTextContent, ChatUserContent } from "../openai-chat.ts"
import { type JsonMode, jsonModeOf, jsonResponseTool } from "./json-mode.ts"
import { refuse, type Translation, translating } from "./untranslatable.ts"

export interface ChatToAnthropicOptions {
  /** Upstream model id sent to Anthropic. */
  readonly model: string
  /** The model's output-token cap: larger requests are clamped to it, requests without a limit get it. */
  readonly maxTokensCap: number
}

export const chatRequestToAnthropic = (
  request: ChatRequest,
  options: ChatToAnthropicOptions
): Translation<MessagesRequest> =>
  translating(() => {
    refuseUnsupportedParameters(request)
    const mode = jsonModeOf(request)
    const { system, messages } = conversation(request.messages)
    const tools = anthropicTools(request, mode)
    const toolChoice = anthropicToolChoice(request, mode)
    const stopSequences = anthropicStopSequences(request.stop)
    const userId = request.user === undefined || request.user === "" ? undefined : opaqueUserId(request.user)
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

const anthropicTools = (request: ChatRequest, mode: JsonMode | undefined): Array<MessagesTool> => {
  const tools: Array<MessagesTool> = (request.tools ?? []).map((tool, index) => {
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
  if (mode !== undefined) tools.push(jsonResponseTool(request, mode))
  return tools
}

const anthropicToolChoice = (request: ChatRequest, mode: JsonMode | undefined): MessagesToolChoice | undefined => {
  const choice = request.tool_choice
  const hasClientTools = (request.tools?.length ?? 0) > 0
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
    if (part.type === "text") return hasText(part.text) ? [textBlock(part.text)] : []
    return [imageBlock(part.image_url.url, `${path}.${index}.image_url.url`)]
  })
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

const assistantBlocks = (message: AssistantChatMessage, path: string): Array<MessagesAssistantBlock> => {
  const texts = message.content == null ? [] : textBlocks(message.content)
  // A refusal replayed from an earlier response is what the model said.
  if (texts.length === 0 && typeof message.refusal === "string" && hasText(message.refusal)) {
    texts.push(textBlock(message.refusal))
  }
  const toolUses = (message.tool_calls ?? []).map((call, index): MessagesAssistantBlock => ({
    type: "tool_use",
    id: sanitizeToolId(call.id),
    name: call.function.name,
    input: parseArguments(call.function.arguments, `${path}.tool_calls.${index}.function.arguments`)
  }))
  return [...texts, ...toolUses]
}

const parseArguments = (text: string, path: string): Readonly<Record<string, unknown>> => {
  if (text.trim() === "") return {}
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch {
    return refuse(path, "tool call arguments are not valid JSON")
  }
  return Predicate.isObject(parsed) ? parsed as Record<string, unknown> : refuse(path, "tool call arguments must be a JSON object")
}

const toolResult = (message: ToolChatMessage): MessagesToolResultBlock => {
  const base = { type: "tool_result" as const, tool_use_id: sanitizeToolId(message.tool_call_id) }
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
