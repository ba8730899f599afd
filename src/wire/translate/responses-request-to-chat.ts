/**
 * OpenAI Responses request -> OpenAI Chat Completions request, for providers that do not serve
 * `/responses` themselves. Anthropic-kind providers get the result through the existing chat ->
 * messages translator (the hub is Chat Completions), so the output is a `ChatRequest` that
 * translator accepts, plus the two chat fields with no `ChatRequest` counterpart yet
 * (`reasoning_effort`, `verbosity`).
 *
 * Translated:
 * - `instructions` -> a leading `system` message; `developer` messages -> `system` too (many
 *   OpenAI-compatible servers know no `developer` role).
 * - `input` items: messages (text, `input_image` by URL or data URL), `function_call` items ->
 *   assistant `tool_calls` (consecutive calls, and assistant text around them before their
 *   outputs, form one assistant message), `function_call_output` -> `tool` messages right after
 *   it (images a tool returned follow in a user message, as chat tool messages carry text only).
 * - function `tools`, `tool_choice` (`allowed_tools` by narrowing `tools` to the allowed ones),
 *   `parallel_tool_calls`, `text.format` -> `response_format`, `text.verbosity` -> `verbosity`,
 *   `reasoning.effort` -> `reasoning_effort`, `max_output_tokens` -> `max_tokens` (or
 *   `max_completion_tokens`, see options), `temperature`, `top_p`, `user` (or else
 *   `safety_identifier`) -> `user`. A streamed request asks for `stream_options.include_usage`,
 *   since `response.completed` carries usage.
 *
 * Dropped, because they only tune delivery or storage and the answer is the same: `store`,
 * `metadata`, `client_metadata` (Codex's request tags), `include` (except logprobs), `prompt_cache_key`, `prompt_cache_retention`,
 * `prompt_cache_options`, `service_tier`, `stream_options`, `image`, `max_tool_calls` (it limits
 * built-in tools, which cannot be present), `background: false`, `truncation: "disabled"`,
 * `reasoning.summary` / `generate_summary` / `context`, `reasoning` items in the input (their
 * content is signed or encrypted for OpenAI's models), message `phase` and item `status`/`id`,
 * and on function tools `defer_loading`, `output_schema`, `strict: null`.
 *
 * Refused with the field named (400), unless said otherwise: `previous_response_id`, `conversation` and
 * `item_reference` items (this translator sees one conversation: the model pipeline resolves
 * `previous_response_id` and `item_reference` from the gateway's stored responses before it
 * runs, see src/pipelines/model/responses/state.ts; `conversation` objects live at the vendor), `prompt` (stored at OpenAI), `background: true`,
 * `truncation: "auto"`, `context_management`, `moderation`, `access_programs`, `top_logprobs`
 * above 0 and the logprobs `include`, `reasoning.mode` other than `standard`, tools other than
 * functions (or dropped, with the `nonFunctionTools: "drop"` option) and the item types that
 * belong to them, `tool_choice` forcing such a tool, file
 * inputs and images by `file_id` (files live at OpenAI), namespaced or async function calls.
 */
import type {
  ChatFunctionTool,
  ChatMessage,
  ChatRequest,
  ChatResponseFormat,
  ChatToolChoice,
  ChatUserPart
} from "../openai-chat.ts"
import type {
  ReasoningEffort,
  ResponsesFunctionCallOutputItem,
  ResponsesInputItem,
  ResponsesMessageItem,
  ResponsesMessagePart,
  ResponsesRequest,
  ResponsesToolOutputPart
} from "../openai-responses.ts"
import { refuse, type Translation, translating } from "./untranslatable.ts"

