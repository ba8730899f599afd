/**
 * OpenAI's legacy completions (`POST /v1/completions`) and moderations (`POST /v1/moderations`)
 * request formats, as the gateway checks them before forwarding (issue 24 item 3). The field
 * lists are the `openai` SDK's `CompletionCreateParamsBase` and `ModerationCreateParams`; a field
 * that is not part of them is refused by name (as on `/v1/chat/completions`), one that is is
 * never refused for being unknown. Both are forwarded as sent (model id replaced, the output cap
 * applied): the vendor judges the values it alone knows (logit bias token ids, model names).
 */
import { Schema } from "effect"
import { type DecodeResult, Int, JsonObject, makeDecoder, NonEmptyString, NonNegativeInt, numberBetween } from "./decode.ts"

const nullable = <S extends Schema.Top>(schema: S) => Schema.optionalKey(Schema.NullOr(schema))

const Token = NonNegativeInt

/**
 * A prompt: text, texts, token ids or lists of token ids (the SDK's four forms). A list of several
 * prompts is answered with one completion each, so, like `n` and `best_of` above 1, it would buy
 * many answers for one request's price (issue 32 item 5): one prompt per request, as chat's `n`.
 */
const Prompt = Schema.Union([
  Schema.String,
  Schema.Array(Schema.String),
  Schema.Array(Token),
  Schema.Array(Schema.Array(Token))
]).annotate({ expected: "a string, an array of token ids, or a one-element array of either" }).check(
  Schema.makeFilter(
    (prompt: string | ReadonlyArray<unknown>) => typeof prompt === "string" || prompt.length <= 1 || typeof prompt[0] === "number",
    { expected: "a single prompt (one completion per request, for one request's price: send one request per prompt)" }
  )
)

/** One answer per request, as `n` on /v1/chat/completions: more would be answered for one request's price. */
const onlyOne = Schema.optionalKey(
  Schema.NullOr(Schema.Literal(1)).annotate({ message: "only 1 is supported (one answer per request, as on /v1/chat/completions)" })
)

const Stop = Schema.Union([
  Schema.String,
  Schema.Array(Schema.String).check(
    Schema.makeFilter((stops: ReadonlyArray<string>) => stops.length <= 4, { expected: "at most 4 stop sequences" })
  )
]).annotate({ expected: "a string or an array of up to 4 strings" })

const Penalty = numberBetween(-2, 2)

export const LegacyCompletionRequestSchema = Schema.Struct({
  model: NonEmptyString,
  prompt: Schema.NullOr(Prompt),
  best_of: onlyOne,
  echo: nullable(Schema.Boolean),
  frequency_penalty: nullable(Penalty),
  logit_bias: nullable(Schema.Record(Schema.String, numberBetween(-100, 100))),
  logprobs: nullable(Int.check(Schema.makeFilter((n: number) => n >= 0 && n <= 5, { expected: "an integer between 0 and 5" }))),
  max_tokens: nullable(NonNegativeInt),
  n: onlyOne,
  presence_penalty: nullable(Penalty),
  seed: nullable(Int),
  stop: nullable(Stop),
  stream: nullable(Schema.Boolean),
  stream_options: nullable(
    Schema.Struct({ include_usage: Schema.optionalKey(Schema.Boolean), include_obfuscation: Schema.optionalKey(Schema.Boolean) })
  ),
  suffix: nullable(Schema.String),
  temperature: nullable(numberBetween(0, 2)),
  top_p: nullable(numberBetween(0, 1)),
  user: Schema.optionalKey(Schema.String)
})

export type LegacyCompletionRequest = typeof LegacyCompletionRequestSchema.Type

const decodeCompletion = makeDecoder(LegacyCompletionRequestSchema)

/** Validates a `/v1/completions` body; a failure names the offending field's path. */
export const decodeLegacyCompletionRequest = (body: unknown): DecodeResult<LegacyCompletionRequest> => decodeCompletion(body)

/** Text, texts, or multi-modal parts (`text` and `image_url` objects: the provider checks them). */
const ModerationInput = Schema.Union([
  NonEmptyString,
  Schema.Array(Schema.String).check(
    Schema.makeFilter((inputs: ReadonlyArray<string>) => inputs.length >= 1, { expected: "a non-empty array" })
  ),
  Schema.Array(JsonObject).check(
    Schema.makeFilter((inputs: ReadonlyArray<unknown>) => inputs.length >= 1, { expected: "a non-empty array" })
  )
]).annotate({ expected: "a string, an array of strings or an array of input parts" })

export const ModerationRequestSchema = Schema.Struct({
  input: ModerationInput,
  model: Schema.optionalKey(NonEmptyString)
})

export type ModerationRequest = typeof ModerationRequestSchema.Type

const decodeModeration = makeDecoder(ModerationRequestSchema)

/** Validates a `/v1/moderations` body; a failure names the offending field's path. */
export const decodeModerationRequest = (body: unknown): DecodeResult<ModerationRequest> => decodeModeration(body)
