/**
 * A Chat Completions response -> a Responses response object, and the pieces the stream
 * translator shares with it: the response "shell" that echoes the request's settings, and usage.
 *
 * Choices worth knowing:
 * - Output order is reasoning, message, function calls: what OpenAI's own models produce.
 * - Reasoning text that OpenAI-compatible servers return next to the answer (`reasoning_content`
 *   from vLLM and DeepSeek, `reasoning` from Ollama and OpenRouter) becomes a `reasoning` item
 *   with `reasoning_text` content; without an encrypted payload it cannot be replayed to OpenAI,
 *   and the request translator drops reasoning items anyway.
 * - A message item is always present unless the model only called tools, so clients that read
 *   `output[0].content[0].text` find the (possibly empty) answer.
 * - `finish_reason` `length` is status `incomplete` with reason `max_output_tokens`,
 *   `content_filter` is `incomplete` with reason `content_filter`; the message item is then
 *   `incomplete` too. Anything else is `completed`.
 * - `store` is reported false here; the Responses pipeline (src/pipelines/model/responses/state.ts)
 *   sets it, and `previous_response_id`, when it stores the answer.
 */
import { Predicate } from "effect"
import type { ChatFinishReason, ChatResponse, ChatUsage } from "../openai-chat.ts"
import { newFunctionCallId, newFunctionCallItemId, newOutputMessageId, newReasoningItemId, newResponseId } from "../ids.ts"
import {
  type ResponsesIncompleteReason,
  type ResponsesOutputContent,
  type ResponsesOutputItem,
  type ResponsesRequest,
  type ResponsesResponse,
  type ResponsesStatus,
  type ResponsesUsage
} from "../openai-responses.ts"
import { nowSeconds } from "./responses.ts"
import { type AuditUsage, emptyAuditUsage } from "./usage.ts"

export interface ResponsesEchoOptions {
  /** Model name reported to the client (usually what it asked for). */
  readonly model: string
  /** Response id; a fresh `resp_` id by default. */
  readonly id?: string
  /** Unix seconds; now by default. */
  readonly createdAt?: number
  /** The client's request, whose settings the response object repeats as OpenAI's does. */
  readonly request?: ResponsesRequest
}

const count = (n: number | null | undefined): number => (typeof n === "number" && Number.isFinite(n) ? n : 0)

/** Chat usage -> Responses usage. Both count cached tokens inside the input total. */
export const responsesUsageFromChat = (usage: ChatUsage | null | undefined): ResponsesUsage => {
  const input = count(usage?.prompt_tokens)
  const output = count(usage?.completion_tokens)
  return {
    input_tokens: input,
    input_tokens_details: {
      cached_tokens: count(usage?.prompt_tokens_details?.cached_tokens),
      cache_write_tokens: count(usage?.prompt_tokens_details?.cache_write_tokens)
    },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: count(usage?.completion_tokens_details?.reasoning_tokens) },
    total_tokens: input + output
  }
}

/** Loosely typed: this reads what a provider's `/responses` returned, gaps included. */
export interface ResponsesUsageLike {
  readonly input_tokens?: number | null
  readonly output_tokens?: number | null
  readonly input_tokens_details?: { readonly cached_tokens?: number | null; readonly cache_write_tokens?: number | null } | null
}

/** Responses usage -> the audit's disjoint buckets (`input_tokens` excludes cache reads and writes). */
export const auditUsageFromResponses = (usage: ResponsesUsageLike | null | undefined): AuditUsage => {
  if (usage == null) return emptyAuditUsage
  const cacheRead = count(usage.input_tokens_details?.cached_tokens)
  const cacheWrite = count(usage.input_tokens_details?.cache_write_tokens)
  return {
    input_tokens: Math.max(count(usage.input_tokens) - cacheRead - cacheWrite, 0),
    output_tokens: count(usage.output_tokens),
    cache_read_tokens: cacheRead,
    cache_write_tokens: cacheWrite
  }
}

/**
 * The response object before any output: status `in_progress`, the request's settings echoed
 * with OpenAI's defaults where the client left them out.
 */
