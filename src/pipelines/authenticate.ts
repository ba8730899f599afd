/**
 * Authentication as a typed requirement. A handler that acts for a key asks for
 * `AuthenticatedKey` (and, if it needs it, `RateDecision`); only `authenticated(handler)`
 * provides them, after the first stages every client request goes through (docs/decisions.md section 4):
 * authenticate the key, then count the request against its rate. Every authenticated request on
 * every endpoint counts, refused ones included, and the admitted ones carry the X-RateLimit-*
 * headers. `route()` refuses a handler that still needs `AuthenticatedKey`, so a route that
 * forgets authentication does not compile.
 *
 * The principal is an API key or an identity-provider subject (decisions section 11); both are
 * limited, budgeted and audited by their id. A subject whose token no policy admits is counted
 * like any other, then refused with 403 scope_violation: its token is valid (401 would send the
 * client to sign in again for nothing), it is just not allowed anything here.
 */
import { Context, Effect } from "effect"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import { type DependencyUnavailable, ScopeViolation } from "../domain/errors.ts"
import type { Principal } from "../domain/records.ts"
import { Auth } from "../services/auth/Auth.ts"
import type { RateDecision as Decision } from "../services/limits/gcra.ts"
import { RateLimiter } from "../services/limits/RateLimiter.ts"
import { type LimitingTeam, rateLimitedError, rateLimitHeaders } from "../services/limits/refusals.ts"
import { stageSpan } from "../services/tracing/stage-span.ts"
import { CurrentRequest, limitsInForce } from "./request.ts"

/** The key, or identity-provider subject, the request was authenticated as. */
export class AuthenticatedKey extends Context.Service<AuthenticatedKey, Principal>()("modelgate/AuthenticatedKey") {}

/** The rate limiter's answer for this request (an admitted one: refusals never reach the handler). */
export class RateDecision extends Context.Service<RateDecision, Decision>()("modelgate/RateDecision") {}

/**
 * One request of the principal's rate and, when it is in a team with a rate of its own, of the
 * team's (issue 33), both or neither (RateLimiter.consumeAll). The decision the answer carries is
 * the refusing one, or when admitted the one with the fewest requests left; `team` when it is the team's.
 */
const consumeRate = (key: Principal, perMinute: number) =>
  Effect.flatMap(RateLimiter, (limiter): Effect.Effect<Decision & { readonly team?: LimitingTeam }, DependencyUnavailable> => {
    const team = key.team
    const teamPerMinute = team?.limits?.requests_per_minute
    if (team == null || teamPerMinute === undefined) return limiter.consume(key.id, perMinute)
    return Effect.map(limiter.consumeAll([{ key: key.id, perMinute }, { key: team.id, perMinute: teamPerMinute }]), ([own, shared]) => {
      const teamDecides = own!.allowed && (!shared!.allowed || shared!.remaining < own!.remaining)
      return teamDecides ? { ...shared!, team: { id: team.id, name: team.name } } : own!
    })
  })

const admitKey = Effect.gen(function*() {
  const request = yield* HttpServerRequest
  const state = yield* CurrentRequest
  const key = yield* (yield* Auth).authenticate(request.headers).pipe(
    // A known key refused as inactive or expired is still named in its request's audit record.
    Effect.tapError((error) =>
      Effect.sync(() => {
        if (error._tag === "KeyInactive" && error.keyId !== undefined) state.audit.key_id = error.keyId
      })
    ),
    stageSpan("Auth.authenticate", { annotate: (key) => ({ "modelgate.key_id": key.id, "modelgate.auth.kind": key.kind }) })
  )
  state.audit.key_id = key.id
  if (key.team) state.audit.team_id = key.team.id
  if (key.kind === "subject") state.identity = { issuer: key.issuer, subject: key.subject, policy: key.policy }
  const perMinute = key.limits?.requests_per_minute ?? (yield* limitsInForce).requests_per_minute
  const decision = yield* consumeRate(key, perMinute).pipe(
    stageSpan("RateLimiter.consume", {
      annotate: (decision) => ({
        "modelgate.rate.allowed": decision.allowed,
        "modelgate.rate.limit": decision.limit,
        "modelgate.rate.remaining": decision.remaining
      })
    })
  )
  if (!decision.allowed) return yield* rateLimitedError(decision, decision.team)
  Object.assign(state.headers, rateLimitHeaders(decision))
  if (key.kind === "subject" && key.policy === null) {
    return yield* new ScopeViolation({ message: `no policy of the identity provider ${key.issuer} admits this subject` })
  }
  return { key, decision }
})

/** Runs `handler` for the request's key: 401/403-class refusals and 429 come first. */
export const authenticated = <A, E, R>(handler: Effect.Effect<A, E, R>) =>
  Effect.flatMap(admitKey, ({ key, decision }) =>
    handler.pipe(
      Effect.provideService(AuthenticatedKey, key),
      Effect.provideService(RateDecision, decision)
    ))
