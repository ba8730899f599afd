/**
 * Chat Completions <-> Gemini `generateContent`, request, answer and stream. Messages and
 * Responses clients reach Gemini through Chat Completions (messages-request-to-chat.ts,
 * responses-request-to-chat.ts), as they reach OpenAI-kind models.
 *
 * Translated: system and developer messages (into `systemInstruction`), user text, images and
 * audio and files given as base64 data (`inlineData`), assistant text and tool calls
 * (`functionCall`, with the `thoughtSignature` their id carries, see `geminiToolCallId`), tool
 * results (`functionResponse`, named after their call, consecutive ones in one turn), function
 * tools (`functionDeclarations`, parameters in Gemini's schema subset, see `geminiSchema`),
 * `tool_choice` (auto, none, required, a named function), JSON mode and structured output
 * (`responseMimeType` and `responseSchema`), `max_tokens` / `max_completion_tokens` (always
 * sent as `maxOutputTokens`, clamped to the model's cap), `temperature`, `top_p`, `stop`,
 * `seed`, `presence_penalty`, `frequency_penalty`, and `reasoning_effort` (a thinking budget:
 * none or minimal 0, low 1024, medium 8192, high 24576; Anthropic's and OpenAI's higher `xhigh` and
 * `max`, which Claude Code and Codex send, take the highest, 24576).
 *
 * Dropped (the answer is the same): `user`, `safety_identifier`, `metadata`, `store`,
 * `service_tier`, `parallel_tool_calls`, `stream_options`, `verbosity`, the prompt cache hints,
 * `n: 1`. Refused, naming the field: images, audio or files by URL or file id (the gateway
 * fetches nothing for a client), custom (grammar) tools, `logprobs`, `logit_bias`, audio output
 * (`audio`, `modalities`), `prediction`, `web_search_options`, `moderation`, a `tool_choice`
 * of `allowed_tools` in `auto` mode.
 */
import type { ChatChunk, ChatFinishReason, ChatMessage, ChatRequest, ChatResponse, ChatToolCall, ChatUsage } from "../openai-chat.ts"
import {
  type GeminiContent,
  type GeminiFinishReason,
  type GeminiFunctionDeclaration,
  type GeminiGenerationConfig,
  type GeminiPart,
  geminiSchema,
  geminiToolCallId,
  type GeminiToolConfig,
  type GeminiUsage,
  type GenerateContentRequest,
  type GenerateContentResponse,
  thoughtSignatureOfId
} from "../gemini.ts"
import { ExpansionBudget, refuse, type Translation, translating } from "./untranslatable.ts"
import { type AuditUsage, chatUsageFromAudit, emptyAuditUsage } from "./usage.ts"
import { parseJsonWithin } from "../json-depth.ts"

export interface ChatToGeminiOptions {
  /** The model's output-token cap: a larger request is clamped, and `maxOutputTokens` is always sent. */
  readonly maxTokensCap: number
  /** What inlining the request's schemas may build, all of them together (default ExpansionBudget's). */
  readonly expansionBytes?: number | undefined
}

const THINKING_BUDGETS: Readonly<Record<string, number>> = { none: 0, minimal: 0, low: 1024, medium: 8192, high: 24576, xhigh: 24576, max: 24576 }

