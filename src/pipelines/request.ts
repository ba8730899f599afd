/**
 * What one request holds while it runs, and how it ends.
 *
 * - `RequestState`: what the pipeline learns (key, model, tokens, ...) and from which the one
 *   audit record is built. A plain mutable draft on purpose: it lives exactly as long as the
 *   request and is written on the hot path.
 * - `scope`: every resource the request takes (its stream slot, its credit charge) and its audit
 *   record are finalizers of this scope. The scope is closed exactly once, with the request's
 *   `Outcome`: by the HTTP app when a plain answer is sent (or the client left before one), by the
 *   response stream when a streamed answer ends, however it ends. Finalizers run in reverse
 *   order, so the charge is refunded and the slot freed before the audit record is written.
 * - `RequestBody`: reading the body is the HTTP layer's job; a pipeline asks for it at the point
 *   of the order of checks where it belongs (after authentication).
 */
import { Context, Effect, Exit, Scope, type Tracer } from "effect"
import { randomHex } from "../wire/ids.ts"
import type { AuditRecord } from "../domain/records.ts"
import type { RequestTooLarge, UnsupportedMediaType, ValidationFailed } from "../domain/errors.ts"
import { AppConfig } from "../services/config/AppConfig.ts"
import type { LimitsSettings } from "../services/limits/LiveLimits.ts"
import { NO_STACK } from "../services/tracing/stage-span.ts"

export interface AuditFields {
  key_id: string | null
  model: string | null
  provider: string | null
  tool: string | null
  connection_id: number | null
  credits: number
  /** The whole input, cache reads and writes included (issue 33). */
  prompt_tokens: number | null
  /** Of `prompt_tokens`, read from and written to the provider's prompt cache; null: unknown. */
  cache_read_tokens: number | null
  cache_write_tokens: number | null
  completion_tokens: number | null
  /** Who the request was for (end-user.ts); absent: none named. */
  end_user?: string | null
  /** The team of the principal when it was authenticated (issue 33). */
  team_id?: string | null
  stream: boolean
  details: Record<string, unknown> | null
}

export interface RequestState {
  readonly requestId: string
  readonly method: string
  /** Route pattern when one matched (`/api-keys/:id`), otherwise the path without query. */
  endpoint: string
  readonly startedAt: number
  readonly ts: string
  readonly clientAddr: string | null
  params: Readonly<Record<string, string | undefined>>
  readonly audit: AuditFields
  /** Extra headers every response of this request carries (rate-limit headers, ...). */
  readonly headers: Record<string, string>
  /** Holds what the request took; closed once with its Outcome (see the file header). */
  readonly scope: Scope.Closeable
  /** Which client tool sent it and its session, from the client's attribution headers (audit only). */
  client: ClientAttribution | null
  /** The identity-provider subject it acts as (`key_id` then holds the subject id); audit details only. */
  identity: IdentityAttribution | null
  /** The request's span when tracing is on; what runs when the request ends runs under it. */
  readonly span: Tracer.Span | undefined
  /**
   * The configured name (model id, or the route's pattern) of the model the request was admitted
   * to, once admission passed the scope check; the metrics' `model` label (issue 22, finding 7:
   * refused, client-chosen names used up the label slots).
   */
  admittedModel: string | null
  /**
   * The config's `limits` as they were when the request started (a config reload may replace
   * them meanwhile: the request finishes on these). Undefined where no live copy is kept (an app
   * built without the gateway's wiring): the configuration's own apply.
   */
  limits: LimitsSettings | undefined
  /**
   * An event stream's last frames should a drain's grace run out while it is open (the in-band
   * shutdown error, then the format's end): set by the event stream, written by the HTTP layer,
   * which owns the response (src/http/app.ts). Undefined for every other answer.
   */
  cutFrames?: (() => string) | undefined
}

export interface IdentityAttribution {
  readonly issuer: string
  readonly subject: string
  readonly policy: string | null
}

export interface ClientAttribution {
  readonly app: string | null
  readonly session: string | null
}

/**
 * Coding clients name themselves and their session in headers of their own: Claude Code
 * (`x-app`, `x-claude-code-session-id`), Codex CLI (`originator`, `session-id`), opencode
 * (`x-session-id`). Recorded in the audit record's details so usage can be grouped per client
 * session; values are clipped and must be printable, since a client controls them.
 */
const APP_HEADERS = ["x-app", "originator"] as const
const SESSION_HEADERS = ["x-claude-code-session-id", "session-id", "x-session-id"] as const
const ATTRIBUTION_VALUE = /^[\x21-\x7e]{1,128}$/

