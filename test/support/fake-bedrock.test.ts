/**
 * The fake Bedrock against AWS's own client, @aws-sdk/client-bedrock-runtime: what the SDK
 * sends, the fake accepts (its SigV4 verification agrees with the SDK's signer); what the fake
 * answers, the SDK reads (JSON, the binary event stream, the exceptions inside it, errors by
 * type). And what Bedrock refuses, the fake refuses, by the SDK's error classes.
 */
import {
  AccessDeniedException,
  BedrockRuntimeClient,
  ConverseCommand,
  type ConverseStreamOutput,
  ConverseStreamCommand,
  CountTokensCommand,
  InvokeModelCommand,
  ThrottlingException,
  ValidationException
} from "@aws-sdk/client-bedrock-runtime"
import { NodeHttpHandler } from "@smithy/node-http-handler"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { type FakeBedrock, startFakeBedrock } from "./fake-bedrock.ts"

const REGION = "us-west-2"
const KEY_ID = "AKIAFAKEBEDROCK00001"
const SECRET = "fake/bedrock+secret/0123456789abcdefghijkl"
const TOKEN = "FwoGZXIvYXdzEFAKESESSIONTOKEN0123456789"
const CLAUDE = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
const ARN = "arn:aws:bedrock:us-west-2:123456789012:inference-profile/us.anthropic.claude-haiku-4-5-20251001-v1:0"
const TITAN = "amazon.titan-embed-text-v2:0"
const COHERE = "cohere.embed-english-v3"

let fake: FakeBedrock

const client = (credentials: { accessKeyId: string; secretAccessKey: string; sessionToken?: string } = { accessKeyId: KEY_ID, secretAccessKey: SECRET, sessionToken: TOKEN }, region = REGION) =>
  new BedrockRuntimeClient({
    region,
    endpoint: fake.url,
    credentials,
    maxAttempts: 1,
    // The SDK's default handler speaks HTTP/2; the fake (like the gateway's client) speaks HTTP/1.1, which Bedrock serves too.
    requestHandler: new NodeHttpHandler()
  })

beforeAll(async () => {
  fake = await startFakeBedrock({ region: REGION, accessKeyId: KEY_ID, secretAccessKey: SECRET, sessionToken: TOKEN, models: [CLAUDE, ARN, TITAN, COHERE] })
})
afterAll(() => fake.close())
beforeEach(() => fake.reset())

const collect = async (stream: AsyncIterable<ConverseStreamOutput> | undefined) => {
  const events: Array<ConverseStreamOutput> = []
  for await (const event of stream ?? []) events.push(event)
  return events
}

