/**
 * Offline use of the official SDKs: capture the exact request body each SDK sends, and run each
 * SDK's stream accumulator over events produced by the translators.
 */
import Anthropic from "@anthropic-ai/sdk"
import { MessageStream } from "@anthropic-ai/sdk/lib/MessageStream"
import OpenAI from "openai"
import { ChatCompletionStream } from "openai/lib/ChatCompletionStream"
import type { AnthropicStreamEvent, ChatChunk } from "../../src/wire/index.ts"

const capturingFetch = (reply: unknown, sink: Array<unknown>) => async (_url: unknown, init?: { body?: unknown }) => {
  sink.push(JSON.parse(String(init?.body)))
  return new Response(JSON.stringify(reply), { status: 200, headers: { "content-type": "application/json" } })
}

/** The JSON body openai-node sends for `params`. */
export const openaiBody = async (params: OpenAI.Chat.ChatCompletionCreateParamsNonStreaming): Promise<unknown> => {
  const sink: Array<unknown> = []
  const reply = {
    id: "chatcmpl-1",
    object: "chat.completion",
    created: 1,
    model: "m",
    choices: [{ index: 0, message: { role: "assistant", content: "ok", refusal: null }, finish_reason: "stop", logprobs: null }]
  }
  const client = new OpenAI({ apiKey: "sk-test", baseURL: "http://gateway.test/v1", fetch: capturingFetch(reply, sink), maxRetries: 0 })
  await client.chat.completions.create(params)
  return sink[0]
}

/** The JSON body the Anthropic SDK sends for `params`. */
export const anthropicBody = async (params: Anthropic.MessageCreateParamsNonStreaming): Promise<unknown> => {
  const sink: Array<unknown> = []
  const reply = {
    id: "msg_1",
    type: "message",
    role: "assistant",
    model: "m",
    content: [{ type: "text", text: "ok", citations: null }],
    stop_reason: "end_turn",
    stop_sequence: null,
    usage: { input_tokens: 1, output_tokens: 1 }
  }
  const client = new Anthropic({ apiKey: "sk-test", baseURL: "http://gateway.test", fetch: capturingFetch(reply, sink), maxRetries: 0 })
  await client.messages.create(params)
  return sink[0]
}

const ndjson = (items: ReadonlyArray<unknown>): ReadableStream<Uint8Array> => {
  const bytes = new TextEncoder().encode(items.map((item) => JSON.stringify(item)).join("\n") + "\n")
  return new ReadableStream({
    start(controller) {
      controller.enqueue(bytes)
      controller.close()
    }
  })
}

/** openai-node's ChatCompletionStream, fed the chunks a translator produced. */
export const assembleChat = (chunks: ReadonlyArray<ChatChunk>) =>
  ChatCompletionStream.fromReadableStream(ndjson(chunks)).finalChatCompletion()

/** The Anthropic SDK's MessageStream, fed the events a translator produced. */
export const assembleMessage = (events: ReadonlyArray<AnthropicStreamEvent>) =>
  MessageStream.fromReadableStream(ndjson(events)).finalMessage()
