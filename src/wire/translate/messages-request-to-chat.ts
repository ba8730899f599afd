/**
 * Anthropic messages request -> OpenAI chat request (reference 3.2, 3.3, 3.4, 3.8).
 *
 * Choices worth knowing:
 * - `thinking` (other than `disabled`) is refused: OpenAI-compatible models have no equivalent
 *   budget, and thinking blocks in the history are dropped (they are Anthropic-signed and mean
 *   nothing to another model).
 * - `top_k` is refused unless the caller says the upstream accepts it (`allowTopK`: vLLM, Ollama
 *   and most self-hosted servers do; OpenAI itself rejects unknown parameters). It is then sent
 *   as the non-standard `top_k` field.
 * - `cache_control` is dropped: OpenAI-compatible upstreams cache prompts on their own.
 * - Tool names over 64 characters are refused rather than shortened, so names in responses never
 *   need mapping back.
 */
import type {
  MessagesAssistantBlock,
  MessagesImageBlock,
  MessagesMessage,
  MessagesRequest,
  MessagesToolChoice,
  MessagesToolResultBlock,
  MessagesUserBlock
} from "../anthropic-messages.ts"
import type { ChatMessage, ChatRequest, ChatToolChoice, ChatUserPart } from "../openai-chat.ts"
import { refuse, type Translation, translating } from "./untranslatable.ts"

export interface MessagesToChatOptions {
  /** Upstream model id sent to the OpenAI-compatible provider. */
  readonly model: string
  /** The model's output-token cap: `max_tokens` above it is clamped. */
  readonly maxTokensCap: number
  /**
   * Which field carries the output limit. OpenAI's reasoning models only accept
   * `max_completion_tokens`; some older OpenAI-compatible servers only know `max_tokens`.
   * Default: `max_completion_tokens`.
   */
  readonly maxTokensField?: "max_tokens" | "max_completion_tokens"
  /** The upstream accepts the non-standard `top_k` parameter. Default: false. */
  readonly allowTopK?: boolean
}

/** A chat request as sent upstream: the accepted shape, plus `top_k` where allowed. */
export type ChatUpstreamRequest = ChatRequest & { readonly top_k?: number }

export const messagesRequestToChat = (
  request: MessagesRequest,
  options: MessagesToChatOptions
): Translation<ChatUpstreamRequest> =>
  translating(() => {
    if (request.thinking !== undefined && request.thinking.type !== "disabled") {
      refuse("thinking", "extended thinking cannot be sent to this model; remove it")
    }
    if (request.top_k !== undefined && options.allowTopK !== true) {
      refuse("top_k", "not supported by this model; remove it")
    }
    const stop = request.stop_sequences ?? []
    if (stop.length > 4) refuse("stop_sequences", "at most 4 stop sequences can be sent to this model")
    const toolChoice = request.tool_choice
    const userId = request.metadata?.user_id
    const maxTokens = Math.min(request.max_tokens, options.maxTokensCap)
    return {
      model: options.model,
      messages: [...systemMessage(request.system), ...request.messages.flatMap(chatMessages)],
      ...(options.maxTokensField === "max_tokens" ? { max_tokens: maxTokens } : { max_completion_tokens: maxTokens }),
      ...(request.temperature === undefined ? {} : { temperature: request.temperature }),
      ...(request.top_p === undefined ? {} : { top_p: request.top_p }),
      ...(request.top_k === undefined ? {} : { top_k: request.top_k }),
      ...(stop.length > 0 ? { stop } : {}),
      ...chatTools(request.tools),
      ...(toolChoice === undefined ? {} : { tool_choice: chatToolChoice(toolChoice) }),
      ...(toolChoice !== undefined && toolChoice.type !== "none" && toolChoice.disable_parallel_tool_use === true
        ? { parallel_tool_calls: false }
        : {}),
      ...(userId == null || userId === "" ? {} : { user: userId }),
      // Without include_usage an OpenAI stream carries no token counts at all.
      ...(request.stream === true ? { stream: true, stream_options: { include_usage: true } } : {})
    }
  })

const systemMessage = (system: MessagesRequest["system"]): Array<ChatMessage> => {
  if (system === undefined) return []
  const text = typeof system === "string" ? system : system.map((block) => block.text).join("\n\n")
  return text === "" ? [] : [{ role: "system", content: text }]
}

