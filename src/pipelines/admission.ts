/**
 * The stages every paid request shares after authentication, in the order of decisions
 * section 4: 400 validate -> 404 model -> 403 scope -> 429 tokens per minute -> 429 stream slot -> 429 budget ->
 * 402 credits -> provider or tool. The stream slot and the credit charge are resources of a
 * scope (the request's, or a narrower one such as one MCP tool call): the slot is given back
 * when it closes, the charge refunded when it closes with a server-side failure (`owesRefund`).
 */
import { Effect, type Exit, Scope } from "effect"
import { ValidationFailed } from "../domain/errors.ts"
import { toMicros } from "../domain/money.ts"
import { decodedOrFail } from "../domain/validation.ts"
import { ModelCatalog, type ResolvedModel } from "../services/catalog/ModelCatalog.ts"
import type { ModelEndpoint } from "../services/config/schema.ts"
import type { Principal } from "../domain/records.ts"
import { type Charge, Credits } from "../services/credits/Credits.ts"
import { streamLimitError } from "../services/limits/refusals.ts"
import { StreamSlots } from "../services/limits/StreamSlots.ts"
import { stageSpan } from "../services/tracing/stage-span.ts"
import type { DecodeResult } from "../wire/decode.ts"
import { AuthenticatedKey, RateDecision } from "./authenticate.ts"
import { boundFor, isTokenPriced, type Meter, meteredCost, meterOf, startMeter } from "./metering.ts"
import type { ModelPricing } from "../domain/pricing.ts"
import { TokenEstimator } from "../services/tokens/TokenEstimator.ts"
import { endUserOf } from "./end-user.ts"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import { CurrentRequest, limitsInForce, outcomeOf, owesRefund, RequestBody, type RequestState } from "./request.ts"
import { holdTokens } from "./token-admission.ts"

const REFUND_NOTE = "the request failed with a server or provider error"

/** The charge each admission scope holds; replaced when a fallback of another price answers. */
const heldCharges = new WeakMap<Scope.Scope, { charge: Charge | undefined; reprices: number; waived?: string; cost?: number }>()

/**
 * Credits as configured (validated decimals) -> the micro-credits a charge holds (issue 33). A
 * model's price is one of a few configured numbers, so each is converted once (the conversion
 * goes through the number's decimal text: 0.4% of a free request's CPU when done per request);
 * bounded, should prices ever vary per request.
 */
const microsOf = new Map<number, number>()
const micros = (credits: number) => {
  if (credits === 0) return 0
  let found = microsOf.get(credits)
  if (found === undefined) {
    found = toMicros(credits) ?? Math.round(credits * 1_000_000)
    if (microsOf.size < 1024) microsOf.set(credits, found)
  }
  return found
}

/**
 * What the request cost, in micro-credits, once known (issue 33): the scope's charge is settled
 * to it (clamped to what was reserved) instead of the whole reservation, the rest returned to the
 * pool and the budgets, and the audit record's `credits` is the cost.
 */
export const settleCost = (scope: Scope.Scope, costMicros: number): void => {
  const held = heldCharges.get(scope)
  if (held !== undefined) held.cost = Math.max(0, Math.floor(costMicros))
}

/**
 * The request ends without being served, for a reason that may be the gateway's own earlier
 * failure rather than the client's (issue 35 item 2: a response the gateway could not store, so
 * the next turn's `previous_response_id` is unknown): its charge is refunded whatever status it
 * ends with, `note` saying why. Nothing was asked of a provider by then.
 */
export const waiveCharge = (scope: Scope.Scope, note: string): void => {
  const held = heldCharges.get(scope)
  if (held !== undefined) held.waived = note
}

/**
 * Moves the request's charge to `amount`, the price of the model that is about to answer it
 * (issue 20: a request is charged once, at the answering model's price). The new price is
 * reserved first, under the request id with a `.N` suffix (a reservation is unique per id), and
 * without counting the budget again; only then is the old charge refunded. Fails with the
 * reservation's refusal (402, or the store's 503) and leaves the old charge in place.
 */
export const repriceCharge = (options: {
  readonly scope: Scope.Scope
  readonly amount: number
  readonly model: string
  /** The answering model's price and output cap: a metered request's cost follows them (issue 33). */
  readonly pricing?: ModelPricing | undefined
  readonly cap?: number | undefined
}) =>
  Effect.gen(function*() {
    const held = heldCharges.get(options.scope)
    if (held === undefined) return
    const meter = meterOf(options.scope)
    const reprice = () => {
      if (meter === undefined || options.pricing === undefined) return
      meter.pricing = options.pricing
      meter.bound = boundFor(meter, options.pricing, options.cap ?? Number.MAX_SAFE_INTEGER)
    }
    const current = held.charge?.amount ?? 0
    // A metered request reserves the answering model's bound (its price, its output cap).
    const amount = meter !== undefined && options.pricing !== undefined
      ? boundFor(meter, options.pricing, options.cap ?? Number.MAX_SAFE_INTEGER)
      : micros(options.amount)
    if (current === amount) return reprice()
    const state = yield* CurrentRequest
    const key = yield* AuthenticatedKey
    const credits = yield* Credits
    held.reprices++
    // The budgets take the new price (the old one's goes back with its refund), not another request.
    const next = yield* credits.reserve({
      amount,
      key_id: key.id,
      request_id: `${state.requestId}.${held.reprices}`,
      model: options.model,
      method: state.method,
      endpoint: state.endpoint
    }, key, { countRequest: false })
    if (held.charge !== undefined) yield* credits.refund(held.charge, `the request was answered by model "${options.model}" at another price`)
    held.charge = next
    state.audit.credits += (next?.amount ?? 0) - current
    reprice()
  })

