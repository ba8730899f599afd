/**
 * Anthropic messages request -> Bedrock Converse request. Converse was shaped after Messages,
 * so most of a Claude conversation survives whole: every field of the messages format is
 * translated, dropped or refused, field by field.
 *
 * Translated: `system` and `role: "system"` messages (into Converse's `system`, in order; one
 * with `clear_at: "next_user_message"` is left out once a later user message exists, as
 * Anthropic hides it then), `max_tokens` (into `inferenceConfig.maxTokens`, always, clamped to
 * the model's cap with a thinking budget kept below it), `temperature`, `top_p`,
 * `stop_sequences`, `top_k` and `thinking` (into `additionalModelRequestFields`, Claude's own
 * fields, which Bedrock hands to the model), custom `tools` (`toolSpec`, `strict` kept,
 * `input_examples` appended to the description), `tool_choice` (auto, any, tool), the
 * structured output `output_config.format` / `output_format` (`outputConfig.textFormat`),
 * `output_config.effort` and a system message's own (per-turn) effort (`outputConfig.effort`, the
 * last one set), a tool history without `tools` (a `toolConfig` naming the history's tools, which
 * Converse requires whenever tool blocks are present), `cache_control` on system, message and tool
 * blocks (a Converse `cachePoint` after the block: Bedrock caches nothing unless asked), and the
 * `anthropic-beta` flags Bedrock's Claude takes (`anthropic_beta`: interleaved thinking, the 1M
 * context). Content: text, images (base64), documents (PDF and plain text as document blocks,
 * content documents as their text), search results, tool_use / tool_result (ids Bedrock accepts,
 * see `bedrockToolUseId`; an error result keeps its status), thinking and redacted_thinking in
 * the assistant's history (`reasoningContent`, with the signature Claude checks), a tool search's
 * `tool_reference` results (as "Tool loaded: <name>").
 *
 * Dropped, because they only tune delivery and the answer is the same: `metadata`,
 * `disable_parallel_tool_use` (the client handles several calls either way), `defer_loading`,
 * `eager_input_streaming`, `context_management` and `compaction` (Bedrock sees the whole
 * history), top-level `cache_control`, image `transformations`, tool_use `caller: direct`,
 * replayed `citations` on text, `service_tier`, `speed`, `inference_geo`, `diagnostics`,
 * `billing_policy`, `fallback_credit_token`, `fallbacks`, other betas.
 *
 * Refused, naming the field: server tools and the blocks they produce, `mcp_servers`,
 * `container`, `thread`, `output_config.task_budget`, tool-list
 * changes inside messages, images by URL or file id (Converse takes the bytes; the gateway
 * fetches nothing on a client's behalf), documents by URL or file id, images inside content
 * documents, `citations` switched on (Bedrock's citations have another shape), `tool_choice:
 * none` while the history holds tool calls (Converse has no "none"; without tool history the
 * tools are simply not offered), tool names over 64 characters.
 */
import type {
  MessagesContentBlock,
  MessagesCustomTool,
  MessagesDocumentBlock,
  MessagesImageBlock,
  MessagesMessage,
  MessagesRequest,
  MessagesSearchResultBlock,
  MessagesToolResultBlock
} from "../anthropic-messages.ts"
import {
  bedrockToolUseId,
  type ConverseContentBlock,
  type ConverseDocumentBlock,
  type ConverseImageBlock,
  type ConverseMessage,
  type ConverseRequest,
  type ConverseSystemBlock,
  type ConverseTool,
  type ConverseToolChoice,
  type ConverseToolResultContent
} from "../bedrock-converse.ts"
import { clampOutputBudget } from "../output-budget.ts"
import { effectiveEffort } from "./per-turn-effort.ts"
import { refuse, type Translation, translating } from "./untranslatable.ts"

export interface MessagesToConverseOptions {
  /** The model's output-token cap: `max_tokens` above it is clamped, and `maxTokens` is always sent. */
  readonly maxTokensCap: number
  /** The client's `anthropic-beta` header, whose flags Bedrock's Claude understands are forwarded. */
  readonly betas?: string | undefined
}

/** Betas Bedrock's Claude models take in `anthropic_beta`; any other flag would be refused there. */
const BEDROCK_BETAS = new Set(["interleaved-thinking-2025-05-14", "context-1m-2025-08-07"])

