/**
 * Chat clients of the legacy functions API on models that have only tools (Anthropic's, on the
 * Anthropic, Bedrock and Vertex kinds): the request is put in tools before the adapter
 * translates it, and the answer and stream are put back in functions
 * (src/wire/translate/legacy-functions.ts). Requests without the legacy API pass untouched.
 */
import { Effect, Stream } from "effect"
import type { ProviderClient } from "../../../services/providers/clients.ts"
import type { ChatChunk, ChatRequest, ChatResponse } from "../../../wire/openai-chat.ts"
import { legacyFunctionsAsTools, toolsAnswerAsLegacy, toolsChunkAsLegacy, usesLegacyFunctions } from "../../../wire/translate/legacy-functions.ts"
import type { Adapter, ClientEvent } from "../adapter.ts"

const legacyEvent = (event: ClientEvent): ClientEvent => {
  const chunk = JSON.parse(event.data) as ChatChunk
  if (!Array.isArray(chunk.choices)) return event
  const legacy = toolsChunkAsLegacy(chunk)
  return { ...event, data: JSON.stringify(legacy), ...(event.value === undefined ? {} : { value: legacy }) }
}

export const withLegacyFunctions = <C extends ProviderClient>(adapter: Adapter<ChatRequest, C>): Adapter<ChatRequest, C> => ({
  complete: (client, request, context) =>
    usesLegacyFunctions(request)
      ? Effect.map(adapter.complete(client, legacyFunctionsAsTools(request), context), (body) => toolsAnswerAsLegacy(body as ChatResponse))
      : adapter.complete(client, request, context),
  stream: (client, request, context) =>
    usesLegacyFunctions(request)
      ? Effect.map(adapter.stream(client, legacyFunctionsAsTools(request), context), (events) => Stream.map(events, legacyEvent))
      : adapter.stream(client, request, context)
})