export const chatRequestToGemini = (request: ChatRequest, options: ChatToGeminiOptions): Translation<GenerateContentRequest> =>
  translating(() => {
    refuseUnsupported(request)
    const system: Array<GeminiPart> = []
    const contents = conversation(request.messages, system)
    // One budget for every schema this request makes Gemini's subset of (tools and response format).
    const budget = new ExpansionBudget(options.expansionBytes)
    const declarations = functionDeclarations(request, budget)
    const toolConfig = geminiToolConfig(request, declarations)
    const asked = request.max_completion_tokens ?? request.max_tokens ?? options.maxTokensCap
    const stop = request.stop == null ? [] : typeof request.stop === "string" ? [request.stop] : request.stop
    const format = request.response_format
    let thinking: GeminiGenerationConfig["thinkingConfig"]
    if (request.reasoning_effort != null) {
      const budget = THINKING_BUDGETS[request.reasoning_effort]
      if (budget === undefined) refuse("reasoning_effort", `"${request.reasoning_effort}" has no Gemini thinking budget (none, minimal, low, medium, high, xhigh, max)`)
      thinking = { thinkingBudget: budget }
    }
    const generationConfig: GeminiGenerationConfig = {
      maxOutputTokens: Math.min(asked, options.maxTokensCap),
      ...(request.temperature == null ? {} : { temperature: request.temperature }),
      ...(request.top_p == null ? {} : { topP: request.top_p }),
      ...(stop.length > 0 ? { stopSequences: stop } : {}),
      ...(request.seed == null ? {} : { seed: request.seed }),
      ...(request.presence_penalty == null ? {} : { presencePenalty: request.presence_penalty }),
      ...(request.frequency_penalty == null ? {} : { frequencyPenalty: request.frequency_penalty }),
      ...(format === undefined || format.type === "text" ? {} : { responseMimeType: "application/json" }),
      ...(format?.type === "json_schema" && format.json_schema.schema !== undefined ? { responseSchema: geminiSchema(format.json_schema.schema, "response_format.json_schema.schema", budget) } : {}),
      ...(thinking === undefined ? {} : { thinkingConfig: thinking })
    }
    return {
      contents,
      ...(system.length > 0 ? { systemInstruction: { parts: system } } : {}),
      ...(declarations.length > 0 ? { tools: [{ functionDeclarations: declarations }] } : {}),
      ...(toolConfig === undefined ? {} : { toolConfig }),
      generationConfig
    }
  })

const refuseUnsupported = (request: ChatRequest): void => {
  if (request.logprobs === true) refuse("logprobs", "Gemini models do not return OpenAI-style log probabilities through the gateway")
  if (request.logit_bias != null && Object.keys(request.logit_bias).length > 0) refuse("logit_bias", "Gemini has no logit bias")
  if (request.audio != null) refuse("audio", "audio output is not translated for Gemini models")
  if (request.modalities != null && request.modalities.some((modality) => modality !== "text")) refuse("modalities", "only text output is translated for Gemini models")
  if (request.prediction != null) refuse("prediction", "Gemini has no predicted outputs")
  if (request.web_search_options !== undefined) refuse("web_search_options", "web search is an OpenAI tool; Gemini's grounding is not offered through this format")
  if (request.moderation != null) refuse("moderation", "OpenAI's moderation cannot run on Gemini models")
}

// --- messages --------------------------------------------------------------------------------

const textOf = (content: string | ReadonlyArray<{ readonly type: string; readonly text?: string }>): string =>
  typeof content === "string" ? content : content.map((part) => part.text ?? "").join("")

/** `data:<mime>;base64,<data>` as Gemini's inline data; anything else is a URL the gateway will not fetch. */
const inlineData = (url: string, path: string): GeminiPart => {
  const match = /^data:([^;,]+);base64,(.*)$/s.exec(url)
  if (match === null) return refuse(path, "Gemini takes media as base64 data (a data: URL); the gateway fetches nothing on a client's behalf")
  return { inlineData: { mimeType: match[1]!, data: match[2]! } }
}

const userParts = (content: Extract<ChatMessage, { role: "user" }>["content"], path: string): Array<GeminiPart> => {
  if (typeof content === "string") return [{ text: content }]
  return content.map((part, index): GeminiPart => {
    const at = `${path}.${index}`
    switch (part.type) {
      case "text":
        return { text: part.text }
      case "image_url":
        return inlineData(part.image_url.url, `${at}.image_url.url`)
      case "input_audio":
        return { inlineData: { mimeType: `audio/${part.input_audio.format}`, data: part.input_audio.data } }
      case "file":
        if (part.file.file_data === undefined) return refuse(`${at}.file`, "Gemini takes files as base64 data (file_data); file ids are OpenAI's")
        return inlineData(part.file.file_data, `${at}.file.file_data`)
    }
  })
}

