/**
 * Which deployment of a model serves the next attempt, and what the gateway remembers about each
 * deployment between requests (issue 20): requests in flight, a decayed time to first answer, and
 * cooldowns. The retry loop itself is the model pipeline's (src/pipelines/model/route.ts); this
 * service only chooses and remembers. For the admin API's view of routing (issue 31) it also
 * keeps what caused each cooldown and this process's recent attempts per deployment
 * (RecentAttempts: fixed-size, a few increments per attempt).
 *
 * Cooldowns live in this process, and also in Redis when one is configured so that every replica
 * stops sending to a failing deployment at once. Redis is an accelerator here, never a
 * dependency: a Redis that does not answer leaves routing to the local view (a request must not
 * fail because the cooldown could not be shared).
 */
import { hostname } from "node:os"
import { Context, Duration, Effect, Layer, Option } from "effect"
import type { Deployment } from "../catalog/ModelCatalog.ts"
import type { RoutingConfig } from "../config/schema.ts"
import { AppConfig } from "../config/AppConfig.ts"
import { RedisClient, redisScript } from "../limits/RedisClient.ts"
import { Metrics } from "../metrics/Metrics.ts"
import { RecentAttempts, type RecentSummary } from "./RecentAttempts.ts"

export type Strategy = RoutingConfig["strategy"]

/** What `/readyz` and tests see of one deployment that cools down. */
export interface CoolingDeployment {
  readonly deployment: string
  readonly provider: string
  readonly seconds_left: number
}

/** One deployment as the admin API's Models page shows it (issue 31). */
export interface DeploymentStatus {
  readonly key: string
  readonly in_flight: number
  /** The decayed time to first answer the `latency` strategy ranks by; null until one answered. */
  readonly ttfb_seconds: number | null
  /** When its cooldown ends (ms since the epoch), or undefined when it is in the rotation. */
  readonly cooling_until: number | undefined
  /** What cooled it: `upstream <status>` or the error's slug; null when not known (set by an older replica). */
  readonly cause: string | null
  /** This replica's counts; null when the deployment is past the tracked cap. */
  readonly recent: { readonly last_5m: RecentSummary; readonly last_60m: RecentSummary } | null
}

/** Where the cooldowns of an inspection come from. */
export type CooldownSource =
  /** This replica's and Redis's, so those other replicas set too. */
  | "shared"
  /** This replica's only: no Redis is configured. */
  | "replica"
  /** This replica's only: Redis did not answer within the deadline. */
  | "replica_redis_unavailable"

export interface RouterShape {
  /**
   * The deployment for the next attempt among `candidates`, skipping `tried` ones and those that
   * cool down; when every untried one cools down and `probe` is set, the one whose cooldown ends
   * first (a probe: its success brings it back early). Undefined when there is none to try.
   */
  readonly pick: (candidates: ReadonlyArray<Deployment>, tried: ReadonlySet<string>, probe: boolean) => Effect.Effect<Deployment | undefined>
  /** An attempt on `deployment` starts; the returned function ends it (call once). */
  readonly begin: (deployment: Deployment) => (outcome: AttemptOutcome) => Effect.Effect<void>
  /** Deployments cooling down now, as this process knows them. */
  readonly cooling: () => ReadonlyArray<CoolingDeployment>
  /**
   * The state of `deployments` for the admin API: cooldowns from Redis too when it answers within
   * `redisDeadlineMs` (else this process's alone), counts and latency from this process. Never fails.
   */
  readonly inspect: (
    deployments: ReadonlyArray<Pick<Deployment, "key">>,
    redisDeadlineMs: number
  ) => Effect.Effect<{ readonly cooldowns: CooldownSource; readonly deployments: ReadonlyArray<DeploymentStatus> }>
  /** The upstream ids this process has routed to on `provider` (a `match:` route serves many), the latest first seen first, at most `limit`. */
  readonly seenIds: (provider: string, limit: number) => ReadonlyArray<string>
}

/** Which process the counts of `inspect` are: this host and process id. */
export const REPLICA = `${hostname()}:${process.pid}`

export type AttemptOutcome =
  /** It answered (a stream: it accepted the request); `seconds` to that answer. */
  | { readonly _tag: "Answered"; readonly seconds: number }
  /**
   * It failed in a way that says the deployment is in trouble: it leaves the rotation for
   * `cooldownMs` once more than `tolerated` other requests failed on it within `windowMs`
   * (issue 32 item 3: one client's requests must not cool a deployment for everyone), at once
   * when `tolerated` is 0 or absent. `request` tells one request's failures from another's.
   * `cause`: why (`upstream 429`, a slug).
   */
  | {
    readonly _tag: "Failed"
    readonly cooldownMs: number
    readonly cause: string
    readonly tolerated?: number
    readonly windowMs?: number
    readonly request?: string
  }
  /**
   * It failed for a reason that says nothing about its health (the request's own fault, the client
   * left); `error`, when set, is counted among the deployment's recent errors (`upstream 400`).
   */
  | { readonly _tag: "Neutral"; readonly error?: string | undefined }