describe("fake Bedrock x @aws-sdk/client-bedrock-runtime", () => {
  it("Converse: a signed request is answered in Converse's shape", async () => {
    fake.enqueue({ kind: "text", text: "Paris is the capital.", usage: { input: 12, output: 5, cacheRead: 3, cacheWrite: 1 } })
    const answer = await client().send(new ConverseCommand({
      modelId: CLAUDE,
      system: [{ text: "Be terse." }],
      messages: [{ role: "user", content: [{ text: "Capital of France?" }, { image: { format: "png", source: { bytes: new Uint8Array([137, 80, 78, 71]) } } }] }],
      inferenceConfig: { maxTokens: 100, temperature: 0.5 }
    }))
    expect(answer.output?.message?.content).toEqual([{ text: "Paris is the capital." }])
    expect(answer.stopReason).toBe("end_turn")
    expect(answer.usage).toEqual({ inputTokens: 12, outputTokens: 5, totalTokens: 21, cacheReadInputTokens: 3, cacheWriteInputTokens: 1 })
    expect(fake.modelIds()).toEqual([CLAUDE])
    expect(fake.requests[0]!.path).toBe(`/model/${encodeURIComponent(CLAUDE)}/converse`)
  })

  it("ConverseStream: the binary event stream decodes to the SDK's events, tool input in fragments, usage last", async () => {
    fake.enqueue({ kind: "tool_calls", text: "Checking.", calls: [{ id: "tooluse_abc123", name: "get_weather", arguments: { city: "Paris" } }], usage: { input: 30, output: 9 } })
    const answer = await client().send(new ConverseStreamCommand({
      modelId: ARN,
      messages: [{ role: "user", content: [{ text: "Weather in Paris?" }] }],
      toolConfig: { tools: [{ toolSpec: { name: "get_weather", inputSchema: { json: { type: "object", properties: { city: { type: "string" } } } } } }] }
    }))
    const events = await collect(answer.stream)
    const kinds = events.map((event) => Object.keys(event).find((key) => key !== "$unknown"))
    expect(kinds[0]).toBe("messageStart")
    expect(kinds.slice(-2)).toEqual(["messageStop", "metadata"])
    const text = events.flatMap((event) => (event.contentBlockDelta?.delta?.text === undefined ? [] : [event.contentBlockDelta.delta.text])).join("")
    expect(text).toBe("Checking.")
    const start = events.find((event) => event.contentBlockStart !== undefined)!.contentBlockStart!
    expect(start).toEqual({ contentBlockIndex: 1, start: { toolUse: { toolUseId: "tooluse_abc123", name: "get_weather" } } })
    const input = events.flatMap((event) => (event.contentBlockDelta?.delta?.toolUse === undefined ? [] : [event.contentBlockDelta.delta.toolUse.input])).join("")
    expect(JSON.parse(input)).toEqual({ city: "Paris" })
    expect(events.at(-2)!.messageStop!.stopReason).toBe("tool_use")
    expect(events.at(-1)!.metadata!.usage).toEqual({ inputTokens: 30, outputTokens: 9, totalTokens: 39 })
    expect(fake.modelIds()).toEqual([ARN])
  })

  it("ConverseStream: reasoning deltas and their signature; an exception mid-stream is the SDK's exception", async () => {
    fake.enqueue({ kind: "text", text: "Four.", reasoning: { text: "Two plus two is four.", signature: "sig-0123" } } as never)
    const events = await collect((await client().send(new ConverseStreamCommand({ modelId: CLAUDE, messages: [{ role: "user", content: [{ text: "2+2?" }] }] }))).stream)
    const reasoning = events.flatMap((event) => {
      const delta = event.contentBlockDelta?.delta?.reasoningContent
      return delta === undefined ? [] : [delta]
    })
    expect(reasoning.map((delta) => delta.text ?? "").join("")).toBe("Two plus two is four.")
    expect(reasoning.at(-1)).toEqual({ signature: "sig-0123" })

    fake.enqueue({ kind: "mid_stream_error", errorType: "throttlingException", message: "Too many tokens, please wait before trying again." })
    const failing = await client().send(new ConverseStreamCommand({ modelId: CLAUDE, messages: [{ role: "user", content: [{ text: "Hello" }] }] }))
    const error = await collect(failing.stream).then(() => undefined, (e: unknown) => e)
    expect(error).toBeInstanceOf(ThrottlingException)
    expect((error as ThrottlingException).message).toBe("Too many tokens, please wait before trying again.")
  })

  it("errors before the answer are the SDK's error classes, with Bedrock's message", async () => {
    fake.enqueue({ kind: "error", status: 429 })
    const throttled = await client().send(new ConverseCommand({ modelId: CLAUDE, messages: [{ role: "user", content: [{ text: "Hi" }] }] })).catch((e: unknown) => e)
    expect(throttled).toBeInstanceOf(ThrottlingException)
    expect((throttled as ThrottlingException).$metadata.httpStatusCode).toBe(429)

    fake.enqueue({ kind: "error", status: 403 })
    const denied = await client().send(new ConverseCommand({ modelId: CLAUDE, messages: [{ role: "user", content: [{ text: "Hi" }] }] })).catch((e: unknown) => e)
    expect(denied).toBeInstanceOf(AccessDeniedException)
  })

  it("refuses what Bedrock refuses, as ValidationException naming the place", async () => {
    const refused = async (input: ConstructorParameters<typeof ConverseCommand>[0]) => {
      const error = await client().send(new ConverseCommand(input)).then(() => undefined, (e: unknown) => e)
      expect(error).toBeInstanceOf(ValidationException)
      return (error as ValidationException).message
    }
    expect(await refused({ modelId: CLAUDE, messages: [{ role: "assistant", content: [{ text: "Hi" }] }] })).toMatch(/must start with a user message/)
    expect(await refused({ modelId: CLAUDE, messages: [{ role: "user", content: [{ text: "a" }] }, { role: "user", content: [{ text: "b" }] }] })).toMatch(/must alternate/)
    expect(await refused({ modelId: CLAUDE, messages: [{ role: "user", content: [{ text: "  " }] }] })).toMatch(/messages\.0\.content\.0 is blank/)
    expect(await refused({
      modelId: CLAUDE,
      messages: [
        { role: "user", content: [{ text: "Weather?" }] },
        { role: "assistant", content: [{ toolUse: { toolUseId: "t1", name: "get_weather", input: {} } }] },
        { role: "user", content: [{ toolResult: { toolUseId: "t1", content: [{ text: "sunny" }] } }] }
      ]
    })).toMatch(/toolConfig field must be defined/)
    expect(await refused({ modelId: CLAUDE, messages: [{ role: "user", content: [{ text: "Hi" }] }], inferenceConfig: { temperature: 1.5 } }))
      .toMatch(/inferenceConfig\.temperature' failed to satisfy constraint/)
    expect(await refused({ modelId: "anthropic.claude-v9", messages: [{ role: "user", content: [{ text: "Hi" }] }] })).toBe("The provided model identifier is invalid.")
  })

  it("refuses a request signed with another secret, another region, or without the session token", async () => {
    const send = (c: BedrockRuntimeClient) =>
      c.send(new ConverseCommand({ modelId: CLAUDE, messages: [{ role: "user", content: [{ text: "Hi" }] }] })).then(() => undefined, (e: unknown) => e as Error)
    const wrongSecret = await send(client({ accessKeyId: KEY_ID, secretAccessKey: "not-the-secret-at-all-000000000000", sessionToken: TOKEN }))
    expect(wrongSecret?.name).toBe("InvalidSignatureException")
    expect(wrongSecret?.message).toMatch(/signature we calculated does not match/)
    expect((await send(client(undefined, "eu-west-1")))?.name).toBe("InvalidSignatureException")
    expect((await send(client({ accessKeyId: KEY_ID, secretAccessKey: SECRET })))?.name).toBe("UnrecognizedClientException")
    expect((await send(client({ accessKeyId: "AKIAUNKNOWNKEY000000", secretAccessKey: SECRET, sessionToken: TOKEN })))?.name).toBe("UnrecognizedClientException")
  })

  it("CountTokens and InvokeModel (Titan, Cohere embeddings)", async () => {
    const counted = await client().send(new CountTokensCommand({
      modelId: CLAUDE,
      input: { converse: { messages: [{ role: "user", content: [{ text: "one two three" }] }] } }
    }))
    expect(counted.inputTokens).toBe(3)

    const titan = await client().send(new InvokeModelCommand({ modelId: TITAN, body: JSON.stringify({ inputText: "hello world", dimensions: 256 }), contentType: "application/json" }))
    const titanBody = JSON.parse(new TextDecoder().decode(titan.body)) as { embedding: Array<number>; inputTextTokenCount: number }
    expect(titanBody.embedding).toHaveLength(256)
    expect(titanBody.inputTextTokenCount).toBe(2)

    const cohere = await client().send(new InvokeModelCommand({ modelId: COHERE, body: JSON.stringify({ texts: ["a b", "c"], input_type: "search_document" }), contentType: "application/json" }))
    const cohereBody = JSON.parse(new TextDecoder().decode(cohere.body)) as { embeddings: Array<Array<number>> }
    expect(cohereBody.embeddings).toHaveLength(2)
  })
})
