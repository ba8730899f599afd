/**
 * Routing one admitted model request across deployments and fallbacks (issue 20).
 *
 * A plan walks groups in order: the requested model's deployments, then each fallback model's.
 * Within a group the Router (src/services/routing/Router.ts) picks the deployment of each attempt;
 * a group allows `1 + routing.retries` attempts. A failure that says nothing about the request
 * itself (429, 5xx, unreachable, timeouts, the gateway's own credentials refused) is retried;
 * a vendor's refusal of the request (400, 404, 413, 422) is answered at once, except a
 * context-window refusal, which moves on to the fallbacks. Every attempt is listed in the audit
 * record's `details.attempts`; the record's model and provider are those of the last attempt,
 * the one that answered when one did.
 *
 * Fallbacks: a fallback serves the request only when it serves the endpoint, when the key may
 * use it (its `allowed_models` covers it, or the fallback model says `allow_via_fallback: true`),
 * and when its price can be reserved: the request is charged once, at the answering model's
 * price (admission.ts `repriceCharge`).
 */
import { type Context, Effect, Stream } from "effect"
import { type ApiError, ProviderError } from "../../domain/errors.ts"
import { slugOf, statusOf } from "../../domain/errors.ts"
import { type Deployment, ModelCatalog, type ResolvedModel } from "../../services/catalog/ModelCatalog.ts"
import { AppConfig } from "../../services/config/AppConfig.ts"
import type { Credits } from "../../services/credits/Credits.ts"
import type { ModelEndpoint, RoutingConfig } from "../../services/config/schema.ts"
import type { Principal } from "../../domain/records.ts"
import type { ProviderClient } from "../../services/providers/clients.ts"
import type { Providers } from "../../services/providers/Providers.ts"
import { type AttemptOutcome, Router } from "../../services/routing/Router.ts"
import { repriceCharge } from "../admission.ts"
import { AuthenticatedKey } from "../authenticate.ts"
import { CurrentRequest, type RequestState } from "../request.ts"
import type { ClientEvent, ContinuationFollower } from "./adapter.ts"
import { flattenEach } from "./stream-chunks.ts"

/** One attempt, as the audit record lists it. */
export interface AttemptRecord {
  /** The provider's name. */
  readonly deployment: string
  /** The model id sent to it. */
  readonly model: string
  /** 200 when it answered, else the status the failure maps to. */
  readonly status: number
  readonly error: string | null
  readonly upstream_status?: number | null
  readonly duration_ms: number
  /** Set on attempts that served a fallback model, and on a stream's continuation. */
  readonly fallback_of?: string
  readonly continuation?: true
}

/** What an attempt serves: the model as resolved for that deployment (its id and provider). */
export interface Target {
  readonly resolved: ResolvedModel
  readonly deployment: Deployment
  readonly fallback: boolean
}

/** An attempt in progress: end it once with what happened. */
export interface RunningAttempt {
  readonly target: Target
  readonly end: (result: { readonly error?: ApiError; readonly answeredSeconds?: number; readonly interrupted?: boolean }) => Effect.Effect<void>
}

/**
 * The client of a target's provider. A reload may have removed the provider since the plan was
 * made (issue 35 item 3): that attempt fails like an unreachable provider (the next target is
 * tried, or a stream ends with the in-band error and a refund), never with a defect that resets
 * the client's connection.
 */
export const clientOfTarget = (providers: Providers["Service"], target: Target): Effect.Effect<ProviderClient, ApiError> =>
  Effect.suspend(() => {
    const name = target.deployment.provider.name
    try {
      return Effect.succeed(providers.client(name))
    } catch {
      return Effect.fail(
        new ProviderError({
          message: `provider "${name}" was removed by a configuration reload while the request was in flight`,
          details: { provider: name, upstream_status: null, reason: "provider_removed" }
        })
      )
    }
  })

const upstreamStatusOf = (error: ApiError): number | null => {
  const status = (error.details as { upstream_status?: unknown } | undefined)?.upstream_status
  return typeof status === "number" ? status : null
}

/** The provider's trouble, not the request's: another deployment may answer. */
export const isRetryable = (error: ApiError): boolean => error._tag === "ProviderError" || error._tag === "UpstreamTimeout"

const CONTEXT_WINDOW = /context[_ ]length|context window|maximum context|prompt is too long|too many (input )?tokens|exceeds? the context/i

