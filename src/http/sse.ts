/**
 * Server-Sent Events framing for both client formats. OpenAI-format frames are data-only (no
 * `id:` lines: they make the Python SDK treat a later keep-alive as an empty event); Anthropic
 * frames always carry their `event:` line, which its SDKs dispatch on.
 */
import { Stream } from "effect"
import { HttpServerResponse } from "effect/http"

export const dataFrame = (data: string): string => `data: ${data}\n\n`
export const DONE_FRAME = "data: [DONE]\n\n"
export const namedFrame = (event: string, data: string): string => `event: ${event}\ndata: ${data}\n\n`

export const sseResponse = <E>(frames: Stream.Stream<string, E>): HttpServerResponse.HttpServerResponse =>
  HttpServerResponse.stream(Stream.encodeText(frames), {
    contentType: "text/event-stream; charset=utf-8",
    headers: { "cache-control": "no-cache", "x-accel-buffering": "no" }
  })