interface DeploymentState {
  inFlight: number
  /** Decayed time to first answer, in seconds; undefined until one is known. */
  latency: number | undefined
  coolingUntil: number
  /** Why it cools down (the failure that set `coolingUntil`); undefined when healthy or learned from Redis. */
  cause: string | undefined
  provider: string
  readonly id: string
  /** Created on the first attempt while fewer than MAX_TRACKED deployments have counts. */
  recent: RecentAttempts | undefined
  /** Recent tolerated failures, one per request, at most `tolerated` + 1 (emptied when it cools). */
  fails: Array<{ readonly at: number; readonly request: string | undefined }>
}

/** Weight of the newest sample in the latency average (older samples decay geometrically). */
const LATENCY_DECAY = 0.3
/** How often a process asks Redis again about a deployment it believes healthy. */
const REDIS_CHECK_MS = 1_000
const KEY_PREFIX = "modelgate:cooldown:"
/**
 * Deployments whose recent attempts are counted: a `match:` route makes one per upstream name a
 * client asks for, so the counts stop growing there (the Metrics labels are capped the same way).
 */
const MAX_TRACKED = 1000
/** A Redis value is a cause the gateway wrote; anything longer is not shown. */
const MAX_CAUSE_LENGTH = 100

/** Extends a cooldown, never shortens it, keeping the cause of the longest (ARGV[2]) as the value; returns nothing. */
const COOL_SCRIPT = redisScript(`
local left = redis.call('PTTL', KEYS[1])
if left < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[1]) end
return 1
`)

/** Per key: the milliseconds left of its cooldown (0 when none) and its cause (the value; '1' from older replicas). */
const INSPECT_SCRIPT = redisScript(`
local out = {}
for i, key in ipairs(KEYS) do
  local left = redis.call('PTTL', key)
  if left < 0 then left = 0 end
  local cause = redis.call('GET', key)
  if not cause then cause = '' end
  out[i] = {left, cause}
end
return out
`)

/** The milliseconds left of each key's cooldown (0 when none). */
const LEFT_SCRIPT = redisScript(`
local out = {}
for i, key in ipairs(KEYS) do
  local left = redis.call('PTTL', key)
  if left < 0 then left = 0 end
  out[i] = left
end
return out
`)

/**
 * Whether this failure is one more than the deployment tolerates: failures of more than
 * `tolerated` distinct requests within the window. A request failing on it twice counts once.
 */
const failsEnough = (state: DeploymentState, outcome: Extract<AttemptOutcome, { _tag: "Failed" }>, t: number): boolean => {
  const tolerated = outcome.tolerated ?? 0
  if (tolerated <= 0) return true
  const since = t - (outcome.windowMs ?? 60_000)
  const fails = state.fails.filter((f) => f.at > since && (outcome.request === undefined || f.request !== outcome.request))
  fails.push({ at: t, request: outcome.request })
  if (fails.length > tolerated) {
    state.fails = []
    return true
  }
  state.fails = fails
  return false
}

const weightedChoice = (options: ReadonlyArray<Deployment>): Deployment => {
  let total = 0
  for (const d of options) total += d.weight
  let point = Math.random() * total
  for (const d of options) {
    point -= d.weight
    if (point < 0) return d
  }
  return options[options.length - 1]!
}

