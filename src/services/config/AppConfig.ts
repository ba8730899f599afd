/**
 * The validated configuration as a service, so pipelines read settings without globals.
 *
 * The gateway's AppConfig is reloadable (issue 26): each top-level section is a getter over the
 * configuration in force, so `(yield* AppConfig).routing` costs one property read, as before,
 * and gives the section a config reload last put in place. A request reads a section once, when
 * it needs it (a routing plan keeps the `routing` it was made with), so one under way finishes on
 * what it started with. Long-lived parts built from AppConfig at start (the server, store, Redis,
 * telemetry, admin, the SQL guard's pool...) read their settings once and keep them; ConfigReload
 * refuses a reload that changes any of those (LIVE_SETTINGS lists the others), so what such a
 * part holds is what the view says.
 */
import * as Context from "effect/Context"
import * as Layer from "effect/Layer"
import type { GatewayConfig } from "./schema.ts"

export class AppConfig extends Context.Service<AppConfig, GatewayConfig>()("modelgate/AppConfig") {
  /** A fixed configuration (a test, an embedding): nothing replaces it. */
  static readonly layer = (config: GatewayConfig) => Layer.succeed(AppConfig, config)

  /** The gateway's: AppConfig, a view over the configuration in force, and the switch that replaces it. */
  static readonly layerReloadable = (config: GatewayConfig) => {
    const live = makeLiveConfig(config)
    return Layer.mergeAll(
      Layer.succeed(AppConfig, live.view),
      Layer.succeed(AppConfigSwitch, { prepare: (next) => () => live.swap(next) })
    )
  }
}

/** Replaces the configuration AppConfig shows: the function `prepare` returns puts `next` in place. */
export class AppConfigSwitch extends Context.Service<AppConfigSwitch, {
  readonly prepare: (next: GatewayConfig) => () => void
}>()("modelgate/AppConfigSwitch") {}

/**
 * A configuration object whose top-level sections read through to `current`: a swap is one
 * assignment, and reading a section allocates nothing. The sections are those of `initial`
 * (every live one has a default, so a reloaded configuration has the same top-level keys, and
 * an optional one that appears or disappears, `redis`, is refused as needing a restart).
 */
export const makeLiveConfig = (initial: GatewayConfig) => {
  let current = initial
  const view = {} as GatewayConfig
  for (const key of Object.keys(initial) as Array<keyof GatewayConfig>) {
    Object.defineProperty(view, key, { enumerable: true, get: () => current[key] })
  }
  return {
    view,
    swap: (next: GatewayConfig) => {
      current = next
    }
  }
}
