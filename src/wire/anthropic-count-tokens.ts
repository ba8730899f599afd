/**
 * `POST /v1/messages/count_tokens` (Anthropic): the request is a Messages request without the
 * generation fields. The gateway needs only `model` and `messages`; everything else is the
 * provider's to judge (it is forwarded as sent to Anthropic-kind providers) or counted as text
 * by the estimator.
 */
import { Schema } from "effect"
import { makeDecoder, NonEmptyString } from "./decode.ts"

const Content = Schema.Union([Schema.String, Schema.Array(Schema.Unknown)])

const Message = Schema.Union([
  Schema.Struct({ role: Schema.Literals(["user", "assistant"]), content: Content }),
  // A system turn inside `messages` (Claude Code sends them, issue 34): counted like the others.
  Schema.Struct({ role: Schema.Literal("system"), content: Schema.optionalKey(Content) })
])

export const CountTokensRequestSchema = Schema.Struct({
  model: NonEmptyString,
  messages: Schema.Array(Message)
})
export type CountTokensRequest = typeof CountTokensRequestSchema.Type

const decode = makeDecoder(CountTokensRequestSchema, { excess: "ignore" })

/** Only the fields the gateway relies on are checked; the rest is kept in the raw body. */
export const decodeCountTokensRequest = (body: unknown) => decode(body)
