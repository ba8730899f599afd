/** The Chat Completions client format (spec 4.1): `POST /v1/chat/completions`. */
import { deprecatedFields } from "../../../domain/deprecation.ts"
import { toEnvelope } from "../../../domain/errors.ts"
import { type ChatRequest, decodeChatRequest } from "../../../wire/openai-chat.ts"
import { dataFrame, DONE_FRAME } from "../../respond.ts"
import type { ClientFormat } from "../adapter.ts"
import { chatContinuation } from "./continuation.ts"
import { chatOutputText } from "../output-text.ts"
import { chatToAnthropic } from "./anthropic.ts"
import { chatToOpenAI } from "./openai.ts"
import { chatToBedrock } from "./bedrock.ts"
import { chatToGemini } from "./gemini.ts"
import { vertexAdapter } from "../vertex.ts"
import { withLegacyFunctions } from "./legacy-functions.ts"

export const chatCompletionsFormat: ClientFormat<ChatRequest> = {
  decode: decodeChatRequest,
  continuation: chatContinuation,
  outputText: chatOutputText,
  // `functions`, `function_call` and `max_tokens`, which OpenAI deprecated (src/domain/deprecation.ts).
  deprecatedFields: (raw) => deprecatedFields("POST /v1/chat/completions", raw),
  // Anthropic's models have tools only: the legacy functions API reaches them as tools (issue 34).
  adapters: {
    openai: chatToOpenAI,
    anthropic: withLegacyFunctions(chatToAnthropic),
    bedrock: withLegacyFunctions(chatToBedrock),
    gemini: chatToGemini,
    vertex: vertexAdapter(withLegacyFunctions(chatToAnthropic), chatToGemini)
  },
  framer: (state) => ({
    frame: (event) => dataFrame(event.data),
    end: () => DONE_FRAME,
    // One `data:` frame holding the envelope (both OpenAI SDKs raise on a chunk with an `error`
    // key), then `[DONE]`.
    failure: (error) => dataFrame(JSON.stringify(toEnvelope(error, state.requestId))) + DONE_FRAME
  })
}
