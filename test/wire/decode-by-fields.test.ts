/**
 * Strict struct decoders decode a body against the struct of the fields it names, built once per
 * key set (src/wire/decode.ts, issue 38). The answer must be the whole struct's, for every body:
 * decoded values, refusals, their paths and messages, struct-level checks, and bodies past the
 * remembered key sets.
 */
import { Result, Schema } from "effect"
import { describe, expect, it } from "vitest"
import { decodeChatRequest } from "../../src/wire/index.ts"
import { ChatRequestSchema } from "../../src/wire/openai-chat.ts"
import { makeDecoder } from "../../src/wire/decode.ts"

const whole = Schema.decodeUnknownResult(ChatRequestSchema, { onExcessProperty: "error", errors: "first" })
const user = [{ role: "user", content: "Hello" }]

const bodies: ReadonlyArray<readonly [string, unknown]> = [
  ["the smallest body", { model: "m", messages: user }],
  ["the same keys in another order", { messages: user, model: "m" }],
  ["a few optional fields", { model: "m", messages: user, max_tokens: 64, temperature: 0.2, stream: false }],
  ["a struct check (stream_options without stream)", { model: "m", messages: user, stream_options: { include_usage: true } }],
  ["the struct check passing", { model: "m", messages: user, stream: true, stream_options: { include_usage: true } }],
  ["an unknown field", { model: "m", messages: user, bogus: 1 }],
  ["a missing required field", { messages: user, max_tokens: 5 }],
  ["a wrong value in a present field", { model: "m", messages: user, temperature: 9 }],
  ["an unknown field inside a present one", { model: "m", messages: [{ role: "user", content: "x", extra: true }] }],
  ["null where nullable", { model: "m", messages: user, max_tokens: null }],
  ["not an object", ["model"]]
]

describe("a strict decoder by the fields present", () => {
  it.each(bodies)("answers as the whole struct: %s", (_, body) => {
    const expected = whole(body)
    // Twice: the first builds the key set's decoder, the second uses it.
    for (let i = 0; i < 2; i++) {
      const got = decodeChatRequest(body)
      expect(got.ok).toBe(Result.isSuccess(expected))
      if (got.ok && Result.isSuccess(expected)) expect(got.value).toStrictEqual(expected.success)
      if (got.ok) expect(Object.keys(got.value)).toStrictEqual(Object.keys((expected as Result.Success<object, unknown>).success))
    }
  })

  it("refuses with the same path and message as the whole struct", () => {
    const decode = makeDecoder(ChatRequestSchema)
    const plain = (body: unknown) => {
      const result = whole(body)
      return Result.isSuccess(result) ? "ok" : "failed"
    }
    for (const [, body] of bodies) {
      const got = decode(body)
      expect(got.ok ? "ok" : "failed").toBe(plain(body))
    }
    expect(decode({ model: "m", messages: user, temperature: 9 })).toMatchObject({ ok: false, path: "temperature" })
    expect(decode({ model: "m", messages: user, stream_options: {} })).toMatchObject({ ok: false, path: "stream_options", message: "stream_options: only allowed when stream is true" })
    expect(decode({ messages: user })).toMatchObject({ ok: false, path: "model", message: "model: required field missing" })
  })

  it("stays exact past the key sets it remembers", () => {
    const decode = makeDecoder(ChatRequestSchema)
    const optional = ["temperature", "top_p", "max_tokens", "seed", "user", "store", "n", "logprobs"] as const
    const values: Record<(typeof optional)[number], unknown> = { temperature: 1, top_p: 1, max_tokens: 3, seed: 7, user: "u", store: false, n: 1, logprobs: false }
    // 2^8 subsets in two orders: far more key sets than are remembered.
    for (let mask = 0; mask < 256; mask++) {
      const picked = optional.filter((_, i) => (mask & (1 << i)) !== 0)
      for (const keys of [picked, [...picked].reverse()]) {
        const body = { model: "m", messages: user, ...Object.fromEntries(keys.map((k) => [k, values[k]])) }
        const got = decode(body)
        const expected = whole(body)
        expect(got.ok).toBe(true)
        if (got.ok && Result.isSuccess(expected)) expect(got.value).toStrictEqual(expected.success)
      }
    }
    expect(decode({ model: "m", messages: user, bogus: true })).toMatchObject({ ok: false, path: "bogus" })
  })
})