/**
 * `Effect.acquireRelease` into `scope` named, rather than the `Scope` service: providing the
 * request's scope as a service put one more layer on the request's context, and past eight of
 * them Effect copies the whole service map (every layer's services) on each further one; the
 * copies were 14% of what a request allocated (issue 38). The acquisition is uninterruptible and
 * the release runs when `scope` closes, with its exit, as acquireRelease's do.
 */
const acquireInto = <A, E, R>(
  scope: Scope.Scope,
  acquire: Effect.Effect<A, E, R>,
  release: (value: A, exit: Exit.Exit<unknown, unknown>) => Effect.Effect<unknown>
): Effect.Effect<A, E, R> => Effect.uninterruptible(Effect.tap(acquire, (value) => Scope.addFinalizerExit(scope, (exit) => release(value, exit))))

/**
 * A slot of the key's team's shared `concurrent_streams` (issue 33), taken after the key's own,
 * held by the same scope. Taken one after the other, never more than either cap is open; a
 * request the team refuses gives its key's slot back when its scope closes.
 */
const acquireTeamStreamSlot = Effect.fnUntraced(function*(scope: Scope.Scope, key: Principal) {
  const team = key.team
  const max = team?.limits?.concurrent_streams
  if (team == null || max === undefined) return
  const slot = yield* acquireInto(
    scope,
    (yield* StreamSlots).acquire(team.id, max).pipe(
      stageSpan("StreamSlots.acquire", {
        attributes: { "modelgate.streams.limit": max, "modelgate.streams.team": team.id },
        annotate: (slot) => ({ "modelgate.streams.acquired": slot !== undefined })
      })
    ),
    (slot) => slot?.release() ?? Effect.void
  )
  if (slot === undefined) return yield* streamLimitError(max, yield* RateDecision, { id: team.id, name: team.name })
})

/**
 * Stream slot, request budget and credits, in that order, each held by `scope`. `repriceable`:
 * a fallback may answer at another price (the model has fallbacks), so a charge must be held
 * even when there is none yet.
 */
export const admitCosts = Effect.fnUntraced(function*(options: {
  readonly scope: Scope.Scope
  readonly stream: boolean
  readonly model: string
  readonly credits: number
  /** What to reserve, in micro-credits, when it is not `credits`: a token-priced request's bound (issue 33). */
  readonly reserveMicros?: number | undefined
  readonly repriceable?: boolean
}) {
  const key = yield* AuthenticatedKey
  const amount = options.reserveMicros ?? micros(options.credits)
  // Nothing to hold: no slot, no budget to count, no price now or later. The reservation and
  // its finalizer are skipped whole (they were about 4% of a free request's CPU; issue 25).
  if (!options.stream && amount <= 0 && key.budget === null && (key.team?.budget ?? null) === null && options.repriceable !== true) return
  const state = yield* CurrentRequest
  const credits = yield* Credits
  if (options.stream) {
    const max = key.limits?.concurrent_streams ?? (yield* limitsInForce).concurrent_streams
    const slot = yield* acquireInto(
      options.scope,
      (yield* StreamSlots).acquire(key.id, max).pipe(
        stageSpan("StreamSlots.acquire", {
          attributes: { "modelgate.streams.limit": max },
          annotate: (slot) => ({ "modelgate.streams.acquired": slot !== undefined })
        })
      ),
      (slot) => slot?.release() ?? Effect.void
    )
    if (slot === undefined) return yield* streamLimitError(max, yield* RateDecision)
    yield* acquireTeamStreamSlot(options.scope, key)
  }
  yield* acquireInto(
    options.scope,
    credits.reserve({
      amount,
      key_id: key.id,
      request_id: state.requestId,
      model: options.model,
      method: state.method,
      endpoint: state.endpoint
    }, key).pipe(stageSpan("Credits.reserve", { attributes: { "modelgate.credits": options.credits } })),
    (admitted, exit) => {
      // The charge held at the end: a fallback of another price may have replaced it (repriceCharge).
      const held = heldCharges.get(options.scope)
      const charge = held?.charge ?? admitted
      if (charge === undefined) return Effect.void
      const outcome = outcomeOf(exit)
      const waived = held?.waived !== undefined && outcome.failure !== undefined
      if (!owesRefund(outcome) && !waived) {
        if (held?.cost === undefined || held.cost >= charge.amount) return credits.settle(charge)
        const cost = held.cost
        return Effect.andThen(credits.settle(charge, cost), Effect.sync(() => {
          state.audit.credits -= charge.amount - cost
        }))
      }
      const note = waived && !owesRefund(outcome) ? held!.waived! : outcome.slug === null ? REFUND_NOTE : `${REFUND_NOTE} (${outcome.slug})`
      return Effect.andThen(credits.refund(charge, note), Effect.sync(() => {
        state.audit.credits -= charge.amount
      }))
    }
  ).pipe(Effect.tap((charge) => Effect.sync(() => {
    state.audit.credits += charge?.amount ?? 0
    heldCharges.set(options.scope, { charge, reprices: 0 })
  })))
})

