/**
 * The end user a model request is for (issue 33): who, behind the client's application, asked.
 * Recorded in the audit record (`end_user`) for the spend reports; never a metrics label (one
 * series per person would be unbounded).
 *
 * Sources, the first present wins:
 * 1. the header `x-modelgate-end-user`: the gateway's own, set on purpose (an application's
 *    backend that knows its user, a proxy in front); strict: 1 to 256 printable ASCII
 *    characters, anything else is a 400 naming the header;
 * 2. the body's `user` (OpenAI chat, Responses, completions, embeddings) or `metadata.user_id`
 *    (Anthropic messages): clients send these today and the provider accepts them, so they are
 *    never refused here. They are recorded bounded: control characters become U+FFFD, and a value
 *    longer than 256 characters keeps its first 239 followed by "…" and 16 hex digits of the
 *    SHA-256 of the whole value, so two long values stay two end users.
 */
import { createHash } from "node:crypto"
import { Effect } from "effect"
import { ValidationFailed } from "../domain/errors.ts"

export const END_USER_HEADER = "x-modelgate-end-user"
export const MAX_END_USER = 256
const HEAD = MAX_END_USER - 17

const HEADER_VALUE = /^[\x20-\x7e]{1,256}$/
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/g

/** A client's own value, bounded and printable (see the file header). */
export const boundedEndUser = (value: string): string => {
  const printable = value.replace(CONTROL, "\uFFFD")
  if (printable.length <= MAX_END_USER) return printable
  // Never split a surrogate pair.
  const head = /[\uD800-\uDBFF]$/.test(printable.slice(0, HEAD)) ? printable.slice(0, HEAD - 1) : printable.slice(0, HEAD)
  return `${head}…${createHash("sha256").update(value).digest("hex").slice(0, 16)}`
}

const nonEmptyString = (value: unknown): value is string => typeof value === "string" && value.trim() !== ""

/** The request's end user, or null when it names none; fails only for a malformed header. */
export const endUserOf = (
  body: Readonly<Record<string, unknown>>,
  headers: Readonly<Record<string, string | undefined>>
): Effect.Effect<string | null, ValidationFailed> => {
  const header = headers[END_USER_HEADER]
  if (header !== undefined) {
    const value = header.trim()
    return HEADER_VALUE.test(value)
      ? Effect.succeed(value)
      : Effect.fail(new ValidationFailed({
        message: `${END_USER_HEADER}: expected 1 to ${MAX_END_USER} printable ASCII characters`,
        details: { field: END_USER_HEADER }
      }))
  }
  if (nonEmptyString(body.user)) return Effect.succeed(boundedEndUser(body.user))
  const metadata = body.metadata
  if (typeof metadata === "object" && metadata !== null && !Array.isArray(metadata)) {
    const userId = (metadata as Record<string, unknown>).user_id
    if (nonEmptyString(userId)) return Effect.succeed(boundedEndUser(userId))
  }
  return Effect.succeed(null)
}
