/** The configured providers as clients, one pooled connection Agent each, closed on shutdown. */
import { Context, Effect, Layer, Option } from "effect"
import type { ProviderConfig } from "../config/schema.ts"
import { Metrics } from "../metrics/Metrics.ts"
import { makeAnthropicClient, makeOpenAIClient, type ProviderClient } from "./clients.ts"
import { makeAzureClient } from "./azure.ts"
import { makeEchoClient } from "./echo.ts"
import { makeAgent } from "./upstream-http.ts"

export class Providers extends Context.Service<Providers, {
  readonly client: (name: string) => ProviderClient
}>()("modelgate/Providers") {
  static readonly layer = (providers: ReadonlyArray<ProviderConfig>, env: Readonly<Record<string, string | undefined>>) =>
    Layer.effect(
      Providers,
      Effect.gen(function*() {
        const metrics = Option.getOrUndefined(yield* Effect.serviceOption(Metrics))
        const clients = new Map<string, ProviderClient>()
        // AWS's signer and event stream codec load only for a deployment with a Bedrock provider.
        const bedrock = providers.some((provider) => provider.kind === "bedrock")
          ? yield* Effect.promise(() => import("./bedrock.ts"))
          : undefined
        // Likewise Google's clients (and Vertex's token signer) only for a Gemini or Vertex provider.
        const gemini = providers.some((provider) => provider.kind === "gemini" || provider.kind === "vertex")
          ? yield* Effect.promise(() => import("./gemini.ts"))
          : undefined
        const vertex = providers.some((provider) => provider.kind === "vertex")
          ? yield* Effect.promise(() => import("./vertex.ts"))
          : undefined
        for (const provider of providers) {
          if (provider.kind === "echo") {
            clients.set(provider.name, makeEchoClient(provider.name))
            continue
          }
          const agent = yield* Effect.acquireRelease(
            Effect.sync(() => makeAgent(provider)),
            (a) => Effect.promise(() => a.destroy())
          )
          const firstByte = metrics?.firstByteRecorder(provider.name)
          clients.set(
            provider.name,
            provider.kind === "openai"
              ? makeOpenAIClient(provider, agent, env, firstByte)
              : provider.kind === "azure"
              ? makeAzureClient(provider, agent, env, firstByte)
              : provider.kind === "gemini" && gemini !== undefined
              ? gemini.makeGeminiClient(provider, agent, firstByte, gemini.geminiApiEndpoint(provider, env))
              : provider.kind === "vertex" && vertex !== undefined
              ? vertex.makeVertexClient(provider, agent, firstByte)
              : provider.kind === "bedrock" && bedrock !== undefined
              ? bedrock.makeBedrockClient(provider, agent, env, firstByte)
              : makeAnthropicClient(provider, agent, env, firstByte)
          )
        }
        return Providers.of({
          // The config loader checked every model's provider exists, so a miss here is a bug.
          client: (name) => {
            const client = clients.get(name)
            if (!client) throw new Error(`no provider named ${name}`)
            return client
          }
        })
      })
    )
}