/** The vendor refused the request as too long for the model's window: a fallback may take it. */
export const isContextWindowRefusal = (error: ApiError): boolean => {
  if (error._tag !== "ValidationFailed") return false
  const upstream = (error.details as { upstream_error?: { code?: unknown; message?: unknown } } | undefined)?.upstream_error
  if (upstream === undefined) return false
  return upstream.code === "context_length_exceeded" || (typeof upstream.message === "string" && CONTEXT_WINDOW.test(upstream.message))
}

/** A wait the upstream asked for, in milliseconds (`retry-after-ms`, else `Retry-After` seconds or date). */
export const retryAfterMsOf = (error: ApiError, now = Date.now()): number | undefined => {
  if (error._tag !== "ProviderError") return undefined
  if (error.retryAfterMs !== undefined) return error.retryAfterMs
  const header = error.retryAfter?.trim()
  if (header === undefined || header === "") return undefined
  if (/^\d+(\.\d+)?$/.test(header)) return Number(header) * 1000
  const date = Date.parse(header)
  return Number.isNaN(date) ? undefined : Math.max(0, date - now)
}

/** Why an attempt failed, as the admin API counts it per deployment: the upstream's status when it answered one, else the slug. */
const reasonOf = (error: ApiError): string => {
  const status = upstreamStatusOf(error)
  return status === null ? slugOf(error) : `upstream ${status}`
}

const TOO_LARGE = /request too large|too large for|exceeds? (the )?(maximum|max) (request|input)|tokens per min.*requested/i

/**
 * A failure the request itself caused, though the provider's status says otherwise (issue 32
 * item 3): OpenAI answers a prompt larger than the deployment's per-minute token limit with a 429
 * "Request too large"; a non-streamed answer arrives whole, so a client asking for a long one runs
 * past the first-byte timeout on any deployment. Either is retried elsewhere, never cools.
 */
const causedByRequest = (error: ApiError, streamed: boolean): boolean => {
  if (error._tag === "UpstreamTimeout") return !streamed && (error.details as { timeout?: unknown } | undefined)?.timeout === "first_byte"
  const upstream = (error.details as { upstream_error?: { message?: unknown } } | undefined)?.upstream_error
  return upstreamStatusOf(error) === 429 && typeof upstream?.message === "string" && TOO_LARGE.test(upstream.message)
}

/**
 * A failure only the deployment can cause, which cools it at once: it cannot be reached, or it
 * refused the gateway's own credentials.
 */
const causedByDeployment = (error: ApiError): boolean => {
  if (error._tag !== "ProviderError") return false
  const status = upstreamStatusOf(error)
  return status === null || status === 401 || status === 403
}

/**
 * How a failed attempt weighs on its deployment: the provider's trouble counts toward a cooldown
 * (at once when only the deployment can cause it), the request's own fault never does. A
 * Retry-After lengthens the cooldown, up to `max_cooldown_seconds`.
 */
const outcomeOfFailure = (error: ApiError, routing: RoutingConfig, request: { readonly id: string; readonly stream: boolean }): AttemptOutcome => {
  if (!isRetryable(error) || causedByRequest(error, request.stream)) return { _tag: "Neutral", error: reasonOf(error) }
  return {
    _tag: "Failed",
    cooldownMs: Math.min(routing.max_cooldown_seconds * 1000, Math.max(routing.cooldown_seconds * 1000, retryAfterMsOf(error) ?? 0)),
    cause: reasonOf(error),
    tolerated: causedByDeployment(error) ? 0 : routing.allowed_fails,
    windowMs: routing.allowed_fails_window_seconds * 1000,
    request: request.id
  }
}

/**
 * The attempts list, kept in the audit draft's `details` with whatever else is there: always for
 * a routed model (several deployments, or fallbacks), and for any request that took more than one
 * attempt (a model with one provider and no fallbacks keeps its record as it was before routing).
 */
const attemptsRecorder = (state: RequestState, routed: boolean) => {
  const attempts: Array<AttemptRecord> = []
  return (attempt: AttemptRecord) => {
    attempts.push(attempt)
    if (routed || attempts.length > 1) state.audit.details = { ...state.audit.details, attempts: [...attempts] }
  }
}

