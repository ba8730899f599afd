/**
 * Chat Completions client -> OpenAI-kind provider (and echo): a passthrough. The body goes
 * upstream with the provider's model id and the caps applied; chunks are forwarded as the exact
 * text received.
 */
import { Effect, Stream } from "effect"
import type { ResolvedModel } from "../../../services/catalog/ModelCatalog.ts"
import type { ChatStreamItem, OpenAIClient } from "../../../services/providers/clients.ts"
import type { ChatRequest } from "../../../wire/openai-chat.ts"
import type { Adapter, ClientEvent } from "../adapter.ts"
import { recordChatUsage } from "../usage.ts"

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

export const chatToOpenAI: Adapter<ChatRequest, OpenAIClient> = {
  complete: (client, chat, { resolved, state }) =>
    Effect.map(client.complete(passthroughBody(chat, resolved)), (completion) => {
      recordChatUsage(state, completion.usage)
      const id = typeof completion.id === "string" && completion.id.startsWith("chatcmpl-")
        ? completion.id
        : `chatcmpl-${completion.id ?? state.requestId}`
      return { ...completion, id }
    }),
  stream: (client, chat, { resolved, state }) =>
    Effect.map(client.stream(passthroughBody(chat, resolved)), (upstream) => {
      const clientWantsUsage = chat.stream_options?.include_usage === true
      let heldUsage: string | undefined
      return upstream.pipe(
        Stream.filter((item: ChatStreamItem) => {
          const { chunk } = item
          if (chunk.usage) recordChatUsage(state, chunk.usage)
          // The usage-only chunk is held to the end: some upstreams send it twice or early.
          if (Array.isArray(chunk.choices) && chunk.choices.length === 0) {
            if (chunk.usage) heldUsage = item.raw
            return false
          }
          return true
        }),
        Stream.map((item): ClientEvent => ({ data: item.raw })),
        Stream.concat(Stream.suspend(() =>
          clientWantsUsage && heldUsage !== undefined ? Stream.make({ data: heldUsage } as ClientEvent) : Stream.empty
        ))
      )
    })
}
