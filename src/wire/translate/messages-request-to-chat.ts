/**
 * Anthropic messages request -> OpenAI chat request (docs/wire-translation.md 3.2, 3.3, 3.4, 3.8).
 *
 * Every field of the messages format (betas included) is translated, dropped or refused:
 *
 * Translated: `system` (a leading system message), `role: "system"` messages inside `messages`
 * (a system message at the same place; one with `clear_at: "next_user_message"` is left out once
 * a later user message exists, as Anthropic hides it then), `max_tokens` (clamped),
 * `temperature`, `top_p`, `top_k` (only where the upstream accepts it, see `allowTopK`),
 * `stop_sequences` (at most 4), custom `tools` (`strict` kept; `input_examples` appended to the
 * description, since the examples are what the model reads), `tool_choice` and
 * `disable_parallel_tool_use`, `metadata.user_id` (`user`), `output_config.effort` and a system
 * message's own (per-turn) effort (`reasoning_effort`, the last one set), `thinking` (`reasoning_effort` from the budget: up to 4096 low, up to
 * 16384 medium, above that high; adaptive leaves the model's default, as does disabled), the
 * structured output `output_config.format` / `output_format` (`response_format` json_schema,
 * strict), `stream` (with `stream_options.include_usage`). Content: text, images (base64, URL),
 * documents (PDF as a `file` part, plain text and content documents as text and image parts,
 * with the title and context as text), search results (as text), tool_use / tool_result (tool
 * messages, named after the tool that was called; a tool's images follow in a user message), a
 * tool search's `tool_reference` results (as "Tool loaded: <name>": the tool itself is already
 * in the list, as `defer_loading` is dropped).
 *
 * Dropped, because they only tune delivery and the answer is the same: `cache_control`
 * everywhere (OpenAI-compatible upstreams cache prompts on their own), `eager_input_streaming`,
 * `defer_loading`, `thinking.display`, `thinking.block_binding`, thinking and redacted_thinking
 * blocks in the history (Anthropic-signed, meaningless to another model), `citations` (replayed
 * citation metadata and the citations switch), image `transformations`, tool_use `caller:
 * direct`, `context_management` and `compaction` (Anthropic trimming old context server-side;
 * the upstream simply sees the whole history), `service_tier`, `speed`, `inference_geo`,
 * `diagnostics`, `billing_policy`, `fallback_credit_token`, `fallbacks`.
 *
 * Refused, naming the field: server tools (`web_search`, `bash`, code execution, MCP toolsets...)
 * and the blocks they produce, `mcp_servers`, `container`, `thread`, `output_config.task_budget`,
 * tool-list changes inside messages
 * (`tool_addition` / `tool_removal`), images and documents by Anthropic `file` id or (documents)
 * by URL, `allowed_callers` other than direct, tool names over 64 characters (rather than
 * shortened, so names in responses never need mapping back), `top_k` where not allowed, more
 * than 4 stop sequences.
 */
import type {
  MessagesContentBlock,
  MessagesCustomTool,
  MessagesDocumentBlock,
  MessagesImageBlock,
  MessagesMessage,
  MessagesRequest,
  MessagesSearchResultBlock,
  MessagesToolChoice,
  MessagesToolResultBlock
} from "../anthropic-messages.ts"
import { openAIToolId } from "../ids.ts"
import type { ChatMessage, ChatRequest, ChatToolChoice, ChatUserPart } from "../openai-chat.ts"
import { effectiveEffort } from "./per-turn-effort.ts"
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
  /**
   * Whether the upstream model takes `reasoning_effort`. Default true. When false, `thinking`
   * and `output_config.effort` are left out: a model that cannot reason answers without it.
   */
  readonly reasoning?: boolean
}

/** A chat request as sent upstream: the accepted shape, plus `top_k` where allowed. */
export type ChatUpstreamRequest = ChatRequest & { readonly top_k?: number }

