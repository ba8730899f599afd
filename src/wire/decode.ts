import * as Predicate from "effect/Predicate"
import * as Result from "effect/Result"
import * as Schema from "effect/Schema"
import * as SchemaAST from "effect/SchemaAST"
import * as SchemaIssue from "effect/SchemaIssue"
/** Outcome of validating a request body: the typed value, or the first problem with its field path. */
export type DecodeResult<A> =
  | { readonly ok: true; readonly value: A }
  | { readonly ok: false; readonly path: string; readonly message: string }

/**
 * Annotation key marking a union whose members are chosen by one literal field (`role`, `type`).
 * It lets the error walker say "messages.1.role: expected one of ..." instead of listing every
 * member's failure.
 */
const discriminatorKey = "modelgate/discriminator"

interface Discriminator {
  readonly key: string
  readonly values: ReadonlyArray<string>
}

type TaggedMember = Schema.Top & { readonly DecodingServices: never }

/** The string literal(s) the member's `key` field takes (`openStruct` members may take several). */
const literalsOf = (member: TaggedMember, key: string): Array<string> => {
  const ast = member.ast
  const property = ast._tag === "Objects" ? ast.propertySignatures.find((p) => p.name === key) : undefined
  const type = property?.type
  const values = type === undefined
    ? []
    : type._tag === "Literal"
    ? [type.literal]
    : type._tag === "Union"
    ? type.types.map((t) => (t._tag === "Literal" ? t.literal : undefined))
    : []
  if (values.length === 0 || !values.every(Predicate.isString)) {
    throw new Error(`union member has no string literal field "${key}"`)
  }
  return values
}

/**
 * A union of objects told apart by the literal value of `key`. Effect's union parser already
 * dispatches on such a field; the annotation only improves the error message.
 */
export const taggedUnion = <const Members extends ReadonlyArray<TaggedMember>>(key: string, members: Members) => {
  const values = members.flatMap((member) => literalsOf(member, key))
  const discriminator: Discriminator = { key, values: [...new Set(values)] }
  return Schema.Union(members).annotate({ [discriminatorKey]: discriminator, expected: "an object" })
}

/**
 * Marks a union whose members are told apart by `key` although one of them leaves it optional
 * (an Anthropic custom tool may omit `type: "custom"`), so an unknown value is reported as such.
 */
export const discriminatedBy = <S extends Schema.Top>(schema: S, key: string, values: ReadonlyArray<string>): S =>
  schema.annotate({ [discriminatorKey]: { key, values } satisfies Discriminator }) as S

/** Schema for a JSON object with arbitrary keys (JSON Schema documents, tool inputs). */
export const JsonObject = Schema.Record(Schema.String, Schema.Unknown).annotate({ expected: "an object" })

/** A JSON Schema object whose top-level `type`, when given, must be "object". */
export const ObjectJsonSchema = JsonObject.check(
  Schema.makeFilter((schema: Readonly<Record<string, unknown>>) =>
    schema["type"] === undefined || schema["type"] === "object"
      ? undefined
      : { path: ["type"], issue: new SchemaIssue.InvalidValue({ message: 'expected "object"' }) }
  )
)

/** The same, with `type: "object"` required (Anthropic `input_schema`). */
export const RequiredObjectJsonSchema = JsonObject.check(
  Schema.makeFilter((schema: Readonly<Record<string, unknown>>) =>
    schema["type"] === "object"
      ? undefined
      : {
        path: ["type"],
        issue: new SchemaIssue.InvalidValue({
          message: schema["type"] === undefined ? "required field missing" : 'expected "object"'
        })
      }
  )
)

export const NonEmptyString = Schema.String.check(Schema.isMinLength(1, { expected: "a non-empty string" }))

export const PositiveInt = Schema.Number.check(
  Schema.makeFilter((n: number) => Number.isInteger(n) && n > 0, { expected: "a positive integer" })
)

export const NonNegativeInt = Schema.Number.check(
  Schema.makeFilter((n: number) => Number.isInteger(n) && n >= 0, { expected: "an integer >= 0" })
)

export const Int = Schema.Number.check(Schema.isInt({ expected: "an integer" }))

export const numberBetween = (minimum: number, maximum: number) =>
  Schema.Number.check(
    Schema.makeFilter((n: number) => n >= minimum && n <= maximum, {
      expected: `a number between ${minimum} and ${maximum}`
    })
  )

/**
 * An object with the listed fields, which also accepts any other key (its value unchecked). Used
 * for the parts of a vendor format the gateway carries as a unit without reading inside them
 * (server tool definitions, server tool results): strict decoding still refuses unknown fields
 * around them, and a translator refuses or forwards them whole.
 */
export const openStruct = <const Fields extends Schema.Struct.Fields>(fields: Fields) =>
  Schema.StructWithRest(Schema.Struct(fields), [Schema.Record(Schema.String, Schema.Unknown)])