/**
 * When the request ends, its cost from the answering model's price and its tokens (metering.ts).
 * Added after the charge, so it runs before the charge's finalizer, which settles to it.
 */
const meterUntilEnd = Effect.fnUntraced(function*(state: RequestState, meter: Meter) {
  const estimator = yield* TokenEstimator
  yield* Scope.addFinalizerExit(state.scope, (exit) =>
    meteredCost(state, meter, outcomeOf(exit).status < 400, estimator).pipe(
      Effect.map((cost) => {
        meter.cost = cost
        settleCost(state.scope, cost.micros)
      })
    ))
})

/** A chat-only model asked for embeddings, or the other way round: the client's mistake, named. */
const requireEndpoint = (resolved: ResolvedModel, endpoint: ModelEndpoint) =>
  resolved.model.endpoints.includes(endpoint)
    ? Effect.void
    : Effect.fail(new ValidationFailed({
      message: `model "${resolved.requested}" does not serve ${endpoint}; it serves ${resolved.model.endpoints.join(" and ")}`,
      details: { field: "model", model: resolved.requested }
    }))

/**
 * Body, model, scope and costs of a model request; what it admits is held by the request's scope.
 * `endpoint`: what the model must serve (default chat). `credits`: the price when it is not the
 * model's own (count_tokens has one of its own). `countsTokens: false`: no tokens-per-minute hold
 * (count_tokens generates nothing).
 */
export const admitModelRequest = <A extends { readonly model: string; readonly stream?: boolean | null | undefined }>(
  decode: (body: unknown) => DecodeResult<A>,
  options: AdmitOptions = {}
) => Effect.gen(() => admitModelSteps(decode, options)).pipe(stageSpan("Admission.admitModelRequest"))

interface AdmitOptions {
  readonly endpoint?: ModelEndpoint
  readonly credits?: number
  readonly countsTokens?: boolean
}

/** admitModelRequest's steps, a generator defined once (README, Generators made per request). */
function* admitModelSteps<A extends { readonly model: string; readonly stream?: boolean | null | undefined }>(
decode: (body: unknown) => DecodeResult<A>,
options: AdmitOptions
) {
  const state = yield* CurrentRequest
  const key = yield* AuthenticatedKey
  const raw = yield* (yield* RequestBody).jsonObject
  const request = yield* decodedOrFail(decode(raw))
  state.audit.end_user = yield* endUserOf(raw, (yield* HttpServerRequest).headers)
  const stream = request.stream === true
  state.audit.stream = stream
  const catalog = yield* ModelCatalog
  const resolved = yield* catalog.resolve(request.model)
  state.audit.model = resolved.model.id
  state.audit.provider = resolved.provider.name
  yield* requireEndpoint(resolved, options.endpoint ?? "chat")
  yield* catalog.checkScope(key, resolved)
  // A route passes client-chosen names upstream: the metrics count it under its pattern.
  state.admittedModel = resolved.route !== undefined && resolved.route.id === undefined ? resolved.route.match : resolved.model.id
  if (options.countsTokens !== false) {
    yield* holdTokens({ scope: state.scope, body: raw, embeddings: options.endpoint === "embeddings", modelMaxTokens: resolved.model.max_tokens })
  }
  const repriceable = (resolved.model.fallbacks?.length ?? 0) > 0
  // Token prices (issue 33): the request is metered when its model, or a fallback that may
  // answer it, is priced by tokens; a price of its own (count_tokens) is flat.
  const meter = options.credits === undefined && (isTokenPriced(resolved.model.pricing) || repriceable)
    ? startMeter({ scope: state.scope, stream, body: raw, pricing: resolved.model.pricing, cap: resolved.model.max_tokens })
    : undefined
  yield* admitCosts({
    scope: state.scope,
    stream,
    model: request.model,
    credits: options.credits ?? resolved.model.credits,
    reserveMicros: meter?.bound,
    repriceable
  })
  if (meter !== undefined) yield* meterUntilEnd(state, meter)
  return { raw, request, resolved }
}
