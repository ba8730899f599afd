/**
 * `GET /v1/models` and `GET /v1/models/{id}`: the models this key may use, in the caller's
 * format. Anthropic's SDK (and Claude Code's model discovery) send `anthropic-version` and
 * usually `x-api-key`; such a request gets Anthropic's shape (`type: "model"`, `display_name`,
 * cursor pages), any other gets OpenAI's list.
 *
 * Listed: every concrete model the key may use, under each of its names (alias, then id), in
 * config order. Routes (`match:`) are not models and are not listed, but retrieving a name a
 * route would serve answers it, so a client that checks its model before using it works.
 * Outside the key's scope, a model answers 404 as if absent.
 */
import { Effect } from "effect"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import { NotFound, ValidationFailed } from "../../domain/errors.ts"
import { authenticated, AuthenticatedKey } from "../../pipelines/authenticate.ts"
import { CurrentRequest } from "../../pipelines/request.ts"
import { json } from "../../pipelines/respond.ts"
import { type CatalogModel, ModelCatalog } from "../../services/catalog/ModelCatalog.ts"
import { route } from "../router.ts"

/** One name a client may send, and the model behind it. */
interface Named {
  readonly name: string
  readonly model: CatalogModel
}

/**
 * Release dates are not known for configured models. Anthropic documents an epoch value for an
 * unknown date; a fixed value (rather than the process start) also keeps replicas answering alike.
 */
const UNKNOWN_DATE = "1970-01-01T00:00:00Z"

const openaiView = ({ name, model }: Named) => ({
  id: name,
  object: "model",
  created: 0,
  owned_by: model.provider,
  // Not part of OpenAI's shape, but what a gateway client needs to choose a model.
  full_id: model.id,
  credits: model.credits,
  max_tokens: model.max_tokens
})

/** Anthropic's ModelInfo (and BetaModelInfo): what the gateway does not know is null, as the type allows. */
const anthropicView = ({ name, model }: Named) => ({
  type: "model",
  id: name,
  display_name: model.display_name ?? name,
  created_at: UNKNOWN_DATE,
  capabilities: null,
  deprecated_at: null,
  lifecycle: "active",
  line: null,
  max_input_tokens: null,
  // The gateway's cap: larger requests are clamped to it.
  max_tokens: model.max_tokens,
  retires_at: null,
  allowed_fallback_models: null,
  credits: model.credits
})

const wantsAnthropicShape = (headers: Readonly<Record<string, string | undefined>>): boolean =>
  headers["anthropic-version"] !== undefined || headers["x-api-key"] !== undefined

const LIFECYCLES = new Set(["active", "deprecated", "retired"])

const invalid = (field: string, problem: string) =>
  new ValidationFailed({ message: `${field}: ${problem}`, details: { field } })

export interface PageQuery {
  readonly limit: number
  readonly after_id?: string | undefined
  readonly before_id?: string | undefined
  /** Lifecycle stages asked for; configured models are all `active`. */
  readonly lifecycle?: ReadonlyArray<string> | undefined
}

/** Anthropic's list parameters: `limit` (1-1000, default 20), `after_id` or `before_id`, `lifecycle[]`. */
export const parsePageQuery = (params: URLSearchParams): PageQuery | ValidationFailed => {
  let limit = 20
  const rawLimit = params.get("limit")
  if (rawLimit !== null) {
    if (!/^\d{1,4}$/.test(rawLimit) || Number(rawLimit) < 1 || Number(rawLimit) > 1000) {
      return invalid("limit", "expected an integer from 1 to 1000")
    }
    limit = Number(rawLimit)
  }
  const after_id = params.get("after_id") ?? undefined
  const before_id = params.get("before_id") ?? undefined
  if (after_id !== undefined && before_id !== undefined) return invalid("before_id", "cannot be combined with after_id")
  // The SDK writes arrays as `lifecycle[]=a&lifecycle[]=b`; a hand-written `lifecycle=a` is read too.
  const stages = [...params.getAll("lifecycle[]"), ...params.getAll("lifecycle")]
  for (const stage of stages) {
    if (!LIFECYCLES.has(stage)) return invalid("lifecycle", `expected active, deprecated or retired, got "${stage}"`)
  }
  return { limit, after_id, before_id, lifecycle: stages.length > 0 ? stages : undefined }
}

export interface AnthropicPage<T> {
  readonly data: ReadonlyArray<T>
  readonly has_more: boolean
  readonly first_id: string | null
  readonly last_id: string | null
}

/**
 * One cursor page. `after_id`: the next `limit` items after it; `before_id`: the `limit` items
 * right before it, so the SDK's backward iteration (`before_id` = this page's `first_id`) walks
 * to the start. `has_more` tells whether items remain in the direction of travel.
 */
export const pageOf = <T extends { readonly id: string }>(items: ReadonlyArray<T>, query: PageQuery): AnthropicPage<T> | ValidationFailed => {
  const indexOf = (field: "after_id" | "before_id", id: string) => {
    const index = items.findIndex((item) => item.id === id)
    return index === -1 ? invalid(field, `no model "${id}" in this list`) : index
  }
  let data: ReadonlyArray<T>
  let has_more: boolean
  if (query.before_id !== undefined) {
    const end = indexOf("before_id", query.before_id)
    if (typeof end !== "number") return end
    const start = Math.max(0, end - query.limit)
    data = items.slice(start, end)
    has_more = start > 0
  } else {
    let start = 0
    if (query.after_id !== undefined) {
      const after = indexOf("after_id", query.after_id)
      if (typeof after !== "number") return after
      start = after + 1
    }
    data = items.slice(start, start + query.limit)
    has_more = start + query.limit < items.length
  }
  return { data, has_more, first_id: data[0]?.id ?? null, last_id: data[data.length - 1]?.id ?? null }
}

export const modelRoutes = [
  route("GET", "/v1/models", authenticated(Effect.gen(function*() {
    const key = yield* AuthenticatedKey
    const catalog = yield* ModelCatalog
    const request = yield* HttpServerRequest
    const named: Array<Named> = []
    for (const model of catalog.models) {
      if (!catalog.isAllowed(key, model)) continue
      if (model.alias !== undefined) named.push({ name: model.alias, model })
      named.push({ name: model.id, model })
    }
    if (!wantsAnthropicShape(request.headers)) return json({ object: "list", data: named.map(openaiView) })
    const query = parsePageQuery(new URL(request.url, "http://local").searchParams)
    if (query instanceof ValidationFailed) return yield* query
    const views = query.lifecycle === undefined || query.lifecycle.includes("active") ? named.map(anthropicView) : []
    const page = pageOf(views, query)
    if (page instanceof ValidationFailed) return yield* page
    return json(page)
  }))),
  route("GET", "/v1/models/:model", authenticated(Effect.gen(function*() {
    const key = yield* AuthenticatedKey
    const catalog = yield* ModelCatalog
    const request = yield* HttpServerRequest
    const name = (yield* CurrentRequest).params.model ?? ""
    const resolved = catalog.lookup(name)
    if (resolved === undefined || !catalog.isAllowed(key, resolved.model)) {
      // Same answer either way: a key should not learn which models exist outside its scope.
      return yield* new NotFound({ message: `unknown model "${name}"`, details: { model: name } })
    }
    const named = { name, model: resolved.model }
    return json(wantsAnthropicShape(request.headers) ? anthropicView(named) : openaiView(named))
  })))
]
