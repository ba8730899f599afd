/**
 * The models the gateway serves, from config. A name resolves, in this order, to:
 * 1. the model whose `alias` or `id` it is exactly;
 * 2. else the most specific `match:` route whose pattern it fits (most literal characters, then
 *    longest literal prefix, then the earlier entry), which serves the requested name itself
 *    (or the route's fixed `id`) with the route's provider, credits and cap;
 * 3. else nothing: 404 `not_found`.
 *
 * A key's `allowed_models` entries (names or patterns) are checked against what a request would
 * actually use, the model's alias and the id sent upstream, not against the client's spelling:
 * allowing `smart` allows its full id too, allowing `claude-*` allows the alias of a Claude
 * model, and no choice of name reaches a model the list does not cover.
 */
import { Context, Effect, Layer } from "effect"
import { NotFound, ScopeViolation } from "../../domain/errors.ts"
import type { Principal } from "../../domain/records.ts"
import { creditsMicros, type ModelPricing, priceMicros } from "../../domain/pricing.ts"
import type { GatewayConfig, ModelEndpoint, ProviderConfig } from "../config/schema.ts"
import { bySpecificity, compilePattern, matchesPattern, ROUTABLE_NAME } from "./patterns.ts"

/** A deployment as configured: the provider, the id it knows the model by (absent: the model's), its weight. */
export interface DeploymentSpec {
  readonly provider: string
  readonly id?: string | undefined
  readonly weight: number
}

/** One place a resolved model is served (issue 20). */
export interface Deployment {
  /** `provider/id`: how cooldowns, metrics and audit attempts name it. */
  readonly key: string
  readonly provider: ProviderConfig
  /** The model id sent to this provider. */
  readonly id: string
  readonly weight: number
}

/** A model as the pipelines use it: the id to send upstream, its provider, price and cap. */
export interface CatalogModel {
  readonly id: string
  readonly alias?: string | undefined
  readonly display_name?: string | undefined
  readonly provider: string
  readonly credits: number
  /** `credits` in micros and `price` per token kind (issue 33; src/domain/pricing.ts). */
  readonly pricing: ModelPricing
  readonly max_tokens: number
  /** What it serves: chat (every generation format) and/or embeddings. */
  readonly endpoints: ReadonlyArray<ModelEndpoint>
  /** Where it is served; `provider` is the first one's. Absent: `provider` alone. */
  readonly deployments?: ReadonlyArray<DeploymentSpec> | undefined
  /** Models tried in order when every deployment failed (names the config checked). */
  readonly fallbacks?: ReadonlyArray<string> | undefined
  /** Reachable as a fallback by a key whose allow-list does not cover it. */
  readonly allow_via_fallback?: boolean | undefined
  /** `models[].reasoning` as configured; absent = decided from the id (reasoning.ts). */
  readonly reasoning?: boolean | undefined
}

/** A `match:` entry of the config. */
export interface ModelRoute {
  readonly match: string
  /** The one id to send upstream; absent = the requested name. */
  readonly id?: string | undefined
  readonly provider: string
  readonly credits: number
  readonly pricing: ModelPricing
  readonly max_tokens: number
  readonly endpoints: ReadonlyArray<ModelEndpoint>
  readonly deployments?: ReadonlyArray<DeploymentSpec> | undefined
  readonly fallbacks?: ReadonlyArray<string> | undefined
  readonly allow_via_fallback?: boolean | undefined
  readonly reasoning?: boolean | undefined
}

export interface ResolvedModel {
  /** The name the client used. */
  readonly requested: string
  /** What serves it; for a route, `id` is the requested name (or the route's fixed id). */
  readonly model: CatalogModel
  readonly provider: ProviderConfig
  /** The route that matched, when the name was not a model's alias or id. */
  readonly route?: ModelRoute | undefined
  /** Where it is served, at least one; the first is `provider` with `model.id`. */
  readonly deployments: ReadonlyArray<Deployment>
}

