/**
 * POST /v1/chat/completions (spec 4.1): auth -> validate -> resolve model -> scope -> provider
 * -> respond -> audit. The client speaks Chat Completions; an `openai`-kind (or echo) provider
 * gets it passed through, an `anthropic`-kind provider gets it translated.
 */
import { Effect, Stream } from "effect"
import { type ApiError, toEnvelope } from "../domain/errors.ts"
import { CurrentRequest, type RequestState } from "../http/request-context.ts"
import { json } from "../http/responses.ts"
import { dataFrame, DONE_FRAME, sseResponse } from "../http/sse.ts"
import { decodeChatRequest, type ChatRequest, type ChatUsage } from "../wire/openai-chat.ts"
import type { ResolvedModel } from "../services/catalog/ModelCatalog.ts"
import type { ChatStreamItem, OpenAIClient } from "../services/providers/clients.ts"
import { guardedStream } from "./streaming.ts"
import { admitModelRequest } from "./admission.ts"
import { chatViaAnthropic } from "./chat-via-anthropic.ts"

export const recordChatUsage = (state: RequestState, usage: ChatUsage | null | undefined) => {
  if (!usage) return
  state.audit.prompt_tokens = usage.prompt_tokens
  state.audit.completion_tokens = usage.completion_tokens
}

/** The request as the upstream gets it: the provider's model id, max_tokens clamped to the model's cap. */
export const passthroughBody = (chat: ChatRequest, resolved: ResolvedModel): Record<string, unknown> => {
  const body: Record<string, unknown> = { ...chat, model: resolved.model.id }
  const cap = resolved.model.max_tokens
  if (typeof chat.max_tokens === "number" && chat.max_tokens > cap) body.max_tokens = cap
  if (typeof chat.max_completion_tokens === "number" && chat.max_completion_tokens > cap) body.max_completion_tokens = cap
  if (chat.stream === true) {
    // Usage is always asked for, so the audit trail has tokens; the client only sees it if it asked too.
    body.stream_options = { ...(chat.stream_options ?? {}), include_usage: true }
  }
  return body
}

/**
 * Ends a stream that already sent its 200: the error goes in-band as one `data:` frame holding
 * the envelope (both OpenAI SDKs raise on a chunk with an `error` key), then `[DONE]`.
 */
export const streamFailureFrames = (state: RequestState, error: ApiError) =>
  dataFrame(JSON.stringify(toEnvelope(error, state.requestId))) + DONE_FRAME

const passthroughStream = (client: OpenAIClient, body: Record<string, unknown>, clientWantsUsage: boolean) =>
  Effect.gen(function*() {
    const state = yield* CurrentRequest
    const upstream = yield* client.stream(body)
    let heldUsage: string | undefined
    const frames = upstream.pipe(
      Stream.map((item: ChatStreamItem) => {
        const { chunk } = item
        if (chunk.usage) recordChatUsage(state, chunk.usage)
        // The usage-only chunk is held to the end: some upstreams send it twice or early.
        if (Array.isArray(chunk.choices) && chunk.choices.length === 0) {
          if (chunk.usage) heldUsage = item.raw
          return ""
        }
        return dataFrame(item.raw)
      }),
      Stream.filter((frame) => frame !== ""),
      Stream.concat(Stream.suspend(() => Stream.make((clientWantsUsage && heldUsage ? dataFrame(heldUsage) : "") + DONE_FRAME)))
    )
    return sseResponse(yield* guardedStream(frames, (error) => streamFailureFrames(state, error)))
  })

const passthrough = (client: OpenAIClient, chat: ChatRequest, resolved: ResolvedModel) =>
  Effect.gen(function*() {
    const state = yield* CurrentRequest
    const body = passthroughBody(chat, resolved)
    if (chat.stream === true) return yield* passthroughStream(client, body, chat.stream_options?.include_usage === true)
    const completion = yield* client.complete(body)
    recordChatUsage(state, completion.usage)
    const id = typeof completion.id === "string" && completion.id.startsWith("chatcmpl-") ? completion.id : `chatcmpl-${completion.id ?? state.requestId}`
    return json({ ...completion, id })
  })

export const chatCompletionsPipeline = Effect.gen(function*() {
  const { request, resolved, client } = yield* admitModelRequest(decodeChatRequest)
  return yield* (client.kind === "openai" ? passthrough(client, request, resolved) : chatViaAnthropic(client, request, resolved))
})
