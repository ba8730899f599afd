/**
 * Vertex AI serves two publishers' models under one provider: a Claude model (`claude-*`) goes
 * through the format's Anthropic adapter with an Anthropic client made for the model (Messages
 * over `:rawPredict`), any other model through its Gemini adapter. So every client format
 * reaches both, with the translations the two kinds already have.
 */
import type { AnthropicClient, GeminiClient, VertexClient } from "../../services/providers/clients.ts"
import type { Adapter } from "./adapter.ts"

/** Anthropic's models on Vertex are published as `claude-...@date`. */
export const isVertexClaude = (model: string): boolean => model.startsWith("claude-")

export const vertexAdapter = <Request>(
  anthropic: Adapter<Request, AnthropicClient>,
  gemini: Adapter<Request, GeminiClient>
): Adapter<Request, VertexClient> => ({
  complete: (client, request, context) => {
    const model = context.resolved.model.id
    return isVertexClaude(model) ? anthropic.complete(client.anthropicFor(model), request, context) : gemini.complete(client.gemini, request, context)
  },
  stream: (client, request, context) => {
    const model = context.resolved.model.id
    return isVertexClaude(model) ? anthropic.stream(client.anthropicFor(model), request, context) : gemini.stream(client.gemini, request, context)
  }
})
