/**
 * The root HTTP app: every request, on every path, passes through here. It assigns the request
 * id, refuses oversized bodies before reading them, routes, turns every failure into the spec's
 * envelope (defects into a 500 without a stack trace) and stamps the id headers on every
 * response. The request's audit record is the last finalizer of its scope (src/pipelines/
 * request.ts); the app ends the request when a plain answer is ready or the client left before
 * one, and leaves a streamed answer's request to its stream, which ends it when it ends.
 */
import * as NodeHttpServerRequest from "@effect/platform-node/NodeHttpServerRequest"
import { Cause, Effect, Fiber, LogLevel, Option, References, Scope, type Tracer } from "effect"
import type { AuditRecord } from "../domain/records.ts"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import type { HttpServerResponse } from "effect/http/HttpServerResponse"
import {
  type ApiError,
  HttpsRequired,
  InternalError,
  isApiError,
  MethodNotAllowed,
  NotFound,
  slugOf,
  statusOf
} from "../domain/errors.ts"
import {
  CLIENT_LEFT,
  clientAttribution,
  CurrentRequest,
  endRequest,
  makeRequestState,
  newRequestId,
  outcomeOf,
  RequestBody,
  type RequestState,
  toAuditRecord
} from "../pipelines/request.ts"
import { CUT_BY_SHUTDOWN, Drain } from "../pipelines/drain.ts"
import { Audit } from "../services/audit/Audit.ts"
import { Metrics, UNMATCHED_ROUTE } from "../services/metrics/Metrics.ts"
import { storeUnavailable } from "../services/credits/Credits.ts"
import { isStoreOutage } from "../services/store/StoreError.ts"
import { LiveLimits, type LimitsSettings } from "../services/limits/LiveLimits.ts"
import { BodyLimits, declaredLengthExceeds, readJsonObject, tooLarge } from "./body.ts"
import type { Forwarding } from "./forwarded.ts"
import { makeNoiseSampler } from "./audit-noise.ts"
import { protocolRefusal } from "./protocol.ts"
import { clientParent } from "../services/tracing/propagation.ts"
import { endRequestSpan, startRequestSpan } from "../services/tracing/request-span.ts"
import { NO_STACK } from "../services/tracing/stage-span.ts"
import { errorResponse, withRequestHeaders } from "./responses.ts"
import { type Match, makeRouteTable, type Route } from "./router.ts"

export interface AppOptions {
  readonly maxBodyBytes: number
  /**
   * `server.trust_proxy`: absent, every peer is the client and plain HTTP is served (the bound
   * address is loopback, or the server speaks TLS). Present, only HTTPS is served (besides the
   * probes): over this server's own TLS, or through a peer it trusts that says X-Forwarded-Proto: https.
   */
  readonly forwarding?: Forwarding | undefined
  /** `server.tls`: the socket itself is HTTPS. */
  readonly tls?: boolean | undefined
}

const pathOf = (url: string) => {
  const q = url.indexOf("?")
  return q === -1 ? url : url.slice(0, q)
}

/** A store outage anywhere in the cause, as a typed failure or as a defect (services that `orDie` store errors). */
const storeOutageIn = (cause: Cause.Cause<unknown>): unknown => {
  for (const reason of cause.reasons) {
    const value = reason._tag === "Fail" ? reason.error : reason._tag === "Die" ? reason.defect : undefined
    if (isStoreOutage(value)) return value
  }
  return undefined
}

/** The longest error message an audit record keeps. */
const AUDIT_MESSAGE_CHARS = 500

/**
 * An error message as the audit record keeps it: a message may quote what the client sent (a
 * field's value), so a URL's credentials and anything shaped like a gateway key or a bearer
 * token are masked before it is stored.
 */