export interface ResponsesToChatOptions {
  /** Upstream model id sent to the provider. */
  readonly model: string
  /**
   * Where `max_output_tokens` goes. `max_tokens` (the default) is what every OpenAI-compatible
   * server understands; OpenAI's reasoning models want `max_completion_tokens`.
   */
  readonly maxTokensField?: "max_tokens" | "max_completion_tokens"
  /**
   * Tools other than functions (hosted `web_search`, `custom`, `mcp`...): `refuse` (the default)
   * answers 400 naming the tool; `drop` leaves them out, for deployments that prefer a client
   * such as Codex, which may offer `web_search` on every request, to work without them. The
   * model then cannot call them; everything else is unchanged. Forcing one with `tool_choice`
   * is refused either way.
   */
  readonly nonFunctionTools?: "refuse" | "drop"
}

/** A chat request with the chat fields `ChatRequest` does not model yet. */
export type ChatRequestFromResponses = ChatRequest & {
  readonly reasoning_effort?: ReasoningEffort
  readonly verbosity?: "low" | "medium" | "high"
}

const NO_STATE =
  "the gateway keeps no conversation state, so earlier responses and conversations cannot be referenced; send the whole conversation in input (as clients do with store: false)"

export const responsesRequestToChat = (
  request: ResponsesRequest,
  options: ResponsesToChatOptions
): Translation<ChatRequestFromResponses> =>
  translating(() => {
    refuseUnsupported(request)
    const messages = chatMessages(request)
    const { tools, toolChoice } = chatTools(request, options.nonFunctionTools ?? "refuse")
    const responseFormat = chatResponseFormat(request)
    const user = request.user ?? request.safety_identifier ?? undefined
    const effort = request.reasoning?.effort ?? undefined
    const verbosity = request.text?.verbosity ?? undefined
    const maxTokens = request.max_output_tokens ?? undefined
    return {
      model: options.model,
      messages,
      ...(request.stream === true ? { stream: true, stream_options: { include_usage: true } } : {}),
      ...(request.temperature == null ? {} : { temperature: request.temperature }),
      ...(request.top_p == null ? {} : { top_p: request.top_p }),
      ...(maxTokens === undefined ? {} : { [options.maxTokensField ?? "max_tokens"]: maxTokens }),
      ...(tools.length > 0 ? { tools } : {}),
      ...(toolChoice === undefined ? {} : { tool_choice: toolChoice }),
      ...(tools.length > 0 && request.parallel_tool_calls != null ? { parallel_tool_calls: request.parallel_tool_calls } : {}),
      ...(responseFormat === undefined ? {} : { response_format: responseFormat }),
      ...(user === undefined || user === "" ? {} : { user }),
      ...(effort === undefined ? {} : { reasoning_effort: effort }),
      ...(verbosity === undefined ? {} : { verbosity })
    }
  })

const refuseUnsupported = (request: ResponsesRequest): void => {
  if (request.previous_response_id != null) refuse("previous_response_id", NO_STATE)
  if (request.conversation != null) refuse("conversation", NO_STATE)
  if (request.prompt != null) refuse("prompt", "stored prompts live at OpenAI and cannot be used with this model; send instructions and input instead")
  if (request.background === true) refuse("background", "background responses need a stored response to poll, which the gateway does not keep")
  if (request.truncation === "auto") {
    refuse("truncation", "the gateway does not truncate input for this model; leave it out or send \"disabled\"")
  }
  if (request.context_management != null && request.context_management.length > 0) {
    refuse("context_management", "server-side context compaction is not available for this model")
  }
  if (request.moderation != null) refuse("moderation", "moderation policies are not available for this model")
  if (request.access_programs?.cyber !== undefined) refuse("access_programs", "access programs are not available for this model")
  if (request.top_logprobs != null && request.top_logprobs > 0) {
    refuse("top_logprobs", "log probabilities are not available for this model")
  }
  const logprobs = request.include?.indexOf("message.output_text.logprobs") ?? -1
  if (logprobs >= 0) refuse(`include.${logprobs}`, "log probabilities are not available for this model")
  const mode = request.reasoning?.mode
  if (mode !== undefined && mode !== "standard") refuse("reasoning.mode", `"${mode}" reasoning is not available for this model`)
}

// --- messages ----------------------------------------------------------------------------------

