/**
 * The GenAI answer attributes a provider span gets, from each wire the providers speak: ids,
 * models, counts and finish reasons, and nothing of the content.
 */
import { describe, expect, it } from "vitest"
import { responseAttributes } from "../../../src/services/providers/upstream-span.ts"

describe("responseAttributes", () => {
  it("reads Anthropic Messages", () => {
    expect(responseAttributes({
      id: "msg_1",
      model: "claude-sonnet-4-5",
      content: [{ type: "text", text: "secret answer" }],
      stop_reason: "end_turn",
      usage: { input_tokens: 12, output_tokens: 3 }
    })).toEqual({
      "gen_ai.response.id": "msg_1",
      "gen_ai.response.model": "claude-sonnet-4-5",
      "gen_ai.response.finish_reasons": ["end_turn"],
      "gen_ai.usage.input_tokens": 12,
      "gen_ai.usage.output_tokens": 3
    })
  })

  it("reads Gemini generateContent", () => {
    expect(responseAttributes({
      candidates: [{ content: { parts: [{ text: "secret answer" }] }, finishReason: "STOP" }],
      usageMetadata: { promptTokenCount: 7, candidatesTokenCount: 5 },
      modelVersion: "gemini-2.5-flash",
      responseId: "r-1"
    })).toEqual({
      "gen_ai.response.id": "r-1",
      "gen_ai.response.model": "gemini-2.5-flash",
      "gen_ai.response.finish_reasons": ["STOP"],
      "gen_ai.usage.input_tokens": 7,
      "gen_ai.usage.output_tokens": 5
    })
  })

  it("reads Bedrock Converse and the Responses API", () => {
    expect(responseAttributes({ output: { message: {} }, stopReason: "max_tokens", usage: { inputTokens: 4, outputTokens: 9 } })).toEqual({
      "gen_ai.response.finish_reasons": ["max_tokens"],
      "gen_ai.usage.input_tokens": 4,
      "gen_ai.usage.output_tokens": 9
    })
    expect(responseAttributes({ id: "resp_1", model: "gpt-5", status: "completed", output: [], usage: { input_tokens: 2, output_tokens: 1 } })).toMatchObject({
      "gen_ai.response.finish_reasons": ["completed"],
      "gen_ai.usage.input_tokens": 2
    })
  })

  it("takes nothing from what is not an answer, and never content", () => {
    expect(responseAttributes(null)).toEqual({})
    expect(responseAttributes("text")).toEqual({})
    const attributes = responseAttributes({ choices: [{ message: { content: "secret answer" }, finish_reason: "stop" }] })
    expect(attributes).toEqual({ "gen_ai.response.finish_reasons": ["stop"] })
    expect(JSON.stringify(attributes)).not.toContain("secret")
  })
})
