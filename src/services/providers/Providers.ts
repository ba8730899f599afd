/** The configured providers as clients, one pooled connection Agent each, closed on shutdown. */
import { Context, Effect, Layer, Option } from "effect"
import type { ProviderConfig } from "../config/schema.ts"
import { Metrics } from "../metrics/Metrics.ts"
import { makeAnthropicClient, makeOpenAIClient, type ProviderClient } from "./clients.ts"
import { makeAzureClient } from "./azure.ts"
import { makeEchoClient } from "./echo.ts"
import { makeAgent } from "./upstream-http.ts"
import type { Agent } from "undici"

export class Providers extends Context.Service<Providers, {
  readonly client: (name: string) => ProviderClient
}>()("modelgate/Providers") {
  static readonly layer = (providers: ReadonlyArray<ProviderConfig>, env: Readonly<Record<string, string | undefined>>) =>
    Layer.effect(
      Providers,
      Effect.gen(function*() {
        const metrics = Option.getOrUndefined(yield* Effect.serviceOption(Metrics))
        /** Each provider's client, its Agent (none for echo) and the config it was made from. */
        let entries = new Map<string, { readonly client: ProviderClient; readonly agent: Agent | undefined; readonly config: string }>()
        const clients = {
          get: (name: string) => entries.get(name)?.client
        }
        // AWS's signer and event stream codec load only for a deployment with a Bedrock provider;
        // likewise Google's clients (and Vertex's token signer) only for a Gemini or Vertex one.
        const loadOptional = Effect.fn("Providers.loadOptional")(function*(list: ReadonlyArray<ProviderConfig>) {
          const has = (...kinds: ReadonlyArray<string>) => list.some((provider) => kinds.includes(provider.kind))
          return {
            bedrock: has("bedrock") ? yield* Effect.promise(() => import("./bedrock.ts")) : undefined,
            gemini: has("gemini", "vertex") ? yield* Effect.promise(() => import("./gemini.ts")) : undefined,
            vertex: has("vertex") ? yield* Effect.promise(() => import("./vertex.ts")) : undefined
          }
        })
        type Optional = Effect.Success<ReturnType<typeof loadOptional>>
        const make = (provider: ProviderConfig, optional: Optional) => {
          const config = JSON.stringify(provider)
          if (provider.kind === "echo") return { client: makeEchoClient(provider.name), agent: undefined, config }
          const agent = makeAgent(provider)
          const firstByte = metrics?.firstByteRecorder(provider.name)
          const { bedrock, gemini, vertex } = optional
          const client = provider.kind === "openai"
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
          return { client, agent, config }
        }
        const initial = yield* loadOptional(providers)
        entries = new Map(providers.map((p) => [p.name, make(p, initial)]))
        yield* Effect.addFinalizer(() => Effect.promise(() => Promise.all([...entries.values()].map((e) => e.agent?.destroy()))))

        const prepare = Effect.fn("Providers.prepare")(function*(next: ReadonlyArray<ProviderConfig>) {
          const optional = yield* loadOptional(next)
          // An unchanged provider keeps its client and its pooled connections.
          const made = new Map(next.map((p) => {
            const kept = entries.get(p.name)
            return [p.name, kept !== undefined && kept.config === JSON.stringify(p) ? kept : make(p, optional)] as const
          }))
          return () => {
            const previous = entries
            entries = made
            // Requests already under way hold their client; `close` lets them finish, then frees the sockets.
            for (const [name, entry] of previous) {
              if (made.get(name) !== entry) void entry.agent?.close().catch(() => {})
            }
          }
        })
        yield* Effect.serviceOption(ProvidersSwitchSlot).pipe(
          Effect.map(Option.map((slot) => slot.set(prepare)))
        )
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

/**
 * Where a reloadable Providers layer leaves its `prepare` (ConfigReload): it builds clients for a
 * new provider list (keeping unchanged ones) and returns the step that puts them in place.
 */
export interface ProvidersSwitchShape {
  prepare: ((next: ReadonlyArray<ProviderConfig>) => Effect.Effect<() => void>) | undefined
  readonly set: (prepare: (next: ReadonlyArray<ProviderConfig>) => Effect.Effect<() => void>) => void
}
export class ProvidersSwitchSlot extends Context.Service<ProvidersSwitchSlot, ProvidersSwitchShape>()("modelgate/ProvidersSwitchSlot") {
  static readonly make = (): ProvidersSwitchShape => {
    const slot: ProvidersSwitchShape = {
      prepare: undefined,
      set: (prepare) => {
        slot.prepare = prepare
      }
    }
    return slot
  }
}