export const clientAttribution = (headers: Readonly<Record<string, string | undefined>>): ClientAttribution | null => {
  const pick = (names: ReadonlyArray<string>) => {
    for (const name of names) {
      const value = headers[name]
      if (value !== undefined && ATTRIBUTION_VALUE.test(value)) return value
    }
    return null
  }
  const app = pick(APP_HEADERS)
  const session = pick(SESSION_HEADERS)
  return app === null && session === null ? null : { app, session }
}

/**
 * How a request ended. `status` is the HTTP status the client got (200 for a stream that failed
 * after its headers); `failure` is the status of the error it was told about, in the response or
 * in-band (a stream's error frame, a tool's error result), which decides refunds.
 */
export interface Outcome {
  readonly status: number
  readonly slug: string | null
  readonly failure: number | undefined
}

export const CLIENT_LEFT: Outcome = { status: 499, slug: "client_closed_request", failure: undefined }

/** The outcome a scope was closed with; a scope closed any other way (a bug, or shutdown) counts as an internal error. */
export const outcomeOf = (exit: Exit.Exit<unknown, unknown>): Outcome =>
  Exit.isSuccess(exit) && typeof exit.value === "object" && exit.value !== null && "status" in exit.value
    ? exit.value as Outcome
    : { status: 500, slug: "internal_error", failure: 500 }

/** The gateway's or the provider's failure: what the request cost is given back, so a retry is never charged twice. */
export const owesRefund = (outcome: Outcome): boolean => outcome.failure !== undefined && outcome.failure >= 500

export const endRequest = (state: RequestState, outcome: Outcome): Effect.Effect<void> => {
  const close = Scope.close(state.scope, Exit.succeed(outcome))
  // A stream ends its request from the fiber writing the response, outside the request's span.
  return state.span === undefined ? close : Effect.withParentSpan(close, state.span, NO_STACK)
}

export class CurrentRequest extends Context.Service<CurrentRequest, RequestState>()("modelgate/CurrentRequest") {}

export class RequestBody extends Context.Service<RequestBody, {
  /** The body as a JSON object, under the size limit: 413, 415 or 400 otherwise. */
  readonly jsonObject: Effect.Effect<Record<string, unknown>, RequestTooLarge | UnsupportedMediaType | ValidationFailed>
}>()("modelgate/RequestBody") {}

/**
 * `req_` + the time in milliseconds (12 hex digits) + 80 random bits: unique across processes
 * without coordination, and in time order. The stores index request ids (the audit trail's unique
 * index, the ledger's, the open reservations), and an id that sorts by time lands at the right
 * edge of each index instead of on a random page: with 96 random bits an audit record cost 22.5
 * µs of the gateway's CPU to insert into a SQLite trail of 150,000 records, 8 µs in time order,
 * and the gap grows with the trail (issue 38). The random part alone keeps ids apart: 80 bits
 * within one millisecond.
 */
export const newRequestId = (): string => `req_${Date.now().toString(16).padStart(12, "0")}${randomHex(10)}`

export const makeRequestState = (options: {
  readonly method: string
  readonly path: string
  readonly clientAddr: string | null
  readonly requestId?: string
  readonly client?: ClientAttribution | null
  readonly span?: Tracer.Span | undefined
}): RequestState => ({
  requestId: options.requestId ?? newRequestId(),
  method: options.method,
  endpoint: options.path.length > 200 ? options.path.slice(0, 200) : options.path,
  startedAt: performance.now(),
  ts: new Date().toISOString(),
  clientAddr: options.clientAddr,
  params: {},
  audit: {
    key_id: null,
    model: null,
    provider: null,
    tool: null,
    connection_id: null,
    credits: 0,
    prompt_tokens: null,
    cache_read_tokens: null,
    cache_write_tokens: null,
    completion_tokens: null,
    stream: false,
    details: null
  },
  headers: {},
  scope: Scope.makeUnsafe(),
  client: options.client ?? null,
  identity: null,
  span: options.span,
  admittedModel: null,
  limits: undefined
})

export const toAuditRecord = (state: RequestState, status: number, error: string | null): AuditRecord => ({
  request_id: state.requestId,
  ts: state.ts,
  method: state.method,
  endpoint: state.endpoint,
  status,
  error,
  duration_ms: Math.round((performance.now() - state.startedAt) * 1000) / 1000,
  client_addr: state.clientAddr,
  ...state.audit,
  details: state.client === null && state.identity === null
    ? state.audit.details
    : {
      ...state.audit.details,
      ...(state.client === null ? {} : { client: state.client }),
      ...(state.identity === null ? {} : { identity: state.identity })
    }
})

/** The limits the current request runs under: those it started with, else the configuration's. */
export const limitsInForce = Effect.gen(function*() {
  const state = yield* CurrentRequest
  return state.limits ?? (yield* AppConfig).limits
})
