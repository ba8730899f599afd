/**
 * LangChain's chat models, unmodified, through the gateway: `ChatOpenAI` (Chat Completions) and
 * `ChatAnthropic` (Messages), each against both provider kinds: invoke, stream, a tool loop
 * (the second turn carries LangChain's `tool` message with its `name`) and structured output.
 */
import { ChatAnthropic } from "@langchain/anthropic"
import type { BaseChatModel } from "@langchain/core/language_models/chat_models"
import { AIMessage, HumanMessage, ToolMessage } from "@langchain/core/messages"
import { tool } from "@langchain/core/tools"
import { ChatOpenAI } from "@langchain/openai"
import { beforeAll, describe, expect, it } from "vitest"
import { z } from "zod"
import { type ProviderUnderTest, useModelGateway } from "../support/model-gateway.ts"

const fixture = useModelGateway()
let key: string

beforeAll(async () => {
  key = (await fixture.gateway().createKey()).key
})

const CLIENTS: ReadonlyArray<{ readonly name: string; readonly model: (alias: string) => BaseChatModel }> = [
  {
    name: "ChatOpenAI",
    model: (alias) => new ChatOpenAI({ model: alias, apiKey: key, maxRetries: 0, configuration: { baseURL: `${fixture.gateway().url}/v1` } })
  },
  {
    name: "ChatAnthropic",
    model: (alias) => new ChatAnthropic({ model: alias, apiKey: key, maxRetries: 0, maxTokens: 1024, anthropicApiUrl: fixture.gateway().url })
  }
]

const weather = tool(async ({ city }: { city: string }) => JSON.stringify({ city, celsius: 21 }), {
  name: "weather",
  description: "The weather in a city",
  schema: z.object({ city: z.string() })
})

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
    it("invoke", async () => {
      const reply = await client.model(provider.model).invoke([new HumanMessage("hello there")])
      expect(reply.content).toBe("echo: hello there")
    })

    it("stream", async () => {
      let text = ""
      for await (const chunk of await client.model(provider.model).stream([new HumanMessage("stream me")])) {
        text += typeof chunk.content === "string" ? chunk.content : chunk.content.map((c) => ("text" in c ? c.text : "")).join("")
      }
      expect(text).toBe("echo: stream me")
    })

    it("a tool loop: the tool call, then the ToolMessage turn", async () => {
      provider.fake().enqueue(
        { kind: "tool_calls", calls: [{ name: "weather", arguments: { city: "Oslo" } }] },
        { kind: "text", text: "It is 21 degrees in Oslo." }
      )
      const model = client.model(provider.model).bindTools!([weather])
      const history: Array<HumanMessage | AIMessage | ToolMessage> = [new HumanMessage("What is the weather in Oslo?")]
      const first = await model.invoke(history)
      expect(first.tool_calls).toHaveLength(1)
      expect(first.tool_calls![0]).toMatchObject({ name: "weather", args: { city: "Oslo" } })
      history.push(first)
      history.push(await weather.invoke(first.tool_calls![0]!) as ToolMessage)
      const second = await model.invoke(history)
      expect(second.content).toBe("It is 21 degrees in Oslo.")
      expect(provider.fake().requests).toHaveLength(2)
    })

    it("structured output (withStructuredOutput)", async () => {
      scriptObject(provider, { name: "Ada", languages: ["en", "fr"] })
      const model = client.model(provider.model).withStructuredOutput(z.object({ name: z.string(), languages: z.array(z.string()) }))
      const result = await model.invoke("Describe Ada as JSON")
      expect(result).toEqual({ name: "Ada", languages: ["en", "fr"] })
    })
  })
})