export const messagesRequestToConverse = (
  request: MessagesRequest,
  options: MessagesToConverseOptions
): Translation<ConverseRequest> =>
  translating(() => {
    refuseUnsupportedParameters(request)
    const budget = request.thinking?.type === "enabled" ? request.thinking.budget_tokens : undefined
    const clamped = clampOutputBudget({ max_tokens: request.max_tokens, budget_tokens: budget }, options.maxTokensCap)
    if (!clamped.ok) return refuse(clamped.path, clamped.message.slice(clamped.path.length + 2))
    const system: Array<ConverseSystemBlock> = [...systemBlocks(request.system)]
    const messages = conversation(request.messages, system)
    const toolConfig = converseToolConfig(request, messages)
    const additional: Record<string, unknown> = {
      ...(request.top_k === undefined ? {} : { top_k: request.top_k }),
      ...(request.thinking === undefined
        ? {}
        : { thinking: clamped.value.budget_tokens === undefined ? request.thinking : { ...request.thinking, budget_tokens: clamped.value.budget_tokens } })
    }
    const betas = (options.betas ?? "").split(",").map((flag) => flag.trim()).filter((flag) => BEDROCK_BETAS.has(flag))
    if (betas.length > 0) additional.anthropic_beta = betas
    const stop = request.stop_sequences ?? []
    const format = request.output_config?.format ?? request.output_format ?? undefined
    const effort = effectiveEffort(request)
    return {
      messages,
      ...(system.length > 0 ? { system } : {}),
      inferenceConfig: {
        maxTokens: clamped.value.max_tokens,
        ...(request.temperature === undefined ? {} : { temperature: request.temperature }),
        ...(request.top_p === undefined ? {} : { topP: request.top_p }),
        ...(stop.length > 0 ? { stopSequences: stop } : {})
      },
      ...(toolConfig === undefined ? {} : { toolConfig }),
      ...(Object.keys(additional).length > 0 ? { additionalModelRequestFields: additional } : {}),
      ...(format == null && effort == null
        ? {}
        : {
          outputConfig: {
            ...(format == null
              ? {}
              : { textFormat: { type: "json_schema" as const, structure: { jsonSchema: { schema: JSON.stringify(format.schema), name: "structured_output" } } } }),
            ...(effort == null ? {} : { effort })
          }
        })
    }
  })

const refuseUnsupportedParameters = (request: MessagesRequest): void => {
  if (request.mcp_servers !== undefined && request.mcp_servers.length > 0) {
    refuse("mcp_servers", "Anthropic's MCP connector runs on Anthropic's servers and cannot be used with Bedrock models")
  }
  if (request.container != null) refuse("container", "code execution containers exist only on Anthropic's servers")
  if (request.thread != null) refuse("thread", "server-side threads exist only on Anthropic's servers")
  if (request.output_config?.task_budget != null) refuse("output_config.task_budget", "task budgets cannot be sent to Bedrock models; remove it")
}

// --- system --------------------------------------------------------------------------------------

const cachePoint = (control: { readonly type: "ephemeral"; readonly ttl?: string } | null | undefined) =>
  control == null ? [] : [{ cachePoint: control.ttl === "1h" ? { type: "default" as const, ttl: "1h" as const } : { type: "default" as const } }]

const systemBlocks = (system: MessagesRequest["system"]): Array<ConverseSystemBlock> => {
  if (system === undefined) return []
  if (typeof system === "string") return system.trim() === "" ? [] : [{ text: system }]
  return system.flatMap((block): Array<ConverseSystemBlock> => [{ text: block.text }, ...cachePoint(block.cache_control)])
}

type SystemInMessages = Extract<MessagesMessage, { role: "system" }>

/** A system message inside `messages` joins the system prompt: Converse has system text only there. */
const systemMessageBlocks = (message: SystemInMessages, path: string, followedByUser: boolean): Array<ConverseSystemBlock> => {
  // Its effort became the request's (`effectiveEffort`).
  if (message.clear_at === "next_user_message" && followedByUser) return []
  const content = message.content
  if (content === undefined) return []
  if (typeof content === "string") return content.trim() === "" ? [] : [{ text: content }]
  return content.flatMap((block, index): Array<ConverseSystemBlock> => {
    if (block.type !== "text") {
      return refuse(`${path}.content.${index}.type`, `"${block.type}" changes Anthropic's server-side tool list; Bedrock has no equivalent`)
    }
    const text = block as Extract<MessagesContentBlock, { type: "text" }>
    return [{ text: text.text }, ...cachePoint(text.cache_control)]
  })
}