/** Tool names by call id, from the assistant turns: Gemini pairs a result with its call by name. */
const callNames = (messages: ReadonlyArray<ChatMessage>): Map<string, string> => {
  const names = new Map<string, string>()
  for (const message of messages) {
    if (message.role !== "assistant") continue
    for (const call of message.tool_calls ?? []) if (call.type === "function") names.set(call.id, call.function.name)
  }
  return names
}

const parseArguments = (text: string, path: string): Record<string, unknown> => {
  if (text.trim() === "") return {}
  try {
    const parsed: unknown = parseJsonWithin(text)
    if (typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)) return parsed as Record<string, unknown>
  } catch {
    // refused below
  }
  return refuse(path, "tool call arguments must be a JSON object for Gemini")
}

const conversation = (messages: ReadonlyArray<ChatMessage>, system: Array<GeminiPart>): Array<GeminiContent> => {
  const names = callNames(messages)
  const contents: Array<{ role: "user" | "model"; parts: Array<GeminiPart> }> = []
  // Gemini wants turns to alternate: parts of consecutive turns of one role join one turn.
  const push = (role: "user" | "model", parts: ReadonlyArray<GeminiPart>) => {
    if (parts.length === 0) return
    const last = contents.at(-1)
    if (last?.role === role) last.parts.push(...parts)
    else contents.push({ role, parts: [...parts] })
  }
  messages.forEach((message, index) => {
    const path = `messages.${index}`
    switch (message.role) {
      case "system":
      case "developer": {
        const text = textOf(message.content)
        if (text !== "") system.push({ text })
        return
      }
      case "user":
        return push("user", userParts(message.content, `${path}.content`))
      case "assistant": {
        const parts: Array<GeminiPart> = []
        const text = message.content == null ? "" : typeof message.content === "string"
          ? message.content
          : message.content.map((part) => (part.type === "text" ? part.text : part.refusal)).join("")
        if (text !== "") parts.push({ text })
        if (message.refusal != null && message.refusal !== "" && text === "") parts.push({ text: message.refusal })
        ;(message.tool_calls ?? []).forEach((call, callIndex) => {
          if (call.type !== "function") return refuse(`${path}.tool_calls.${callIndex}`, "custom tool calls are not translated for Gemini models")
          const signature = thoughtSignatureOfId(call.id)
          parts.push({
            functionCall: { name: call.function.name, args: parseArguments(call.function.arguments, `${path}.tool_calls.${callIndex}.function.arguments`) },
            ...(signature === undefined ? {} : { thoughtSignature: signature })
          })
        })
        if (message.function_call != null) {
          parts.push({ functionCall: { name: message.function_call.name, args: parseArguments(message.function_call.arguments, `${path}.function_call.arguments`) } })
        }
        return push("model", parts)
      }
      case "tool": {
        const name = names.get(message.tool_call_id) ?? message.name
        if (name === undefined) return refuse(`${path}.tool_call_id`, `no assistant tool call has the id "${message.tool_call_id}"`)
        return push("user", [{ functionResponse: { name, response: { result: textOf(message.content) } } }])
      }
      case "function":
        return push("user", [{ functionResponse: { name: message.name, response: { result: message.content ?? "" } } }])
    }
  })
  if (contents.length === 0) refuse("messages", "Gemini needs at least one user or assistant message besides the system prompt")
  return contents
}

// --- tools -----------------------------------------------------------------------------------

