/**
 * OpenAI's legacy completions (`POST /v1/completions`) and moderations (`POST /v1/moderations`)
 * request formats, as the gateway checks them before forwarding (issue 24 item 3). The field
 * lists are the `openai` SDK's `CompletionCreateParamsBase` and `ModerationCreateParams`; a field
 * that is not part of them is refused by name (as on `/v1/chat/completions`), one that is is
 * never refused for being unknown. Both are forwarded as sent (model id replaced, the output cap
 * applied): the vendor judges the values it alone knows (logit bias token ids, model names).
 */
import { Schema } from "effect"
import { type DecodeResult, Int, JsonObject, makeDecoder, NonEmptyString, NonNegativeInt, numberBetween, PositiveInt } from "./decode.ts"

const nullable = <S extends Schema.Top>(schema: S) => Schema.optionalKey(Schema.NullOr(schema))

const Token = NonNegativeInt

/** A prompt: text, texts, token ids or lists of token ids (the SDK's four forms). */
const Prompt = Schema.Union([
  Schema.String,
  Schema.Array(Schema.String),
  Schema.Array(Token),
  Schema.Array(Schema.Array(Token))
]).annotate({ expected: "a string, an array of strings, an array of token ids or an array of token arrays" })

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
  best_of: nullable(PositiveInt.check(Schema.makeFilter((n: number) => n <= 20, { expected: "an integer between 1 and 20" }))),
  echo: nullable(Schema.Boolean),
  frequency_penalty: nullable(Penalty),
  logit_bias: nullable(Schema.Record(Schema.String, numberBetween(-100, 100))),
  logprobs: nullable(Int.check(Schema.makeFilter((n: number) => n >= 0 && n <= 5, { expected: "an integer between 0 and 5" }))),
  max_tokens: nullable(NonNegativeInt),
  n: nullable(PositiveInt.check(Schema.makeFilter((n: number) => n <= 128, { expected: "an integer between 1 and 128" }))),
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
