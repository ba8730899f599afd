/**
 * Every failure a client can see is one of these tagged errors. Each tag maps to exactly one
 * slug of the spec's section 7 and the status table below is the only place that decides the
 * HTTP status, so a slug can never drift between endpoints.
 */
import * as Schema from "effect/Schema"
const fields = {
  message: Schema.String,
  details: Schema.optional(Schema.Record(Schema.String, Schema.Unknown))
}

/** `missing`: no credential at all, so the challenge names no error (RFC 6750 section 3.1). */
export class Unauthorized extends Schema.TaggedError<Unauthorized>()("Unauthorized", {
  ...fields,
  missing: Schema.optional(Schema.Boolean)
}) {}
/** `keyId`: the key that was refused, for the audit record (never in the envelope). */
export class KeyInactive extends Schema.TaggedError<KeyInactive>()("KeyInactive", {
  ...fields,
  keyId: Schema.optional(Schema.String)
}) {}
export class ScopeViolation extends Schema.TaggedError<ScopeViolation>()("ScopeViolation", fields) {}
export class ToolsDisabled extends Schema.TaggedError<ToolsDisabled>()("ToolsDisabled", fields) {}
export class HttpsRequired extends Schema.TaggedError<HttpsRequired>()("HttpsRequired", fields) {}
/** A cookie-authenticated state-changing call without the session's CSRF token or from another origin. */
export class CsrfRejected extends Schema.TaggedError<CsrfRejected>()("CsrfRejected", fields) {}
export class NotFound extends Schema.TaggedError<NotFound>()("NotFound", fields) {}
export class SessionExpired extends Schema.TaggedError<SessionExpired>()("SessionExpired", fields) {}
export class MethodNotAllowed extends Schema.TaggedError<MethodNotAllowed>()("MethodNotAllowed", {
  ...fields,
  allow: Schema.Array(Schema.String)
}) {}
export class Conflict extends Schema.TaggedError<Conflict>()("Conflict", fields) {}
/**
 * 400 for a malformed body or argument; 422 where the spec asks for it (a well-formed but
 * unacceptable value); 408 for a body that never arrives in full and 417 for an `Expect` the
 * server cannot meet, the two protocol-level client mistakes HTTP has its own status for.
 */
export class ValidationFailed extends Schema.TaggedError<ValidationFailed>()("ValidationFailed", {
  ...fields,
  status: Schema.optional(Schema.Literals([400, 408, 417, 422]))
}) {}
export class RequestTooLarge extends Schema.TaggedError<RequestTooLarge>()("RequestTooLarge", fields) {}
export class HeadersTooLarge extends Schema.TaggedError<HeadersTooLarge>()("HeadersTooLarge", fields) {}
export class UnsupportedMediaType extends Schema.TaggedError<UnsupportedMediaType>()("UnsupportedMediaType", fields) {}
export class QueryTooDangerous extends Schema.TaggedError<QueryTooDangerous>()("QueryTooDangerous", fields) {}
export class RateLimited extends Schema.TaggedError<RateLimited>()("RateLimited", {
  ...fields,
  retryAfterSeconds: Schema.Number,
  limit: Schema.Number,
  remaining: Schema.Number,
  resetAt: Schema.Number
}) {}
export class BudgetExhausted extends Schema.TaggedError<BudgetExhausted>()("BudgetExhausted", fields) {}
export class InsufficientCredits extends Schema.TaggedError<InsufficientCredits>()("InsufficientCredits", fields) {}
export class ConnectionUnreachable extends Schema.TaggedError<ConnectionUnreachable>()("ConnectionUnreachable", fields) {}
export class ProviderError extends Schema.TaggedError<ProviderError>()("ProviderError", {
  ...fields,
  retryAfter: Schema.optional(Schema.String),
  /** The upstream's `retry-after-ms` (OpenAI's precise form), for the router's backoff (issue 20). */
  retryAfterMs: Schema.optional(Schema.Number)
}) {}
export class UpstreamTimeout extends Schema.TaggedError<UpstreamTimeout>()("UpstreamTimeout", fields) {}
export class SqlGateBlocked extends Schema.TaggedError<SqlGateBlocked>()("SqlGateBlocked", fields) {}
export class DependencyUnavailable extends Schema.TaggedError<DependencyUnavailable>()("DependencyUnavailable", fields) {}
export class InternalError extends Schema.TaggedError<InternalError>()("InternalError", fields) {}

