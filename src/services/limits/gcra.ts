/**
 * The rate-limit algorithm: GCRA (the generic cell rate algorithm), a token bucket expressed as
 * one timestamp per key. The in-memory limiter runs `gcra` below; the Redis limiter runs
 * `GCRA_LUA`, the same arithmetic as one atomic script on Redis's own clock (so replicas with
 * skewed clocks agree). Keep the two in step: test/services/limits runs the same scenarios
 * against both layers.
 *
 * Time is in integer microseconds so that every value stays an exact integer in a double (and
 * in Lua 5.1, whose only number type is a double): `now` is about 1.8e15 < 2^53.
 *
 * - `interval` = floor(period / limit): one request's worth of time.
 * - `tolerance` = limit * interval: a fresh key may spend exactly `limit` requests at once.
 * - `tat` (theoretical arrival time): when the bucket would be full again. A request is
 *   admitted when `max(tat, now) + interval - tolerance <= now`, and then `tat` moves forward
 *   by one interval. Refused requests change nothing, so a flood cannot push a key further away.
 *
 * Changing a key's limit (a per-key override) keeps the number of requests already spent in
 * the current window, not the time owed: the stored debt is rescaled to the new interval and
 * capped at the new burst, so raising 10 -> 50 after 10 requests leaves 40, and lowering
 * 50 -> 10 after 30 requests leaves none, refilling at the new rate.
 *
 * `resetAt` is when the bucket is full again (every request of the limit available), rounded up
 * to a whole Unix second, which is what `X-RateLimit-Reset` promises: wait until then and the
 * whole limit is yours. `retryAfterSeconds` is the real wait until the next admission, rounded
 * up and at least 1, so a retry after that many seconds is admitted unless someone else spent
 * the token first.
 */

export const MICROS_PER_SECOND = 1_000_000
export const RATE_PERIOD_MICROS = 60 * MICROS_PER_SECOND

export interface RateDecision {
  readonly allowed: boolean
  /** The requests-per-minute limit that applied. */
  readonly limit: number
  /** Requests still available right now, after this one. */
  readonly remaining: number
  /** Unix seconds (integer) when the bucket is full again. */
  readonly resetAt: number
  /** Whole seconds >= 1 until a retry is admitted when refused; 0 when allowed. */
  readonly retryAfterSeconds: number
}

export interface GcraState {
  /** Theoretical arrival time, microseconds since the epoch. */
  readonly tat: number
  /** The interval the state was written with, to rescale after a limit change. */
  readonly interval: number
}

export interface GcraStep {
  readonly decision: RateDecision
  /** The state to store, or `undefined` when nothing changed. */
  readonly next: GcraState | undefined
}

/** Above this the interval would drop below 60 us and stop meaning "per minute". */
export const MAX_PER_MINUTE = 1_000_000

/** Limits are whole requests per minute, at least 1; a nonsense value must not mean "unlimited". */
export const normalizeLimit = (perMinute: number): number =>
  Number.isFinite(perMinute) && perMinute >= 1 ? Math.min(Math.floor(perMinute), MAX_PER_MINUTE) : 1

export const intervalFor = (limit: number): number => Math.max(1, Math.floor(RATE_PERIOD_MICROS / limit))

const ceilDiv = (a: number, b: number): number => Math.ceil(a / b)

export const gcra = (state: GcraState | undefined, now: number, perMinute: number): GcraStep => {
  const limit = normalizeLimit(perMinute)
  const interval = intervalFor(limit)
  const tolerance = limit * interval
  let tat = state === undefined ? now : state.tat
  let rescaled = false
  if (state !== undefined && state.interval !== interval && tat > now) {
    tat = now + Math.min(Math.floor(((tat - now) * interval) / state.interval), tolerance)
    rescaled = true
  }
  // A tat more than a whole bucket ahead exists only when the clock went back (issue 35): the debt
  // is capped at one bucket, so no key waits longer than the period, whatever the clock did.
  if (tat > now + tolerance) tat = now + tolerance
  if (tat < now) tat = now
  const newTat = tat + interval
  const allowAt = newTat - tolerance
  if (now < allowAt) {
    return {
      decision: {
        allowed: false,
        limit,
        remaining: 0,
        resetAt: ceilDiv(tat, MICROS_PER_SECOND),
        retryAfterSeconds: Math.max(1, ceilDiv(allowAt - now, MICROS_PER_SECOND))
      },
      next: rescaled ? { tat, interval } : undefined
    }
  }
  return {
    decision: {
      allowed: true,
      limit,
      remaining: Math.max(0, limit - ceilDiv(newTat - now, interval)),
      resetAt: ceilDiv(newTat, MICROS_PER_SECOND),
      retryAfterSeconds: 0
    },
    next: { tat: newTat, interval }
  }
}

