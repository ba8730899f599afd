import { Result, Schema } from "effect"

/**
 * A request field that has no faithful equivalent in the target wire format. The gateway answers
 * it with 400 `validation_failed`: silently dropping a field that changes the model's output would
 * hand the client an answer to a different question.
 */
export class Untranslatable extends Schema.TaggedError<Untranslatable>()("Untranslatable", {
  path: Schema.String,
  message: Schema.String
}) {}

export type Translation<A> = Result.Result<A, Untranslatable>

/** Stops the translation in progress; `translating` turns it into a failed `Translation`. */
export const refuse = (path: string, reason: string): never => {
  throw new Untranslatable({ path, message: `${path}: ${reason}` })
}

/**
 * Runs a translation written as straight-line code. Refusals are thrown from deep inside the
 * message walk and caught only here, which keeps every helper a plain function of its input.
 */
export const translating = <A>(build: () => A): Translation<A> => {
  try {
    return Result.succeed(build())
  } catch (error) {
    if (error instanceof Untranslatable) return Result.fail(error)
    throw error
  }
}