/**
 * How a decoder treats fields its schema does not name: `"error"` refuses them at every depth
 * (strict: the gateway reads and translates the whole body), `"ignore"` leaves them out of the
 * typed value (passthrough: the raw body is forwarded, the vendor judges what it does not model).
 */
export type ExcessFields = "error" | "ignore"

/**
 * Builds a decoder for a request schema. Only the first problem is reported: a client fixes one
 * field at a time anyway.
 */
export const makeDecoder = <S extends Schema.Top & { readonly DecodingServices: never }>(
  schema: S,
  options: { readonly excess?: ExcessFields } = {}
) => {
  const whole = decoderOf<S["Type"]>(schema, options.excess ?? "error")
  const fields = (schema as { readonly fields?: Schema.Struct.Fields }).fields
  return fields === undefined || (options.excess ?? "error") !== "error" ? whole : byFieldsPresent(schema, fields, whole)
}

const decoderOf = <A>(schema: Schema.Top & { readonly DecodingServices: never }, excess: ExcessFields) => {
  const decode = Schema.decodeUnknownResult(schema, { onExcessProperty: excess, errors: "first" })
  return (body: unknown): DecodeResult<A> => {
    const result = decode(body)
    if (Result.isSuccess(result)) return { ok: true, value: result.success as A }
    const found = firstProblem(result.failure.issue, [], body)
    const path = found.path.map(String).join(".")
    return { ok: false, path, message: `${path === "" ? "body" : path}: ${found.message}` }
  }
}

/** Key sets remembered per strict struct decoder; past it, bodies of a new shape take the whole struct. */
const KEY_SETS = 64

/**
 * A strict struct decoder that decodes a body against the struct of the fields it has, built
 * once per key set (a client sends the same few, in the same order, request after request): a
 * chat body names 3 to 8 of the format's 37 fields, and Effect Schema's struct parser visits
 * every field of the schema, present or not, allocating as it goes (issue 38). Same field schemas,
 * same struct checks, same output; a body with a field the schema does not name, or without a
 * required one, takes the whole struct, whose refusal names it.
 */
const byFieldsPresent = <S extends Schema.Top & { readonly DecodingServices: never }>(
  schema: S,
  fields: Schema.Struct.Fields,
  whole: (body: unknown) => DecodeResult<S["Type"]>
) => {
  const required = Object.keys(fields).filter((name) => !SchemaAST.isOptional(fields[name]!.ast))
  const checks = schema.ast.checks
  const bySet = new Map<string, (body: unknown) => DecodeResult<S["Type"]>>()
  const narrowed = (keys: ReadonlyArray<string>) => {
    const picked: Record<string, Schema.Struct.Fields[string]> = {}
    for (const name of Object.keys(fields)) if (keys.includes(name)) picked[name] = fields[name]!
    const struct = Schema.Struct(picked)
    // The struct's fields are the schema's own, which need no services (S's constraint).
    const narrow = (checks === undefined ? struct : struct.check(...checks)) as unknown as S
    return decoderOf<S["Type"]>(narrow, "error")
  }
  return (body: unknown): DecodeResult<S["Type"]> => {
    if (!Predicate.isObject(body) || Array.isArray(body)) return whole(body)
    const keys = Object.keys(body)
    const set = keys.join(",")
    let decode = bySet.get(set)
    if (decode === undefined) {
      if (bySet.size >= KEY_SETS || !keys.every((key) => Object.hasOwn(fields, key)) || !required.every((name) => keys.includes(name))) {
        return whole(body)
      }
      decode = narrowed(keys)
      bySet.set(set, decode)
    }
    return decode(body)
  }
}

interface Problem {
  readonly path: ReadonlyArray<PropertyKey>
  readonly message: string
}

const valueAt = (root: unknown, path: ReadonlyArray<PropertyKey>): unknown => {
  let current = root
  for (const key of path) {
    if (!Predicate.isObjectOrArray(current)) return undefined
    current = (current as Record<PropertyKey, unknown>)[key]
  }
  return current
}

const annotationString = (annotations: SchemaAST.AST["annotations"], key: string): string | undefined => {
  const value = annotations?.[key]
  return Predicate.isString(value) ? value : undefined
}

const describe = (ast: SchemaAST.AST): string => {
  const expected = annotationString(ast.annotations, "expected")
  if (expected !== undefined) return expected
  switch (ast._tag) {
    case "String":
      return "a string"
    case "Number":
      return "a number"
    case "Boolean":
      return "a boolean"
    case "Null":
      return "null"
    case "Literal":
      return JSON.stringify(ast.literal)
    case "Objects":
      return "an object"
    case "Arrays":
      return "an array"
    case "Union": {
      if (ast.types.every((member) => member._tag === "Literal")) {
        return `one of ${ast.types.map((member) => (member as SchemaAST.Literal).literal).join(", ")}`
      }
      const parts = [...new Set(ast.types.map(describe))]
      return parts.length <= 1 ? (parts[0] ?? "a valid value") : `${parts.slice(0, -1).join(", ")} or ${parts.at(-1)}`
    }
    default:
      return "a valid value"
  }
}