const chatTools = (tools: MessagesRequest["tools"]): Pick<ChatRequest, "tools"> => {
  if (tools === undefined || tools.length === 0) return {}
  return {
    tools: tools.map((tool, index) => {
      if (tool.name.length > 64) refuse(`tools.${index}.name`, "tool names longer than 64 characters cannot be sent to this model")
      return {
        type: "function" as const,
        function: {
          name: tool.name,
          ...(tool.description === undefined ? {} : { description: tool.description }),
          parameters: tool.input_schema
        }
      }
    })
  }
}

const chatToolChoice = (choice: MessagesToolChoice): ChatToolChoice => {
  switch (choice.type) {
    case "auto":
      return "auto"
    case "any":
      return "required"
    case "none":
      return "none"
    case "tool":
      return { type: "function", function: { name: choice.name } }
  }
}

const chatMessages = (message: MessagesMessage): Array<ChatMessage> =>
  message.role === "user" ? userMessages(message.content) : [assistantMessage(message.content)]

/**
 * An Anthropic user turn holds tool results and new input together. OpenAI wants the tool
 * messages directly after the assistant message that called the tools, so they come first and
 * the rest of the turn follows as one user message. Tool messages carry text only: images a tool
 * returned travel in that user message.
 */
const userMessages = (content: Extract<MessagesMessage, { role: "user" }>["content"]): Array<ChatMessage> => {
  if (typeof content === "string") return [{ role: "user", content }]
  const toolMessages: Array<ChatMessage> = []
  const parts: Array<ChatUserPart> = []
  const toolImages: Array<ChatUserPart> = []
  for (const block of content) {
    if (block.type === "tool_result") {
      toolMessages.push(toolMessage(block))
      toolImages.push(...toolResultImages(block))
    } else {
      parts.push(userPart(block))
    }
  }
  const rest = [...toolImages, ...parts]
  return rest.length === 0 ? toolMessages : [...toolMessages, { role: "user", content: compactParts(rest) }]
}

const compactParts = (parts: Array<ChatUserPart>): string | Array<ChatUserPart> => {
  const only = parts[0]
  return parts.length === 1 && only !== undefined && only.type === "text" ? only.text : parts
}

const userPart = (block: Exclude<MessagesUserBlock, MessagesToolResultBlock>): ChatUserPart =>
  block.type === "text" ? { type: "text", text: block.text } : imagePart(block)

const imagePart = (block: MessagesImageBlock): ChatUserPart => ({
  type: "image_url",
  image_url: {
    url: block.source.type === "base64" ? `data:${block.source.media_type};base64,${block.source.data}` : block.source.url
  }
})

const toolResultText = (block: MessagesToolResultBlock): string => {
  const content = block.content
  const text = content === undefined
    ? ""
    : typeof content === "string"
    ? content
    : content.flatMap((part) => (part.type === "text" ? [part.text] : [])).join("\n")
  // OpenAI has no error flag on tool messages; the model still has to know the call failed.
  if (block.is_error !== true) return text
  return text === "" ? "Error" : `Error: ${text}`
}

const toolResultImages = (block: MessagesToolResultBlock): Array<ChatUserPart> =>
  typeof block.content === "object"
    ? block.content.flatMap((part) => (part.type === "image" ? [imagePart(part)] : []))
    : []

const toolMessage = (block: MessagesToolResultBlock): ChatMessage => ({
  role: "tool",
  tool_call_id: block.tool_use_id,
  content: toolResultText(block)
})

const assistantMessage = (content: Extract<MessagesMessage, { role: "assistant" }>["content"]): ChatMessage => {
  if (typeof content === "string") return { role: "assistant", content }
  const text = content.flatMap((block) => (block.type === "text" ? [block.text] : [])).join("")
  const toolCalls = content.flatMap((block: MessagesAssistantBlock) =>
    block.type === "tool_use"
      ? [{ id: block.id, type: "function" as const, function: { name: block.name, arguments: JSON.stringify(block.input) } }]
      : []
  )
  if (toolCalls.length === 0) return { role: "assistant", content: text }
  return { role: "assistant", content: text === "" ? null : text, tool_calls: toolCalls }
}