export const auditMessage = (message: string): string =>
  message.slice(0, AUDIT_MESSAGE_CHARS)
    .replace(/([a-z][a-z0-9+.-]*:\/\/[^\s:@/"']*:)[^\s@/"']*@/gi, "$1***@")
    .replace(/\bsk-[A-Za-z0-9_-]{8,}/g, "sk-***")
    .replace(/\b(Bearer\s+)\S+/gi, "$1***")

/**
 * One line per request at info: who, what, how it ended. Identifiers only: never the key, the
 * body, a message or a statement, so the log is safe to ship wherever logs go.
 */
const logRequest = (record: AuditRecord, span: Tracer.Span | undefined) =>
  // A 5xx is the gateway's or a provider's failure: at error, so an operator filtering on level sees it.
  (record.status >= 500 ? Effect.logError("request") : Effect.logInfo("request")).pipe(Effect.annotateLogs({
    request_id: record.request_id,
    // The way from a log line to its trace.
    ...(span?.sampled ? { trace_id: span.traceId } : {}),
    key_id: record.key_id,
    method: record.method,
    route: record.endpoint,
    model: record.model,
    provider: record.provider,
    status: record.status,
    // Only when there is one: a success line read `slug=null` (and `"slug":null` in JSON).
    ...(record.error === null ? {} : { slug: record.error }),
    prompt_tokens: record.prompt_tokens,
    completion_tokens: record.completion_tokens,
    ...(typeof record.details?.upstream_status === "number" ? { upstream_status: record.details.upstream_status } : {}),
    duration_ms: record.duration_ms
  }))

/** The unauthenticated health probes (`/healthz`, `/readyz`), served over plain HTTP even behind a trusted proxy. */
const PROBE_PATHS: ReadonlySet<string> = new Set(["/healthz", "/readyz"])
const isProbe = (found: Match<unknown>) => found._tag === "Found" && PROBE_PATHS.has(found.pattern)

type RoutesContext<Routes extends ReadonlyArray<Route<any>>> = Routes[number] extends Route<infer R> ? R : never

export const makeHttpApp = <const Routes extends ReadonlyArray<Route<any>>>(routes: Routes, options: AppOptions) =>
  Effect.gen(function*() {
    const audit = yield* Audit
    const metrics = yield* Metrics
    // Metric labels use route patterns only: an unmatched path would make a label per URL.
    const patterns = new Set<string>(routes.map((r) => r.path))
    const drain = Option.getOrUndefined(yield* Effect.serviceOption(Drain))
    const match = makeRouteTable<RoutesContext<Routes>>(routes)
    // Decided once: below `info` the per-request line is not even built (it is on the hot path).
    const logsRequests = LogLevel.isGreaterThanOrEqualTo("Info", yield* References.MinimumLogLevel)
    // Off (telemetry.otlp_endpoint unset): no request span is made at all.
    const tracing = yield* References.TracerEnabled
    // The config's limits as a reload may replace them: each request takes the ones in force when it starts.
    const liveLimits = Option.getOrUndefined(yield* Effect.serviceOption(LiveLimits))
    const bodyLimits = yield* BodyLimits
    // The body limits of the last limits seen, so a request does not build its own copy.
    let bodyLimitsOf: { readonly from: LimitsSettings; readonly value: typeof bodyLimits } | undefined
    const bodyLimitsFor = (limits: LimitsSettings | undefined) => {
      if (limits === undefined) return bodyLimits
      if (bodyLimitsOf?.from !== limits) {
        bodyLimitsOf = { from: limits, value: { ...bodyLimits, maxJsonDepth: limits.max_json_depth } }
      }
      return bodyLimitsOf.value
    }

    const forwarding = options.forwarding
    const socketIsHttps = options.tls === true

    const dispatch = (request: HttpServerRequest, state: RequestState, found: Match<RoutesContext<Routes>>, viaProxy: boolean) => {
      // Behind a proxy, HTTPS as the client reached it: what a trusted proxy says, else what the
      // socket is (a peer that is not a proxy of yours does not get to say). The health probes
      // are exempt: a Kubernetes or load-balancer probe talks to the process directly, not
      // through the TLS proxy, and they carry no credential and no data.
      if (
        forwarding !== undefined && !(viaProxy ? request.headers["x-forwarded-proto"] === "https" : socketIsHttps) &&
        !isProbe(found)
      ) {
        return Effect.fail(new HttpsRequired({ message: "plain HTTP is refused: connect over HTTPS, through the TLS proxy in front of this gateway" }))
      }
      const refusal = protocolRefusal(request)
      if (refusal !== undefined) return Effect.fail(refusal)
      const maxBodyBytes = state.limits?.max_body_bytes ?? options.maxBodyBytes
      if (declaredLengthExceeds(request, maxBodyBytes)) return Effect.fail(tooLarge(maxBodyBytes))
      switch (found._tag) {
        case "NotFound":
          return Effect.fail(new NotFound({ message: `no route for ${request.method} ${state.endpoint}` }))
        case "MethodNotAllowed":
          state.endpoint = found.pattern
          return Effect.fail(
            new MethodNotAllowed({ message: `${request.method} is not allowed on ${found.pattern}`, allow: found.allow })
          )
        case "Found":
          state.endpoint = found.pattern
          state.params = found.params
          return found.handler
      }
    }

    const context = yield* Effect.context<never>()
    // Unauthenticated probes and refusals write a bounded number of audit rows (audit-noise.ts).
    const sampleNoise = makeNoiseSampler()

    /** The answer is ready: a plain one ends its request now, a streamed one when its stream ends. */
    const finish = (request: HttpServerRequest, state: RequestState, response: HttpServerResponse, error: ApiError | undefined) => {
      const answered = withRequestHeaders(response, state)
      if (response.body._tag === "Stream") {
        // Backstop: a client that leaves between this answer and the stream's first frame
        // interrupts the response before its stream runs, so the stream never ends its request
        // (slot, charge and audit record would be held forever). The socket closing does it
        // then; ending a request twice does nothing, so a stream that ended it first wins.
        const node = NodeHttpServerRequest.toServerResponse(request)
        node.once("close", () => {
          if (node.writableEnded) return
          Effect.runForkWith(context)(endRequest(state, node.headersSent ? { ...CLIENT_LEFT, status: 200 } : CLIENT_LEFT))
        })
        // Open from here until the stream ends its request (however it ends).
        const closed = metrics.streamOpened()
        const opened = Effect.as(Scope.addFinalizer(state.scope, Effect.sync(closed)), answered)
        if (drain === undefined) return opened
        // A drain whose grace runs out ends the stream: its last frames (the in-band shutdown
        // error, when it is an event stream) go out after what was written, and the request is
        // interrupted, which stops its reads and ends it as cut by the shutdown (respond.ts). A
        // stream whose headers are not written yet has not started: it sees the cut when it
        // starts, and its frames go out with its headers.
        return Effect.withFiber((fiber) =>
          Effect.flatMap(
            drain.onCut(Effect.suspend(() => {
              if (!node.headersSent) return Effect.void
              const frames = state.cutFrames?.()
              if (frames !== undefined && !node.writableEnded) node.end(frames)
              return Fiber.interrupt(fiber)
            })),
            (unregister) => Effect.andThen(Scope.addFinalizer(state.scope, Effect.sync(unregister)), opened)
          )
        )
      }
      const status = error ? statusOf(error) : response.status
      const outcome = { status, slug: error ? slugOf(error) : null, failure: status >= 400 ? status : undefined }
      return Effect.as(endRequest(state, outcome), answered)
    }

    return Effect.gen(function*() {
      const request = yield* HttpServerRequest
      // Matched first (it is pure) so that the request span is named by its route.
      const found = match(request.method, request.url)
      const requestId = newRequestId()
      // A client's trace context: the parent of the request span, or (tracing off) passed on upstream as it came.
      const parent = clientParent(request.headers)
      const span = tracing
        ? yield* startRequestSpan({ method: request.method, route: found._tag === "NotFound" ? undefined : found.pattern, requestId, parent })
        : undefined
      const peer = Option.getOrNull(request.remoteAddress)
      // Only with trust_proxy: one lookup of the peer (forwarded.ts remembers the answers).
      const viaProxy = forwarding !== undefined && peer !== null && forwarding.trusts(peer)
      const state = makeRequestState({
        method: request.method,
        path: pathOf(request.url),
        clientAddr: viaProxy ? forwarding.client(request.headers["x-forwarded-for"]) ?? peer : peer,
        client: clientAttribution(request.headers),
        requestId,
        span
      })
      state.limits = liveLimits?.current()
      const maxBodyBytes = state.limits?.max_body_bytes ?? options.maxBodyBytes
      if (drain !== undefined) {
        // Counted until its scope closes (a stream's when the stream ends): what a drain waits for.
        drain.requestStarted()
        yield* Scope.addFinalizer(state.scope, Effect.sync(drain.requestEnded))
      }
      // Added before the charge and slot, so it runs after them: the record sees the refunds and releases.
      // The metrics and the request log are read off the same record, so all three agree.
      yield* Scope.addFinalizerExit(state.scope, (exit) =>
        Effect.suspend(() => {
          const outcome = outcomeOf(exit)
          const record = toAuditRecord(state, outcome.status, outcome.slug)
          const kept = sampleNoise(record, Date.now())
          if (kept !== undefined) audit.append(kept)
          metrics.observe(record, patterns.has(record.endpoint) ? record.endpoint : UNMATCHED_ROUTE, state.admittedModel)
          const logged = logsRequests ? logRequest(record, span) : Effect.void
          return span === undefined ? logged : Effect.andThen(logged, endRequestSpan(span, record))
        }))
      const handled = dispatch(request, state, found, viaProxy).pipe(
        Effect.provideService(CurrentRequest, state),
        // The body limits in force when the request started go with its body (not provided as a
        // service of their own: one more per-request service made Effect copy the whole context).
        Effect.provideService(RequestBody, { jsonObject: readJsonObject(request, maxBodyBytes, bodyLimitsFor(state.limits)) }),
        Effect.flatMap((response) => finish(request, state, response, undefined)),
        Effect.catchCause((cause) => {
          // The client left while an interruptible stage (the upstream call) was waiting: no
          // answer can reach it, so the interruption goes on to onInterrupt, which records it.
          if (Cause.hasInterruptsOnly(cause)) return Effect.failCause(cause)
          const failure = Cause.findErrorOption(cause)
          const outage = storeOutageIn(cause)
          if (outage !== undefined) metrics.dependencyError("store")
          const error: ApiError = Option.isSome(failure) && isApiError(failure.value)
            ? failure.value
            // One store-failure policy for every route, the admin API included: an unreachable
            // store is 503 dependency_unavailable, whichever service ran into it.
            : outage !== undefined
            ? storeUnavailable(outage)
            : new InternalError({ message: "internal error; quote the request id when reporting it" })
          const log = error._tag === "InternalError" ? Effect.logError("unhandled failure", cause) : Effect.void
          // The record keeps what the client was told, not just the slug: "why was this a 400" is an audit question.
          // And a provider's own status (a 401 for a wrong provider key, a 429, a 5xx): the client's
          // 502 carries it in details.upstream_status, so the record and the request line do too.
          const upstream = (error.details as { upstream_status?: unknown } | undefined)?.upstream_status
          state.audit.details = {
            ...state.audit.details,
            message: auditMessage(error.message),
            ...(typeof upstream === "number" ? { upstream_status: upstream } : {})
          }
          return Effect.andThen(log, finish(request, state, errorResponse(error, state), error))
        }),
        // The client went away before an answer: still one record, with nginx's 499 convention;
        // or a drain's grace ran out and the server cut it (refunded, recorded as the server's doing).
        // (Closing a scope twice does nothing, so a request that was already ended keeps its outcome.)
        Effect.onInterrupt(() => endRequest(state, drain?.cutting() === true ? CUT_BY_SHUTDOWN : CLIENT_LEFT))
      )
      const under = span ?? parent
      return yield* (under === undefined ? handled : Effect.withParentSpan(handled, under, NO_STACK))
    })
  })