// --- messages ------------------------------------------------------------------------------------

interface Turn {
  readonly role: "user" | "assistant"
  readonly results: Array<ConverseContentBlock>
  readonly blocks: Array<ConverseContentBlock>
}

/**
 * Walks the transcript once. Converse wants turns that alternate, so consecutive messages of a
 * role (as Anthropic accepts them, and as they become once system messages are lifted out) are
 * one turn, tool results first.
 */
const conversation = (messages: ReadonlyArray<MessagesMessage>, system: Array<ConverseSystemBlock>): Array<ConverseMessage> => {
  const turns: Array<Turn> = []
  const append = (role: Turn["role"], results: ReadonlyArray<ConverseContentBlock>, blocks: ReadonlyArray<ConverseContentBlock>) => {
    if (results.length === 0 && blocks.length === 0) return
    let turn = turns.at(-1)
    if (turn === undefined || turn.role !== role) {
      turn = { role, results: [], blocks: [] }
      turns.push(turn)
    }
    turn.results.push(...results)
    turn.blocks.push(...blocks)
  }
  const lastUser = messages.findLastIndex((message) => message.role === "user")
  messages.forEach((message, index) => {
    const path = `messages.${index}`
    switch (message.role) {
      case "system":
        system.push(...systemMessageBlocks(message, path, index < lastUser))
        return
      case "user": {
        const { results, blocks } = userBlocks(message.content, `${path}.content`)
        append("user", results, blocks)
        return
      }
      case "assistant":
        append("assistant", [], assistantBlocks(message.content, `${path}.content`))
        return
    }
  })
  return turns.map((turn) => ({ role: turn.role, content: [...turn.results, ...turn.blocks] }))
}

const refuseServerBlock = (block: MessagesContentBlock, path: string): never =>
  refuse(`${path}.type`, `"${block.type}" blocks come from Anthropic's server-side tools; Bedrock has no equivalent`)

const userBlocks = (
  content: Extract<MessagesMessage, { role: "user" }>["content"],
  path: string
): { readonly results: Array<ConverseContentBlock>; readonly blocks: Array<ConverseContentBlock> } => {
  if (typeof content === "string") return { results: [], blocks: [{ text: content }] }
  const results: Array<ConverseContentBlock> = []
  const blocks: Array<ConverseContentBlock> = []
  content.forEach((block, index) => {
    const blockPath = `${path}.${index}`
    switch (block.type) {
      case "tool_result":
        results.push({ toolResult: toolResult(block, blockPath) }, ...cachePoint(block.cache_control))
        return
      case "tool_use":
        return refuse(`${blockPath}.type`, "tool_use blocks belong in assistant messages")
      case "thinking":
      case "redacted_thinking":
        return refuse(`${blockPath}.type`, `${block.type} blocks belong in assistant messages`)
      default: {
        const converted = contentBlock(block, blockPath)
        if (converted === undefined) return refuseServerBlock(block, blockPath)
        blocks.push(converted, ...cachePoint((block as { readonly cache_control?: Parameters<typeof cachePoint>[0] }).cache_control))
      }
    }
  })
  return { results, blocks }
}

/** Text, image, document and search result blocks; undefined for anything else. */
const contentBlock = (block: MessagesContentBlock, path: string): ConverseContentBlock | undefined => {
  switch (block.type) {
    case "text":
      return { text: block.text }
    case "image":
      return { image: imageBlock(block, path) }
    case "document":
      return { document: documentBlock(block, path) }
    case "search_result":
      return { searchResult: searchResultBlock(block, path) }
    default:
      return undefined
  }
}

const IMAGE_FORMATS = { "image/jpeg": "jpeg", "image/png": "png", "image/gif": "gif", "image/webp": "webp" } as const

const imageBlock = (block: MessagesImageBlock, path: string): ConverseImageBlock => {
  const source = block.source
  switch (source.type) {
    case "base64":
      return { format: IMAGE_FORMATS[source.media_type], source: { bytes: source.data } }
    case "url":
      return refuse(`${path}.source`, "Bedrock takes images as bytes, not URLs; send the image as base64")
    case "file":
      return refuse(`${path}.source`, "Anthropic file ids cannot be read by Bedrock models; send the image as base64")
  }
}

