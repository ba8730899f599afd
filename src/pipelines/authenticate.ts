/**
 * Authentication as a typed requirement. A handler that acts for a key asks for
 * `AuthenticatedKey` (and, if it needs it, `RateDecision`); only `authenticated(handler)`
 * provides them, after the first stages every client request goes through (docs/decisions.md section 4):
 * authenticate the key, then count the request against its rate. Every authenticated request on
 * every endpoint counts, refused ones included, and the admitted ones carry the X-RateLimit-*
 * headers. `route()` refuses a handler that still needs `AuthenticatedKey`, so a route that
 * forgets authentication does not compile.
 */
import { Context, Effect } from "effect"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import type { ApiKeyRecord } from "../domain/records.ts"
import { Auth } from "../services/auth/Auth.ts"
import { AppConfig } from "../services/config/AppConfig.ts"
import type { RateDecision as Decision } from "../services/limits/gcra.ts"
import { RateLimiter } from "../services/limits/RateLimiter.ts"
import { rateLimitedError, rateLimitHeaders } from "../services/limits/refusals.ts"
import { stageSpan } from "../services/tracing/stage-span.ts"
import { CurrentRequest } from "./request.ts"

/** The key the request was authenticated with. */
export class AuthenticatedKey extends Context.Service<AuthenticatedKey, ApiKeyRecord>()("modelgate/AuthenticatedKey") {}

/** The rate limiter's answer for this request (an admitted one: refusals never reach the handler). */
export class RateDecision extends Context.Service<RateDecision, Decision>()("modelgate/RateDecision") {}

const admitKey = Effect.gen(function*() {
  const request = yield* HttpServerRequest
  const state = yield* CurrentRequest
  const key = yield* (yield* Auth).authenticate(request.headers).pipe(
    stageSpan("Auth.authenticate", { annotate: (key) => ({ "modelgate.key_id": key.id }) })
  )
  state.audit.key_id = key.id
  const perMinute = key.limits?.requests_per_minute ?? (yield* AppConfig).limits.requests_per_minute
  const decision = yield* (yield* RateLimiter).consume(key.id, perMinute).pipe(
    stageSpan("RateLimiter.consume", {
      annotate: (decision) => ({
        "modelgate.rate.allowed": decision.allowed,
        "modelgate.rate.limit": decision.limit,
        "modelgate.rate.remaining": decision.remaining
      })
    })
  )
  if (!decision.allowed) return yield* rateLimitedError(decision)
  Object.assign(state.headers, rateLimitHeaders(decision))
  return { key, decision }
})

/** Runs `handler` for the request's key: 401/403-class refusals and 429 come first. */
export const authenticated = <A, E, R>(handler: Effect.Effect<A, E, R>) =>
  Effect.flatMap(admitKey, ({ key, decision }) =>
    handler.pipe(
      Effect.provideService(AuthenticatedKey, key),
      Effect.provideService(RateDecision, decision)
    ))