export const messagesRequestToChat = (
  request: MessagesRequest,
  options: MessagesToChatOptions
): Translation<ChatUpstreamRequest> =>
  translating(() => {
    refuseUnsupportedParameters(request, options)
    const stop = request.stop_sequences ?? []
    if (stop.length > 4) refuse("stop_sequences", "at most 4 stop sequences can be sent to this model")
    const toolChoice = request.tool_choice
    const userId = request.metadata?.user_id
    const maxTokens = Math.min(request.max_tokens, options.maxTokensCap)
    const effort = options.reasoning === false ? undefined : reasoningEffort(request)
    const format = request.output_config?.format ?? request.output_format ?? undefined
    return {
      model: options.model,
      messages: [...systemMessage(request.system), ...conversation(request.messages)],
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
      ...(effort === undefined ? {} : { reasoning_effort: effort }),
      ...(format == null
        ? {}
        : {
          response_format: {
            type: "json_schema" as const,
            json_schema: { name: "structured_output", schema: format.schema, strict: true }
          }
        }),
      // Without include_usage an OpenAI stream carries no token counts at all.
      ...(request.stream === true ? { stream: true, stream_options: { include_usage: true } } : {})
    }
  })

const refuseUnsupportedParameters = (request: MessagesRequest, options: MessagesToChatOptions): void => {
  if (request.top_k !== undefined && options.allowTopK !== true) refuse("top_k", "not supported by this model; remove it")
  if (request.mcp_servers !== undefined && request.mcp_servers.length > 0) {
    refuse("mcp_servers", "Anthropic's MCP connector runs on Anthropic's servers and cannot be used with this model")
  }
  if (request.container != null) refuse("container", "code execution containers exist only on Anthropic's servers")
  if (request.thread != null) refuse("thread", "server-side threads exist only on Anthropic's servers")
  if (request.output_config?.task_budget != null) {
    refuse("output_config.task_budget", "task budgets cannot be sent to this model; remove it")
  }
}

/** The per-turn or request `output_config.effort` first; otherwise a budget-sized effort for enabled thinking. */
const reasoningEffort = (request: MessagesRequest): string | undefined => {
  const effort = effectiveEffort(request)
  if (effort !== undefined) return effort
  const thinking = request.thinking
  if (thinking?.type !== "enabled") return undefined
  if (thinking.budget_tokens <= 4096) return "low"
  return thinking.budget_tokens <= 16384 ? "medium" : "high"
}

const systemMessage = (system: MessagesRequest["system"]): Array<ChatMessage> => {
  if (system === undefined) return []
  const text = typeof system === "string" ? system : system.map((block) => block.text).join("\n\n")
  return text === "" ? [] : [{ role: "system", content: text }]
}

/** Examples are part of what the model reads about a tool, so they travel in its description. */
const describedTool = (tool: MessagesCustomTool): string | undefined => {
  const examples = tool.input_examples ?? []
  if (examples.length === 0) return tool.description
  const listed = examples.map((example) => JSON.stringify(example)).join("\n")
  return `${tool.description ?? ""}${tool.description ? "\n\n" : ""}Example inputs:\n${listed}`
}