export interface ModelCatalogShape {
  /** The concrete models (not routes), in config order. */
  readonly models: ReadonlyArray<CatalogModel>
  readonly routes: ReadonlyArray<ModelRoute>
  /** What a name resolves to, without failing; undefined for an unknown name. */
  readonly lookup: (name: string) => ResolvedModel | undefined
  readonly resolve: (name: string) => Effect.Effect<ResolvedModel, NotFound>
  /**
   * 403 unless the key's allow-list covers the model (absent list = every model), and its team's
   * too when it is in a team with one (issue 33: the team's list narrows its keys').
   */
  readonly checkScope: (key: ScopeHolder & { readonly kind?: Principal["kind"] }, resolved: ResolvedModel) => Effect.Effect<void, ScopeViolation>
  readonly isAllowed: (key: ScopeHolder, model: CatalogModel) => boolean
}

/** What a model is allowed by: the principal's list and, when it is in one, its team's. */
export type ScopeHolder = Pick<Principal, "allowed_models"> & {
  readonly team?: { readonly allowed_models: ReadonlyArray<string> | null } | null | undefined
}

/** Whether an allow-list covers a model: any entry equal to, or a pattern fitting, its alias or id. */
export const allowListCovers = (list: ReadonlyArray<string> | null, model: CatalogModel): boolean => {
  if (list === null) return true
  for (const text of list) {
    const entry = compilePattern(text)
    if (matchesPattern(entry, model.id)) return true
    if (model.alias !== undefined && matchesPattern(entry, model.alias)) return true
  }
  return false
}

export const makeCatalog = (
  config: Pick<GatewayConfig, "models" | "providers"> & { readonly routing?: Pick<GatewayConfig["routing"], "default_fallbacks"> | undefined }
): ModelCatalogShape => {
  const providers = new Map(config.providers.map((p) => [p.name, p]))
  const provider = (name: string): ProviderConfig => {
    const found = providers.get(name)
    // Config loading checks every reference; reaching this is a bug, not a client error.
    if (found === undefined) throw new Error(`model catalog: no provider named "${name}"`)
    return found
  }
  const defaultFallbacks = config.routing?.default_fallbacks ?? []
  // `provider:` alone is one deployment; the config loader checked one of the two is given.
  const routingOf = (entry: GatewayConfig["models"][number]) => {
    const deployments: ReadonlyArray<DeploymentSpec> = entry.deployments ?? [{ provider: entry.provider!, weight: 1 }]
    const own = entry.fallbacks ?? []
    return {
      provider: deployments[0]!.provider,
      deployments,
      fallbacks: (own.length > 0 ? own : defaultFallbacks).filter((name) => name !== entry.id && name !== entry.alias),
      allow_via_fallback: entry.allow_via_fallback ?? false
    }
  }
  // The schema checked every amount (toMicros); a price that still fails to convert is a bug.
  const pricingOf = (entry: GatewayConfig["models"][number]): ModelPricing => {
    if (entry.price === undefined) return { credits_micros: creditsMicros(entry.credits) }
    const price = priceMicros(entry.price)
    if (price === undefined) throw new Error(`model catalog: invalid price for "${entry.id ?? entry.match}"`)
    return { credits_micros: creditsMicros(entry.credits), price }
  }
  const models: Array<CatalogModel> = []
  const routes: Array<ModelRoute> = []
  for (const entry of config.models) {
    if (entry.match !== undefined) {
      routes.push({
        match: entry.match,
        id: entry.id,
        credits: entry.credits,
        pricing: pricingOf(entry),
        max_tokens: entry.max_tokens,
        endpoints: entry.endpoints,
        ...routingOf(entry),
        reasoning: entry.reasoning
      })
    } else if (entry.id !== undefined) {
      models.push({
        id: entry.id,
        alias: entry.alias,
        display_name: entry.display_name,
        credits: entry.credits,
        pricing: pricingOf(entry),
        max_tokens: entry.max_tokens,
        endpoints: entry.endpoints,
        ...routingOf(entry),
        reasoning: entry.reasoning
      })
    }
  }
  const deploymentsOf = (specs: ReadonlyArray<DeploymentSpec> | undefined, fallbackProvider: string, id: string): ReadonlyArray<Deployment> =>
    (specs ?? [{ provider: fallbackProvider, weight: 1 }]).map((spec) => {
      const upstreamId = spec.id ?? id
      return { key: `${spec.provider}/${upstreamId}`, provider: provider(spec.provider), id: upstreamId, weight: spec.weight }
    })
  const exact = new Map<string, ResolvedModel>()
  for (const model of models) {
    const deployments = deploymentsOf(model.deployments, model.provider, model.id)
    const resolved = (requested: string): ResolvedModel => ({ requested, model, provider: provider(model.provider), deployments })
    exact.set(model.id, resolved(model.id))
    if (model.alias !== undefined) exact.set(model.alias, resolved(model.alias))
  }
  // Most specific first, config order kept among equals (Array.prototype.sort is stable).
  const ordered = routes
    .map((route) => ({ route, pattern: compilePattern(route.match), provider: provider(route.provider) }))
    .sort((a, b) => bySpecificity(a.pattern, b.pattern))

  const lookup = (name: string): ResolvedModel | undefined => {
    const found = exact.get(name)
    if (found !== undefined) return found
    if (!ROUTABLE_NAME.test(name)) return undefined
    for (const candidate of ordered) {
      if (!matchesPattern(candidate.pattern, name)) continue
      const { route } = candidate
      const id = route.id ?? name
      return {
        requested: name,
        model: {
          id,
          provider: route.provider,
          credits: route.credits,
          pricing: route.pricing,
          max_tokens: route.max_tokens,
          endpoints: route.endpoints,
          deployments: route.deployments,
          fallbacks: route.fallbacks,
          allow_via_fallback: route.allow_via_fallback,
          reasoning: route.reasoning
        },
        provider: candidate.provider,
        route,
        deployments: deploymentsOf(route.deployments, route.provider, id)
      }
    }
    return undefined
  }

  const isAllowed = (key: ScopeHolder, model: CatalogModel) =>
    allowListCovers(key.allowed_models, model) && (key.team == null || allowListCovers(key.team.allowed_models, model))

  return {
    models,
    routes,
    lookup,
    resolve: (name) => {
      const resolved = lookup(name)
      return resolved === undefined
        ? Effect.fail(new NotFound({ message: `unknown model "${name}"`, details: { model: name } }))
        : Effect.succeed(resolved)
    },
    checkScope: (key, resolved) =>
      isAllowed(key, resolved.model)
        ? Effect.void
        : Effect.fail(new ScopeViolation({
          message: allowListCovers(key.allowed_models, resolved.model)
            ? `this key's team may not use model "${resolved.requested}"`
            : `this ${key.kind === "subject" ? "token's policy" : "key"} may not use model "${resolved.requested}"`,
          details: { model: resolved.requested }
        })),
    isAllowed
  }
}

