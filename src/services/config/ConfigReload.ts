/**
 * Config reload (issue 26): SIGHUP or `POST /admin/reload` reads the configuration again, the
 * way the process read it at start (same file, same environment, same command-line flags), and
 * puts the new settings in place without a restart and without dropping a request. What it
 * applies (LIVE_SETTINGS):
 * - `models` and `providers`: a request resolves its model and provider client once, so one
 *   under way finishes on what it started with, and the next one sees the new ones. A provider
 *   whose entry did not change keeps its client and pooled connections; a changed or removed
 *   one's connections close once their requests finish.
 * - `limits`: read once per request at its start (limits/LiveLimits.ts says what a changed limit
 *   means for what is already counted: nothing is reset).
 * - `auth` (`auth.oidc`): issuers, their verification settings and their policies; the next
 *   token verified is judged by the new ones, and remembered tokens are forgotten in the same
 *   step (identity/IdentityTokens.ts).
 * - `routing`: a request's routing plan reads it once, when it is made (retries, backoff,
 *   deadline, cooldown length, stream continuation); `strategy` applies from the next pick and
 *   `default_fallbacks` from the next request's model lookup. What the router remembers about each
 *   deployment (cooldowns, latency, requests in flight) is kept.
 * - `count_tokens`, `moderations`: the next request's price (and moderations' provider).
 * - `responses`: the next request decides from it whether it may use and store responses; a
 *   response is kept for the `retention_days` in force when it is stored; the sweep of expired
 *   ones keeps running.
 * - the per-request parts of `mcp`: `credits_per_tool_call`, `allowed_origins`,
 *   `max_statement_bytes`, `max_result_bytes` (each read by the next tool call).
 * These are read from AppConfig, whose sections read through to the configuration in force
 * (config/AppConfig.ts): the reload swaps it in one step with the parts above.
 *
 * Everything else (the listen address, TLS, the store, Redis, the admin settings, connections,
 * the MCP session TTL, tool caps advertised in the tool schemas and the guard's pool, telemetry,
 * credits, audit, logging...) is built into long-lived parts at start: a reload that changes any
 * of it is refused as a whole, naming each changed setting, and nothing is applied. A file that
 * does not load is refused the same way, and the running configuration stays.
 */
import { Context, Effect, Layer, Option, Semaphore } from "effect"
import { Conflict, ValidationFailed } from "../../domain/errors.ts"
import { ModelCatalogSwitch } from "../catalog/ModelCatalog.ts"
import { AppConfigSwitch } from "./AppConfig.ts"
import { IdentityTokens } from "../identity/IdentityTokens.ts"
import { LiveLimits } from "../limits/LiveLimits.ts"
import { ProvidersSwitchSlot } from "../providers/Providers.ts"
import type { ConfigInvalid } from "./load.ts"
import type { GatewayConfig } from "./schema.ts"

/**
 * The settings a reload applies, a whole section or one setting of it (`mcp.allowed_origins`);
 * every other one needs a restart.
 */
export const LIVE_SETTINGS = [
  "models",
  "providers",
  "limits",
  "auth",
  "routing",
  "count_tokens",
  "moderations",
  "responses",
  "mcp.credits_per_tool_call",
  "mcp.allowed_origins",
  "mcp.max_statement_bytes",
  "mcp.max_result_bytes"
] as const

/** Whether a changed setting (as `changedSettings` names it) is one a reload applies. */
export const isLive = (name: string): boolean =>
  LIVE_SETTINGS.some((live) => name === live || name.startsWith(`${live}.`))

/** The live settings read from AppConfig alone (nothing else is rebuilt for them). */
const CONFIG_ONLY = ["routing", "count_tokens", "moderations", "responses", "mcp"] as const

export interface ReloadResult {
  /** The live settings that changed (empty: the file said what was already running). */
  readonly changed: ReadonlyArray<string>
  readonly models: number
  readonly providers: number
}

const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b)

/** The dotted names of the settings that differ, two levels deep at most (`server.port`, `store`). */
export const changedSettings = (before: GatewayConfig, after: GatewayConfig): Array<string> => {
  const out: Array<string> = []
  const was = before as unknown as Record<string, unknown>
  const now = after as unknown as Record<string, unknown>
  for (const name of new Set([...Object.keys(was), ...Object.keys(now)])) {
    if (same(was[name], now[name])) continue
    const a = was[name]
    const b = now[name]
    const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v)
    if (isObject(a) && isObject(b)) {
      for (const inner of new Set([...Object.keys(a), ...Object.keys(b)])) {
        if (!same(a[inner], b[inner])) out.push(`${name}.${inner}`)
      }
    } else out.push(name)
  }
  return out
}