/** The model of a group as seen through one of its deployments. */
const throughDeployment = (resolved: ResolvedModel, deployment: Deployment): ResolvedModel => ({
  ...resolved,
  model: { ...resolved.model, id: deployment.id, provider: deployment.provider.name },
  provider: deployment.provider
})

interface Group {
  readonly resolved: ResolvedModel
  readonly fallback: boolean
  readonly tried: Set<string>
  attempts: number
}

/**
 * The attempts of one request. `next` gives the target of the next attempt (waiting its backoff
 * first) or fails with the error to answer; `begin` starts an attempt on a target; `run` runs
 * attempts until one answers.
 */
export const makePlan = Effect.fnUntraced(function*(resolved: ResolvedModel, endpoint: ModelEndpoint) {
  const state = yield* CurrentRequest
  // The fallbacks' repricing runs later, possibly from the response stream's fiber: its services are taken now.
  const services = yield* Effect.context<CurrentRequest | AuthenticatedKey | Credits>()
  return new Plan({
    resolved,
    endpoint,
    state,
    routing: (yield* AppConfig).routing,
    router: yield* Router,
    catalog: yield* ModelCatalog,
    key: yield* AuthenticatedKey,
    services
  })
})

/**
 * A plan's state is fields and its steps are methods rather than closures over makePlan's
 * locals: the generators behind `next` and `run` are then defined once, not made for each
 * request (README, Generators made per request).
 */
export class Plan {
  readonly routing: RoutingConfig
  private readonly resolved: ResolvedModel
  private readonly endpoint: ModelEndpoint
  private readonly state: RequestState
  private readonly router: Router["Service"]
  private readonly catalog: ModelCatalog["Service"]
  private readonly key: Principal
  private readonly services: Context.Context<CurrentRequest | AuthenticatedKey | Credits>
  private readonly deadline: number
  private readonly groups: Array<Group>
  private readonly pendingFallbacks: Array<string>
  private readonly recordAttempt: (attempt: AttemptRecord) => void
  private current = 0
  private started = 0
  /** What the client is told when nothing answers: the provider's trouble, rather than a fallback's refusal. */
  private answer: ApiError | undefined

  constructor(input: {
    readonly resolved: ResolvedModel
    readonly endpoint: ModelEndpoint
    readonly state: RequestState
    readonly routing: RoutingConfig
    readonly router: Router["Service"]
    readonly catalog: ModelCatalog["Service"]
    readonly key: Principal
    readonly services: Context.Context<CurrentRequest | AuthenticatedKey | Credits>
  }) {
    this.resolved = input.resolved
    this.endpoint = input.endpoint
    this.state = input.state
    this.routing = input.routing
    this.router = input.router
    this.catalog = input.catalog
    this.key = input.key
    this.services = input.services
    this.deadline = input.state.startedAt + input.routing.deadline_ms
    this.groups = [{ resolved: input.resolved, fallback: false, tried: new Set(), attempts: 0 }]
    this.pendingFallbacks = [...(input.resolved.model.fallbacks ?? [])]
    this.recordAttempt = attemptsRecorder(input.state, input.resolved.deployments.length > 1 || this.pendingFallbacks.length > 0)
  }

  /**
   * The next fallback this request may use, its price reserved; undefined when none is left.
   * Built when asked for: most requests never get that far (it was built for each one).
   */
  private nextFallback(): Effect.Effect<Group | undefined> {
    if (this.pendingFallbacks.length === 0) return Effect.succeed(undefined)
    return Effect.gen(() => this.nextFallbackSteps()).pipe(Effect.provideContext(this.services))
  }

  private *nextFallbackSteps() {
    while (this.pendingFallbacks.length > 0) {
      const name = this.pendingFallbacks.shift()!
      const found = this.catalog.lookup(name)
      if (found === undefined || !found.model.endpoints.includes(this.endpoint)) continue
      if (!this.catalog.isAllowed(this.key, found.model) && found.model.allow_via_fallback !== true) continue
      if (this.groups.some((g) => g.resolved.model === found.model)) continue
      const repriced = yield* Effect.result(
        repriceCharge({ scope: this.state.scope, amount: found.model.credits, model: name, pricing: found.model.pricing, cap: found.model.max_tokens })
      )
      if (repriced._tag === "Failure") {
        this.recordAttempt({
          deployment: found.provider.name,
          model: found.model.id,
          status: statusOf(repriced.failure),
          error: slugOf(repriced.failure),
          duration_ms: 0,
          fallback_of: this.resolved.requested
        })
        continue
      }
      const group: Group = { resolved: found, fallback: true, tried: new Set<string>(), attempts: 0 }
      return group
    }
    return undefined
  }

