/**
 * The stages both model surfaces share, in the order of decisions section 4:
 * auth -> 429 rate -> 400 validate -> 404 model -> 403 scope -> 429 stream slot ->
 * 429 budget -> 402 credits -> provider. What the request takes on the way (a stream slot,
 * credits) is recorded as its settlement, which the HTTP app and the stream guard settle
 * however the request ends.
 */
import { Effect } from "effect"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import { decodedOrFail } from "../domain/validation.ts"
import type { ApiKeyRecord } from "../domain/records.ts"
import { readJsonObject } from "../http/body.ts"
import { CurrentRequest, type RequestState, type Settlement } from "../http/request-context.ts"
import type { DecodeResult } from "../wire/decode.ts"
import { ModelCatalog } from "../services/catalog/ModelCatalog.ts"
import { AppConfig } from "../services/config/AppConfig.ts"
import { type Charge, Credits } from "../services/credits/Credits.ts"
import { streamLimitError } from "../services/limits/refusals.ts"
import { type Slot, StreamSlots } from "../services/limits/StreamSlots.ts"
import { Providers } from "../services/providers/Providers.ts"
import { authenticateRequest } from "./authenticate.ts"

const once = (effect: Effect.Effect<void>): Effect.Effect<void> => {
  let done = false
  return Effect.suspend(() => {
    if (done) return Effect.void
    done = true
    return effect
  })
}

const makeSettlement = (slot: Slot | undefined, credits: Credits["Service"], charge: Charge | undefined): Settlement => ({
  release: once(slot === undefined ? Effect.void : slot.release()),
  refund: once(charge === undefined ? Effect.void : credits.refund(charge, "the request failed with a server or provider error"))
})

/** Stream slot, request budget and credits, in that order; anything taken is given back if a later step refuses. */
export const admitCosts = (options: {
  readonly key: ApiKeyRecord
  readonly stream: boolean
  readonly model: string
  readonly credits: number
}) =>
  Effect.gen(function*() {
    const state = yield* CurrentRequest
    const config = yield* AppConfig
    const creditsService = yield* Credits
    let slot: Slot | undefined
    if (options.stream) {
      const max = options.key.limits?.concurrent_streams ?? config.limits.concurrent_streams
      slot = yield* (yield* StreamSlots).acquire(options.key.id, max)
      if (slot === undefined) return yield* streamLimitError(max, state.rate!)
    }
    const charge = yield* creditsService.reserve(
      { amount: options.credits, key_id: options.key.id, request_id: state.requestId, model: options.model },
      options.key.budget
    ).pipe(Effect.onError(() => slot?.release() ?? Effect.void))
    state.audit.credits = charge?.amount ?? 0
    state.settlement = makeSettlement(slot, creditsService, charge)
  })

/** Settles a request that ended without a stream taking ownership: refund on a 5xx, free the slot. */
export const settleRequest = (state: RequestState, status: number) =>
  state.settlement === undefined
    ? Effect.void
    : Effect.andThen(status >= 500 ? refundAndZero(state) : Effect.void, state.settlement.release)

export const refundAndZero = (state: RequestState) =>
  state.settlement === undefined
    ? Effect.void
    : Effect.andThen(state.settlement.refund, Effect.sync(() => {
      state.audit.credits = 0
    }))

export const admitModelRequest = <A extends { readonly model: string; readonly stream?: boolean | null | undefined }>(
  decode: (body: unknown) => DecodeResult<A>
) =>
  Effect.gen(function*() {
    const state = yield* CurrentRequest
    const key = yield* authenticateRequest
    const config = yield* AppConfig
    const raw = yield* readJsonObject(yield* HttpServerRequest, config.limits.max_body_bytes)
    const request = yield* decodedOrFail(decode(raw))
    state.audit.stream = request.stream === true
    const catalog = yield* ModelCatalog
    const resolved = yield* catalog.resolve(request.model)
    state.audit.model = resolved.model.id
    state.audit.provider = resolved.provider.name
    yield* catalog.checkScope(key, resolved)
    yield* admitCosts({ key, stream: request.stream === true, model: request.model, credits: resolved.model.credits })
    const client = (yield* Providers).client(resolved.provider.name)
    return { key, request, resolved, client }
  })
