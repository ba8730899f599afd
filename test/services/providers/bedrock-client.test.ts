/**
 * The Bedrock client below the pipelines: the event stream framer (messages split anywhere across
 * reads, checksums verified, a length claim bounded), the stream's end (messageStop makes it
 * whole, metadata ends it, an exception inside it fails it, an event type newer than the gateway
 * is skipped), and Bedrock's errors as the gateway's.
 */
import { Effect, Exit, Stream } from "effect"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { Agent } from "undici"
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest"
import { EventStreamFramer, MAXIMUM_MESSAGE_BYTES } from "../../../src/services/providers/aws-event-stream.ts"
import { makeBedrockClient } from "../../../src/services/providers/bedrock.ts"
import { bedrockStatusFailure } from "../../../src/services/providers/bedrock-errors.ts"
import { makeRedactor } from "../../../src/services/providers/redact.ts"
import { encodeEventMessage, eventMessage, exceptionMessage } from "../../support/fake-bedrock.ts"
import { testConfig } from "../../support/gateway.ts"

describe("EventStreamFramer", () => {
  const messages = [eventMessage("messageStart", { role: "assistant" }), eventMessage("contentBlockDelta", { contentBlockIndex: 0, delta: { text: "héllo" } })]
  const bytes = Buffer.concat(messages)

  it("decodes messages however the bytes are split", () => {
    for (const size of [1, 3, 7, 16, bytes.length]) {
      const framer = new EventStreamFramer()
      const out = []
      for (let at = 0; at < bytes.length; at += size) {
        const framed = framer.push(bytes.subarray(at, at + size))
        if (typeof framed === "string") throw new Error(framed)
        out.push(...framed)
      }
      expect(out.map((m) => m.headers[":event-type"])).toEqual(["messageStart", "contentBlockDelta"])
      expect(JSON.parse(new TextDecoder().decode(out[1]!.body)).delta).toEqual({ text: "héllo" })
      expect(framer.leftover).toBe(0)
    }
  })

  it("refuses a message whose checksum is wrong, or that claims more than a message may hold", () => {
    const corrupt = Buffer.from(messages[0]!)
    corrupt[corrupt.length - 6] = corrupt[corrupt.length - 6]! ^ 0xff
    expect(new EventStreamFramer().push(corrupt)).toEqual(expect.stringMatching(/checksum|crc/i))
    const huge = Buffer.alloc(12)
    huge.writeUInt32BE(MAXIMUM_MESSAGE_BYTES + 1, 0)
    expect(new EventStreamFramer().push(huge)).toMatch(/claims/)
  })

  it("copies a message's bytes once however small the reads (issue 32.7: linear, not one copy of the pending bytes per read)", () => {
    // A 4 MiB message (a 16 MiB one would do the same at four times the cost) in 2 KiB reads, then a small one.
    const big = eventMessage("contentBlockDelta", { contentBlockIndex: 0, delta: { text: "x".repeat(4 * 1024 * 1024) } })
    const stream = Buffer.concat([big, messages[0]!])
    const framer = new EventStreamFramer()
    const from = vi.spyOn(Buffer, "from")
    const concat = vi.spyOn(Buffer, "concat")
    const out = []
    try {
      for (let at = 0; at < stream.length; at += 2048) {
        const framed = framer.push(stream.subarray(at, at + 2048))
        if (typeof framed === "string") throw new Error(framed)
        out.push(...framed)
      }
      const copied = [...concat.mock.results, ...from.mock.results].reduce((sum, result) => sum + (result.value as Buffer).length, 0)
      // Each read copied once as it arrives, each message joined once: about twice the stream, never ~reads x message.
      expect(copied).toBeLessThanOrEqual(2 * stream.length + 4096)
    } finally {
      from.mockRestore()
      concat.mockRestore()
    }
    expect(out.map((m) => m.headers[":event-type"])).toEqual(["contentBlockDelta", "messageStart"])
    expect(framer.leftover).toBe(0)
  })
})

