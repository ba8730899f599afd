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

export const errorHeaders = (error: ApiError): Record<string, string> => {
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
      if (error.status === 408 || error.status === 417) return { connection: "close" }
      return error.details?.upstream_status !== undefined ? { "x-should-retry": "false" } : {}
    case "NotFound":
      // The provider refused the request itself: retrying it unchanged cannot succeed.
      return error.details?.upstream_status !== undefined ? { "x-should-retry": "false" } : {}
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