const functionDeclarations = (request: ChatRequest, budget: ExpansionBudget): Array<GeminiFunctionDeclaration> => {
  const declarations: Array<GeminiFunctionDeclaration> = []
  ;(request.tools ?? []).forEach((tool, index) => {
    if (tool.type !== "function") return refuse(`tools.${index}`, "custom (free-form or grammar) tools are not translated for Gemini models")
    const { name, description, parameters } = tool.function
    declarations.push({
      name,
      ...(description === undefined ? {} : { description }),
      // A function without parameters has none declared: Gemini refuses an empty OBJECT schema's absent properties.
      ...(parameters === undefined || Object.keys((parameters as { properties?: object }).properties ?? {}).length === 0
        ? {}
        : { parameters: geminiSchema(parameters, `tools.${index}.function.parameters`, budget) })
    })
  })
  ;(request.functions ?? []).forEach((fn, index) => {
    declarations.push({
      name: fn.name,
      ...(fn.description === undefined ? {} : { description: fn.description }),
      ...(fn.parameters === undefined ? {} : { parameters: geminiSchema(fn.parameters, `functions.${index}.parameters`, budget) })
    })
  })
  return declarations
}

const geminiToolConfig = (request: ChatRequest, declarations: ReadonlyArray<GeminiFunctionDeclaration>): GeminiToolConfig | undefined => {
  const choice = request.tool_choice ?? (request.function_call === undefined ? undefined : request.function_call)
  if (choice === undefined || declarations.length === 0) return undefined
  if (choice === "auto") return { functionCallingConfig: { mode: "AUTO" } }
  if (choice === "none") return { functionCallingConfig: { mode: "NONE" } }
  if (choice === "required") return { functionCallingConfig: { mode: "ANY" } }
  if ("name" in choice) return { functionCallingConfig: { mode: "ANY", allowedFunctionNames: [choice.name] } }
  switch (choice.type) {
    case "function":
      return { functionCallingConfig: { mode: "ANY", allowedFunctionNames: [choice.function.name] } }
    case "custom":
      return refuse("tool_choice", "custom tools are not translated for Gemini models")
    case "allowed_tools": {
      if (choice.allowed_tools.mode !== "required") return refuse("tool_choice", "Gemini limits the callable functions only when one must be called (mode required)")
      const names = choice.allowed_tools.tools.map((tool) => (tool.function as { name?: unknown } | undefined)?.name).filter((name): name is string => typeof name === "string")
      return { functionCallingConfig: { mode: "ANY", allowedFunctionNames: names } }
    }
  }
}

// --- answers ---------------------------------------------------------------------------------

const count = (n: number | undefined): number => (typeof n === "number" && Number.isFinite(n) ? n : 0)

/** Gemini counts the whole prompt in `promptTokenCount` (cached tokens included) and thinking apart from the answer. */
export const auditUsageFromGemini = (usage: GeminiUsage | undefined): AuditUsage => {
  if (usage === undefined) return emptyAuditUsage
  const cached = count(usage.cachedContentTokenCount)
  return {
    input_tokens: Math.max(count(usage.promptTokenCount) + count(usage.toolUsePromptTokenCount) - cached, 0),
    output_tokens: count(usage.candidatesTokenCount) + count(usage.thoughtsTokenCount),
    cache_read_tokens: cached,
    cache_write_tokens: 0
  }
}

const chatUsageOf = (usage: GeminiUsage | undefined): ChatUsage =>
  chatUsageFromAudit(auditUsageFromGemini(usage), usage?.thoughtsTokenCount ?? undefined)

const FILTERED = new Set(["SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY", "LANGUAGE"])

export const finishReasonFromGemini = (reason: GeminiFinishReason | undefined, calledTools: boolean): ChatFinishReason => {
  if (calledTools) return "tool_calls"
  if (reason === "MAX_TOKENS") return "length"
  if (reason !== undefined && FILTERED.has(reason)) return "content_filter"
  return "stop"
}

const callOf = (part: GeminiPart): ChatToolCall => ({
  id: part.functionCall!.id !== undefined && part.thoughtSignature === undefined ? part.functionCall!.id : geminiToolCallId(part.thoughtSignature),
  type: "function",
  function: { name: part.functionCall!.name, arguments: JSON.stringify(part.functionCall!.args ?? {}) }
})

