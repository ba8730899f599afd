/**
 * Bedrock's errors as the gateway's. AWS names an error by its type (`x-amzn-errortype:
 * ValidationException:http://internal.amazon.com/...`, or `__type` in the body) and says what
 * went wrong in `message`. A request Bedrock refuses as malformed (`ValidationException`) is
 * the client's to fix: 400 with Bedrock's message, or 404 when what it refuses is the model id;
 * an unknown model (`ResourceNotFoundException`) is 404. Everything else is the operator's or
 * AWS's trouble and a 502 with `details.upstream_status`: missing model access or a bad
 * signature (403), throttling and quotas (429, `ServiceQuotaExceededException`), a model that
 * failed, timed out or is not ready (424, 408, 429), AWS's own failures (500, 503).
 */
import { NotFound, ProviderError, ValidationFailed } from "../../domain/errors.ts"
import type { Redact } from "./redact.ts"
import type { UpstreamFailure, UpstreamResponse } from "./upstream-http.ts"

const header = (headers: UpstreamResponse["headers"], name: string): string | undefined => {
  const value = headers[name]
  return Array.isArray(value) ? value[0] : value
}

/** `ValidationException:http://internal...` and `com.amazon.coral#ValidationException` both name `ValidationException`. */
const errorTypeOf = (raw: string | undefined): string | undefined => {
  if (raw === undefined || raw === "") return undefined
  const beforeColon = raw.split(":")[0] ?? raw
  return beforeColon.split("#").at(-1) || undefined
}

/** A refusal of the model id itself, which Bedrock reports as a ValidationException. */
const isUnknownModel = (message: string) =>
  /model identifier is invalid|model id(?:entifier)? .*(?:not found|does not exist)|unknown model/i.test(message)

export const bedrockStatusFailure = (
  provider: string,
  status: number,
  body: string,
  headers: UpstreamResponse["headers"],
  redact: Redact
): UpstreamFailure => {
  let type = errorTypeOf(header(headers, "x-amzn-errortype"))
  let message: string | undefined
  try {
    const parsed = JSON.parse(body) as Record<string, unknown>
    const said = parsed.message ?? parsed.Message
    if (typeof said === "string") message = said
    type ??= errorTypeOf(typeof parsed.__type === "string" ? parsed.__type : typeof parsed.code === "string" ? parsed.code : undefined)
  } catch {
    // Not JSON (a proxy's page): the truncated text is the evidence there is.
  }
  const text = redact((message ?? body).slice(0, 1000))
  const details = { provider, upstream_status: status, upstream_error: { type: type ?? null, code: null, message: text } }
  const said = text === "" ? "" : `: ${text}`
  if (type === "ResourceNotFoundException" || (status === 404 && type === undefined && message !== undefined)) {
    return new NotFound({ message: `provider "${provider}" does not know the model${said}`, details })
  }
  if (type === "ValidationException" || (type === undefined && (status === 400 || status === 413 || status === 422) && message !== undefined)) {
    return isUnknownModel(text)
      ? new NotFound({ message: `provider "${provider}" does not know the model${said}`, details })
      : new ValidationFailed({ message: `provider "${provider}" refused the request (${status})${said}`, details })
  }
  const retryAfter = header(headers, "retry-after")
  return new ProviderError({
    message: `provider "${provider}" answered ${status}${type === undefined ? "" : ` ${type}`}${said}`,
    details,
    ...(retryAfter === undefined ? {} : { retryAfter })
  })
}

/** An exception inside a stream after the 200 (`:message-type: exception` or `error`). */
export const bedrockStreamFailure = (provider: string, type: string, message: string, redact: Redact): ProviderError => {
  const text = redact(message.slice(0, 1000))
  return new ProviderError({
    message: `provider "${provider}" failed mid-stream: ${type}${text === "" ? "" : `: ${text}`}`,
    details: { provider, upstream_status: null, upstream_error: { type, code: null, message: text } }
  })
}
