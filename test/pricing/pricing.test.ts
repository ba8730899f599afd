/**
 * Issue 33, the arithmetic of token prices (src/domain/pricing.ts) and `models[].price` in the
 * configuration: exact costs in micro-credits, the reservation bound with and without a named
 * output limit, the input over-estimate that does not read media as text.
 */
import { Result } from "effect"
import { describe, expect, it } from "vitest"
import { stringify } from "yaml"
import {
  boundMicros,
  costMicros,
  effectiveMaxOutputTokens,
  estimateInput,
  IMAGE_TOKENS,
  type ModelPricing,
  PROVIDER_OVERHEAD_TOKENS,
  priceMicros,
  tokenMicros,
  utf8Length
} from "../../src/domain/pricing.ts"
import { MAX_MICROS } from "../../src/domain/money.ts"
import { chatOutputText, messagesOutputText, responsesOutputText } from "../../src/pipelines/model/output-text.ts"
import { makeCatalog } from "../../src/services/catalog/ModelCatalog.ts"
import { resolveConfig } from "../../src/services/config/load.ts"

const sonnet: ModelPricing = { credits_micros: 0, price: priceMicros({ input: 3, output: 15, cache_read: 0.3, cache_write: 3.75 })! }

describe("cost", () => {
  it("is credits plus each kind of token at its price, rounded up once to the micro-credit", () => {
    // 700 x 3 + 300 x 0.3 + 200 x 3.75 + 40 x 15 = 2100 + 90 + 750 + 600 = 3540 micros exactly.
    expect(costMicros(sonnet, { input: 700, cache_read: 300, cache_write: 200, output: 40 })).toBe(3540)
    expect(costMicros({ ...sonnet, credits_micros: 2_000_000 }, { input: 700, cache_read: 300, cache_write: 200, output: 40 })).toBe(2_003_540)
    // One token at 0.3 credits per million is 0.3 micros: rounded up to 1, once for the whole sum.
    expect(costMicros(sonnet, { input: 0, cache_read: 1, cache_write: 0, output: 0 })).toBe(1)
    expect(costMicros(sonnet, { input: 0, cache_read: 10, cache_write: 0, output: 0 })).toBe(3)
    expect(costMicros(sonnet, { input: 0, cache_read: 0, cache_write: 0, output: 0 })).toBe(0)
  })

  it("prices at the finest decimal exactly (0.000001 credits per million tokens)", () => {
    const tiny: ModelPricing = { credits_micros: 0, price: priceMicros({ input: 0.000001, output: 0.000001 })! }
    expect(costMicros(tiny, { input: 999_999, cache_read: 0, cache_write: 0, output: 0 })).toBe(1)
    expect(costMicros(tiny, { input: 1_000_000, cache_read: 0, cache_write: 0, output: 1_000_000 })).toBe(2)
  })

  it("is exact where the products pass 2^53 (BigInt), and never above the largest amount", () => {
    // 10^9 tokens at 5,000,000.5 credits per million: 10^9 x 5,000,000,500,000 micros = 5.0000005e21.
    const dear: ModelPricing = { credits_micros: 0, price: priceMicros({ input: 5_000_000.5, output: 1 })! }
    expect(tokenMicros([[1_000_000_000, 5_000_000_500_000]])).toBe(5_000_000_500_000_000)
    expect(costMicros(dear, { input: 1_000_000_000, cache_read: 0, cache_write: 0, output: 0 })).toBe(5_000_000_500_000_000)
    // Rounding up a BigInt sum: 3 tokens x 333,333 micros per million = 999,999 -> 1 micro.
    expect(tokenMicros([[3, 333_333], [2 ** 40, 2 ** 23]])).toBe(Number((3n * 333_333n + 2n ** 63n + 999_999n) / 1_000_000n))
    expect(tokenMicros([[1_000_000_000, MAX_MICROS]])).toBe(MAX_MICROS)
  })

  it("a model without a price costs its credits whatever its tokens", () => {
    expect(costMicros({ credits_micros: 5_000_000 }, { input: 10_000, cache_read: 0, cache_write: 0, output: 10_000 })).toBe(5_000_000)
  })
})

