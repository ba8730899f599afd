/**
 * What the limits mean on the wire: the `X-RateLimit-*` headers of an admitted request and the
 * `RateLimited` errors of a refused one (the HTTP layer turns those fields into `Retry-After`
 * and the same three headers).
 */
import { RateLimited } from "../../domain/errors.ts"
import type { RateDecision } from "./gcra.ts"

export const rateLimitHeaders = (decision: RateDecision): Record<string, string> => ({
  "x-ratelimit-limit": String(decision.limit),
  "x-ratelimit-remaining": String(decision.remaining),
  "x-ratelimit-reset": String(decision.resetAt)
})

/** The team whose shared limit refused a request (issue 33); absent: the key's (or subject's) own limit. */
export interface LimitingTeam {
  readonly id: string
  readonly name: string
}

const whose = (team: LimitingTeam | undefined) => (team === undefined ? "this key" : `this key's team "${team.name}"`)

/** The refusal for a request the rate limiter did not admit. */
export const rateLimitedError = (decision: RateDecision, team?: LimitingTeam): RateLimited =>
  new RateLimited({
    message: `Rate limit reached: ${decision.limit} requests per minute for ${whose(team)}. Retry after ${decision.retryAfterSeconds} s.`,
    details: { limit: "requests_per_minute", requests_per_minute: decision.limit, ...(team === undefined ? {} : { team_id: team.id }) },
    retryAfterSeconds: Math.max(1, decision.retryAfterSeconds),
    limit: decision.limit,
    remaining: decision.remaining,
    resetAt: decision.resetAt
  })

/**
 * The refusal for a stream beyond the key's `concurrent_streams`. The request itself was
 * admitted by the rate limiter, so the headers carry that decision; when a stream will end
 * cannot be known, so `Retry-After` is the minimum, 1 s.
 */
export const streamLimitError = (maxStreams: number, decision: RateDecision, team?: LimitingTeam): RateLimited =>
  new RateLimited({
    message: `Concurrent stream limit reached: at most ${maxStreams} open streaming requests for ${whose(team)}.`,
    details: { limit: "concurrent_streams", concurrent_streams: maxStreams, ...(team === undefined ? {} : { team_id: team.id }) },
    retryAfterSeconds: 1,
    limit: decision.limit,
    remaining: decision.remaining,
    resetAt: decision.resetAt
  })
