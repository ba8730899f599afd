/**
 * The tokens-per-minute algorithm (issue 33): a leaky bucket per principal (and per team) that
 * holds the tokens of requests under way and of the last minute. The in-memory limiter runs
 * `reserveBuckets` / `correctBuckets` below; the Redis limiter runs `TOKENS_RESERVE_LUA` /
 * `TOKENS_CORRECT_LUA`, the same arithmetic as atomic scripts on Redis's own clock. Keep the two
 * in step: test/services/limits/token-limiter.test.ts runs the same scenarios on both.
 *
 * Units keep every value an exact integer in a double (and in Lua 5.1): time in milliseconds,
 * and "used" in token-milliseconds per minute: one token is `TOKEN_PERIOD_MS` units, and the
 * bucket drains `limit` units per millisecond, so a full bucket (`limit` tokens, `limit *
 * 60,000` units) empties in exactly one minute. With `MAX_TOKENS_PER_MINUTE` = 1e9 the largest
 * value is 1.2e14 < 2^53.
 *
 * - A request is admitted when its hold fits every bucket that applies (the key's or subject's,
 *   and its team's): `used + hold <= capacity` in each; then each bucket takes the hold, all or
 *   none (one synchronous step in memory, one script in Redis).
 * - The hold is the request's estimate, at most one whole minute's limit: a request estimated
 *   above the limit is admitted once the bucket is empty, not never.
 * - At the end of the request each bucket is corrected by (real tokens - its hold), up or down.
 *   Real use beyond the limit is owed: the bucket may go over capacity, up to twice it (a debt
 *   of at most one minute), and refills from there.
 * - A limit change keeps what is used (tokens are tokens whatever the limit); the next request
 *   is judged against the new capacity.
 */

export const TOKEN_PERIOD_MS = 60_000
export const MAX_TOKENS_PER_MINUTE = 1_000_000_000

/** One bucket: its limit (tokens per minute) and what is asked of it now (tokens, signed for a correction). */
export interface TokenBucketCall {
  readonly key: string
  readonly limit: number
  readonly tokens: number
}

export interface TokenBucketState {
  /** Token-milliseconds per minute in use at `at`. */
  readonly used: number
  /** Milliseconds since the epoch. */
  readonly at: number
}

export interface TokenDecision {
  readonly allowed: boolean
  /** The tokens-per-minute limit of the binding bucket (the refusing one, or the one with least left). */
  readonly limit: number
  /** Tokens still available in that bucket after this request's hold (0 when refused). */
  readonly remaining: number
  /** Whole seconds >= 1 until the hold fits when refused; 0 when allowed. */
  readonly retryAfterSeconds: number
  /** What each bucket holds for the request, in the order of the call (all 0 when refused). */
  readonly holds: ReadonlyArray<number>
  /** Which bucket of the call `limit` and `remaining` are of. */
  readonly bucket: number
}

export const normalizeTokenLimit = (perMinute: number): number =>
  Number.isFinite(perMinute) && perMinute >= 1 ? Math.min(Math.floor(perMinute), MAX_TOKENS_PER_MINUTE) : 1

const nonNegativeInt = (n: number): number => (Number.isFinite(n) && n > 0 ? Math.floor(n) : 0)

/** What is in use at `now`: the stored amount drained since it was written (a clock gone back drains nothing). */
export const drained = (state: TokenBucketState | undefined, now: number, limit: number): number => {
  if (state === undefined) return 0
  const elapsed = now - state.at
  return elapsed <= 0 ? state.used : Math.max(0, state.used - elapsed * limit)
}

/**
 * Holds `tokens` in every bucket of `calls` if it fits all of them. `states[i]` is the stored
 * state of `calls[i]`; `next[i]` what to store when admitted.
 */
export const reserveBuckets = (
  calls: ReadonlyArray<TokenBucketCall>,
  states: ReadonlyArray<TokenBucketState | undefined>,
  now: number
): { readonly decision: TokenDecision; readonly next: ReadonlyArray<TokenBucketState> | undefined } => {
  const used: Array<number> = []
  const holds: Array<number> = []
  let refused: { limit: number; waitMs: number; bucket: number } | undefined
  let binding = { limit: 0, remaining: Number.POSITIVE_INFINITY, bucket: 0 }
  calls.forEach((call, i) => {
    const limit = normalizeTokenLimit(call.limit)
    const capacity = limit * TOKEN_PERIOD_MS
    const hold = Math.min(nonNegativeInt(call.tokens), limit)
    const now_used = drained(states[i], now, limit)
    const after = now_used + hold * TOKEN_PERIOD_MS
    used.push(after)
    holds.push(hold)
    if (after > capacity) {
      const waitMs = Math.ceil((after - capacity) / limit)
      if (refused === undefined || waitMs > refused.waitMs) refused = { limit, waitMs, bucket: i }
    } else {
      const remaining = Math.floor((capacity - after) / TOKEN_PERIOD_MS)
      if (remaining < binding.remaining) binding = { limit, remaining, bucket: i }
    }
  })
  if (refused !== undefined) {
    return {
      decision: {
        allowed: false,
        limit: refused.limit,
        remaining: 0,
        retryAfterSeconds: Math.max(1, Math.ceil(refused.waitMs / 1000)),
        holds: calls.map(() => 0),
        bucket: refused.bucket
      },
      next: undefined
    }
  }
  return {
    decision: { allowed: true, limit: binding.limit, remaining: binding.remaining, retryAfterSeconds: 0, holds, bucket: binding.bucket },
    next: used.map((u) => ({ used: u, at: now }))
  }
}