/**
 * Bedrock names every document (letters, digits, single spaces, hyphens, parentheses, square
 * brackets), and two documents of a request must not share a name: the title where it has
 * one, made to fit, and the block's place in the request, which is unique.
 */
const documentName = (title: string | null | undefined, path: string): string => {
  const fitted = (title ?? "").replace(/[^a-zA-Z0-9\s\-()[\]]/g, " ").replace(/\s+/g, " ").trim().slice(0, 150)
  const place = path.replace(/[^0-9]+/g, "-").replace(/^-|-$/g, "")
  return fitted === "" ? `document ${place}` : `${fitted} (${place})`
}

const documentBlock = (block: MessagesDocumentBlock, path: string): ConverseDocumentBlock => {
  if (block.citations?.enabled === true) {
    refuse(`${path}.citations`, "citations are not translated for Bedrock models; remove it")
  }
  const name = documentName(block.title, path)
  const context = block.context == null || block.context === "" ? {} : { context: block.context }
  const source = block.source
  switch (source.type) {
    case "base64":
      return { format: "pdf", name, source: { bytes: source.data }, ...context }
    case "text":
      return { format: "txt", name, source: { text: source.data }, ...context }
    case "content": {
      const texts = typeof source.content === "string"
        ? [{ text: source.content }]
        : source.content.map((inner, index) =>
          inner.type === "text"
            ? { text: inner.text }
            : refuse(`${path}.source.content.${index}`, "images inside a content document cannot be sent to Bedrock models; send the image as its own block")
        )
      return { format: "txt", name, source: { content: texts }, ...context }
    }
    case "url":
      return refuse(`${path}.source`, "Bedrock models cannot fetch documents by URL; send the document as base64")
    case "file":
      return refuse(`${path}.source`, "Anthropic file ids cannot be read by Bedrock models; send the document as base64")
  }
}

const searchResultBlock = (block: MessagesSearchResultBlock, path: string) => {
  if (block.citations?.enabled === true) refuse(`${path}.citations`, "citations are not translated for Bedrock models; remove it")
  return { source: block.source, title: block.title, content: block.content.map((inner) => ({ text: inner.text })) }
}

const toolResult = (block: MessagesToolResultBlock, path: string) => {
  const content: Array<ConverseToolResultContent> = []
  if (typeof block.content === "string") {
    if (block.content !== "") content.push({ text: block.content })
  } else if (block.content !== undefined) {
    block.content.forEach((inner, index) => {
      const innerPath = `${path}.content.${index}`
      switch (inner.type) {
        case "text":
          content.push({ text: inner.text })
          return
        case "image":
          content.push({ image: imageBlock(inner, innerPath) })
          return
        case "document":
          content.push({ document: documentBlock(inner, innerPath) })
          return
        case "search_result":
          content.push({ text: [inner.title, inner.source, ...inner.content.map((part) => part.text)].filter((text) => text !== "").join("\n\n") })
          return
        case "tool_reference":
          // Deferred tools are all offered from the start (defer_loading is dropped), so a tool
          // search's answer only has to tell the model which tool it found.
          content.push({ text: `Tool loaded: ${inner.tool_name}` })
          return
        default:
          return refuse(`${innerPath}.type`, `"${inner.type}" tool results come from Anthropic's server-side tools; Bedrock has no equivalent`)
      }
    })
  }
  // Bedrock refuses an error result without content; the model still has to know the call failed.
  if (block.is_error === true && content.length === 0) content.push({ text: "Error" })
  return { toolUseId: bedrockToolUseId(block.tool_use_id), content, ...(block.is_error === true ? { status: "error" as const } : {}) }
}

