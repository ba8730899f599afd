/**
 * How the admin lists page (issue 31), the way `/audit` does: `limit` rows at a time, and an
 * opaque `cursor` taken from the previous answer's `next_cursor` (null on the last page). The
 * repository asks for one row more than the page (rows.ts `keysetPage`), so no count is needed.
 * A list ordered by one number (the audit trail's seq) has that number as its cursor; a list
 * ordered by several columns has their values, encoded here so a client never builds one.
 */
import * as Effect from "effect/Effect"
import { ValidationFailed } from "../../domain/errors.ts"

export const DEFAULT_PAGE = 100
export const MAX_PAGE = 1000
/** A cursor is a few short values; anything longer was not made here. */
const MAX_CURSOR = 1000

const invalid = (field: string, message: string) => new ValidationFailed({ message: `${field}: ${message}`, details: { field } })

/** `limit`: an integer from 1 to 1000, 100 when absent. */
export const pageLimit = (raw: string | undefined): Effect.Effect<number, ValidationFailed> => {
  if (raw === undefined) return Effect.succeed(DEFAULT_PAGE)
  const n = /^\d{1,4}$/.test(raw) ? Number(raw) : Number.NaN
  return n >= 1 && n <= MAX_PAGE ? Effect.succeed(n) : Effect.fail(invalid("limit", `expected an integer from 1 to ${MAX_PAGE}`))
}

/** The cursor after a row whose sort key is these values. */
export const encodeCursor = (values: ReadonlyArray<string>): string => Buffer.from(JSON.stringify(values)).toString("base64url")

/** The sort key a cursor holds: exactly `arity` strings, else a 400 naming `cursor`. */
export const decodeCursor = (raw: string | undefined, arity: number): Effect.Effect<ReadonlyArray<string> | undefined, ValidationFailed> => {
  if (raw === undefined) return Effect.succeed(undefined)
  const bad = Effect.fail(invalid("cursor", "expected the next_cursor of a previous page"))
  if (raw.length === 0 || raw.length > MAX_CURSOR || !/^[A-Za-z0-9_-]+$/.test(raw)) return bad
  try {
    const values: unknown = JSON.parse(Buffer.from(raw, "base64url").toString("utf8"))
    return Array.isArray(values) && values.length === arity && values.every((v) => typeof v === "string" && v.length <= 300)
      ? Effect.succeed(values as ReadonlyArray<string>)
      : bad
  } catch {
    return bad
  }
}
