/**
 * Untrusted input (admin bodies and queries, tool arguments, model requests) decoded with one
 * formatter, the wire package's: unknown fields refused at every depth, the first problem named
 * by its field path, and a ValidationFailed (400, or 422 where the spec says so) as the error.
 */
import * as Effect from "effect/Effect"
import type * as Schema from "effect/Schema"
import { type DecodeResult, makeDecoder } from "../wire/decode.ts"
import { ValidationFailed } from "./errors.ts"

export const validationFailed = (problem: { readonly path: string; readonly message: string }, status: 400 | 422 = 400) =>
  new ValidationFailed({ message: problem.message, details: { field: problem.path }, status })

/** A wire decoder's result as an Effect, so pipelines `yield*` it. */
export const decodedOrFail = <A>(decoded: DecodeResult<A>): Effect.Effect<A, ValidationFailed> =>
  decoded.ok ? Effect.succeed(decoded.value) : Effect.fail(validationFailed(decoded))

/** Decode with unknown fields refused anywhere in the value. */
export const decodeStrict = <S extends Schema.Top & { readonly DecodingServices: never }>(schema: S) => {
  const decode = makeDecoder(schema)
  return (input: unknown): Effect.Effect<S["Type"], ValidationFailed> => decodedOrFail(decode(input))
}
