/**
 * The legacy functions API of Chat Completions (`functions`, `function_call`, assistant
 * `function_call`, `role: "function"` results) as tools, for models that have only tools
 * (Anthropic's, on every kind that serves them: Anthropic, Bedrock, Vertex). It maps one-to-one
 * (issue 34): a function is a function tool, `function_call` is `tool_choice` with one call at a
 * time (`parallel_tool_calls: false`), an assistant's `function_call` is a tool call with an id
 * made here (`call_fn_<n>`), and a function result answers the latest call of that name.
 *
 * The answer goes back the way the client asked: a tool call becomes `message.function_call`
 * (in a stream, `delta.function_call`) and `finish_reason: "tool_calls"` becomes
 * `"function_call"`, which is what a client of the legacy API reads.
 */
import type { ChatChunk, ChatFinishReason, ChatMessage, ChatRequest, ChatResponse } from "../openai-chat.ts"

/** Whether the request speaks the legacy API anywhere: then it is translated, and its answer too. */
export const usesLegacyFunctions = (request: ChatRequest): boolean =>
  request.functions !== undefined || request.function_call !== undefined ||
  request.messages.some((message) => message.role === "function" || (message.role === "assistant" && message.function_call != null))

/** The same request in tools. */
export const legacyFunctionsAsTools = (request: ChatRequest): ChatRequest => {
  const { functions, function_call, ...rest } = request
  let made = 0
  const pending = new Map<string, Array<string>>()
  const messages = request.messages.map((message): ChatMessage => {
    if (message.role === "assistant" && message.function_call != null) {
      const { function_call: call, ...assistant } = message
      const id = `call_fn_${made++}`
      pending.set(call.name, [...(pending.get(call.name) ?? []), id])
      return { ...assistant, tool_calls: [...(assistant.tool_calls ?? []), { id, type: "function", function: call }] }
    }
    if (message.role === "function") {
      const waiting = pending.get(message.name) ?? []
      // A result without its call keeps an id of its own: the translation after this one refuses it by name.
      const id = waiting.shift() ?? `call_fn_${made++}`
      return { role: "tool", tool_call_id: id, content: message.content ?? "" }
    }
    return message
  })
  const tools = [...(request.tools ?? []), ...(functions ?? []).map((fn) => ({ type: "function" as const, function: fn }))]
  const choice = function_call === undefined
    ? undefined
    : typeof function_call === "string"
    ? function_call
    : { type: "function" as const, function: { name: function_call.name } }
  return {
    ...rest,
    messages,
    ...(tools.length > 0 ? { tools } : {}),
    ...(choice === undefined || request.tool_choice !== undefined ? {} : { tool_choice: choice }),
    ...(functions === undefined ? {} : { parallel_tool_calls: false })
  } as ChatRequest
}

const legacyReason = (reason: ChatFinishReason | null): ChatFinishReason | null => reason === "tool_calls" ? "function_call" : reason

/** A tools answer as the legacy API's: the first call as `function_call`. */
export const toolsAnswerAsLegacy = (response: ChatResponse): ChatResponse => ({
  ...response,
  choices: response.choices.map((choice) => {
    const { tool_calls, ...message } = choice.message
    const call = tool_calls?.[0]
    return {
      ...choice,
      message: call === undefined ? message : { ...message, function_call: call.function } as typeof message,
      finish_reason: legacyReason(choice.finish_reason)
    }
  })
})

/** A tools chunk as the legacy API's: the first call's deltas as `delta.function_call`. */
export const toolsChunkAsLegacy = (chunk: ChatChunk): ChatChunk => ({
  ...chunk,
  choices: chunk.choices.map((choice) => {
    const { tool_calls, ...delta } = choice.delta
    const call = tool_calls?.find((entry) => (entry.index ?? 0) === 0)?.function
    const fn = call == null
      ? undefined
      : { ...(call.name == null ? {} : { name: call.name }), arguments: call.arguments ?? "" }
    return { ...choice, delta: fn === undefined ? delta : { ...delta, function_call: fn } as typeof delta, finish_reason: legacyReason(choice.finish_reason) }
  })
})
