import { Readable } from "node:stream"
import { Effect, Stream } from "effect"
import { describe, expect, it } from "vitest"
import { sseEvents } from "../../../src/services/providers/upstream-http.ts"

const eventsOf = (...chunks: Array<string>) =>
  Effect.runPromise(Stream.runCollect(sseEvents("up", { status: 200, headers: {}, body: Readable.from(chunks.map((c) => Buffer.from(c))) })))

describe("sseEvents", () => {
  it("keeps reading after a `retry:` field (the gateway never reconnects mid-answer)", async () => {
    const events = await eventsOf('data: {"n":1}\n\n', "retry: 3000\n\n", 'data: {"n":2}\n\n', 'retry: 10\ndata: {"n":3}\n\n', "data: [DONE]\n\n")
    expect(events.map((e) => e.data)).toEqual(['{"n":1}', '{"n":2}', '{"n":3}', "[DONE]"])
  })

  it("joins events split across chunks and skips comment lines", async () => {
    const events = await eventsOf(": keep-alive\n\nevent: message_start\nda", 'ta: {"a":', "1}\n\n")
    expect(events.map((e) => [e.event, e.data])).toEqual([["message_start", '{"a":1}']])
  })
})
