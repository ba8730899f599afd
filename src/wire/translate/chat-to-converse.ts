/**
 * Chat Completions <-> Bedrock Converse, request, answer and stream, composed through Anthropic
 * Messages: Converse is Messages' sibling (the same turns, blocks, tool use and stop reasons), so
 * chat -> Messages (chat-request-to-anthropic.ts, every chat field translated, dropped or refused
 * there) -> Converse (messages-request-to-converse.ts) on the way up, and Converse -> Messages ->
 * chat on the way back. JSON mode is the same forced-tool emulation as for Anthropic models (a
 * Converse tool with `toolChoice: {tool}`), undone by the same response translators.
 *
 * A refusal of the second step names the field of the intermediate Messages request, which
 * mirrors the chat request's (`messages.N` counts turns after system messages were lifted out).
 */
import { Result } from "effect"
import type { ConverseRequest, ConverseResponse, ConverseStreamEvent } from "../bedrock-converse.ts"
import type { ChatChunk, ChatRequest, ChatResponse } from "../openai-chat.ts"
import { AnthropicToChatStream, type AnthropicToChatStreamOptions } from "./anthropic-to-chat-stream.ts"
import { chatRequestToAnthropic } from "./chat-request-to-anthropic.ts"
import { ConverseToAnthropicStream, converseResponseToAnthropic } from "./converse-to-anthropic.ts"
import type { JsonMode } from "./json-mode.ts"
import { messagesRequestToConverse } from "./messages-request-to-converse.ts"
import { anthropicResponseToChat } from "./responses.ts"
import type { Translation } from "./untranslatable.ts"
import type { AuditUsage } from "./usage.ts"

export const chatRequestToConverse = (request: ChatRequest, options: { readonly maxTokensCap: number }): Translation<ConverseRequest> => {
  // The model id travels in Converse's URL, not its body.
  const messages = chatRequestToAnthropic(request, { model: request.model, maxTokensCap: options.maxTokensCap })
  return Result.isFailure(messages) ? Result.fail(messages.failure) : messagesRequestToConverse(messages.success, { maxTokensCap: options.maxTokensCap })
}

export const converseResponseToChat = (
  response: ConverseResponse,
  options: { readonly model: string; readonly jsonMode?: JsonMode | undefined }
): ChatResponse => anthropicResponseToChat(converseResponseToAnthropic(response, { model: options.model }), options)

/** Converse stream events in, chat chunks out (through the Anthropic events of the same answer). */
export class ConverseToChatStream {
  readonly #toAnthropic: ConverseToAnthropicStream
  readonly #toChat: AnthropicToChatStream

  constructor(options: AnthropicToChatStreamOptions) {
    this.#toAnthropic = new ConverseToAnthropicStream({ model: options.model })
    this.#toChat = new AnthropicToChatStream(options)
  }

  push(event: ConverseStreamEvent): Array<ChatChunk> {
    return this.#toAnthropic.push(event).flatMap((anthropic) => this.#toChat.push(anthropic))
  }

  end(): Array<ChatChunk> {
    return [...this.#toAnthropic.end().flatMap((anthropic) => this.#toChat.push(anthropic)), ...this.#toChat.end()]
  }

  usage(): AuditUsage {
    return this.#toChat.usage()
  }
}
