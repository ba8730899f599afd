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
import type { GatewayConfig, ModelEndpoint, ProviderConfig } from "../config/schema.ts"
import { bySpecificity, compilePattern, matchesPattern, ROUTABLE_NAME } from "./patterns.ts"

/** A model as the pipelines use it: the id to send upstream, its provider, price and cap. */
export interface CatalogModel {
  readonly id: string
  readonly alias?: string | undefined
  readonly display_name?: string | undefined
  readonly provider: string
  readonly credits: number
  readonly max_tokens: number
  /** What it serves: chat (every generation format) and/or embeddings. */
  readonly endpoints: ReadonlyArray<ModelEndpoint>
}

/** A `match:` entry of the config. */
export interface ModelRoute {
  readonly match: string
  /** The one id to send upstream; absent = the requested name. */
  readonly id?: string | undefined
  readonly provider: string
  readonly credits: number
  readonly max_tokens: number
  readonly endpoints: ReadonlyArray<ModelEndpoint>
}

export interface ResolvedModel {
  /** The name the client used. */
  readonly requested: string
  /** What serves it; for a route, `id` is the requested name (or the route's fixed id). */
  readonly model: CatalogModel
  readonly provider: ProviderConfig
  /** The route that matched, when the name was not a model's alias or id. */
  readonly route?: ModelRoute | undefined
}

export interface ModelCatalogShape {
  /** The concrete models (not routes), in config order. */
  readonly models: ReadonlyArray<CatalogModel>
  readonly routes: ReadonlyArray<ModelRoute>
  /** What a name resolves to, without failing; undefined for an unknown name. */
  readonly lookup: (name: string) => ResolvedModel | undefined
  readonly resolve: (name: string) => Effect.Effect<ResolvedModel, NotFound>
  /** 403 unless the key's allow-list covers the model (absent list = every model). */
  readonly checkScope: (key: Pick<Principal, "allowed_models"> & { readonly kind?: Principal["kind"] }, resolved: ResolvedModel) => Effect.Effect<void, ScopeViolation>
  readonly isAllowed: (key: Pick<Principal, "allowed_models">, model: CatalogModel) => boolean
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

export const makeCatalog = (config: Pick<GatewayConfig, "models" | "providers">): ModelCatalogShape => {
  const providers = new Map(config.providers.map((p) => [p.name, p]))
  const provider = (name: string): ProviderConfig => {
    const found = providers.get(name)
    // Config loading checks every reference; reaching this is a bug, not a client error.
    if (found === undefined) throw new Error(`model catalog: no provider named "${name}"`)
    return found
  }
  const models: Array<CatalogModel> = []
  const routes: Array<ModelRoute> = []
  for (const entry of config.models) {
    if (entry.match !== undefined) {
      routes.push({
        match: entry.match,
        id: entry.id,
        provider: entry.provider,
        credits: entry.credits,
        max_tokens: entry.max_tokens,
        endpoints: entry.endpoints
      })
    } else if (entry.id !== undefined) {
      models.push({
        id: entry.id,
        alias: entry.alias,
        display_name: entry.display_name,
        provider: entry.provider,
        credits: entry.credits,
        max_tokens: entry.max_tokens,
        endpoints: entry.endpoints
      })
    }
  }
  const exact = new Map<string, ResolvedModel>()
  for (const model of models) {
    const resolved = (requested: string): ResolvedModel => ({ requested, model, provider: provider(model.provider) })
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
      return {
        requested: name,
        model: { id: route.id ?? name, provider: route.provider, credits: route.credits, max_tokens: route.max_tokens, endpoints: route.endpoints },
        provider: candidate.provider,
        route
      }
    }
    return undefined
  }

  const isAllowed = (key: Pick<Principal, "allowed_models">, model: CatalogModel) => allowListCovers(key.allowed_models, model)

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
          message: `this ${key.kind === "subject" ? "token's policy" : "key"} may not use model "${resolved.requested}"`,
          details: { model: resolved.requested }
        })),
    isAllowed
  }
}

export class ModelCatalog extends Context.Service<ModelCatalog, ModelCatalogShape>()("modelgate/ModelCatalog") {
  static readonly make = makeCatalog

  static readonly layer = (config: Pick<GatewayConfig, "models" | "providers">) =>
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