/** The state after correcting one bucket by `tokens` (signed): never below 0, at most twice the capacity. */
export const correctBucket = (state: TokenBucketState | undefined, call: TokenBucketCall, now: number): TokenBucketState => {
  const limit = normalizeTokenLimit(call.limit)
  const delta = Number.isFinite(call.tokens) ? Math.trunc(call.tokens) : 0
  const capped = Math.max(-2 * MAX_TOKENS_PER_MINUTE, Math.min(2 * MAX_TOKENS_PER_MINUTE, delta))
  const used = drained(state, now, limit) + capped * TOKEN_PERIOD_MS
  return { used: Math.max(0, Math.min(2 * limit * TOKEN_PERIOD_MS, used)), at: now }
}

/**
 * KEYS: the buckets' hashes { u = used, t = at }. ARGV: per key, its limit (normalized) and the
 * hold (tokens, already at most the limit). Returns { allowed (0|1), limit, remaining,
 * retryAfterSeconds, bucket (0-based index of the binding key) }. Numbers are written with %.0f (Redis would round with %.14g).
 */
export const TOKENS_RESERVE_LUA = `
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local used = {}
local refusedLimit, refusedWait, refusedIndex = nil, -1, 0
local bindLimit, bindRemaining, bindIndex = 0, nil, 0
for i = 1, #KEYS do
  local limit = tonumber(ARGV[2 * i - 1])
  local hold = tonumber(ARGV[2 * i])
  local capacity = limit * ${TOKEN_PERIOD_MS}
  local stored = redis.call('HMGET', KEYS[i], 'u', 't')
  local u = 0
  if stored[1] then
    u = tonumber(stored[1])
    local elapsed = now - tonumber(stored[2])
    if elapsed > 0 then u = math.max(0, u - elapsed * limit) end
  end
  local after = u + hold * ${TOKEN_PERIOD_MS}
  used[i] = after
  if after > capacity then
    local wait = math.ceil((after - capacity) / limit)
    if wait > refusedWait then refusedLimit, refusedWait, refusedIndex = limit, wait, i - 1 end
  else
    local remaining = math.floor((capacity - after) / ${TOKEN_PERIOD_MS})
    if bindRemaining == nil or remaining < bindRemaining then bindLimit, bindRemaining, bindIndex = limit, remaining, i - 1 end
  end
end
if refusedLimit then
  return { 0, refusedLimit, 0, math.max(1, math.ceil(refusedWait / 1000)), refusedIndex }
end
for i = 1, #KEYS do
  local limit = tonumber(ARGV[2 * i - 1])
  redis.call('HSET', KEYS[i], 'u', string.format('%.0f', used[i]), 't', string.format('%.0f', now))
  redis.call('PEXPIRE', KEYS[i], math.ceil(used[i] / limit) + 1000)
end
return { 1, bindLimit, bindRemaining, 0, bindIndex }
`

/**
 * KEYS: the buckets' hashes. ARGV: per key, its limit (normalized) and the correction (signed
 * tokens, already bounded). Returns 1.
 */
export const TOKENS_CORRECT_LUA = `
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
for i = 1, #KEYS do
  local limit = tonumber(ARGV[2 * i - 1])
  local delta = tonumber(ARGV[2 * i])
  local stored = redis.call('HMGET', KEYS[i], 'u', 't')
  local u = 0
  if stored[1] then
    u = tonumber(stored[1])
    local elapsed = now - tonumber(stored[2])
    if elapsed > 0 then u = math.max(0, u - elapsed * limit) end
  end
  u = math.max(0, math.min(2 * limit * ${TOKEN_PERIOD_MS}, u + delta * ${TOKEN_PERIOD_MS}))
  if u == 0 then
    redis.call('DEL', KEYS[i])
  else
    redis.call('HSET', KEYS[i], 'u', string.format('%.0f', u), 't', string.format('%.0f', now))
    redis.call('PEXPIRE', KEYS[i], math.ceil(u / limit) + 1000)
  end
end
return 1
`