  private backoff(error: ApiError | undefined, sameDeployment: boolean, group: Group): number {
    const asked = error === undefined ? undefined : retryAfterMsOf(error)
    const base = this.routing.backoff_ms * 2 ** Math.max(0, group.attempts - 1)
    // Full jitter: replicas retrying the same failure do not come back in step.
    const jittered = Math.random() * base
    return sameDeployment ? Math.max(asked ?? 0, jittered) : jittered
  }

  /**
   * The target of the next attempt, after `failed` (the last attempt's error, if any), or the
   * error to answer with.
   */
  next(failed: ApiError | undefined): Effect.Effect<Target, ApiError> {
    return Effect.gen(() => this.nextSteps(failed))
  }

  private *nextSteps(failed: ApiError | undefined) {
    const routing = this.routing
    if (failed !== undefined && (this.answer === undefined || isRetryable(failed) || !isRetryable(this.answer))) this.answer = failed
    const toFallbacks = failed !== undefined && isContextWindowRefusal(failed)
    if (failed !== undefined && !isRetryable(failed) && !toFallbacks) return yield* Effect.fail(failed)
    // A context-window refusal leaves the group that refused, not the fallbacks after it.
    const refusedGroup = toFallbacks ? this.current : -1
    while (true) {
      let group = this.groups[this.current]!
      const laterGroups = this.current < this.groups.length - 1 || this.pendingFallbacks.length > 0
      const exhausted = this.current === refusedGroup || group.attempts > routing.retries
      let deployment = exhausted ? undefined : yield* this.router.pick(group.resolved.deployments, group.tried, !laterGroups)
      let sameDeployment = false
      if (deployment === undefined && !exhausted && !laterGroups && failed !== undefined && group.attempts > 0) {
        // Every deployment was tried: the last one again, when it asked for a short wait.
        const asked = retryAfterMsOf(failed)
        if (asked !== undefined && asked <= routing.max_retry_wait_ms && group.resolved.deployments.length === 1) {
          deployment = group.resolved.deployments[0]
          sameDeployment = true
        }
      }
      if (deployment === undefined) {
        if (this.current < this.groups.length - 1) {
          this.current++
          continue
        }
        const fallback = yield* this.nextFallback()
        if (fallback === undefined) return yield* Effect.fail(this.answer ?? failed!)
        this.groups.push(fallback)
        this.current = this.groups.length - 1
        continue
      }
      group = this.groups[this.current]!
      if (this.started > 0 && group.attempts > 0) {
        const wait = this.backoff(failed, sameDeployment, group)
        if (performance.now() + wait > this.deadline) return yield* Effect.fail(this.answer ?? failed!)
        if (wait > 0) yield* Effect.sleep(Math.round(wait))
      } else if (this.started > 0 && performance.now() > this.deadline) {
        return yield* Effect.fail(this.answer ?? failed!)
      }
      group.tried.add(deployment.key)
      group.attempts++
      this.started++
      // A fallback's price was reserved when it was chosen; going back is never needed.
      const target: Target = { resolved: throughDeployment(group.resolved, deployment), deployment, fallback: group.fallback }
      return target
    }
  }

  begin(target: Target, options: { readonly continuation?: boolean } = {}): RunningAttempt {
    const { state, routing, resolved } = this
    const endRouter = this.router.begin(target.deployment)
    const startedAt = performance.now()
    state.audit.model = target.resolved.model.id
    state.audit.provider = target.deployment.provider.name
    return {
      target,
      end: ({ error, answeredSeconds, interrupted }) =>
        Effect.suspend(() => {
          this.recordAttempt({
            deployment: target.deployment.provider.name,
            model: target.deployment.id,
            status: interrupted ? 499 : error === undefined ? 200 : statusOf(error),
            error: interrupted ? "client_closed_request" : error === undefined ? null : slugOf(error),
            ...(error === undefined ? {} : { upstream_status: upstreamStatusOf(error) }),
            duration_ms: Math.round(performance.now() - startedAt),
            ...(target.fallback ? { fallback_of: resolved.requested } : {}),
            ...(options.continuation ? { continuation: true as const } : {})
          })
          return endRouter(
            interrupted
              ? { _tag: "Neutral" }
              : error === undefined
              ? { _tag: "Answered", seconds: answeredSeconds ?? (performance.now() - startedAt) / 1000 }
              : outcomeOfFailure(error, routing, { id: state.requestId, stream: state.audit.stream })
          )
        })
    }
  }

