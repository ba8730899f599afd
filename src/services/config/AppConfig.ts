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

/** Every top-level section, the optional ones included, so the view cannot miss one. */
type Sections = { readonly [K in keyof Required<GatewayConfig>]: GatewayConfig[K] }

/**
 * A configuration whose top-level sections read through to the one in force: a swap is one
 * assignment, and reading a section allocates nothing. Getters on a class prototype cost what a
 * plain property read does once inlined (an object literal of 21 getters, or getters defined in
 * a loop, measured 3 to 5 times slower). The sections are not own properties: read them, do not
 * spread or serialize the view.
 */
class LiveConfigView implements Sections {
  #current: GatewayConfig
  constructor(initial: GatewayConfig) {
    this.#current = initial
  }
  static swap(view: LiveConfigView, next: GatewayConfig) {
    view.#current = next
  }
  get server() {
    return this.#current.server
  }
  get store() {
    return this.#current.store
  }
  get redis() {
    return this.#current.redis
  }
  get secrets() {
    return this.#current.secrets
  }
  get admin() {
    return this.#current.admin
  }
  get workspace() {
    return this.#current.workspace
  }
  get limits() {
    return this.#current.limits
  }
  get auth() {
    return this.#current.auth
  }
  get providers() {
    return this.#current.providers
  }
  get models() {
    return this.#current.models
  }
  get routing() {
    return this.#current.routing
  }
  get connections() {
    return this.#current.connections
  }
  get mcp() {
    return this.#current.mcp
  }
  get credits() {
    return this.#current.credits
  }
  get store_timeouts() {
    return this.#current.store_timeouts
  }
  get store_pool_size() {
    return this.#current.store_pool_size
  }
  get redis_timeouts() {
    return this.#current.redis_timeouts
  }
  get alerts() {
    return this.#current.alerts
  }
  get count_tokens() {
    return this.#current.count_tokens
  }
  get responses() {
    return this.#current.responses
  }
  get moderations() {
    return this.#current.moderations
  }
  get audit() {
    return this.#current.audit
  }
  get log() {
    return this.#current.log
  }
  get telemetry() {
    return this.#current.telemetry
  }
}

export const makeLiveConfig = (initial: GatewayConfig) => {
  const view = new LiveConfigView(initial)
  return {
    view: view as GatewayConfig,
    swap: (next: GatewayConfig) => LiveConfigView.swap(view, next)
  }
}
