/**
 * The text of a streamed answer as the client received it, one event at a time, in each client
 * format: what the gateway counts itself when a stream ends without the provider's usage (issue
 * 33, src/pipelines/metering.ts). Text, thinking, refusals and tool calls' names and arguments
 * are all output the provider charges.
 */
import type { ClientEvent } from "./adapter.ts"

type Json = Record<string, unknown>

const valueOf = (event: ClientEvent): Json | undefined => {
  try {
    const value = event.value ?? JSON.parse(event.data)
    return typeof value === "object" && value !== null ? value as Json : undefined
  } catch {
    return undefined
  }
}

const str = (value: unknown): string => (typeof value === "string" ? value : "")

/** A Chat Completions chunk: each choice's content, reasoning, refusal and tool calls. */
export const chatOutputText = (event: ClientEvent): string => {
  const chunk = valueOf(event)
  const choices = chunk?.choices
  if (!Array.isArray(choices)) return ""
  let text = ""
  for (const choice of choices as Array<Json>) {
    // Legacy completions' chunks carry `text` in the choice itself.
    text += str(choice?.text)
    const delta = choice?.delta as Json | null | undefined
    if (delta == null) continue
    text += str(delta.content) + str(delta.reasoning_content) + str(delta.reasoning) + str(delta.refusal)
    const call = delta.function_call as Json | undefined
    if (call != null) text += str(call.name) + str(call.arguments)
    if (Array.isArray(delta.tool_calls)) {
      for (const tool of delta.tool_calls as Array<Json>) {
        const fn = tool?.function as Json | undefined
        if (fn != null) text += str(fn.name) + str(fn.arguments)
      }
    }
  }
  return text
}

/** A Messages event: text, thinking and tool input deltas, and a tool call's name when its block starts. */
export const messagesOutputText = (event: ClientEvent): string => {
  if (event.event !== "content_block_delta" && event.event !== "content_block_start") return ""
  const value = valueOf(event)
  if (value === undefined) return ""
  if (value.type === "content_block_start") {
    const block = value.content_block as Json | undefined
    return block === undefined ? "" : str(block.name) + str(block.text) + str(block.thinking)
  }
  const delta = value.delta as Json | undefined
  return delta === undefined ? "" : str(delta.text) + str(delta.partial_json) + str(delta.thinking)
}

/** A Responses event: every `*.delta` event's text (output text, reasoning, refusal, function arguments). */
export const responsesOutputText = (event: ClientEvent): string => {
  const type = event.event
  if (type === undefined || !type.endsWith(".delta")) return ""
  return str(valueOf(event)?.delta)
}