interface OpenAssistant {
  text: string
  refusal: string
  readonly calls: Array<{ readonly id: string; readonly name: string; readonly arguments: string; readonly item: number }>
}

/**
 * Walks the items once. Chat wants every assistant tool call answered by `tool` messages right
 * after that assistant message; anything else in between, an output for a call that is not
 * waiting, or a call left without output is refused with the item's path.
 */
const chatMessages = (request: ResponsesRequest): Array<ChatMessage> => {
  const messages: Array<ChatMessage> = []
  if (request.instructions != null && request.instructions !== "") {
    messages.push({ role: "system", content: request.instructions })
  }
  const input = request.input
  if (input === undefined) refuse("input", "required field missing")
  const items: ReadonlyArray<ResponsesInputItem> = typeof input === "string"
    ? [{ type: "message", role: "user", content: input }]
    : input ?? []

  let assistant: OpenAssistant | undefined
  // Calls of the last flushed assistant message still owed an output, by call id -> item index.
  const waiting = new Map<string, number>()
  let answerable = new Set<string>()
  let toolImages: Array<ChatUserPart> = []

  const unanswered = (): never => {
    const [id, item] = waiting.entries().next().value as [string, number]
    return refuse(`input.${item}`, `function_call "${id}" has no function_call_output before the next message`)
  }
  const flushAssistant = () => {
    if (assistant === undefined) return
    const open = assistant
    assistant = undefined
    const text = open.text === "" ? null : open.text
    if (open.calls.length === 0) {
      // An assistant message with nothing in it (Codex replays some) tells the model nothing.
      if (text === null && open.refusal === "") return
      messages.push({ role: "assistant", content: text ?? "", ...(open.refusal === "" ? {} : { refusal: open.refusal }) })
      return
    }
    messages.push({
      role: "assistant",
      content: text,
      ...(open.refusal === "" ? {} : { refusal: open.refusal }),
      tool_calls: open.calls.map((call) => ({
        id: call.id,
        type: "function",
        function: { name: call.name, arguments: call.arguments }
      }))
    })
    answerable = new Set(open.calls.map((call) => call.id))
    for (const call of open.calls) waiting.set(call.id, call.item)
  }
  /** Anything but a tool message ends the run of tool messages. */
  const beforeOtherMessage = () => {
    if (waiting.size > 0) unanswered()
    answerable = new Set()
    if (toolImages.length > 0) {
      messages.push({ role: "user", content: toolImages })
      toolImages = []
    }
  }

  items.forEach((item, index) => {
    const path = `input.${index}`
    switch (item.type) {
      case "message": {
        if (item.role === "assistant") {
          const { text, refusal } = assistantContent(item, path)
          if (assistant === undefined) {
            beforeOtherMessage()
            assistant = { text: "", refusal: "", calls: [] }
          }
          assistant.text += text
          assistant.refusal += refusal
          return
        }
        flushAssistant()
        beforeOtherMessage()
        messages.push(inputMessage(item, path))
        return
      }
      case "function_call": {
        if (item.namespace !== undefined) refuse(`${path}.namespace`, "namespaced tools cannot be translated for this model")
        if (item.async === true) refuse(`${path}.async`, "asynchronous function calls cannot be translated for this model")
        if (assistant === undefined) {
          beforeOtherMessage()
          assistant = { text: "", refusal: "", calls: [] }
        }
        assistant.calls.push({ id: item.call_id, name: item.name, arguments: item.arguments, item: index })
        return
      }
      case "function_call_output": {
        flushAssistant()
        const callId = item.call_id
        if (callId == null || callId === "") refuse(`${path}.call_id`, "required field missing")
        if (!answerable.has(callId!)) {
          refuse(`${path}.call_id`, `no function_call with call_id "${callId}" directly precedes this output`)
        }
        waiting.delete(callId!)
        const { text, images } = toolOutput(item, path)
        messages.push({ role: "tool", tool_call_id: callId!, content: text })
        toolImages.push(...images)
        return
      }
      case "custom_tool_call": {
        // An earlier call of a custom (free-form input) tool, such as Codex's apply_patch made
        // while the conversation ran on an OpenAI model: kept as a function call whose one
        // argument is the raw input, so the history stays whole. (Custom tools themselves are
        // not offered to other providers; see the file header.)
        const call = item as unknown as { call_id?: unknown; name?: unknown; input?: unknown }
        if (typeof call.call_id !== "string" || typeof call.name !== "string") refuse(path, "a custom_tool_call needs call_id and name")
        if (assistant === undefined) {
          beforeOtherMessage()
          assistant = { text: "", refusal: "", calls: [] }
        }
        assistant.calls.push({
          id: call.call_id as string,
          name: call.name as string,
          arguments: JSON.stringify({ input: typeof call.input === "string" ? call.input : "" }),
          item: index
        })
        return
      }
      case "custom_tool_call_output": {
        flushAssistant()
        const output = item as unknown as { call_id?: unknown; output?: unknown }
        const callId = output.call_id
        if (typeof callId !== "string" || callId === "") return refuse(`${path}.call_id`, "required field missing")
        if (!answerable.has(callId)) refuse(`${path}.call_id`, `no custom_tool_call with call_id "${callId}" directly precedes this output`)
        waiting.delete(callId)
        const text = typeof output.output === "string"
          ? output.output
          : Array.isArray(output.output)
          ? output.output.map((part) => (typeof part === "object" && part !== null && typeof (part as { text?: unknown }).text === "string" ? (part as { text: string }).text : "")).join("")
          : ""
        messages.push({ role: "tool", tool_call_id: callId, content: text })
        return
      }
      case "reasoning":
        return
      case "item_reference":
        // The AI SDK's openai provider sends earlier assistant text as references unless told
        // `store: false`; saying so turns a dead end into a one-line fix for the client.
        return refuse(
          path,
          `${NO_STATE}; item references cannot be resolved (with the AI SDK, set providerOptions.openai.store to false so it sends whole items)`
        )
      default:
        return refuse(`${path}.type`, `"${item.type}" items cannot be translated for this model`)
    }
  })
  flushAssistant()
  beforeOtherMessage()
  if (messages.length === 0) refuse("input", "expected at least one input item")
  return messages
}