export type ApiError =
  | Unauthorized
  | KeyInactive
  | ScopeViolation
  | ToolsDisabled
  | HttpsRequired
  | CsrfRejected
  | NotFound
  | SessionExpired
  | MethodNotAllowed
  | Conflict
  | ValidationFailed
  | RequestTooLarge
  | HeadersTooLarge
  | UnsupportedMediaType
  | QueryTooDangerous
  | RateLimited
  | BudgetExhausted
  | InsufficientCredits
  | ConnectionUnreachable
  | ProviderError
  | UpstreamTimeout
  | SqlGateBlocked
  | DependencyUnavailable
  | InternalError

/** The one table from error tag to slug and HTTP status. */
export const errorTable: { readonly [K in ApiError["_tag"]]: { readonly slug: string; readonly status: number } } = {
  Unauthorized: { slug: "unauthorized", status: 401 },
  KeyInactive: { slug: "key_inactive", status: 401 },
  ScopeViolation: { slug: "scope_violation", status: 403 },
  ToolsDisabled: { slug: "tools_disabled", status: 403 },
  HttpsRequired: { slug: "https_required", status: 403 },
  CsrfRejected: { slug: "csrf_rejected", status: 403 },
  SqlGateBlocked: { slug: "sql_gate_blocked", status: 403 },
  NotFound: { slug: "not_found", status: 404 },
  SessionExpired: { slug: "session_expired", status: 404 },
  MethodNotAllowed: { slug: "method_not_allowed", status: 405 },
  Conflict: { slug: "conflict", status: 409 },
  ValidationFailed: { slug: "validation_failed", status: 400 },
  RequestTooLarge: { slug: "request_too_large", status: 413 },
  UnsupportedMediaType: { slug: "unsupported_media_type", status: 415 },
  HeadersTooLarge: { slug: "headers_too_large", status: 431 },
  QueryTooDangerous: { slug: "query_too_dangerous", status: 422 },
  RateLimited: { slug: "rate_limited", status: 429 },
  BudgetExhausted: { slug: "budget_exhausted", status: 429 },
  InsufficientCredits: { slug: "insufficient_credits", status: 402 },
  InternalError: { slug: "internal_error", status: 500 },
  ConnectionUnreachable: { slug: "connection_unreachable", status: 502 },
  ProviderError: { slug: "provider_error", status: 502 },
  DependencyUnavailable: { slug: "dependency_unavailable", status: 503 },
  UpstreamTimeout: { slug: "upstream_timeout", status: 504 }
}

const apiErrorTags = new Set<string>(Object.keys(errorTable))

export const isApiError = (u: unknown): u is ApiError =>
  typeof u === "object" && u !== null && "_tag" in u && apiErrorTags.has((u as { _tag: string })._tag)

export const statusOf = (error: ApiError): number =>
  error._tag === "ValidationFailed" && error.status !== undefined ? error.status : errorTable[error._tag].status

export const slugOf = (error: ApiError): string => errorTable[error._tag].slug

/** The spec's section 7 envelope. */
export interface ErrorEnvelope {
  readonly status: number
  readonly error: string
  readonly message: string
  readonly request_id: string
  readonly details?: Record<string, unknown>
}

export const toEnvelope = (error: ApiError, requestId: string): ErrorEnvelope => {
  const envelope: ErrorEnvelope = {
    status: statusOf(error),
    error: slugOf(error),
    message: error.message,
    request_id: requestId
  }
  return error.details === undefined ? envelope : { ...envelope, details: error.details }
}