export class ModelCatalog extends Context.Service<ModelCatalog, ModelCatalogShape>()("modelgate/ModelCatalog") {
  static readonly make = makeCatalog

  static readonly layer = (config: Parameters<typeof makeCatalog>[0]) =>
    Layer.succeed(ModelCatalog, makeCatalog(config))

  /**
   * A catalog a config reload can replace (ConfigReload): every read goes to the current one, so
   * a request resolves its model against one catalog, and the next request sees the new one.
   */
  static readonly layerReloadable = (config: Pick<GatewayConfig, "models" | "providers">) => {
    let current = makeCatalog(config)
    const shape: ModelCatalogShape = {
      get models() {
        return current.models
      },
      get routes() {
        return current.routes
      },
      lookup: (name) => current.lookup(name),
      resolve: (name) => current.resolve(name),
      checkScope: (key, resolved) => current.checkScope(key, resolved),
      isAllowed: (key, model) => current.isAllowed(key, model)
    }
    return Layer.mergeAll(
      Layer.succeed(ModelCatalog, shape),
      Layer.succeed(ModelCatalogSwitch, {
        // Built first (it throws on a config the loader would have refused), swapped in one step.
        prepare: (next) => {
          const made = makeCatalog(next)
          return () => {
            current = made
          }
        }
      })
    )
  }
}

/** Replaces the reloadable catalog: `prepare` builds the new one, the function it returns puts it in place. */
export class ModelCatalogSwitch extends Context.Service<ModelCatalogSwitch, {
  readonly prepare: (config: Pick<GatewayConfig, "models" | "providers">) => () => void
}>()("modelgate/ModelCatalogSwitch") {}
