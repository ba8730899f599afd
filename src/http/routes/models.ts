/** `GET /v1/models`: the models this key may use, in the OpenAI list shape SDKs expect. */
import { Effect } from "effect"
import { authenticated, AuthenticatedKey } from "../../pipelines/authenticate.ts"
import { ModelCatalog } from "../../services/catalog/ModelCatalog.ts"
import type { ModelConfig } from "../../services/config/schema.ts"
import { CurrentRequest } from "../../pipelines/request.ts"
import { json } from "../../pipelines/respond.ts"
import { route } from "../router.ts"
import { NotFound } from "../../domain/errors.ts"

const created = Math.floor(Date.now() / 1000)

const view = (model: ModelConfig, name: string) => ({
  id: name,
  object: "model",
  created,
  owned_by: model.provider,
  // Not part of OpenAI's shape, but what a gateway client needs to choose a model.
  full_id: model.id,
  credits: model.credits,
  max_tokens: model.max_tokens
})

export const modelRoutes = [
  route("GET", "/v1/models", authenticated(Effect.gen(function*() {
    const key = yield* AuthenticatedKey
    const catalog = yield* ModelCatalog
    const data = catalog.models.filter((m) => catalog.isAllowed(key, m)).map((m) => view(m, m.alias ?? m.id))
    return json({ object: "list", data })
  }))),
  route("GET", "/v1/models/:model", authenticated(Effect.gen(function*() {
    const key = yield* AuthenticatedKey
    const catalog = yield* ModelCatalog
    const state = yield* CurrentRequest
    const resolved = yield* catalog.resolve(decodeURIComponent(state.params.model ?? ""))
    if (!catalog.isAllowed(key, resolved.model)) {
      // Answer as if absent: a key should not learn which models exist outside its scope.
      return yield* new NotFound({ message: `unknown model "${resolved.requested}"` })
    }
    return json(view(resolved.model, resolved.requested))
  })))
]
