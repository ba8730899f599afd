/**
 * Messages client -> Anthropic-kind provider (and Claude on Vertex): a passthrough. The body goes
 * upstream with the provider's model id and the caps applied (for Vertex, without what Vertex
 * refuses); events are forwarded in order, each as the provider wrote it, except that
 * `message_delta` events are merged into one (see below).
 */
import { Effect, Stream } from "effect"
import { decodedOrFail } from "../../../domain/validation.ts"
import type { Headers } from "effect/http/Headers"
import { type AnthropicClient, type AnthropicHeaders, sourceTextOf } from "../../../services/providers/clients.ts"
import type {
  AnthropicStreamEvent,
  MessageDeltaEvent,
  MessageDeltaUsage,
  MessagesPassthroughRequest
} from "../../../wire/anthropic-messages.ts"
import { messagesPassthroughBody } from "../../../wire/anthropic-messages.ts"
import { type AuditUsage, auditUsageFromAnthropic, emptyAuditUsage } from "../../../wire/translate/usage.ts"
import type { Adapter, AdapterContext, ClientEvent } from "../adapter.ts"
import type { RequestState } from "../../request.ts"
import { recordDropped } from "../dropped.ts"
import { recordAuditUsage } from "../usage.ts"
import { messagesForVertex } from "../../../wire/translate/messages-for-vertex.ts"
import { flattenEach } from "../stream-chunks.ts"

/**
 * The body the client sent, with the provider's model id, `max_tokens` clamped to the model's
 * cap and a thinking budget kept below it (or a 400 naming both when none fits): fields the
 * gateway does not model, betas included, still reach the provider, which judges its format.
 */
const passthroughBody = ({ raw, resolved, state }: AdapterContext) =>
  decodedOrFail(messagesPassthroughBody(forVendor(raw, resolved.provider.kind, state), { model: resolved.model.id, maxTokensCap: resolved.model.max_tokens }))

/** Claude on Vertex takes Anthropic's format minus what it refuses (messages-for-vertex.ts); the dropped rest is named. */
export const forVendor = (raw: Record<string, unknown>, kind: string, state: RequestState): Record<string, unknown> => {
  if (kind !== "vertex") return raw
  const { body, dropped } = messagesForVertex(raw)
  recordDropped(state, dropped)
  return body
}

/** The client's version and betas go upstream with its body: the vendor judges its own format. */
export const forwardedAnthropicHeaders = (headers: Headers): AnthropicHeaders => ({
  "anthropic-version": headers["anthropic-version"],
  "anthropic-beta": headers["anthropic-beta"]
})

export const eventOf = (event: AnthropicStreamEvent): ClientEvent => ({ event: event.type, data: JSON.stringify(event), value: event })

/** An event as the provider sent it when it is the one parsed from its text (not a merged delta). */
const relayedEventOf = (event: AnthropicStreamEvent): ClientEvent => {
  const text = sourceTextOf(event)
  return text === undefined ? eventOf(event) : { event: event.type, data: text, value: event }
}

const overwriteUsage = (usage: AuditUsage, delta: MessageDeltaUsage): AuditUsage => ({
  input_tokens: delta.input_tokens ?? usage.input_tokens,
  output_tokens: delta.output_tokens,
  cache_read_tokens: delta.cache_read_input_tokens ?? usage.cache_read_tokens,
  cache_write_tokens: delta.cache_creation_input_tokens ?? usage.cache_write_tokens
})

/** Later values win where present, as in the SDKs' own accumulators. */
const mergeDeltas = (held: MessageDeltaEvent, next: MessageDeltaEvent): MessageDeltaEvent => {
  const delta = { ...held.delta }
  for (const [key, value] of Object.entries(next.delta)) if (value != null) Object.assign(delta, { [key]: value })
  const usage = { ...held.usage }
  for (const [key, value] of Object.entries(next.usage)) if (value != null) Object.assign(usage, { [key]: value })
  return { ...next, delta, usage }
}

export const messagesToAnthropic: Adapter<MessagesPassthroughRequest, AnthropicClient> = {
  complete: (client, _, context) =>
    Effect.flatMap(passthroughBody(context), (body) => client.complete(body, forwardedAnthropicHeaders(context.headers))).pipe(Effect.map((response) => {
      const { state } = context
      recordAuditUsage(state, auditUsageFromAnthropic(response.usage))
      const id = typeof response.id === "string" && response.id.startsWith("msg_") ? response.id : `msg_${response.id}`
      return { ...response, id }
    })),
  stream: (client, _, context) =>
    Effect.flatMap(passthroughBody(context), (body) => client.stream(body, forwardedAnthropicHeaders(context.headers))).pipe(Effect.map((upstream) => {
      const { state } = context
      let usage = emptyAuditUsage
      // Some Anthropic-compatible upstreams send message_delta more than once. Clients are owed the
      // documented sequence (one message_delta, right before message_stop), and a client that adds
      // up the deltas would count tokens twice, so they are merged and sent once.
      let heldDelta: MessageDeltaEvent | undefined
      return upstream.pipe(
        Stream.map((event): ReadonlyArray<ClientEvent> => {
          // message_start carries input and cache counts; message_delta the cumulative output,
          // and overwrites any input count it repeats (the SDK's own accumulator does the same).
          if (event.type === "message_start") {
            usage = auditUsageFromAnthropic(event.message.usage)
            recordAuditUsage(state, usage)
          } else if (event.type === "message_delta") {
            usage = overwriteUsage(usage, event.usage)
            recordAuditUsage(state, usage)
            heldDelta = heldDelta === undefined ? event : mergeDeltas(heldDelta, event)
            return []
          }
          // The provider client fails any stream that ends without message_stop, so this always comes.
          if (event.type === "message_stop" && heldDelta !== undefined) {
            const delta = heldDelta
            heldDelta = undefined
            return [relayedEventOf(delta), relayedEventOf(event)]
          }
          return [relayedEventOf(event)]
        }),
        flattenEach
      )
    }))
}