export const responseShell = (options: ResponsesEchoOptions & { readonly id: string; readonly createdAt: number }): ResponsesResponse => {
  const request = options.request
  return {
    id: options.id,
    object: "response",
    created_at: options.createdAt,
    status: "in_progress",
    background: false,
    error: null,
    incomplete_details: null,
    instructions: request?.instructions ?? null,
    max_output_tokens: request?.max_output_tokens ?? null,
    max_tool_calls: request?.max_tool_calls ?? null,
    model: options.model,
    output: [],
    parallel_tool_calls: request?.parallel_tool_calls ?? true,
    previous_response_id: null,
    prompt_cache_key: request?.prompt_cache_key ?? null,
    reasoning: { effort: request?.reasoning?.effort ?? null, summary: request?.reasoning?.summary ?? null },
    safety_identifier: request?.safety_identifier ?? null,
    service_tier: "default",
    store: false,
    temperature: request?.temperature ?? 1,
    text: { format: request?.text?.format ?? { type: "text" }, verbosity: request?.text?.verbosity ?? "medium" },
    tool_choice: request?.tool_choice ?? "auto",
    tools: request?.tools ?? [],
    top_logprobs: request?.top_logprobs ?? 0,
    top_p: request?.top_p ?? 1,
    truncation: request?.truncation ?? "disabled",
    usage: null,
    user: request?.user ?? null,
    metadata: request?.metadata ?? {}
  }
}

/** Why a chat answer stopped, as a Responses status. */
export const responsesOutcome = (
  finish: ChatFinishReason | string | null | undefined
): { readonly status: ResponsesStatus; readonly incomplete: ResponsesIncompleteReason | null } => {
  if (finish === "length") return { status: "incomplete", incomplete: "max_output_tokens" }
  if (finish === "content_filter") return { status: "incomplete", incomplete: "content_filter" }
  return { status: "completed", incomplete: null }
}

/** The non-standard reasoning text some OpenAI-compatible servers put next to the answer. */
export const reasoningTextOf = (message: unknown): string => {
  if (!Predicate.isObject(message)) return ""
  const value = message["reasoning_content"] ?? message["reasoning"]
  return Predicate.isString(value) ? value : ""
}

export const chatResponseToResponses = (response: ChatResponse, options: ResponsesEchoOptions): ResponsesResponse => {
  const choice = response.choices[0]
  const message = choice?.message
  const { status, incomplete } = responsesOutcome(choice?.finish_reason)
  const itemStatus = status === "completed" ? "completed" : "incomplete"
  const output: Array<ResponsesOutputItem> = []

  const reasoning = reasoningTextOf(message)
  if (reasoning !== "") {
    output.push({
      type: "reasoning",
      id: newReasoningItemId(),
      summary: [],
      content: [{ type: "reasoning_text", text: reasoning }],
      status: itemStatus
    })
  }

  const toolCalls = message?.tool_calls ?? []
  const text = typeof message?.content === "string" ? message.content : ""
  const refusal = typeof message?.refusal === "string" && message.refusal !== "" ? message.refusal : undefined
  if (text !== "" || refusal !== undefined || toolCalls.length === 0) {
    const content: Array<ResponsesOutputContent> = []
    if (text !== "" || refusal === undefined) content.push({ type: "output_text", text, annotations: [], logprobs: [] })
    if (refusal !== undefined) content.push({ type: "refusal", refusal })
    output.push({ type: "message", id: newOutputMessageId(), role: "assistant", status: itemStatus, content })
  }

  for (const call of toolCalls) {
    output.push({
      type: "function_call",
      id: newFunctionCallItemId(),
      call_id: call.id === "" ? newFunctionCallId() : call.id,
      name: call.function.name,
      // A call without arguments still parses on the client.
      arguments: call.function.arguments.trim() === "" ? "{}" : call.function.arguments,
      status: "completed"
    })
  }

  const createdAt = options.createdAt ?? nowSeconds()
  return {
    ...responseShell({ ...options, id: options.id ?? newResponseId(), createdAt }),
    status,
    completed_at: status === "completed" ? nowSeconds() : null,
    incomplete_details: incomplete === null ? null : { reason: incomplete },
    output,
    usage: responsesUsageFromChat(response.usage)
  }
}
