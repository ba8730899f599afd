/**
 * The Vercel AI SDK, unmodified, through the gateway: `@ai-sdk/anthropic` on /v1/messages,
 * `@ai-sdk/openai`'s Chat Completions model and `@ai-sdk/openai-compatible` on
 * /v1/chat/completions, each against both provider kinds (passthrough and translation): text,
 * streamed text, a multi-step tool loop (streamed and not) and structured output. The fakes
 * refuse what the real APIs refuse, so a field the gateway mistranslates fails here.
 */
import { createAnthropic } from "@ai-sdk/anthropic"
import { createOpenAI } from "@ai-sdk/openai"
import { createOpenAICompatible } from "@ai-sdk/openai-compatible"
import { generateObject, generateText, type LanguageModel, stepCountIs, streamText, tool } from "ai"
import { beforeAll, describe, expect, it } from "vitest"
import { z } from "zod"
import type { FakeUpstream } from "../support/fake-common.ts"
import { type ProviderUnderTest, useModelGateway } from "../support/model-gateway.ts"

const fixture = useModelGateway()
let key: string

beforeAll(async () => {
  key = (await fixture.gateway().createKey()).key
})

interface ClientUnderTest {
  readonly name: string
  readonly model: (alias: string) => LanguageModel
}

const CLIENTS: ReadonlyArray<ClientUnderTest> = [
  {
    name: "@ai-sdk/anthropic",
    model: (alias) => createAnthropic({ apiKey: key, baseURL: `${fixture.gateway().url}/v1` })(alias)
  },
  {
    name: "@ai-sdk/openai .chat()",
    model: (alias) => createOpenAI({ apiKey: key, baseURL: `${fixture.gateway().url}/v1` }).chat(alias)
  },
  {
    name: "@ai-sdk/openai-compatible",
    model: (alias) => createOpenAICompatible({ name: "modelgate", apiKey: key, baseURL: `${fixture.gateway().url}/v1`, includeUsage: true }).chatModel(alias)
  }
]

const weather = tool({
  description: "The weather in a city",
  inputSchema: z.object({ city: z.string() }),
  execute: async ({ city }) => ({ city, celsius: 21 })
})

/** The fake answers the first turn with a tool call, the second with text that uses the result. */
const scriptToolLoop = (fake: FakeUpstream) =>
  fake.enqueue(
    { kind: "tool_calls", calls: [{ name: "weather", arguments: { city: "Oslo" } }] },
    { kind: "text", text: "It is 21 degrees in Oslo." }
  )

/**
 * Structured output: the fake answers with the tool the request forces (a client's own
 * extraction tool, or the tool by which the gateway emulates JSON mode toward Anthropic), or
 * with the JSON as text when nothing is forced.
 */
const scriptObject = (provider: ProviderUnderTest, value: Record<string, unknown>) =>
  provider.fake().setDefault((body) => {
    const forced: unknown = body.tool_choice?.function?.name ?? body.tool_choice?.name
    return typeof forced === "string"
      ? { kind: "tool_calls", calls: [{ name: forced, arguments: value }] }
      : { kind: "text", text: JSON.stringify(value) }
  })

describe.each(CLIENTS)("$name", (client) => {
  describe.each(fixture.providers)("-> $kind-kind provider", (provider) => {
    it("generateText", async () => {
      const result = await generateText({ model: client.model(provider.model), prompt: "hello there", maxRetries: 0 })
      expect(result.text).toBe("echo: hello there")
      expect(result.usage.inputTokens).toBeGreaterThan(0)
      expect(provider.fake().requests).toHaveLength(1)
    })

    it("streamText", async () => {
      const result = streamText({ model: client.model(provider.model), prompt: "stream me", maxRetries: 0 })
      let text = ""
      for await (const delta of result.textStream) text += delta
      expect(text).toBe("echo: stream me")
      expect((await result.usage).outputTokens).toBeGreaterThan(0)
    })

    it("a multi-step tool loop (generateText)", async () => {
      scriptToolLoop(provider.fake())
      const result = await generateText({
        model: client.model(provider.model),
        prompt: "What is the weather in Oslo?",
        tools: { weather },
        stopWhen: stepCountIs(3),
        maxRetries: 0
      })
      expect(result.text).toBe("It is 21 degrees in Oslo.")
      expect(result.steps).toHaveLength(2)
      expect(result.steps[0]!.toolResults[0]).toMatchObject({ toolName: "weather", output: { city: "Oslo", celsius: 21 } })
      expect(provider.fake().requests).toHaveLength(2)
    })

    it("a multi-step tool loop (streamText)", async () => {
      scriptToolLoop(provider.fake())
      const result = streamText({
        model: client.model(provider.model),
        prompt: "What is the weather in Oslo?",
        tools: { weather },
        stopWhen: stepCountIs(3),
        maxRetries: 0
      })
      let text = ""
      for await (const delta of result.textStream) text += delta
      expect(text).toBe("It is 21 degrees in Oslo.")
      expect((await result.steps)).toHaveLength(2)
    })

    it("structured output (generateObject)", async () => {
      scriptObject(provider, { name: "Ada", languages: ["en", "fr"] })
      const result = await generateObject({
        model: client.model(provider.model),
        schema: z.object({ name: z.string(), languages: z.array(z.string()) }),
        prompt: "Describe Ada as JSON",
        maxRetries: 0
      })
      expect(result.object).toEqual({ name: "Ada", languages: ["en", "fr"] })
    })
  })
})
