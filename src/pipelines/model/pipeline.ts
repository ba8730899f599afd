/**
 * The one model pipeline: authenticate -> admit (validate, model, scope, stream slot, budget,
 * credits) -> route (route.ts: a deployment, retries, fallbacks) -> the adapter for (client
 * format, provider kind) of each attempt -> the client format's responder. See adapter.ts for
 * how formats and provider kinds plug in.
 */
import { Effect, Stream } from "effect"
import type { ApiError } from "../../domain/errors.ts"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import type { ProviderClient } from "../../services/providers/clients.ts"
import { Providers } from "../../services/providers/Providers.ts"
import { TokenEstimator } from "../../services/tokens/TokenEstimator.ts"
import { admitModelRequest } from "../admission.ts"
import { authenticated } from "../authenticate.ts"
import { CurrentRequest, type RequestState } from "../request.ts"
import { eventStreamResponse, json } from "../respond.ts"
import type { Adapter, AdapterContext, ClientEvent, ClientFormat } from "./adapter.ts"
import { clientOfTarget, makePlan, routedEvents, type Target } from "./route.ts"
import { withFirstChunk } from "./stream-chunks.ts"
import { meterOf, relayOutput } from "../metering.ts"
import { mergedDeprecationHeaders } from "../../domain/deprecation.ts"
import { turnIfLargeBody } from "../../wire/turns.ts"

/**
 * What a format with state around its answers (Responses: stored conversations) puts between
 * admission and the adapter: the context the adapter gets, and the answer or events as the
 * client gets them.
 */
export interface AnswerSession {
  readonly context: AdapterContext
  readonly complete: (body: unknown) => Effect.Effect<unknown>
  readonly stream: <E>(events: Stream.Stream<ClientEvent, E>) => Stream.Stream<ClientEvent, E>
}

export const modelPipeline = <Request extends { readonly model: string; readonly stream?: boolean | null | undefined }, R = never>(
  format: ClientFormat<Request>,
  session?: (context: AdapterContext, client: ProviderClient) => Effect.Effect<AnswerSession, ApiError, R>
) =>
  authenticated(Effect.gen(function*() {
    const state = yield* CurrentRequest
    const { raw, request, resolved } = yield* admitModelRequest(format.decode)
    const deprecated = format.deprecatedFields?.(raw) ?? []
    if (deprecated.length > 0) Object.assign(state.headers, mergedDeprecationHeaders(deprecated))
    const providers = yield* Providers
    const headers = (yield* HttpServerRequest).headers
    const tokens = yield* TokenEstimator
    const plan = yield* makePlan(resolved, "chat")
    // A large body was decoded and admitted on this turn: it is translated on the next.
    yield* turnIfLargeBody(raw)
    const clientOf = (target: Target) => clientOfTarget(providers, target)
    // The table is keyed by the client's own kind, so the pair always matches.
    const adapterOf = (client: ProviderClient) => format.adapters[client.kind] as Adapter<Request, typeof client>
    const contextOf = (target: Target, body = raw, on: RequestState = state): AdapterContext => ({ state: on, resolved: target.resolved, raw: body, headers, tokens })
    // The session belongs to an attempt: whether a Responses body is forwarded or translated
    // depends on the provider that attempt reaches, so each attempt opens its own.
    const services = yield* Effect.context<R>()
    const sessionOf = (target: Target, client: ProviderClient): Effect.Effect<AnswerSession | undefined, ApiError> =>
      session === undefined ? Effect.succeed(undefined) : Effect.provideContext(session(contextOf(target), client), services)

    // An attempt's client and session. The attempts below are chained, not generators: a generator
    // function made per request costs V8 a map and prototype of its own (README, Generators made per request).
    const attemptOn = (target: Target) =>
      Effect.flatMap(clientOf(target), (client) => Effect.map(sessionOf(target, client), (around) => ({ client, around })))

    if (request.stream !== true) {
      const answered = yield* plan.run((target) =>
        Effect.flatMap(attemptOn(target), ({ around, client }) => {
          const body = adapterOf(client).complete(client, request, around?.context ?? contextOf(target))
          return around === undefined ? body : Effect.flatMap(body, around.complete)
        })
      )
      yield* answered.running.end({ answeredSeconds: answered.answeredSeconds })
      return json(answered.value)
    }
    const open = (target: Target) =>
      Effect.flatMap(attemptOn(target), ({ around, client }) =>
        Effect.flatMap(
          adapterOf(client).stream(client, request, around?.context ?? contextOf(target)),
          // The opening includes the first event: an upstream that fails before it is this attempt's failure.
          (events) => withFirstChunk(around === undefined ? events : around.stream(events))
        ))
    const follower = plan.routing.stream_continuation ? format.continuation?.follower() : undefined
    const openContinuation = (target: Target, partial: string) => Effect.flatMap(clientOf(target), (client) => {
      const body = follower!.continueBody(raw, partial, client.kind)
      const meter = meterOf(state.scope)
      if (meter !== undefined) meter.continued = true
      // The continuation's usage is its own: its adapter records it on a copy, added to the first's when it ends.
      const before = {
        prompt: state.audit.prompt_tokens ?? 0,
        cacheRead: state.audit.cache_read_tokens ?? 0,
        cacheWrite: state.audit.cache_write_tokens ?? 0,
        completion: state.audit.completion_tokens ?? 0
      }
      const own: RequestState = {
        ...state,
        audit: { ...state.audit, prompt_tokens: null, cache_read_tokens: null, cache_write_tokens: null, completion_tokens: null }
      }
      const addUp = Effect.sync(() => {
        if (own.audit.prompt_tokens === null && own.audit.completion_tokens === null) return
        state.audit.prompt_tokens = before.prompt + (own.audit.prompt_tokens ?? 0)
        state.audit.cache_read_tokens = before.cacheRead + (own.audit.cache_read_tokens ?? 0)
        state.audit.cache_write_tokens = before.cacheWrite + (own.audit.cache_write_tokens ?? 0)
        state.audit.completion_tokens = before.completion + (own.audit.completion_tokens ?? 0)
      })
      return Effect.map(
        adapterOf(client).stream(client, { ...request, ...body } as Request, contextOf(target, body, own)),
        (events): Stream.Stream<ClientEvent, ApiError> => Stream.ensuring(events, addUp)
      )
    })
    const first = yield* plan.run(open)
    const events = routedEvents({ plan, first, open, follower, openContinuation })
    const framer = format.framer(state, request)
    // A token-priced request counts the text it relays, in case the stream ends before its usage (metering.ts).
    const meter = meterOf(state.scope)
    const outputText = format.outputText
    const counted = meter === undefined || outputText === undefined ? events : Stream.map(events, (event) => {
      relayOutput(meter, outputText(event))
      return event
    })
    const frames = counted.pipe(
      Stream.map(framer.frame),
      Stream.concat(Stream.suspend(() => {
        if (meter !== undefined) meter.completed = true
        return Stream.make(framer.end())
      })),
      Stream.filter((frame) => frame !== "")
    )
    return yield* eventStreamResponse(frames, framer.failure)
  }))