export class ConfigReload extends Context.Service<ConfigReload, {
  readonly reload: Effect.Effect<ReloadResult, Conflict | ValidationFailed>
}>()("modelgate/ConfigReload") {
  /**
   * `load` reads the configuration as at start; none: the gateway was built from a value (a test,
   * an embedding), and a reload is refused as having nothing to read.
   */
  static readonly layer = (initial: GatewayConfig, load: Effect.Effect<GatewayConfig, ConfigInvalid> | undefined) =>
    Layer.effect(
      ConfigReload,
      Effect.gen(function*() {
        const catalog = Option.getOrUndefined(yield* Effect.serviceOption(ModelCatalogSwitch))
        const providers = Option.getOrUndefined(yield* Effect.serviceOption(ProvidersSwitchSlot))
        const limits = Option.getOrUndefined(yield* Effect.serviceOption(LiveLimits))
        const identity = Option.getOrUndefined(yield* Effect.serviceOption(IdentityTokens))
        const appConfig = Option.getOrUndefined(yield* Effect.serviceOption(AppConfigSwitch))
        let running = initial
        // One reload at a time: two SIGHUPs in a row must not interleave their swaps.
        const lock = yield* Semaphore.make(1)

        const reload = Effect.gen(function*() {
          if (load === undefined) {
            return yield* new Conflict({ message: "reload is not available: this gateway was not started from a configuration file" })
          }
          const next = yield* load.pipe(
            Effect.mapError((error) =>
              new ValidationFailed({ message: `the configuration does not load, nothing changed: ${error.message}`, status: 422 })
            )
          )
          const changed = changedSettings(running, next)
          const live = changed.filter(isLive)
          const restart = changed.filter((name) => !live.includes(name))
          if (restart.length > 0) {
            return yield* new Conflict({
              message: `reload refused, nothing changed: ${restart.join(", ")} cannot change while running (restart for that); ` +
                `a reload applies ${LIVE_SETTINGS.join(", ")}`,
              details: { restart_required: restart }
            })
          }
          const touched = (setting: string) => live.some((name) => name === setting || name.startsWith(`${setting}.`))
          const providersChanged = touched("providers")
          // The catalog holds each model's fallbacks, `routing.default_fallbacks` included.
          const catalogChanged = touched("models") || providersChanged || touched("routing.default_fallbacks")
          if (providersChanged && providers?.prepare === undefined) {
            return yield* new Conflict({ message: "reload refused, nothing changed: this gateway's providers are fixed (not built from the configuration)" })
          }
          if (catalogChanged && catalog === undefined) {
            return yield* new Conflict({ message: "reload refused, nothing changed: this gateway's model catalog is fixed" })
          }
          if (touched("limits") && limits === undefined) {
            return yield* new Conflict({ message: "reload refused, nothing changed: this gateway's limits are fixed" })
          }
          if (touched("auth") && identity === undefined) {
            return yield* new Conflict({ message: "reload refused, nothing changed: this gateway's identity-provider settings are fixed" })
          }
          const fixedConfig = CONFIG_ONLY.filter(touched)
          if (fixedConfig.length > 0 && appConfig === undefined) {
            return yield* new Conflict({ message: `reload refused, nothing changed: this gateway's ${fixedConfig.join(", ")} settings are fixed` })
          }
          // Everything is built before anything is swapped; the swaps then run without a pause
          // in between, so no request sees the new catalog with the old providers.
          const swapIdentity = touched("auth")
            ? yield* Effect.try({
              try: () => identity!.prepare(next.auth.oidc),
              catch: (error) =>
                new ValidationFailed({ message: `the configuration does not load, nothing changed: auth.oidc: ${String((error as Error)?.message ?? error)}`, status: 422 })
            })
            : () => {}
          const swapProviders = providersChanged ? yield* providers!.prepare!(next.providers) : () => {}
          const swapCatalog = catalogChanged ? catalog!.prepare(next) : () => {}
          const swapLimits = touched("limits") ? limits!.prepare(next.limits) : () => {}
          const swapConfig = appConfig === undefined ? () => {} : appConfig.prepare(next)
          swapProviders()
          swapCatalog()
          swapLimits()
          swapIdentity()
          swapConfig()
          running = next
          return { changed: live, models: next.models.length, providers: next.providers.length }
        })
        return ConfigReload.of({
          reload: lock.withPermits(1)(reload).pipe(
            Effect.tap((result) =>
              Effect.logInfo(
                result.changed.length === 0
                  ? "config reloaded: nothing changed"
                  : `config reloaded: ${result.changed.join(", ")} (${result.models} model entries, ${result.providers} providers)`
              )
            ),
            Effect.tapError((error) => Effect.logWarning(error.message)),
            Effect.withSpan("ConfigReload.reload")
          )
        })
      })
    )
}