describe("bedrockStatusFailure", () => {
  const redact = makeRedactor(["the-secret-access-key"])
  const failure = (status: number, type: string | undefined, message: string) =>
    bedrockStatusFailure("br", status, JSON.stringify({ message }), type === undefined ? {} : { "x-amzn-errortype": `${type}:http://internal.amazon.com/coral/com.amazon.bedrock/` }, redact)

  it("maps Bedrock's exception types to the gateway's errors", () => {
    expect(failure(400, "ValidationException", "messages.0: blank")).toMatchObject({ _tag: "ValidationFailed", details: { upstream_status: 400, upstream_error: { type: "ValidationException", message: "messages.0: blank" } } })
    expect(failure(400, "ValidationException", "The provided model identifier is invalid.")).toMatchObject({ _tag: "NotFound" })
    expect(failure(404, "ResourceNotFoundException", "Model not found")).toMatchObject({ _tag: "NotFound" })
    for (const [status, type] of [[403, "AccessDeniedException"], [403, "InvalidSignatureException"], [429, "ThrottlingException"], [400, "ServiceQuotaExceededException"], [424, "ModelErrorException"], [408, "ModelTimeoutException"], [503, "ServiceUnavailableException"]] as const) {
      expect(failure(status, type, "x"), type).toMatchObject({ _tag: "ProviderError", details: { upstream_status: status, upstream_error: { type } } })
    }
    // The type may come in the body instead (`__type`), namespaced.
    expect(bedrockStatusFailure("br", 400, JSON.stringify({ __type: "com.amazon.coral.validate#ValidationException", message: "bad" }), {}, redact)).toMatchObject({ _tag: "ValidationFailed" })
    expect(failure(403, "AccessDeniedException", "key AKIAABCDEFGHIJKLMNOP secret the-secret-access-key"))
      .toMatchObject({ details: { upstream_error: { message: "key [redacted] secret [redacted]" } } })
  })
})

describe("ConverseStream's end", () => {
  let server: Server
  let reply: Array<Buffer> = []
  const agent = new Agent()
  beforeAll(async () => {
    server = createServer((req, res) => {
      req.resume()
      req.on("end", () => {
        res.writeHead(200, { "content-type": "application/vnd.amazon.eventstream" })
        for (const message of reply) res.write(message)
        res.end()
      })
    })
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  })
  afterAll(async () => {
    await agent.close()
    await new Promise((resolve) => server.close(resolve))
  })

  const run = (messages: Array<Buffer>) => {
    reply = messages
    const config = testConfig({
      providers: [{ name: "br", kind: "bedrock", region: "us-east-1", base_url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, access_key_id: "AKIAABCDEFGHIJKLMNOP", secret_access_key: "secret" }]
    })
    const client = makeBedrockClient(config.providers.find((p) => p.name === "br")!, agent, {})
    return Effect.runPromiseExit(Effect.flatMap(client.converseStream("m", { messages: [] }), (stream) => Stream.runCollect(stream)))
  }

  it("is whole with messageStop, skips event types it does not know, and stops at metadata", async () => {
    const exit = await run([
      eventMessage("messageStart", { role: "assistant" }),
      eventMessage("someFutureEvent", { x: 1 }),
      eventMessage("contentBlockDelta", { contentBlockIndex: 0, delta: { text: "hi" } }),
      eventMessage("messageStop", { stopReason: "end_turn" }),
      eventMessage("metadata", { usage: { inputTokens: 1, outputTokens: 1, totalTokens: 2 } })
    ])
    expect(Exit.isSuccess(exit)).toBe(true)
    if (Exit.isSuccess(exit)) expect([...exit.value].map((event) => event.type)).toEqual(["messageStart", "contentBlockDelta", "messageStop", "metadata"])
  })

  it("fails when the body ends before messageStop, or with an exception inside it", async () => {
    const cut = await run([eventMessage("messageStart", { role: "assistant" }), eventMessage("contentBlockDelta", { contentBlockIndex: 0, delta: { text: "hi" } })])
    expect(Exit.isFailure(cut) && JSON.stringify(cut.cause)).toMatch(/ended the stream before the answer was complete/)
    const thrown = await run([eventMessage("messageStart", { role: "assistant" }), exceptionMessage("throttlingException", "slow down")])
    expect(Exit.isFailure(thrown) && JSON.stringify(thrown.cause)).toMatch(/throttlingException.*slow down/)
    const half = await run([eventMessage("messageStart", { role: "assistant" }), encodeEventMessage({ ":message-type": "event" }, Buffer.from("{}")).subarray(0, 20)])
    expect(Exit.isFailure(half) && JSON.stringify(half.cause)).toMatch(/malformed event stream/)
  })
})
