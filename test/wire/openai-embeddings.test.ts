import { Result } from "effect"
import { describe, expect, it } from "vitest"
import {
  auditUsageFromEmbeddings,
  decodeEmbeddingBase64,
  decodeEmbeddingsRequest,
  ECHO_MAX_DIMENSIONS,
  echoEmbedding,
  echoEmbeddingsResponse,
  embeddingInputs,
  type EmbeddingsRequest,
  encodeEmbeddingBase64,
  MAX_EMBEDDING_INPUTS
} from "../../src/wire/openai-embeddings.ts"
import { embeddingsThroughSdk } from "./responses-sdk.ts"
import { expectDecodesUnchanged } from "../support/decoded.ts"

const decoded = (body: unknown): EmbeddingsRequest => {
  const result = decodeEmbeddingsRequest(body)
  if (!result.ok) throw new Error(result.message)
  return result.value
}

const echo = (body: unknown) => {
  const result = echoEmbeddingsResponse(decoded(body), "echo-embed")
  if (Result.isFailure(result)) throw new Error(result.failure.message)
  return result.success
}

describe("decodeEmbeddingsRequest", () => {
  it("accepts every input shape and the SDK's default body", async () => {
    const long = Array.from({ length: 5000 }, (_, i) => i)
    for (const input of ["hello", ["a", "b"], [1, 2, 3], [[1, 2], [3]], long, [long, long]]) {
      expectDecodesUnchanged(decodeEmbeddingsRequest, { model: "m", input }, JSON.stringify(input))
    }
    const { sent } = await embeddingsThroughSdk(
      { model: "text-embedding-3-small", input: ["a"], dimensions: 8, user: "u" },
      (body) => echo(body)
    )
    // openai-node asks for base64 unless told otherwise.
    expect(sent).toEqual({ model: "text-embedding-3-small", input: ["a"], dimensions: 8, user: "u", encoding_format: "base64" })
    expectDecodesUnchanged(decodeEmbeddingsRequest, sent)
  })

  const cases: ReadonlyArray<readonly [string, unknown, string]> = [
    ["an unknown field", { model: "m", input: "x", truncate: true }, "truncate: unknown field"],
    ["a missing input", { model: "m" }, "input: required field missing"],
    ["a missing model", { input: "x" }, "model: required field missing"],
    ["a bad encoding", { model: "m", input: "x", encoding_format: "int8" }, "encoding_format: expected one of float, base64"],
    ["zero dimensions", { model: "m", input: "x", dimensions: 0 }, "dimensions: expected a positive integer"]
  ]
  for (const [name, body, message] of cases) {
    it(`refuses ${name}`, () => {
      const result = decodeEmbeddingsRequest(body)
      expect(result.ok ? "ok" : result.message).toBe(message)
    })
  }

  it("refuses empty and oversized inputs at input", () => {
    for (const input of ["", [], [""], [[]], Array.from({ length: MAX_EMBEDDING_INPUTS + 1 }, () => "x"), [1.5], { text: "x" }]) {
      const result = decodeEmbeddingsRequest({ model: "m", input })
      expect(result.ok, JSON.stringify(input).slice(0, 40)).toBe(false)
      if (!result.ok) expect(result.path.startsWith("input")).toBe(true)
    }
  })
})

describe("echo embeddings", () => {
  it("are deterministic unit vectors of the asked size", () => {
    const a = echoEmbedding("hello")
    expect(a).toHaveLength(256)
    expect(echoEmbedding("hello")).toEqual(a)
    expect(echoEmbedding("hello!")).not.toEqual(a)
    expect(echoEmbedding([1, 2, 3], 10)).toHaveLength(10)
    expect(echoEmbedding([1, 2, 3], 10)).not.toEqual(echoEmbedding("1,2,3", 10))
    const norm = Math.sqrt(a.reduce((sum, value) => sum + value * value, 0))
    expect(norm).toBeCloseTo(1, 5)
    expect(a.every((value) => Math.fround(value) === value)).toBe(true)
  })

  it("round-trip through base64 as float32 little-endian", () => {
    const vector = echoEmbedding("x", 5)
    const encoded = encodeEmbeddingBase64(vector)
    expect(Buffer.from(encoded, "base64")).toHaveLength(20)
    expect(Buffer.from(encoded, "base64").readFloatLE(4)).toBe(vector[1])
    expect(decodeEmbeddingBase64(encoded)).toEqual(vector)
  })

  it("reach the SDK's embeddings.create in base64 (its default) and as floats, with the same numbers", async () => {
    const base64 = await embeddingsThroughSdk({ model: "echo-embed", input: ["one two", "three"] }, (body) => echo(body))
    expect(base64.result.data.map((item) => item.embedding)).toEqual([echoEmbedding("one two"), echoEmbedding("three")])
    expect(base64.result.usage).toEqual({ prompt_tokens: 3, total_tokens: 3 })
    expect(base64.result.model).toBe("echo-embed")

    const floats = await embeddingsThroughSdk(
      { model: "echo-embed", input: [[5, 6, 7]], encoding_format: "float", dimensions: 3 },
      (body) => echo(body)
    )
    expect(floats.result.data).toEqual([{ object: "embedding", index: 0, embedding: echoEmbedding([5, 6, 7], 3) }])
    expect(floats.result.usage.prompt_tokens).toBe(3)
  })

  it("refuses more dimensions than the echo provider makes, naming dimensions", () => {
    const result = echoEmbeddingsResponse(decoded({ model: "m", input: "x", dimensions: ECHO_MAX_DIMENSIONS + 1 }), "m")
    expect(Result.isFailure(result) && result.failure.path).toBe("dimensions")
  })

  it("list one input per vector, and bill input tokens only", () => {
    expect(embeddingInputs("a")).toEqual(["a"])
    expect(embeddingInputs([1, 2])).toEqual([[1, 2]])
    expect(embeddingInputs([[1], [2]])).toEqual([[1], [2]])
    expect(auditUsageFromEmbeddings({ prompt_tokens: 7 })).toEqual({ input_tokens: 7, output_tokens: 0, cache_read_tokens: 0, cache_write_tokens: 0 })
  })
})
