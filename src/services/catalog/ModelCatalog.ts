/**
 * The models the gateway serves, from config: each named by alias or full provider id, each
 * bound to one provider, with a credit price and an output-token cap.
 */
import { Context, Effect, Layer } from "effect"
import { NotFound, ScopeViolation } from "../../domain/errors.ts"
import type { ApiKeyRecord } from "../../domain/records.ts"
import type { GatewayConfig, ModelConfig, ProviderConfig } from "../config/schema.ts"

export interface ResolvedModel {
  /** The name the client used. */
  readonly requested: string
  readonly model: ModelConfig
  readonly provider: ProviderConfig
}

export interface ModelCatalogShape {
  readonly models: ReadonlyArray<ModelConfig>
  readonly resolve: (name: string) => Effect.Effect<ResolvedModel, NotFound>
  /** 403 unless the key's allow-list names the model by alias or id (absent list = every model). */
  readonly checkScope: (key: ApiKeyRecord, resolved: ResolvedModel) => Effect.Effect<void, ScopeViolation>
  readonly isAllowed: (key: ApiKeyRecord, model: ModelConfig) => boolean
}

export class ModelCatalog extends Context.Service<ModelCatalog, ModelCatalogShape>()("modelgate/ModelCatalog") {
  static readonly make = (config: Pick<GatewayConfig, "models" | "providers">): ModelCatalogShape => {
    const byName = new Map<string, ModelConfig>()
    for (const model of config.models) {
      byName.set(model.id, model)
      if (model.alias !== undefined) byName.set(model.alias, model)
    }
    const providers = new Map(config.providers.map((p) => [p.name, p]))
    const isAllowed = (key: ApiKeyRecord, model: ModelConfig) =>
      key.allowed_models === null ||
      key.allowed_models.includes(model.id) ||
      (model.alias !== undefined && key.allowed_models.includes(model.alias))
    return {
      models: config.models,
      resolve: (name) => {
        const model = byName.get(name)
        return model === undefined
          ? Effect.fail(new NotFound({ message: `unknown model "${name}"`, details: { model: name } }))
          : Effect.succeed({ requested: name, model, provider: providers.get(model.provider)! })
      },
      checkScope: (key, resolved) =>
        isAllowed(key, resolved.model)
          ? Effect.void
          : Effect.fail(new ScopeViolation({
            message: `this key may not use model "${resolved.requested}"`,
            details: { model: resolved.requested }
          })),
      isAllowed
    }
  }

  static readonly layer = (config: Pick<GatewayConfig, "models" | "providers">) =>
    Layer.succeed(ModelCatalog, ModelCatalog.make(config))
}