const assistantBlocks = (content: Extract<MessagesMessage, { role: "assistant" }>["content"], path: string): Array<ConverseContentBlock> => {
  if (typeof content === "string") return content === "" ? [] : [{ text: content }]
  return content.flatMap((block, index): Array<ConverseContentBlock> => {
    const blockPath = `${path}.${index}`
    switch (block.type) {
      case "text":
        return [{ text: block.text }, ...cachePoint(block.cache_control)]
      case "thinking":
        return [{ reasoningContent: { reasoningText: { text: block.thinking, signature: block.signature } } }]
      case "redacted_thinking":
        return [{ reasoningContent: { redactedContent: block.data } }]
      case "tool_use":
        if (block.caller !== undefined && block.caller.type !== "direct") {
          refuse(`${blockPath}.caller`, "programmatic tool calls run on Anthropic's servers; Bedrock has no equivalent")
        }
        return [{ toolUse: { toolUseId: bedrockToolUseId(block.id), name: block.name, input: block.input } }, ...cachePoint(block.cache_control)]
      case "tool_result":
        return refuse(`${blockPath}.type`, "tool_result blocks belong in user messages")
      case "image":
      case "document":
      case "search_result":
        return refuse(`${blockPath}.type`, `Bedrock models take ${block.type} blocks in user messages only`)
      default:
        return refuseServerBlock(block, blockPath)
    }
  })
}

// --- tools ---------------------------------------------------------------------------------------

/** Examples are part of what the model reads about a tool, so they travel in its description. */
const describedTool = (tool: MessagesCustomTool): string | undefined => {
  const examples = tool.input_examples ?? []
  const description = tool.description === "" ? undefined : tool.description
  if (examples.length === 0) return description
  const listed = examples.map((example) => JSON.stringify(example)).join("\n")
  return `${description ?? ""}${description ? "\n\n" : ""}Example inputs:\n${listed}`
}

const hasToolBlocks = (messages: ReadonlyArray<ConverseMessage>): boolean =>
  messages.some((message) => message.content.some((block) => "toolUse" in block || "toolResult" in block))

/**
 * Converse refuses tool blocks without a `toolConfig`, but a client's follow-up turn may carry the
 * tool history without offering tools again (the OpenAI SDK's, say). The history's own tools are
 * then declared, by name with an open schema: the model was already calling them, and the client
 * answers a call the same way it did.
 */
const historyToolConfig = (messages: ReadonlyArray<ConverseMessage>): ConverseRequest["toolConfig"] => {
  const names = new Set<string>()
  for (const message of messages) {
    for (const block of message.content) if ("toolUse" in block) names.add(block.toolUse.name)
  }
  if (names.size === 0) {
    // Results without their calls are refused by Bedrock anyway; a placeholder would only hide it.
    return undefined
  }
  return { tools: [...names].map((name) => ({ toolSpec: { name, inputSchema: { json: { type: "object" } } } })) }
}

const converseToolConfig = (request: MessagesRequest, messages: ReadonlyArray<ConverseMessage>): ConverseRequest["toolConfig"] => {
  const tools = (request.tools ?? []).flatMap((tool, index): Array<ConverseTool> => {
    if (tool.type != null && tool.type !== "custom") {
      return refuse(`tools.${index}.type`, `"${tool.type}" is a server tool that runs on Anthropic's servers; Bedrock has no equivalent`)
    }
    const custom = tool as MessagesCustomTool
    if (custom.name.length > 64) refuse(`tools.${index}.name`, "tool names longer than 64 characters cannot be sent to Bedrock models")
    if (custom.allowed_callers !== undefined && custom.allowed_callers.some((caller) => caller !== "direct")) {
      refuse(`tools.${index}.allowed_callers`, "programmatic tool calling runs on Anthropic's servers; Bedrock has no equivalent")
    }
    const description = describedTool(custom)
    return [
      {
        toolSpec: {
          name: custom.name,
          ...(description === undefined ? {} : { description }),
          inputSchema: { json: custom.input_schema },
          ...(custom.strict === undefined ? {} : { strict: custom.strict })
        }
      },
      ...cachePoint(custom.cache_control)
    ]
  })
  const choice = request.tool_choice
  if (choice?.type === "none") {
    // Converse has no "none": not offering the tools says the same, unless the history needs them.
    if (hasToolBlocks(messages)) {
      refuse("tool_choice", 'Bedrock has no tool_choice "none" for a conversation with tool calls; leave tool_choice out')
    }
    return undefined
  }
  if (tools.length === 0) {
    if (choice !== undefined) refuse("tool_choice", "requires tools")
    return historyToolConfig(messages)
  }
  const toolChoice: ConverseToolChoice | undefined = choice === undefined
    ? undefined
    : choice.type === "auto"
    ? { auto: {} }
    : choice.type === "any"
    ? { any: {} }
    : { tool: { name: choice.name } }
  return { tools, ...(toolChoice === undefined ? {} : { toolChoice }) }
}
