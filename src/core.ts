/**
 * The store and the services every entry point shares: the server (gateway.ts) and the CLI's
 * store commands (src/commands). Apart from gateway.ts so that `modelgate keys list` loads the
 * store and nothing of the server.
 */
import { toMicros } from "./domain/money.ts"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import type { GatewayConfig } from "./services/config/schema.ts"
import { KeyCache } from "./services/auth/KeyCache.ts"
import { ApiKeys } from "./services/keys/ApiKeys.ts"
import { Teams } from "./services/teams/Teams.ts"
import { CreditsRepo } from "./services/store/CreditsRepo.ts"
import { StoreDeadline } from "./services/store/StoreError.ts"
import { StoreLayer } from "./services/store/StoreLayer.ts"

export interface CoreOverrides {
  /** Every store repository at once (for example `StoreLayer.fromUrl`, or one with a repository swapped). */
  readonly store?: ReturnType<typeof StoreLayer.fromUrl> | undefined
}

/**
 * Every store call's deadline (issue 21), read by each call from the context it runs in: the
 * gateway provides it with its request services (the server's handlers run in their context);
 * elsewhere the default applies.
 */
export const storeDeadlineLayer = (config: GatewayConfig) =>
  Layer.succeed(
    StoreDeadline,
    config.store.startsWith("sqlite:") ? Duration.infinity : Duration.millis(config.store_timeouts.call_ms)
  )

/** Store plus the services every entry point (server and CLI) shares. */
export const coreLayer = (config: GatewayConfig, overrides: CoreOverrides = {}) => {
  const store = Layer.effectDiscard(Effect.flatMap(CreditsRepo, (s) => s.ensureWorkspace(toMicros(config.workspace.credits) ?? 0))).pipe(
    Layer.provideMerge(
      overrides.store ??
        StoreLayer.fromUrl(config.store, { ...config.store_timeouts, pool_size: config.store_pool_size }, { key: config.secrets.key, previousKeys: config.secrets.previous_keys })
    )
  )
  return Layer.mergeAll(ApiKeys.layer, Teams.layer).pipe(Layer.provideMerge(KeyCache.layer), Layer.provideMerge(store))
}
