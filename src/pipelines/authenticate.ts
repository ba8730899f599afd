/**
 * The first stages every client request goes through (decisions section 4): authenticate the
 * key, then count the request against its rate. Every authenticated request on every endpoint
 * counts, refused ones included, and the admitted ones carry the X-RateLimit-* headers.
 */
import { Effect } from "effect"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import { CurrentRequest } from "../http/request-context.ts"
import { Auth } from "../services/auth/Auth.ts"
import { AppConfig } from "../services/config/AppConfig.ts"
import { RateLimiter } from "../services/limits/RateLimiter.ts"
import { rateLimitedError, rateLimitHeaders } from "../services/limits/refusals.ts"

export const authenticateRequest = Effect.gen(function*() {
  const request = yield* HttpServerRequest
  const state = yield* CurrentRequest
  const key = yield* (yield* Auth).authenticate(request.headers)
  state.audit.key_id = key.id
  const perMinute = key.limits?.requests_per_minute ?? (yield* AppConfig).limits.requests_per_minute
  const decision = yield* (yield* RateLimiter).consume(key.id, perMinute)
  state.rate = decision
  if (!decision.allowed) return yield* rateLimitedError(decision)
  Object.assign(state.headers, rateLimitHeaders(decision))
  return key
})
