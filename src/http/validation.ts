/** Decoding untrusted input with Schema into a ValidationFailed that names the offending field. */
import { Effect, Result, Schema, SchemaIssue } from "effect"
import { ValidationFailed } from "../domain/errors.ts"

const formatter = SchemaIssue.makeFormatterStandardSchemaV1()

export interface FieldProblem {
  readonly path: string
  readonly message: string
}

const describe = (message: string) => (message === "Expected no excess property" ? "unknown field" : message.replace(/^Expected /, "expected "))

export const firstProblem = (error: Schema.SchemaError): FieldProblem => {
  const issue = formatter(error.issue).issues[0]
  const path = (issue?.path ?? []).map((segment) => String(typeof segment === "object" ? segment.key : segment)).join(".")
  return { path, message: describe(issue?.message ?? "invalid value") }
}

export const problemToError = (problem: FieldProblem, status: 400 | 422 = 400) =>
  new ValidationFailed({
    message: problem.path === "" ? problem.message : `${problem.path}: ${problem.message}`,
    details: { field: problem.path },
    status
  })

/** Decode with unknown fields refused anywhere in the value. */
export const decodeStrict = <S extends Schema.Top & { readonly DecodingServices: never }>(schema: S) => {
  const decode = Schema.decodeUnknownResult(schema as never)
  return (input: unknown): Effect.Effect<S["Type"], ValidationFailed> => {
    const result = decode(input, { onExcessProperty: "error" }) as Result.Result<S["Type"], Schema.SchemaError>
    return Result.isSuccess(result) ? Effect.succeed(result.success) : Effect.fail(problemToError(firstProblem(result.failure)))
  }
}