describe("the reservation bound", () => {
  const body = { model: "m", messages: [{ role: "user", content: "hello" }] }

  it("reserves the named output limit at the output price and the input at the highest input-side price", () => {
    const input = estimateInput(body).tokens
    // cache_write (3.75) is the dearest input-side price.
    expect(boundMicros(sonnet, input, effectiveMaxOutputTokens({ ...body, max_tokens: 1000 }, 8000))).toBe(Math.ceil((input * 3_750_000 + 1000 * 15_000_000) / 1_000_000))
  })

  it("without a named limit reserves the model's cap; a limit above the cap is the cap", () => {
    expect(effectiveMaxOutputTokens(body, 8000)).toBe(8000)
    expect(effectiveMaxOutputTokens({ ...body, max_tokens: 100_000 }, 8000)).toBe(8000)
    expect(effectiveMaxOutputTokens({ ...body, max_completion_tokens: 300 }, 8000)).toBe(300)
    expect(effectiveMaxOutputTokens({ ...body, max_output_tokens: 700 }, 8000)).toBe(700)
    expect(effectiveMaxOutputTokens({ ...body, max_tokens: 300, max_completion_tokens: 500 }, 8000)).toBe(500)
  })

  it("never falls below the cost of what the provider can answer within it", () => {
    const input = estimateInput(body).tokens
    const bound = boundMicros(sonnet, input, 1000)
    // The provider's count of the input is at most the text's UTF-8 bytes; every kind at its own price is cheaper.
    expect(costMicros(sonnet, { input: 0, cache_read: 0, cache_write: input, output: 1000 })).toBeLessThanOrEqual(bound)
    expect(costMicros(sonnet, { input, cache_read: 0, cache_write: 0, output: 1000 })).toBeLessThanOrEqual(bound)
  })
})

describe("the input estimate", () => {
  const image = "data:image/png;base64," + "iVBORw0KGgo".repeat(100_000)

  it("counts text by its UTF-8 bytes, an upper bound on any byte-level tokenizer's count", () => {
    expect(utf8Length("héllo wörld")).toBe(Buffer.byteLength("héllo wörld"))
    expect(utf8Length("日本語 🎉")).toBe(Buffer.byteLength("日本語 🎉"))
    const text = estimateInput({ messages: [{ role: "user", content: "日本語のテキスト" }] })
    expect(text.tokens).toBeGreaterThanOrEqual(PROVIDER_OVERHEAD_TOKENS + Buffer.byteLength("日本語のテキスト"))
    expect(text.texts).toContain("日本語のテキスト")
  })

  it("does not read base64 media as text, in any client format", () => {
    const chat = estimateInput({ messages: [{ role: "user", content: [{ type: "text", text: "what is this" }, { type: "image_url", image_url: { url: image } }] }] })
    const messages = estimateInput({
      messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: image.slice(22) } }] }]
    })
    const responses = estimateInput({ input: [{ role: "user", content: [{ type: "input_image", image_url: image }] }] })
    for (const estimate of [chat, messages, responses]) {
      expect(estimate.mediaTokens).toBe(IMAGE_TOKENS)
      expect(estimate.tokens).toBeLessThan(IMAGE_TOKENS + PROVIDER_OVERHEAD_TOKENS + 200)
      expect(estimate.texts.some((text) => text.length > 1000)).toBe(false)
    }
  })

  it("counts a document or audio by its decoded size", () => {
    const pdf = "JVBERi0xLjQK".repeat(50_000)
    const estimate = estimateInput({ messages: [{ role: "user", content: [{ type: "document", source: { type: "base64", media_type: "application/pdf", data: pdf } }] }] })
    expect(estimate.mediaTokens).toBe(pdf.length * 3 / 4)
    const audio = estimateInput({ messages: [{ role: "user", content: [{ type: "input_audio", input_audio: { data: pdf, format: "wav" } }] }] })
    expect(audio.mediaTokens).toBe(pdf.length * 3 / 4)
  })
})