export const makeRouter = (options: {
  /** A function is read at each pick: a config reload's strategy applies from the next one, with what is remembered kept. */
  readonly strategy: Strategy | (() => Strategy)
  readonly redis?: RedisClient["Service"] | undefined
  readonly metrics?: Metrics["Service"] | undefined
  /** The timers' clock (ms); monotonic by default. */
  readonly now?: () => number
  /** The wall clock the admin API's `cooling_until` is given in (ms since the epoch); `now` when that is given, else Date.now. */
  readonly wall?: () => number
}): RouterShape => {
  // Cooldowns, the failure window and the Redis checks are local timers (issue 35 item 7): on the
  // monotonic clock, so a wall clock set back (NTP, an operator) never keeps a deployment out
  // longer than its cooldown, and one set forward never ends a cooldown early. Redis keeps the
  // shared ones by its own clock (PX); only `inspect` converts to wall time for the admin API.
  const now = options.now ?? (() => performance.now())
  const wall = options.wall ?? options.now ?? Date.now
  const { redis, metrics } = options
  const fixed = options.strategy
  const strategyNow = typeof fixed === "function" ? fixed : () => fixed
  const states = new Map<string, DeploymentState>()
  /** When this process last asked Redis about each deployment. */
  const checked = new Map<string, number>()
  const stateOf = (d: Deployment): DeploymentState => {
    let state = states.get(d.key)
    if (state === undefined) {
      state = { inFlight: 0, latency: undefined, coolingUntil: 0, cause: undefined, provider: d.provider.name, id: d.id, recent: undefined, fails: [] }
      states.set(d.key, state)
    }
    return state
  }

  /** Learns the cooldowns other replicas set, at most once a second per deployment. */
  const refreshFromRedis = (candidates: ReadonlyArray<Deployment>) => {
    if (redis === undefined) return Effect.void
    const t = now()
    const due = candidates.filter((d) => t - (checked.get(d.key) ?? -Infinity) >= REDIS_CHECK_MS && stateOf(d).coolingUntil <= t)
    if (due.length === 0) return Effect.void
    for (const d of due) checked.set(d.key, t)
    return redis.evalScript(LEFT_SCRIPT, due.map((d) => KEY_PREFIX + d.key), []).pipe(
      Effect.map((reply) => {
        if (!Array.isArray(reply)) return
        const at = now()
        due.forEach((d, i) => {
          const left = Number(reply[i] ?? 0)
          if (left > 0) stateOf(d).coolingUntil = Math.max(stateOf(d).coolingUntil, at + left)
        })
      }),
      Effect.ignore
    )
  }

  const share = (d: Deployment, ms: number, cause: string) =>
    redis === undefined || ms <= 0 ? Effect.void : Effect.ignore(redis.evalScript(COOL_SCRIPT, [KEY_PREFIX + d.key], [String(Math.ceil(ms)), cause]))

  let tracked = 0
  /** Counts one ended attempt: a few increments (RecentAttempts), nothing that grows per request. */
  const count = (state: DeploymentState, error: string | undefined, at: number) => {
    if (state.recent === undefined) {
      if (tracked >= MAX_TRACKED) return
      tracked++
      state.recent = new RecentAttempts()
    }
    state.recent.record(at, error)
  }

  /** The cooldowns Redis holds for `keys` (ms left, cause), or undefined when it does not answer by the deadline. */
  const sharedCooldowns = (keys: ReadonlyArray<string>, deadlineMs: number) => {
    if (redis === undefined || keys.length === 0) return Effect.succeed(undefined)
    return redis.evalScript(INSPECT_SCRIPT, keys.map((k) => KEY_PREFIX + k), []).pipe(
      Effect.timeoutOption(Duration.millis(deadlineMs)),
      Effect.map(Option.getOrUndefined),
      Effect.map((reply) => {
        if (!Array.isArray(reply)) return undefined
        return keys.map((_, i) => {
          const entry: unknown = reply[i]
          const [left, cause] = Array.isArray(entry) ? entry : [0, ""]
          const text = typeof cause === "string" ? cause : String(cause ?? "")
          return {
            left: Number(left) || 0,
            // '1' is what replicas before the cause was shared wrote.
            cause: text === "" || text === "1" || text.length > MAX_CAUSE_LENGTH ? undefined : text
          }
        })
      }),
      Effect.orElseSucceed(() => undefined)
    )
  }

  const clearShared = (d: Deployment) => (redis === undefined ? Effect.void : Effect.ignore(redis.command(["DEL", KEY_PREFIX + d.key])))

  const choose = (healthy: ReadonlyArray<Deployment>): Deployment => {
    if (healthy.length === 1) return healthy[0]!
    const strategy = strategyNow()
    if (strategy === "weighted") return weightedChoice(healthy)
    const score = strategy === "least_busy"
      ? (d: Deployment) => stateOf(d).inFlight
      // An unmeasured deployment scores 0: it is tried, and so measured.
      : (d: Deployment) => stateOf(d).latency ?? 0
    let best = Infinity
    let tied: Array<Deployment> = []
    for (const d of healthy) {
      const s = score(d)
      if (s < best) {
        best = s
        tied = [d]
      } else if (s === best) tied.push(d)
    }
    return weightedChoice(tied)
  }

  // Defined once, not a generator made per pick (README, Generators made per request).
  const pickAmong = Effect.fnUntraced(function*(candidates: ReadonlyArray<Deployment>, tried: ReadonlySet<string>, probe: boolean) {
    const untried = candidates.filter((d) => !tried.has(d.key))
    if (untried.length === 0) return undefined
    yield* refreshFromRedis(untried)
    const t = now()
    const healthy = untried.filter((d) => stateOf(d).coolingUntil <= t)
    if (healthy.length > 0) return choose(healthy)
    if (!probe) return undefined
    // All cooling: the one back soonest is probed rather than failing the request unasked.
    return untried.reduce((a, b) => (stateOf(b).coolingUntil < stateOf(a).coolingUntil ? b : a))
  })

  return {
    pick: (candidates, tried, probe) => {
      // The common case, a model with one deployment on its first attempt and no shared
      // cooldowns to learn: decided without building an effect pipeline (it runs per request).
      if (redis === undefined && candidates.length === 1 && tried.size === 0) {
        const only = candidates[0]!
        return Effect.succeed(stateOf(only).coolingUntil <= now() || probe ? only : undefined)
      }
      return pickAmong(candidates, tried, probe)
    },
    begin: (d) => {
      const state = stateOf(d)
      state.inFlight++
      let ended = false
      return (outcome) =>
        Effect.suspend(() => {
          if (ended) return Effect.void
          ended = true
          state.inFlight--
          metrics?.routingAttempt(d.key, d.provider.name, outcome._tag === "Answered" ? "answered" : outcome._tag === "Failed" ? "failed" : "refused")
          // One clock read per attempt, shared by the counts and the cooldown.
          const t = now()
          count(state, outcome._tag === "Failed" ? outcome.cause : outcome._tag === "Neutral" ? outcome.error : undefined, t)
          if (outcome._tag === "Answered") {
            state.latency = state.latency === undefined ? outcome.seconds : state.latency + LATENCY_DECAY * (outcome.seconds - state.latency)
            // A probe that answered brings the deployment back before its cooldown ends.
            if (state.coolingUntil > t) {
              state.coolingUntil = 0
              state.cause = undefined
              return clearShared(d)
            }
            return Effect.void
          }
          if (outcome._tag === "Failed" && outcome.cooldownMs > 0) {
            if (!failsEnough(state, outcome, t)) return Effect.void
            const until = t + outcome.cooldownMs
            if (until > state.coolingUntil) {
              state.coolingUntil = until
              state.cause = outcome.cause
              metrics?.routingCooldown(d.key, d.provider.name)
            }
            return share(d, outcome.cooldownMs, outcome.cause)
          }
          return Effect.void
        })
    },
    cooling: () => {
      const t = now()
      const out: Array<CoolingDeployment> = []
      for (const [key, state] of states) {
        if (state.coolingUntil > t) out.push({ deployment: key, provider: state.provider, seconds_left: Math.ceil((state.coolingUntil - t) / 1000) })
      }
      return out
    },
    inspect: (deployments, redisDeadlineMs) =>
      Effect.map(sharedCooldowns(deployments.map((d) => d.key), redisDeadlineMs), (shared) => {
        const t = now()
        const statuses = deployments.map((d, i): DeploymentStatus => {
          const state = states.get(d.key)
          let until = state !== undefined && state.coolingUntil > t ? state.coolingUntil : 0
          let cause = until > 0 ? state?.cause : undefined
          const remote = shared?.[i]
          // Another replica's cooldown that ends later is the one in force (Redis keeps the longest).
          if (remote !== undefined && remote.left > 0) {
            if (t + remote.left > until) {
              until = t + remote.left
              cause = remote.cause ?? cause
            } else cause ??= remote.cause
          }
          return {
            key: d.key,
            in_flight: state?.inFlight ?? 0,
            ttfb_seconds: state?.latency ?? null,
            cooling_until: until > 0 ? wall() + (until - t) : undefined,
            cause: until > 0 ? cause ?? null : null,
            recent: state?.recent === undefined
              ? (state === undefined || tracked < MAX_TRACKED ? { last_5m: EMPTY, last_60m: EMPTY } : null)
              : { last_5m: state.recent.summary(t, 5), last_60m: state.recent.summary(t, 60) }
          }
        })
        const cooldowns: CooldownSource = redis === undefined ? "replica" : shared === undefined && deployments.length > 0 ? "replica_redis_unavailable" : "shared"
        return { cooldowns, deployments: statuses }
      }),
    seenIds: (provider, limit) => {
      const out: Array<string> = []
      // Newest first: a Map iterates in insertion order, so from its end.
      const all = [...states.values()]
      for (let i = all.length - 1; i >= 0 && out.length < limit; i--) if (all[i]!.provider === provider) out.push(all[i]!.id)
      return out
    }
  }
}

const EMPTY: RecentSummary = { attempts: 0, errors: 0, by_error: {} }

export class Router extends Context.Service<Router, RouterShape>()("modelgate/Router") {
  /**
   * Cooldowns shared through the RedisClient when the context has one, else per process; the
   * strategy is `routing.strategy` as AppConfig shows it at each pick (a reload may change it).
   */
  static readonly layer = Layer.effect(
    Router,
    Effect.gen(function*() {
      const config = yield* AppConfig
      const redis = Option.getOrUndefined(yield* Effect.serviceOption(RedisClient))
      const metrics = Option.getOrUndefined(yield* Effect.serviceOption(Metrics))
      const router = makeRouter({ strategy: () => config.routing.strategy, redis, metrics })
      metrics?.coolingSource(() => router.cooling())
      return Router.of(router)
    })
  )
}