const textOfPart = (part: ResponsesMessagePart, path: string, what: string): string => {
  if (part.type === "input_text" || part.type === "output_text") return part.text
  return refuse(`${path}.type`, `${what} carry text only`)
}

const inputMessage = (item: ResponsesMessageItem, path: string): ChatMessage => {
  const content = item.content
  if (item.role === "system" || item.role === "developer") {
    const text = typeof content === "string"
      ? content
      : content.map((part, index) => textOfPart(part, `${path}.content.${index}`, `${item.role} messages`)).join("")
    return { role: "system", content: text }
  }
  if (typeof content === "string") return { role: "user", content }
  const parts = content.map((part, index): ChatUserPart => userPart(part, `${path}.content.${index}`))
  const only = parts[0]
  return { role: "user", content: parts.length === 1 && only?.type === "text" ? only.text : parts }
}

const userPart = (part: ResponsesMessagePart | ResponsesToolOutputPart, path: string): ChatUserPart => {
  switch (part.type) {
    case "input_text":
    case "output_text":
      return { type: "text", text: part.text }
    case "input_image": {
      if (part.image_url == null || part.image_url === "") {
        return refuse(
          part.file_id == null ? `${path}.image_url` : `${path}.file_id`,
          part.file_id == null
            ? "required field missing"
            : "files stored at OpenAI cannot be sent to this model; send the image as image_url (a URL or a data URL)"
        )
      }
      // `original` has no chat equivalent; the provider's default detail applies.
      const detail = part.detail === "low" || part.detail === "high" || part.detail === "auto" ? { detail: part.detail } : {}
      return { type: "image_url", image_url: { url: part.image_url, ...detail } }
    }
    case "input_file":
      return refuse(path, "file inputs cannot be translated for this model")
    case "refusal":
      return refuse(`${path}.type`, "refusal parts belong in assistant messages")
  }
}