const leafMessage = (issue: SchemaIssue.Leaf): string => {
  switch (issue._tag) {
    case "InvalidType":
      return annotationString(issue.ast.annotations, "message") ?? `expected ${describe(issue.ast)}`
    case "InvalidValue": {
      const expected = annotationString(issue.annotations, "expected")
      return annotationString(issue.annotations, "message") ?? (expected === undefined ? "invalid value" : `expected ${expected}`)
    }
    case "MissingKey":
      return annotationString(issue.annotations, "message") ?? "required field missing"
    case "UnexpectedKey":
      return "unknown field"
    case "Forbidden":
      return "not allowed"
    case "OneOf":
      return "ambiguous value"
  }
}

const filterMessage = (issue: SchemaIssue.Filter): string | undefined => {
  const annotations = issue.filter.annotations
  const message = annotationString(annotations, "message")
  if (message !== undefined) return message
  const expected = annotationString(annotations, "expected")
  return expected === undefined ? undefined : `expected ${expected}`
}

/** A problem's depth: the member that got furthest into the input is the one the client meant. */
const depth = (problem: Problem): number => problem.path.length

/**
 * The field that told the union's members apart: the `taggedUnion` annotation, or else a literal
 * property of the object members (`{type: "ephemeral"}` inside `NullOr`) whose value the input
 * got wrong.
 */
const discriminatorOf = (ast: SchemaAST.Union, input: Readonly<Record<PropertyKey, unknown>>): Discriminator | undefined => {
  const annotated = ast.annotations?.[discriminatorKey] as Discriminator | undefined
  if (annotated !== undefined) return annotated
  const literals = new Map<string, Array<string>>()
  for (const member of ast.types) {
    if (member._tag !== "Objects") continue
    for (const property of member.propertySignatures) {
      if (property.type._tag !== "Literal" || !Predicate.isString(property.name)) continue
      const values = literals.get(property.name) ?? []
      values.push(String(property.type.literal))
      literals.set(property.name, values)
    }
  }
  for (const [key, values] of literals) {
    if (!values.includes(String(input[key]))) return { key, values }
  }
  return undefined
}

const discriminatorProblem = (
  discriminator: Discriminator,
  input: Readonly<Record<PropertyKey, unknown>>,
  path: ReadonlyArray<PropertyKey>
): Problem => {
  const keyPath = [...path, discriminator.key]
  return discriminator.key in input
    ? {
      path: keyPath,
      message: discriminator.values.length === 1
        ? `expected ${JSON.stringify(discriminator.values[0])}`
        : `expected one of ${discriminator.values.join(", ")}`
    }
    : { path: keyPath, message: "required field missing" }
}

const unionProblem = (issue: SchemaIssue.AnyOf, path: ReadonlyArray<PropertyKey>, root: unknown): Problem => {
  const value = valueAt(root, path)
  const annotated = issue.ast.annotations?.[discriminatorKey] as Discriminator | undefined
  // A tag no member has: say so, rather than what an open member (`openStruct`) found wrong.
  if (
    annotated !== undefined && Predicate.isObject(value) && value[annotated.key] != null &&
    !annotated.values.includes(String(value[annotated.key]))
  ) {
    return discriminatorProblem(annotated, value, path)
  }
  if (issue.issues.length > 0) {
    const candidates = issue.issues.map((inner) => firstProblem(inner, path, root))
    return candidates.reduce((best, next) => (depth(next) > depth(best) ? next : best))
  }
  const input = valueAt(root, path)
  const discriminator = Predicate.isObject(input) ? discriminatorOf(issue.ast, input) : undefined
  if (discriminator !== undefined && Predicate.isObject(input)) return discriminatorProblem(discriminator, input, path)
  return { path, message: annotationString(issue.ast.annotations, "message") ?? `expected ${describe(issue.ast)}` }
}

const firstProblem = (issue: SchemaIssue.Issue, path: ReadonlyArray<PropertyKey>, root: unknown): Problem => {
  switch (issue._tag) {
    case "Pointer":
      return firstProblem(issue.issue, [...path, ...issue.path], root)
    case "Filter": {
      const inner = issue.issue
      if (inner._tag === "InvalidValue" && annotationString(inner.annotations, "message") === undefined) {
        return { path, message: filterMessage(issue) ?? "invalid value" }
      }
      return firstProblem(inner, path, root)
    }
    case "Encoding":
      return firstProblem(issue.issue, path, root)
    case "Composite":
      return firstProblem(issue.issues[0], path, root)
    case "AnyOf":
      return unionProblem(issue, path, root)
    default:
      return { path, message: leafMessage(issue) }
  }
}