  /**
   * Runs attempts until one succeeds: `attempt` is the call to one target. `after`: the failure
   * that made this run necessary (a stream that failed), `continuation` marks its attempts.
   */
  run<A>(
    attempt: (target: Target) => Effect.Effect<A, ApiError>,
    options: { readonly after?: ApiError; readonly continuation?: boolean } = {}
  ): Effect.Effect<{ readonly value: A; readonly running: RunningAttempt; readonly answeredSeconds: number }, ApiError> {
    return Effect.gen(() => this.runSteps(attempt, options))
  }

  private *runSteps<A>(
    attempt: (target: Target) => Effect.Effect<A, ApiError>,
    options: { readonly after?: ApiError; readonly continuation?: boolean }
  ) {
    let failed: ApiError | undefined = options.after
    while (true) {
      const target = yield* this.next(failed)
      const running = this.begin(target, { continuation: options.continuation ?? false })
      const startedAt = performance.now()
      const result = yield* Effect.result(Effect.onInterrupt(attempt(target), () => running.end({ interrupted: true })))
      if (result._tag === "Success") {
        return { value: result.success, running, answeredSeconds: (performance.now() - startedAt) / 1000 }
      }
      yield* running.end({ error: result.failure })
      failed = result.failure
    }
  }
}


/** One opened upstream stream, as `Plan.run` gives it. */
export interface OpenedStream {
  readonly value: Stream.Stream<ClientEvent, ApiError>
  readonly running: RunningAttempt
  readonly answeredSeconds: number
}

/**
 * The client's one stream over the attempts of a request. A stream that fails before any event
 * reached the client moves to the next deployment or fallback as a failed call would. One that
 * fails after, with `follower` (stream continuation on and the format supports it), is continued:
 * `openContinuation` asks the next target for the rest of the partial turn, and its events are
 * spliced in. Otherwise the failure ends the stream in-band, as before routing.
 */
export const routedEvents = (options: {
  readonly plan: Plan
  readonly first: OpenedStream
  readonly open: (target: Target) => Effect.Effect<Stream.Stream<ClientEvent, ApiError>, ApiError>
  readonly follower: ContinuationFollower | undefined
  readonly openContinuation: (target: Target, partial: string) => Effect.Effect<Stream.Stream<ClientEvent, ApiError>, ApiError>
}): Stream.Stream<ClientEvent, ApiError> => {
  const { plan, follower } = options
  let emitted = 0
  const serve = (opened: OpenedStream, splice: ((event: ClientEvent) => ReadonlyArray<ClientEvent>) | undefined): Stream.Stream<ClientEvent, ApiError> => {
    let ended = false
    const end = (result: Parameters<RunningAttempt["end"]>[0]) =>
      Effect.suspend(() => {
        if (ended) return Effect.void
        ended = true
        return opened.running.end(result)
      })
    const events = splice === undefined ? opened.value : flattenEach(Stream.map(opened.value, splice))
    return events.pipe(
      Stream.map((event) => {
        emitted++
        follower?.observe(event)
        return event
      }),
      Stream.concat(Stream.drain(Stream.fromEffect(end({ answeredSeconds: opened.answeredSeconds })))),
      Stream.catch((error: ApiError) =>
        Stream.unwrap(Effect.gen(function*() {
          yield* end({ error })
          if (!isRetryable(error)) return Stream.fail(error)
          if (emitted === 0) return Stream.unwrap(Effect.map(plan.run(options.open, { after: error }), (next) => serve(next, undefined)))
          const partial = follower?.partial()
          if (follower === undefined || partial === undefined) return Stream.fail(error)
          return Stream.unwrap(Effect.map(
            plan.run((target) => options.openContinuation(target, partial), { after: error, continuation: true }),
            (next) => serve(next, follower.splice())
          ))
        }))
      ),
      // The client left (or a drain cut the stream): the attempt ends without a verdict on its deployment.
      Stream.ensuring(end({ interrupted: true }))
    )
  }
  return serve(options.first, undefined)
}