const assistantContent = (item: ResponsesMessageItem, path: string): { text: string; refusal: string } => {
  if (typeof item.content === "string") return { text: item.content, refusal: "" }
  let text = ""
  let refusal = ""
  item.content.forEach((part, index) => {
    if (part.type === "refusal") refusal += part.refusal
    else text += textOfPart(part, `${path}.content.${index}`, "assistant messages")
  })
  return { text, refusal }
}

const toolOutput = (
  item: ResponsesFunctionCallOutputItem,
  path: string
): { text: string; images: Array<ChatUserPart> } => {
  if (typeof item.output === "string") return { text: item.output, images: [] }
  const texts: Array<string> = []
  const images: Array<ChatUserPart> = []
  item.output.forEach((part, index) => {
    const converted = userPart(part, `${path}.output.${index}`)
    if (converted.type === "text") texts.push(converted.text)
    else images.push(converted)
  })
  return { text: texts.join("\n"), images }
}

// --- tools and formats -------------------------------------------------------------------------

const chatTools = (
  request: ResponsesRequest,
  nonFunctionTools: "refuse" | "drop"
): { tools: Array<ChatFunctionTool>; toolChoice: ChatToolChoice | undefined } => {
  let tools = (request.tools ?? []).flatMap((tool, index): Array<ChatFunctionTool> => {
    const path = `tools.${index}`
    if (tool.type !== "function") {
      if (nonFunctionTools === "drop") return []
      return refuse(`${path}.type`, `"${tool.type}" tools cannot be translated for this model; only function tools can`)
    }
    if (tool.allowed_callers?.includes("programmatic") === true) {
      refuse(`${path}.allowed_callers`, "programmatic tool calling is not available for this model")
    }
    if (tool.async === true) refuse(`${path}.async`, "asynchronous function tools are not available for this model")
    return [{
      type: "function",
      function: {
        name: tool.name,
        ...(tool.description == null ? {} : { description: tool.description }),
        ...(tool.parameters == null ? {} : { parameters: tool.parameters }),
        ...(tool.strict == null ? {} : { strict: tool.strict })
      }
    }]
  })
  const choice = request.tool_choice
  if (choice === undefined) return { tools, toolChoice: undefined }
  if (typeof choice === "string") {
    if (tools.length === 0) {
      if (choice === "required") refuse("tool_choice", "\"required\" needs at least one function tool")
      return { tools, toolChoice: undefined }
    }
    return { tools, toolChoice: choice }
  }
  switch (choice.type) {
    case "function":
      return { tools, toolChoice: { type: "function", function: { name: choice.name } } }
    case "allowed_tools": {
      const allowed = new Set(choice.tools.map((entry, index) => {
        if (entry["type"] !== "function" || typeof entry["name"] !== "string") {
          return refuse(`tool_choice.tools.${index}`, "only function tools can be allowed for this model")
        }
        return entry["name"]
      }))
      // Narrowing the list is what the allowed set means to the model.
      tools = tools.filter((tool) => allowed.has(tool.function.name))
      if (tools.length === 0) return refuse("tool_choice.tools", "none of the allowed tools is among the function tools")
      return { tools, toolChoice: choice.mode }
    }
    default:
      return refuse("tool_choice.type", `forcing a "${choice.type}" tool is not available for this model`)
  }
}

const chatResponseFormat = (request: ResponsesRequest): ChatResponseFormat | undefined => {
  const format = request.text?.format
  if (format === undefined || format.type === "text") return undefined
  if (format.type === "json_object") return { type: "json_object" }
  return {
    type: "json_schema",
    json_schema: {
      name: format.name,
      schema: format.schema,
      ...(format.description === undefined ? {} : { description: format.description }),
      ...(format.strict == null ? {} : { strict: format.strict })
    }
  }
}
