/**
 * Per-key cap on open streaming responses (`concurrent_streams`).
 *
 * A slot is taken before the stream starts and given back when it ends, whichever way it ends.
 * `acquireScoped` ties the slot to a scope (completion, failure, client disconnect and
 * interruption all close it); `acquire` leaves the release to the caller, for a slot taken in a
 * handler and handed to a response stream that outlives the handler (`Stream.ensuring`).
 * Either way the layer gives back every slot it still holds when it shuts down.
 *
 * - `layerMemory`: a counter per key, exact within one process.
 * - `layerRedis`: a sorted set per key (`modelgate:streams:<key>`) of slot ids scored by lease
 *   expiry (Redis server time, ms). The acquire script prunes expired leases, counts, and adds
 *   atomically, so concurrent acquires on any number of replicas never exceed the cap. While a
 *   slot is held a heartbeat renews its lease every lease/3 (re-adding it if it is gone); if the
 *   process dies, its slots lapse within one lease. The key expires with its last lease, so
 *   nothing accumulates. A Redis restarted without persistence comes back empty: every holder
 *   beats as soon as the connection is ready again, and at the latest at its next beat, so the
 *   cap holds again within one renewal interval (decisions section 10).
 */
import { randomUUID } from "node:crypto"
import { Context, Duration, Effect, Fiber, Layer, type Scope } from "effect"
import type { DependencyUnavailable } from "../../domain/errors.ts"
import { RedisClient, redisScript } from "./RedisClient.ts"
import { keepRunning } from "../durability/keep-running.ts"

export const STREAM_KEY_PREFIX = "modelgate:streams:"
export const DEFAULT_STREAM_LEASE = Duration.seconds(30)

export interface Slot {
  readonly id: string
  /** Gives the slot back. Idempotent; never fails (a slot whose release cannot reach Redis lapses with its lease). */
  readonly release: () => Effect.Effect<void>
}

export interface StreamSlotsShape {
  /** A slot of `key`'s `max`, or `undefined` when all are taken. The caller must release it. */
  readonly acquire: (key: string, max: number) => Effect.Effect<Slot | undefined, DependencyUnavailable>
  /** Like `acquire`, released when the surrounding scope closes (or earlier by `release`). */
  readonly acquireScoped: (key: string, max: number) => Effect.Effect<Slot | undefined, DependencyUnavailable, Scope.Scope>
}

export interface StreamSlotsRedisOptions {
  /**
   * How long a slot outlives its holder's last heartbeat. Default 30 s; heartbeats every lease/3.
   * A function is read at each acquire (a config reload may change it): a slot keeps the lease it
   * was taken with.
   */
  readonly lease?: Duration.Input | (() => Duration.Input)
}

const normalizeMax = (max: number): number => (Number.isFinite(max) && max >= 1 ? Math.floor(max) : 1)

const scoped =
  (acquire: StreamSlotsShape["acquire"]): StreamSlotsShape["acquireScoped"] => (key, max) =>
    Effect.acquireRelease(acquire(key, max), (slot) => (slot === undefined ? Effect.void : slot.release()))

/**
 * KEYS[1]: the key's sorted set. ARGV: max, lease (ms), slot id.
 * Returns 1 when the slot was added, 0 when the cap is reached.
 */
const ACQUIRE_LUA = `
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
local expiry = now + tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], expiry, ARGV[3])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], math.max(expiry, tonumber(last[2])))
return 1
`

/**
 * KEYS[1]: the key's sorted set. ARGV: lease (ms), slot id.
 * Renews the lease; re-adds a slot that lapsed (the stream is still open, so it still counts).
 */
const HEARTBEAT_LUA = `
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local expiry = now + tonumber(ARGV[1])
redis.call('ZADD', KEYS[1], expiry, ARGV[2])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], math.max(expiry, tonumber(last[2])))
return 1
`

