/** The error envelope as a response, and the headers every response carries. */
import { HttpServerResponse } from "effect/http"
import { type ApiError, statusOf, toEnvelope } from "../domain/errors.ts"
import type { RequestState } from "../pipelines/request.ts"
import { json } from "../pipelines/respond.ts"

/** Headers owed to the client whatever the outcome: both request-id spellings (OpenAI's and Anthropic's SDKs each read one). */
export const withRequestHeaders = (response: HttpServerResponse.HttpServerResponse, state: RequestState) =>
  HttpServerResponse.setHeaders(response, { ...state.headers, "x-request-id": state.requestId, "request-id": state.requestId })

/** error_description may hold only printable ASCII without a double quote or a backslash (RFC 6750 section 3). */
const invalidTokenChallenge = (description: string) =>
  `Bearer error="invalid_token", error_description="${description.replace(/[^\x20-\x21\x23-\x5b\x5d-\x7e]/g, "").slice(0, 200)}"`

/**
 * Statuses a client may retry unchanged: a request that timed out on its way in (408), a
 * conflict that may clear (409), a limit that refills (429); 5xx are the server's. Every other
 * 4xx is the client's mistake, and retrying it cannot succeed.
 */
const RETRYABLE_4XX = new Set([408, 409, 429])

/**
 * The headers an error answer carries. Every non-retryable 4xx says `x-should-retry: false`,
 * the header both official SDKs read before their own status rules: without it the OpenAI SDK
 * (and Codex, opencode) retry a 404 for an unknown model several times.
 */
export const errorHeaders = (error: ApiError): Record<string, string> => {
  const headers = headersOfTag(error)
  const status = statusOf(error)
  return status >= 400 && status < 500 && !RETRYABLE_4XX.has(status) ? { ...headers, "x-should-retry": "false" } : headers
}

const headersOfTag = (error: ApiError): Record<string, string> => {
  switch (error._tag) {
    case "RateLimited":
      return {
        "retry-after": String(error.retryAfterSeconds),
        "x-ratelimit-limit": String(error.limit),
        "x-ratelimit-remaining": String(error.remaining),
        "x-ratelimit-reset": String(error.resetAt)
      }
    case "MethodNotAllowed":
      return { allow: error.allow.join(", ") }
    case "Unauthorized":
      // RFC 6750 section 3: a request without credentials gets a bare challenge; a bad one names the error.
      return { "www-authenticate": error.missing === true ? "Bearer" : invalidTokenChallenge(error.message) }
    case "KeyInactive":
      return { "www-authenticate": invalidTokenChallenge(error.message) }
    case "ProviderError":
      return error.retryAfter !== undefined ? { "retry-after": error.retryAfter } : {}
    case "ValidationFailed":
      // The rest of a body that stopped arriving, or of one behind a refused Expect, is never
      // read: the connection cannot be reused.
      return error.status === 408 || error.status === 417 ? { connection: "close" } : {}
    case "BudgetExhausted":
      // A 429 the SDKs would retry, but a used-up budget does not refill with time: both official
      // SDKs honour this header and give up at once.
      return { "x-should-retry": "false" }
    case "RequestTooLarge":
    case "HeadersTooLarge":
      // The rest of an oversized body is never read, so the connection cannot be reused.
      return { connection: "close" }
    default:
      return {}
  }
}

export const errorResponse = (error: ApiError, state: RequestState): HttpServerResponse.HttpServerResponse =>
  HttpServerResponse.setHeaders(json(toEnvelope(error, state.requestId), statusOf(error)), errorHeaders(error))