/** The answer's text (thought summaries left out) and its function calls. */
const answerOf = (response: GenerateContentResponse) => {
  const candidate = response.candidates?.[0]
  let text = ""
  const calls: Array<ChatToolCall> = []
  for (const part of candidate?.content?.parts ?? []) {
    if (part.functionCall !== undefined) calls.push(callOf(part))
    else if (typeof part.text === "string" && part.thought !== true) text += part.text
  }
  const blocked = candidate === undefined && response.promptFeedback?.blockReason !== undefined
  return { text, calls, finish: blocked ? "content_filter" as const : finishReasonFromGemini(candidate?.finishReason, calls.length > 0) }
}

export const geminiResponseToChat = (
  response: GenerateContentResponse,
  options: { readonly id: string; readonly model: string; readonly created: number }
): ChatResponse => {
  const { text, calls, finish } = answerOf(response)
  return {
    id: options.id,
    object: "chat.completion",
    created: options.created,
    model: options.model,
    choices: [{
      index: 0,
      message: { role: "assistant", content: text === "" && calls.length > 0 ? null : text, ...(calls.length > 0 ? { tool_calls: calls } : {}) },
      finish_reason: finish,
      logprobs: null
    }],
    usage: chatUsageOf(response.usageMetadata)
  }
}

/**
 * Gemini stream events in, chat chunks out. Gemini sends text in pieces and each function call
 * whole in one event; the finish reason rides on the last candidate and the usage on every event
 * (the last one counts). The finish chunk, and the usage chunk when the client asked for it,
 * are sent at the end, once.
 */
export class GeminiToChatStream {
  readonly #options: { readonly id: string; readonly model: string; readonly created: number; readonly includeUsage: boolean }
  #started = false
  #calls = 0
  #finish: GeminiFinishReason | undefined
  #blocked = false
  #usage: GeminiUsage | undefined

  constructor(options: { readonly id: string; readonly model: string; readonly created: number; readonly includeUsage: boolean }) {
    this.#options = options
  }

  #chunk(delta: ChatChunk["choices"][number]["delta"], finish: ChatFinishReason | null = null): ChatChunk {
    return {
      id: this.#options.id,
      object: "chat.completion.chunk",
      created: this.#options.created,
      model: this.#options.model,
      choices: [{ index: 0, delta, finish_reason: finish, logprobs: null }]
    }
  }

  #start(out: Array<ChatChunk>): void {
    if (this.#started) return
    this.#started = true
    out.push(this.#chunk({ role: "assistant", content: "" }))
  }

  push(event: GenerateContentResponse): Array<ChatChunk> {
    const out: Array<ChatChunk> = []
    if (event.usageMetadata !== undefined) this.#usage = event.usageMetadata
    if (event.promptFeedback?.blockReason !== undefined && (event.candidates ?? []).length === 0) this.#blocked = true
    const candidate = event.candidates?.[0]
    for (const part of candidate?.content?.parts ?? []) {
      if (part.functionCall !== undefined) {
        this.#start(out)
        const call = callOf(part)
        out.push(this.#chunk({ tool_calls: [{ index: this.#calls++, id: call.id, type: "function", function: call.function }] }))
      } else if (typeof part.text === "string" && part.text !== "" && part.thought !== true) {
        this.#start(out)
        out.push(this.#chunk({ content: part.text }))
      }
    }
    if (candidate?.finishReason !== undefined) this.#finish = candidate.finishReason
    return out
  }

  /** Whether Gemini said the answer is whole (a finish reason, or a blocked prompt). */
  finished(): boolean {
    return this.#finish !== undefined || this.#blocked
  }

  end(): Array<ChatChunk> {
    const out: Array<ChatChunk> = []
    this.#start(out)
    out.push(this.#chunk({}, this.#blocked ? "content_filter" : finishReasonFromGemini(this.#finish, this.#calls > 0)))
    if (this.#options.includeUsage) {
      out.push({
        id: this.#options.id,
        object: "chat.completion.chunk",
        created: this.#options.created,
        model: this.#options.model,
        choices: [],
        usage: chatUsageOf(this.#usage)
      })
    }
    return out
  }

  usage(): AuditUsage {
    return auditUsageFromGemini(this.#usage)
  }
}
