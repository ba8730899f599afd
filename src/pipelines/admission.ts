/**
 * The stages both model surfaces share, in the order of decisions section 4:
 * auth (and rate limit) -> validate -> resolve model (404) -> scope (403) -> provider client.
 */
import { Effect } from "effect"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import { ValidationFailed } from "../domain/errors.ts"
import { readJsonObject } from "../http/body.ts"
import { CurrentRequest } from "../http/request-context.ts"
import type { DecodeResult } from "../http/wire/decode.ts"
import { ModelCatalog } from "../services/catalog/ModelCatalog.ts"
import { AppConfig } from "../services/config/AppConfig.ts"
import { Providers } from "../services/providers/Providers.ts"
import { authenticateRequest } from "./authenticate.ts"

export const decodedOrFail = <A>(decoded: DecodeResult<A>): Effect.Effect<A, ValidationFailed> =>
  decoded.ok
    ? Effect.succeed(decoded.value)
    : Effect.fail(new ValidationFailed({
      message: decoded.path === "" ? decoded.message : `${decoded.path}: ${decoded.message}`,
      details: { field: decoded.path }
    }))

export const admitModelRequest = <A extends { readonly model: string; readonly stream?: boolean | null | undefined }>(
  decode: (body: unknown) => DecodeResult<A>
) =>
  Effect.gen(function*() {
    const state = yield* CurrentRequest
    const key = yield* authenticateRequest
    const config = yield* AppConfig
    const raw = yield* readJsonObject(yield* HttpServerRequest, config.limits.max_body_bytes)
    const request = yield* decodedOrFail(decode(raw))
    state.audit.stream = request.stream === true
    const catalog = yield* ModelCatalog
    const resolved = yield* catalog.resolve(request.model)
    state.audit.model = resolved.model.id
    state.audit.provider = resolved.provider.name
    yield* catalog.checkScope(key, resolved)
    const client = (yield* Providers).client(resolved.provider.name)
    return { key, request, resolved, client }
  })