/**
 * KEYS[1]: the key's hash { t = tat, i = interval }. ARGV[1]: the limit (already normalized).
 * Returns { allowed (0|1), limit, remaining, resetAt, retryAfterSeconds }.
 * Numbers are written with %.0f because Redis turns a Lua number into a string with %.14g,
 * which would round a microsecond timestamp.
 */
export const GCRA_LUA = `
local limit = tonumber(ARGV[1])
local interval = math.max(1, math.floor(${RATE_PERIOD_MICROS} / limit))
local tolerance = limit * interval
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * ${MICROS_PER_SECOND} + tonumber(clock[2])
local stored = redis.call('HMGET', KEYS[1], 't', 'i')
local tat = now
local rescaled = false
if stored[1] then
  tat = tonumber(stored[1])
  local old = tonumber(stored[2])
  if old ~= interval and tat > now then
    tat = now + math.min(math.floor((tat - now) * interval / old), tolerance)
    rescaled = true
  end
end
if tat > now + tolerance then tat = now + tolerance end
if tat < now then tat = now end
local newTat = tat + interval
local allowAt = newTat - tolerance
local function store(t)
  redis.call('HSET', KEYS[1], 't', string.format('%.0f', t), 'i', string.format('%.0f', interval))
  redis.call('PEXPIRE', KEYS[1], math.ceil((t - now) / 1000) + 1)
end
if now < allowAt then
  if rescaled then store(tat) end
  return { 0, limit, 0, math.ceil(tat / ${MICROS_PER_SECOND}), math.max(1, math.ceil((allowAt - now) / ${MICROS_PER_SECOND})) }
end
store(newTat)
return { 1, limit, math.max(0, limit - math.ceil((newTat - now) / interval)), math.ceil(newTat / ${MICROS_PER_SECOND}), 0 }
`

/**
 * Several buckets at once (issue 33: a key and its team): KEYS are the buckets, ARGV their limits
 * (normalized), in the same order. The request is admitted only when every bucket admits it, and
 * then every bucket is spent; when one refuses, none is (a request the team refuses does not use
 * up its key's rate). Returns the decisions, five numbers per bucket, as GCRA_LUA does for one;
 * in a refused batch the buckets that would have admitted say so, but nothing was spent.
 */
export const GCRA_ALL_LUA = `
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * ${MICROS_PER_SECOND} + tonumber(clock[2])
local out = {}
local pending = {}
local all = true
local function store(key, t, interval)
  redis.call('HSET', key, 't', string.format('%.0f', t), 'i', string.format('%.0f', interval))
  redis.call('PEXPIRE', key, math.ceil((t - now) / 1000) + 1)
end
for n = 1, #KEYS do
  local limit = tonumber(ARGV[n])
  local interval = math.max(1, math.floor(${RATE_PERIOD_MICROS} / limit))
  local tolerance = limit * interval
  local stored = redis.call('HMGET', KEYS[n], 't', 'i')
  local tat = now
  local rescaled = false
  if stored[1] then
    tat = tonumber(stored[1])
    local old = tonumber(stored[2])
    if old ~= interval and tat > now then
      tat = now + math.min(math.floor((tat - now) * interval / old), tolerance)
      rescaled = true
    end
  end
  if tat > now + tolerance then tat = now + tolerance end
  if tat < now then tat = now end
  local newTat = tat + interval
  local allowAt = newTat - tolerance
  if now < allowAt then
    all = false
    if rescaled then store(KEYS[n], tat, interval) end
    table.insert(out, 0)
    table.insert(out, limit)
    table.insert(out, 0)
    table.insert(out, math.ceil(tat / ${MICROS_PER_SECOND}))
    table.insert(out, math.max(1, math.ceil((allowAt - now) / ${MICROS_PER_SECOND})))
  else
    pending[n] = { newTat, interval }
    table.insert(out, 1)
    table.insert(out, limit)
    table.insert(out, math.max(0, limit - math.ceil((newTat - now) / interval)))
    table.insert(out, math.ceil(newTat / ${MICROS_PER_SECOND}))
    table.insert(out, 0)
  end
end
if all then
  for n = 1, #KEYS do store(KEYS[n], pending[n][1], pending[n][2]) end
end
return out
`
