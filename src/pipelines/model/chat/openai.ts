/**
 * Chat Completions client -> OpenAI-kind provider (and echo): a passthrough. The body goes
 * upstream with the provider's model id and the caps applied; chunks are forwarded as the exact
 * text received.
 */
import { Effect, Stream } from "effect"
import type { ChatStreamItem, OpenAIClient } from "../../../services/providers/clients.ts"
import { chatPassthroughBody, type ChatRequest } from "../../../wire/openai-chat.ts"
import type { Adapter, AdapterContext, ClientEvent } from "../adapter.ts"
import { recordChatUsage } from "../usage.ts"

/**
 * The body the client sent, with the provider's model id and the caps applied: fields the
 * gateway does not model still reach the provider, which judges its own format.
 */
const passthroughBody = ({ raw, resolved }: AdapterContext) =>
  chatPassthroughBody(raw, { model: resolved.model.id, maxTokensCap: resolved.model.max_tokens })

export const chatToOpenAI: Adapter<ChatRequest, OpenAIClient> = {
  complete: (client, _, context) =>
    Effect.map(client.complete(passthroughBody(context)), (completion) => {
      const { state } = context
      recordChatUsage(state, completion.usage)
      const id = typeof completion.id === "string" && completion.id.startsWith("chatcmpl-")
        ? completion.id
        : `chatcmpl-${completion.id ?? state.requestId}`
      return { ...completion, id }
    }),
  stream: (client, chat, context) =>
    Effect.map(client.stream(passthroughBody(context)), (upstream) => {
      const { state } = context
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
        Stream.map((item): ClientEvent => ({ data: item.raw, value: item.chunk })),
        Stream.concat(Stream.suspend(() =>
          clientWantsUsage && heldUsage !== undefined ? Stream.make({ data: heldUsage } as ClientEvent) : Stream.empty
        ))
      )
    })
}
