/**
 * Per-request state the pipeline fills in as it learns things (key, model, tokens, ...), and
 * from which the one audit record of the request is built. A plain mutable object on purpose:
 * it lives exactly as long as the request and is touched on the hot path.
 */
import { Context } from "effect"
import { randomBytes } from "node:crypto"
import type { Effect } from "effect"
import type { AuditRecord } from "../domain/records.ts"
import type { RateDecision } from "../services/limits/gcra.ts"

export interface AuditFields {
  key_id: string | null
  model: string | null
  provider: string | null
  tool: string | null
  connection_id: number | null
  credits: number
  prompt_tokens: number | null
  completion_tokens: number | null
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
  /** Set by streaming responses, which write their audit record when the stream ends. */
  auditDeferred: boolean
  /** Extra headers every response of this request carries (rate-limit headers, ...). */
  readonly headers: Record<string, string>
  /** The rate limiter's answer for this request, once it was counted. */
  rate: RateDecision | undefined
  /** What the request holds and must give back when it ends (stream slot, credits to refund on a 5xx). */
  settlement: Settlement | undefined
}

export interface Settlement {
  /** Frees what the request holds (its stream slot). Idempotent. */
  readonly release: Effect.Effect<void>
  /** Gives the request's credits back; for failures that are the gateway's or the provider's. Idempotent. */
  readonly refund: Effect.Effect<void>
}

export class CurrentRequest extends Context.Service<CurrentRequest, RequestState>()("modelgate/CurrentRequest") {}

/**
 * `req_` + 96 random bits: unique across processes without coordination. Random bytes are drawn
 * from the CSPRNG in blocks, because one system call per request showed up in profiles.
 */
const ID_BYTES = 12
const POOL_IDS = 1024
let pool = randomBytes(ID_BYTES * POOL_IDS)
let offset = 0
export const newRequestId = (): string => {
  if (offset === pool.length) {
    pool = randomBytes(ID_BYTES * POOL_IDS)
    offset = 0
  }
  const id = pool.toString("hex", offset, offset + ID_BYTES)
  offset += ID_BYTES
  return `req_${id}`
}

export const makeRequestState = (options: {
  readonly method: string
  readonly path: string
  readonly clientAddr: string | null
  readonly requestId?: string
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
    completion_tokens: null,
    stream: false,
    details: null
  },
  auditDeferred: false,
  headers: {},
  rate: undefined,
  settlement: undefined
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
  ...state.audit
})