export class StreamSlots extends Context.Service<StreamSlots, StreamSlotsShape>()("modelgate/limits/StreamSlots") {
  static readonly layerMemory: Layer.Layer<StreamSlots> = Layer.sync(StreamSlots, () => {
    const counts = new Map<string, number>()
    const acquire: StreamSlotsShape["acquire"] = (key, max) =>
      Effect.sync(() => {
        const held = counts.get(key) ?? 0
        if (held >= normalizeMax(max)) return undefined
        counts.set(key, held + 1)
        let released = false
        return {
          id: randomUUID(),
          release: () =>
            Effect.sync(() => {
              if (released) return
              released = true
              const left = (counts.get(key) ?? 1) - 1
              if (left <= 0) counts.delete(key)
              else counts.set(key, left)
            })
        }
      })
    return StreamSlots.of({ acquire, acquireScoped: scoped(acquire) })
  })

  static readonly layerRedis = (options: StreamSlotsRedisOptions = {}): Layer.Layer<StreamSlots, never, RedisClient> =>
    Layer.effect(
      StreamSlots,
      Effect.gen(function*() {
        const redis = yield* RedisClient
        const scope = yield* Effect.scope
        const leaseOf = () => {
          const lease = typeof options.lease === "function" ? options.lease() : options.lease
          return Math.max(3, Math.round(Duration.toMillis(lease ?? DEFAULT_STREAM_LEASE)))
        }
        const acquireScript = redisScript(ACQUIRE_LUA)
        const heartbeatScript = redisScript(HEARTBEAT_LUA)
        const held = new Set<Slot>()
        /** Each held slot's heartbeat, to run at once when Redis comes back. */
        const beats = new Map<Slot, Effect.Effect<void>>()
        const context = yield* Effect.context<never>()
        const unsubscribe = redis.onReconnect(() => {
          for (const beat of beats.values()) Effect.runFork(Effect.provideContext(beat, context))
        })
        yield* Effect.addFinalizer(() => Effect.sync(unsubscribe))

        // Giving back what is still held on shutdown frees the slots now rather than a lease later.
        yield* Effect.addFinalizer(() =>
          Effect.forEach([...held], (slot) => slot.release(), { concurrency: "unbounded", discard: true })
        )

        // Uninterruptible (and bounded by the client's deadline): a slot added in Redis always
        // reaches the caller with its heartbeat running, never stranded until its lease lapses.
        const acquire: StreamSlotsShape["acquire"] = Effect.fnUntraced(function*(key, max) {
          const redisKey = STREAM_KEY_PREFIX + key
          const leaseMs = leaseOf()
          const id = randomUUID()
          const added = yield* redis.evalScript(acquireScript, [redisKey], [
            String(normalizeMax(max)),
            String(leaseMs),
            id
          ])
          if (added !== 1) return undefined
          const heartbeat = redis.evalScript(heartbeatScript, [redisKey], [String(leaseMs), id]).pipe(
            // A missed beat is retried at the next one, well within the lease. Debug level: an
            // outage is already logged once by the client, not once per open stream per beat.
            Effect.catch((error) => Effect.logDebug(`stream slot heartbeat failed: ${error.message}`))
          )
          const beating = yield* Effect.forkIn(
            Effect.andThen(Effect.sleep(Duration.millis(Math.floor(leaseMs / 3))), keepRunning("a stream slot's heartbeat", heartbeat, Duration.millis(Math.floor(leaseMs / 3)))),
            scope
          )
          let released = false
          const slot: Slot = {
            id,
            release: () =>
              Effect.suspend(() => {
                if (released) return Effect.void
                released = true
                held.delete(slot)
                beats.delete(slot)
                return Fiber.interrupt(beating).pipe(
                  Effect.andThen(redis.command(["ZREM", redisKey, id])),
                  Effect.catch((error) =>
                    Effect.logWarning(`stream slot not released (it lapses with its lease): ${error.message}`)
                  ),
                  Effect.asVoid
                )
              }).pipe(Effect.uninterruptible)
          }
          held.add(slot)
          beats.set(slot, heartbeat)
          return slot
        }, Effect.uninterruptible)

        return StreamSlots.of({ acquire, acquireScoped: scoped(acquire) })
      })
    )
}
