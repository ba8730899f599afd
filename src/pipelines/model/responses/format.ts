/** The OpenAI Responses client format (decisions section 6): `POST /v1/responses`. */
import { slugOf, toEnvelope } from "../../../domain/errors.ts"
import { decodeResponsesPassthrough, type ResponsesPassthroughRequest } from "../../../wire/openai-responses.ts"
import { ResponsesPassthroughStream } from "../../../wire/responses-stream.ts"
import { namedFrame } from "../../respond.ts"
import type { ClientEvent, ClientFormat } from "../adapter.ts"
import { responsesToAnthropic } from "./anthropic.ts"
import { responsesToOpenAI } from "./openai.ts"
import { responsesToBedrock } from "./bedrock.ts"
import { responsesToGemini } from "./gemini.ts"
import { vertexAdapter } from "../vertex.ts"
import { responsesOutputText } from "../output-text.ts"

const framed = (event: { readonly type: string }) => namedFrame(event.type, JSON.stringify(event))

export const responsesFormat: ClientFormat<ResponsesPassthroughRequest> = {
  decode: decodeResponsesPassthrough,
  outputText: responsesOutputText,
  adapters: { openai: responsesToOpenAI, anthropic: responsesToAnthropic, bedrock: responsesToBedrock, gemini: responsesToGemini, vertex: vertexAdapter(responsesToAnthropic, responsesToGemini) },
  framer: (state, request) => {
    // Responses events are numbered and carry the response so far: the framer follows them, so
    // an in-band failure (an `error` event, then `response.failed`) continues the numbering and
    // reports what was produced before it.
    const followed = new ResponsesPassthroughStream({ model: request.model })
    return {
      frame: (event: ClientEvent) => {
        followed.observe(event.value ?? JSON.parse(event.data))
        return namedFrame(event.event ?? "message", event.data)
      },
      end: () => "",
      failure: (error) => {
        const envelope = toEnvelope(error, state.requestId)
        return followed.fail({ code: slugOf(error), message: error.message, extra: { error: envelope } }).map(framed).join("")
      }
    }
  }
}
