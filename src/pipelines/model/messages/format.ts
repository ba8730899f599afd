/** The Anthropic Messages client format (docs/decisions.md section 6): `POST /v1/messages`. */
import { toEnvelope } from "../../../domain/errors.ts"
import { decodeMessagesPassthrough, type MessagesPassthroughRequest } from "../../../wire/anthropic-messages.ts"
import { namedFrame } from "../../respond.ts"
import type { ClientFormat } from "../adapter.ts"
import { messagesContinuation } from "./continuation.ts"
import { messagesOutputText } from "../output-text.ts"
import { messagesToAnthropic } from "./anthropic.ts"
import { messagesToOpenAI } from "./openai.ts"
import { messagesToBedrock } from "./bedrock.ts"
import { messagesToGemini } from "./gemini.ts"
import { vertexAdapter } from "../vertex.ts"

export const messagesFormat: ClientFormat<MessagesPassthroughRequest> = {
  // What the gateway relies on; a translating adapter decodes the whole body strictly.
  decode: decodeMessagesPassthrough,
  continuation: messagesContinuation,
  outputText: messagesOutputText,
  adapters: { anthropic: messagesToAnthropic, openai: messagesToOpenAI, bedrock: messagesToBedrock, gemini: messagesToGemini, vertex: vertexAdapter(messagesToAnthropic, messagesToGemini) },
  framer: (state) => ({
    frame: (event) => namedFrame(event.event ?? "message", event.data),
    end: () => "",
    // An `event: error` frame carrying the envelope; the stream then ends.
    failure: (error) => namedFrame("error", JSON.stringify({ type: "error", ...toEnvelope(error, state.requestId) }))
  })
}