const chatTools = (tools: MessagesRequest["tools"]): Pick<ChatRequest, "tools"> => {
  if (tools === undefined || tools.length === 0) return {}
  return {
    tools: tools.map((tool, index) => {
      if (tool.type != null && tool.type !== "custom") {
        return refuse(`tools.${index}.type`, `"${tool.type}" is a server tool that runs on Anthropic's servers; this model has no equivalent`)
      }
      const custom = tool as MessagesCustomTool
      if (custom.name.length > 64) refuse(`tools.${index}.name`, "tool names longer than 64 characters cannot be sent to this model")
      if (custom.allowed_callers !== undefined && custom.allowed_callers.some((caller) => caller !== "direct")) {
        refuse(`tools.${index}.allowed_callers`, "programmatic tool calling runs on Anthropic's servers; this model has no equivalent")
      }
      const description = describedTool(custom)
      return {
        type: "function" as const,
        function: {
          name: custom.name,
          ...(description === undefined ? {} : { description }),
          parameters: custom.input_schema,
          ...(custom.strict === undefined ? {} : { strict: custom.strict })
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

/**
 * Walks the transcript once. Tool messages are named after the tool_use they answer, which
 * OpenAI accepts and some OpenAI-compatible upstreams (Gemini) need.
 */
const conversation = (messages: ReadonlyArray<MessagesMessage>): Array<ChatMessage> => {
  const toolNames = new Map<string, string>()
  const lastUser = messages.findLastIndex((message) => message.role === "user")
  return messages.flatMap((message, index): Array<ChatMessage> => {
    const path = `messages.${index}`
    switch (message.role) {
      case "user":
        return userMessages(message.content, `${path}.content`, toolNames)
      case "assistant":
        return assistantMessages(message.content, `${path}.content`, toolNames)
      case "system":
        return systemMessages(message, path, index < lastUser)
    }
  })
}

type SystemInMessages = Extract<MessagesMessage, { role: "system" }>

const systemMessages = (message: SystemInMessages, path: string, followedByUser: boolean): Array<ChatMessage> => {
  // Its effort became the request's (`effectiveEffort`).
  if (message.clear_at === "next_user_message" && followedByUser) return []
  const content = message.content
  if (content === undefined) return []
  if (typeof content === "string") return content === "" ? [] : [{ role: "system", content }]
  const texts = content.map((block, index) => {
    if (block.type !== "text") {
      return refuse(`${path}.content.${index}.type`, `"${block.type}" changes Anthropic's server-side tool list; this model has no equivalent`)
    }
    return (block as { readonly text: string }).text
  })
  return texts.length === 0 ? [] : [{ role: "system", content: texts.join("\n\n") }]
}

const refuseBlock = (block: MessagesContentBlock, path: string): never =>
  refuse(`${path}.type`, `"${block.type}" blocks come from Anthropic's server-side tools; this model has no equivalent`)

/**
 * An Anthropic user turn holds tool results and new input together. OpenAI wants the tool
 * messages directly after the assistant message that called the tools, so they come first and
 * the rest of the turn follows as one user message. Tool messages carry text only: images a tool
 * returned travel in that user message.
 */
const userMessages = (
  content: Extract<MessagesMessage, { role: "user" }>["content"],
  path: string,
  toolNames: ReadonlyMap<string, string>
): Array<ChatMessage> => {
  if (typeof content === "string") return [{ role: "user", content }]
  const toolMessages: Array<ChatMessage> = []
  const parts: Array<ChatUserPart> = []
  const toolImages: Array<ChatUserPart> = []
  content.forEach((block, index) => {
    const blockPath = `${path}.${index}`
    switch (block.type) {
      case "tool_result": {
        const { text, images } = toolResultContent(block, blockPath)
        const name = toolNames.get(block.tool_use_id)
        toolMessages.push({ role: "tool", tool_call_id: openAIToolId(block.tool_use_id), content: text, ...(name === undefined ? {} : { name }) })
        toolImages.push(...images)
        return
      }
      case "thinking":
      case "redacted_thinking":
        return
      case "tool_use":
        return refuse(`${blockPath}.type`, "tool_use blocks belong in assistant messages")
      default: {
        const converted = contentParts(block, blockPath)
        if (converted === undefined) return refuseBlock(block, blockPath)
        parts.push(...converted)
      }
    }
  })
  const rest = [...toolImages, ...parts]
  return rest.length === 0 ? toolMessages : [...toolMessages, { role: "user", content: compactParts(rest) }]
}

/** Text, image, document and search result blocks as chat parts; undefined for anything else. */
const contentParts = (block: MessagesContentBlock, path: string): Array<ChatUserPart> | undefined => {
  switch (block.type) {
    case "text":
      return [{ type: "text", text: block.text }]
    case "image":
      return [imagePart(block, path)]
    case "document":
      return documentParts(block, path)
    case "search_result":
      return [{ type: "text", text: searchResultText(block) }]
    default:
      return undefined
  }
}

const compactParts = (parts: Array<ChatUserPart>): string | Array<ChatUserPart> => {
  const only = parts[0]
  return parts.length === 1 && only !== undefined && only.type === "text" ? only.text : parts
}

const imagePart = (block: MessagesImageBlock, path: string): ChatUserPart => {
  const source = block.source
  switch (source.type) {
    case "base64":
      return { type: "image_url", image_url: { url: `data:${source.media_type};base64,${source.data}` } }
    case "url":
      return { type: "image_url", image_url: { url: source.url } }
    case "file":
      return refuse(`${path}.source`, "Anthropic file ids cannot be read by this model; send the image as base64 or a URL")
  }
}

const documentParts = (block: MessagesDocumentBlock, path: string): Array<ChatUserPart> => {
  const heading = [block.title, block.context].filter((text): text is string => typeof text === "string" && text !== "")
  const lead: Array<ChatUserPart> = heading.length === 0 ? [] : [{ type: "text", text: heading.join("\n\n") }]
  const source = block.source
  switch (source.type) {
    case "base64":
      return [...lead, {
        type: "file",
        file: {
          file_data: `data:application/pdf;base64,${source.data}`,
          filename: block.title == null || block.title === "" ? "document.pdf" : block.title
        }
      }]
    case "text":
      return [...lead, { type: "text", text: source.data }]
    case "content": {
      if (typeof source.content === "string") return [...lead, { type: "text", text: source.content }]
      return [
        ...lead,
        ...source.content.map((inner, index): ChatUserPart =>
          inner.type === "text" ? { type: "text", text: inner.text } : imagePart(inner, `${path}.source.content.${index}`)
        )
      ]
    }
    case "url":
      return refuse(`${path}.source`, "this model cannot fetch documents by URL; send the document as base64")
    case "file":
      return refuse(`${path}.source`, "Anthropic file ids cannot be read by this model; send the document as base64")
  }
}

const searchResultText = (block: MessagesSearchResultBlock): string =>
  [block.title, block.source, ...block.content.map((inner) => inner.text)].filter((text) => text !== "").join("\n\n")

/** A tool result's text for the tool message, and the images that must travel separately. */
const toolResultContent = (
  block: MessagesToolResultBlock,
  path: string
): { readonly text: string; readonly images: Array<ChatUserPart> } => {
  const content = block.content
  const texts: Array<string> = []
  const images: Array<ChatUserPart> = []
  if (typeof content === "string") texts.push(content)
  else if (content !== undefined) {
    content.forEach((inner, index) => {
      const innerPath = `${path}.content.${index}`
      const parts: Array<ChatUserPart> = inner.type === "browser_state"
        ? refuse(`${innerPath}.type`, `"${inner.type}" tool results come from Anthropic's server-side tools; this model has no equivalent`)
        : inner.type === "tool_reference"
        // Deferred tools are sent to this model from the start (defer_loading is dropped), so a
        // tool search's answer only has to tell the model which tool it found.
        ? [{ type: "text", text: `Tool loaded: ${inner.tool_name}` }]
        : contentParts(inner as MessagesContentBlock, innerPath) ?? []
      for (const part of parts) {
        if (part.type === "text") texts.push(part.text)
        else images.push(part)
      }
    })
  }
  const text = texts.join("\n")
  // OpenAI has no error flag on tool messages; the model still has to know the call failed.
  if (block.is_error !== true) return { text, images }
  return { text: text === "" ? "Error" : `Error: ${text}`, images }
}

const assistantMessages = (
  content: Extract<MessagesMessage, { role: "assistant" }>["content"],
  path: string,
  toolNames: Map<string, string>
): Array<ChatMessage> => {
  if (typeof content === "string") return [{ role: "assistant", content }]
  const texts: Array<string> = []
  const toolCalls: Array<{ id: string; type: "function"; function: { name: string; arguments: string } }> = []
  content.forEach((block, index) => {
    const blockPath = `${path}.${index}`
    switch (block.type) {
      case "text":
        texts.push(block.text)
        return
      case "thinking":
      case "redacted_thinking":
        return
      case "tool_use":
        if (block.caller !== undefined && block.caller.type !== "direct") {
          refuse(`${blockPath}.caller`, "programmatic tool calls run on Anthropic's servers; this model has no equivalent")
        }
        toolNames.set(block.id, block.name)
        toolCalls.push({ id: openAIToolId(block.id), type: "function", function: { name: block.name, arguments: JSON.stringify(block.input) } })
        return
      case "tool_result":
        return refuse(`${blockPath}.type`, "tool_result blocks belong in user messages")
      case "image":
      case "document":
      case "search_result":
        return refuse(`${blockPath}.type`, `this model takes ${block.type} blocks in user messages only`)
      default:
        return refuseBlock(block, blockPath)
    }
  })
  const text = texts.join("")
  if (toolCalls.length === 0) return [{ role: "assistant", content: text }]
  return [{ role: "assistant", content: text === "" ? null : text, tool_calls: toolCalls }]
}
