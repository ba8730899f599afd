/** The configured providers as clients, one pooled connection Agent each, closed on shutdown. */
import { Context, Effect, Layer } from "effect"
import type { ProviderConfig } from "../config/schema.ts"
import { makeAnthropicClient, makeOpenAIClient, type ProviderClient } from "./clients.ts"
import { makeEchoClient } from "./echo.ts"
import { makeAgent } from "./upstream-http.ts"

export class Providers extends Context.Service<Providers, {
  readonly client: (name: string) => ProviderClient
}>()("modelgate/Providers") {
  static readonly layer = (providers: ReadonlyArray<ProviderConfig>, env: Readonly<Record<string, string | undefined>>) =>
    Layer.effect(
      Providers,
      Effect.gen(function*() {
        const clients = new Map<string, ProviderClient>()
        for (const provider of providers) {
          if (provider.kind === "echo") {
            clients.set(provider.name, makeEchoClient(provider.name))
            continue
          }
          const agent = yield* Effect.acquireRelease(
            Effect.sync(() => makeAgent(provider)),
            (a) => Effect.promise(() => a.destroy())
          )
          clients.set(
            provider.name,
            provider.kind === "openai" ? makeOpenAIClient(provider, agent, env) : makeAnthropicClient(provider, agent, env)
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