describe("models[].price in the configuration", () => {
  const load = (price: unknown, extra: Record<string, unknown> = {}) =>
    resolveConfig({
      fileText: stringify({
        providers: [{ name: "up", kind: "openai", base_url: "http://127.0.0.1:9", api_key: "sk-x" }],
        models: [{ alias: "m", id: "model-1", provider: "up", price, ...extra }]
      }),
      env: {}
    })

  it("takes decimals of credits per million tokens; cache prices default to the input price", () => {
    const result = load({ input: 2.5, output: 10 })
    expect(Result.isSuccess(result)).toBe(true)
    const config = Result.getOrThrow(result)
    const catalog = makeCatalog(config)
    expect(catalog.lookup("m")!.model.pricing.price).toEqual({ input: 2_500_000, output: 10_000_000, cache_read: 2_500_000, cache_write: 2_500_000 })
    const cached = makeCatalog(Result.getOrThrow(load({ input: 3, output: 15, cache_read: 0.3, cache_write: 3.75 })))
    expect(cached.lookup("m")!.model.pricing.price).toEqual({ input: 3_000_000, output: 15_000_000, cache_read: 300_000, cache_write: 3_750_000 })
  })

  it("routes take a price like credits", () => {
    const config = Result.getOrThrow(resolveConfig({
      fileText: stringify({
        providers: [{ name: "up", kind: "openai", base_url: "http://127.0.0.1:9", api_key: "sk-x" }],
        models: [{ match: "gpt-*", provider: "up", credits: 0, price: { input: 1.25, output: 10 } }]
      }),
      env: {}
    }))
    expect(makeCatalog(config).lookup("gpt-9")!.model.pricing).toEqual({ credits_micros: 0, price: { input: 1_250_000, output: 10_000_000, cache_read: 1_250_000, cache_write: 1_250_000 } })
  })

  it.each([
    [{ input: 0.0000001, output: 1 }, "models.0.price.input"],
    [{ input: 1, output: -1 }, "models.0.price.output"],
    [{ input: 1, output: 1, cache_read: "cheap" }, "models.0.price.cache_read"],
    [{ input: 1 }, "models.0.price.output"],
    [{ input: 1, output: 1, cache_write: 1e12 }, "models.0.price.cache_write"]
  ])("refuses %j, naming the field", (price, field) => {
    const result = load(price)
    expect(Result.isFailure(result)).toBe(true)
    if (Result.isFailure(result)) expect(result.failure.message).toContain(field)
  })
})

describe("the text a stream relayed, in each client format", () => {
  it("Chat Completions: content, reasoning, refusals and tool calls", () => {
    const chunk = { choices: [{ index: 0, delta: { content: "Hi", reasoning_content: " think", tool_calls: [{ index: 0, function: { name: "f", arguments: "{\"a\":1}" } }] } }] }
    expect(chatOutputText({ data: JSON.stringify(chunk) })).toBe("Hi thinkf{\"a\":1}")
    expect(chatOutputText({ data: JSON.stringify({ choices: [], usage: { prompt_tokens: 1 } }) })).toBe("")
  })

  it("Messages: text, thinking and tool input deltas, a tool's name", () => {
    const delta = (d: Record<string, unknown>) => ({ event: "content_block_delta", data: JSON.stringify({ type: "content_block_delta", index: 0, delta: d }) })
    expect(messagesOutputText(delta({ type: "text_delta", text: "Hello" }))).toBe("Hello")
    expect(messagesOutputText(delta({ type: "thinking_delta", thinking: "hmm" }))).toBe("hmm")
    expect(messagesOutputText(delta({ type: "input_json_delta", partial_json: "{\"q\":" }))).toBe("{\"q\":")
    expect(messagesOutputText({ event: "content_block_start", data: JSON.stringify({ type: "content_block_start", index: 1, content_block: { type: "tool_use", id: "t", name: "search", input: {} } }) })).toBe("search")
    expect(messagesOutputText({ event: "message_delta", data: JSON.stringify({ type: "message_delta", delta: {}, usage: { output_tokens: 3 } }) })).toBe("")
  })

  it("Responses: every delta event", () => {
    const event = (type: string, delta: string) => ({ event: type, data: JSON.stringify({ type, delta }) })
    expect(responsesOutputText(event("response.output_text.delta", "Hi"))).toBe("Hi")
    expect(responsesOutputText(event("response.function_call_arguments.delta", "{}"))).toBe("{}")
    expect(responsesOutputText(event("response.reasoning_text.delta", "so"))).toBe("so")
    expect(responsesOutputText({ event: "response.completed", data: "{}" })).toBe("")
  })
})
