import { Result, Schema } from "effect"

/**
 * A request field that has no faithful equivalent in the target wire format. The gateway answers
 * it with 400 `validation_failed`: silently dropping a field that changes the model's output would
 * hand the client an answer to a different question.
 */
export class Untranslatable extends Schema.TaggedError<Untranslatable>()("Untranslatable", {
  path: Schema.String,
  message: Schema.String,
  /** Set when what the translation would build exceeds its byte budget (ExpansionBudget). */
  maxBytes: Schema.optional(Schema.Number)
}) {}

export type Translation<A> = Result.Result<A, Untranslatable>

/** Stops the translation in progress; `translating` turns it into a failed `Translation`. */
export const refuse = (path: string, reason: string): never => {
  throw new Untranslatable({ path, message: `${path}: ${reason}` })
}

/** A translation's default byte budget: four times the default body limit (1 MiB). */
export const DEFAULT_EXPANSION_BYTES = 4 * 1_048_576

/**
 * The bytes a translation may build from one request (issue 32): whatever multiplies the client's
 * input (a `$ref` inlined at every use, a definition's description copied each time) is counted
 * as it is built and refused by name the moment it passes the budget, so no request can make the
 * gateway build (and send) hundreds of megabytes from a body of kilobytes.
 */
export class ExpansionBudget {
  readonly maxBytes: number
  #left: number
  constructor(maxBytes: number = DEFAULT_EXPANSION_BYTES) {
    this.maxBytes = maxBytes
    this.#left = maxBytes
  }

  /** Counts `bytes` built for `path`; past the budget the translation stops with a refusal naming it. */
  charge(bytes: number, path: string): void {
    this.#left -= bytes
    if (this.#left < 0) {
      throw new Untranslatable({
        path,
        message: `${path}: translating it would build more than ${this.maxBytes} bytes (what the request expands to for this provider, e.g. $refs inlined at every use); simplify it`,
        maxBytes: this.maxBytes
      })
    }
  }
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
