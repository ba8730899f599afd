import { Readable } from "node:stream"
import { Effect, Stream } from "effect"
import { describe, expect, it } from "vitest"
import { makeRedactor } from "../../../src/services/providers/redact.ts"
import { type EventOutcome, mapEventsOrFail, sseEvents, statusFailure } from "../../../src/services/providers/upstream-http.ts"

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

describe("stream chunking (one step per upstream read, not per event)", () => {
  const readsOf = (...chunks: Array<string>) =>
    sseEvents("up", { status: 200, headers: {}, body: Readable.from(chunks.map((c) => Buffer.from(c))) })

  it("keeps the events of one read together as one chunk", async () => {
    const chunks = await Effect.runPromise(Stream.runCollect(Stream.mapArray(readsOf("data: 1\n\ndata: 2\n\ndata: 3\n\n", "data: 4\n\n"), (events) => [events.map((e) => e.data)])))
    expect(chunks).toEqual([["1", "2", "3"], ["4"]])
  })

  it("passes on the events before a refused one, then fails with it, and reads nothing after", async () => {
    let seen: Array<string> = []
    const check = (event: { readonly data: string }): EventOutcome<string, string> => {
      seen.push(event.data)
      return event.data === "bad" ? { ok: false, error: `refused ${event.data}` } : { ok: true, value: event.data }
    }
    const passed: Array<string> = []
    const exit = await Effect.runPromiseExit(readsOf("data: a\n\ndata: b\n\ndata: bad\n\ndata: c\n\n", "data: d\n\n").pipe(
      mapEventsOrFail(check),
      Stream.runForEach((value) => Effect.sync(() => passed.push(value)))
    ))
    expect(passed).toEqual(["a", "b"])
    expect(exit._tag).toBe("Failure")
    expect(JSON.stringify(exit)).toContain("refused bad")
    expect(seen).toEqual(["a", "b", "bad"])

    // A refused first event fails at once.
    seen = []
    const first = await Effect.runPromiseExit(Stream.runCollect(readsOf("data: bad\n\n", "data: e\n\n").pipe(mapEventsOrFail(check))))
    expect(first._tag).toBe("Failure")
    expect(seen).toEqual(["bad"])
  })
})

describe("statusFailure", () => {
  const KEY = "sk-proj-Abc123def456GHI789jkl012"
  const redact = makeRedactor([KEY])
  const body = (message: string, extra: Record<string, unknown> = {}) => JSON.stringify({ error: { message, type: "invalid_request_error", ...extra } })

  it("answers a refusal of the request as the client's 400, and an unknown model as 404", () => {
    for (const status of [400, 413, 422]) {
      const error = statusFailure("up", status, body("bad field"), undefined, redact)
      expect(error._tag).toBe("ValidationFailed")
      expect(error.details).toMatchObject({ provider: "up", upstream_status: status, upstream_error: { message: "bad field" } })
    }
    expect(statusFailure("up", 404, body("The model `gpt-9` does not exist", { code: "model_not_found" }), undefined, redact)._tag).toBe("NotFound")
    // A 404 that is not about the model (a wrong base URL) is the operator's problem: 502.
    expect(statusFailure("up", 404, "<html>Not Found</html>", undefined, redact)._tag).toBe("ProviderError")
  })

  it("keeps the provider's own trouble a 502", () => {
    for (const status of [401, 403, 429, 500, 503, 529]) expect(statusFailure("up", status, body("x"), undefined, redact)._tag).toBe("ProviderError")
  })

  it("never relays the provider's key, quoted whole, masked, or in plain text", () => {
    const quoted = [
      body(`Incorrect API key provided: ${KEY}. You can find your API key at ...`),
      body("Incorrect API key provided: sk-proj-****************************l012."),
      `upstream said: invalid credentials ${KEY}`,
      body("bad header Authorization: Bearer abcdefghijklmnop")
    ]
    for (const text of quoted) {
      for (const status of [400, 401]) {
        const error = statusFailure("up", status, text, undefined, redact)
        const shown = JSON.stringify({ message: error.message, details: error.details })
        expect(shown).not.toContain(KEY)
        expect(shown).not.toContain("l012")
        expect(shown).not.toContain("abcdefghijklmnop")
        expect(shown).toContain("[redacted]")
      }
    }
  })
})
