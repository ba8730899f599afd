/**
 * The AWS binary event stream (`application/vnd.amazon.eventstream`), as Bedrock's
 * `/converse-stream` answers: a sequence of messages, each a 12-byte prelude (total length,
 * headers length, prelude CRC32), typed headers, a payload and a message CRC32. Each message is
 * framed here by its total length and decoded (both checksums verified) by AWS's own codec.
 *
 * A message claims its length before it arrives, so the claim is bounded: an upstream cannot
 * make the gateway buffer more than one bounded message. Like `sseEvents`, the messages of one
 * upstream read travel on together as one chunk.
 */
import { EventStreamCodec } from "@smithy/core/event-streams"
import { Effect, Stream } from "effect"
import { constVoid } from "effect/Function"
import { ProviderError } from "../../domain/errors.ts"
import { transportFailure, type UpstreamFailure, type UpstreamResponse } from "./upstream-http.ts"

/** One message: its string headers (`:message-type`, `:event-type`...) and its payload. */
export interface EventStreamMessage {
  readonly headers: Readonly<Record<string, string>>
  readonly body: Uint8Array
}

const PRELUDE_BYTES = 12
const MINIMUM_MESSAGE_BYTES = 16
/** AWS caps a message's payload at 16 MiB and its headers at 128 KiB. */
export const MAXIMUM_MESSAGE_BYTES = 16 * 1024 * 1024 + 128 * 1024 + MINIMUM_MESSAGE_BYTES

const utf8Decoder = new TextDecoder()
const utf8Encoder = new TextEncoder()
const codec = new EventStreamCodec((bytes) => utf8Decoder.decode(bytes), (text) => utf8Encoder.encode(text))

const malformedStream = (provider: string, status: number, message: string) =>
  new ProviderError({
    message: `provider "${provider}" sent a malformed event stream`,
    details: { provider, upstream_status: status, upstream_error: { message } }
  })

/**
 * Splits bytes into whole messages; what is left waits for the next read. Reads are kept as they
 * came and a message's bytes are joined once, when it is whole (issue 32 item 7): joining the
 * pending bytes with every read copied a 16 MiB message in 2 KiB reads 8,000 times over,
 * stalling the event loop for seconds.
 */
export class EventStreamFramer {
  #reads: Array<Buffer> = []
  #buffered = 0

  /** The first `n` buffered bytes (n <= buffered), as one buffer: the first read, or the reads joined once. */
  #take(n: number, consume: boolean): Buffer {
    const first = this.#reads[0]!
    let bytes: Buffer
    if (first.length >= n) {
      bytes = first.subarray(0, n)
      if (consume) {
        if (first.length === n) this.#reads.shift()
        else this.#reads[0] = first.subarray(n)
      }
    } else {
      let covered = 0
      let used = 0
      while (covered < n) covered += this.#reads[used++]!.length
      const joined = Buffer.concat(this.#reads.slice(0, used), covered)
      bytes = joined.subarray(0, n)
      const rest = joined.subarray(n)
      this.#reads.splice(0, used, ...(consume ? (rest.length > 0 ? [rest] : []) : [joined]))
    }
    if (consume) this.#buffered -= n
    return bytes
  }

  /** The messages completed by `bytes`, or the reason the stream cannot be read. */
  push(bytes: Uint8Array): Array<EventStreamMessage> | string {
    if (bytes.length > 0) {
      this.#reads.push(Buffer.from(bytes))
      this.#buffered += bytes.length
    }
    const messages: Array<EventStreamMessage> = []
    while (this.#buffered >= PRELUDE_BYTES) {
      const total = this.#take(4, false).readUInt32BE(0)
      if (total < MINIMUM_MESSAGE_BYTES || total > MAXIMUM_MESSAGE_BYTES) return `a message claims ${total} bytes`
      if (this.#buffered < total) break
      const frame = this.#take(total, true)
      let decoded: ReturnType<EventStreamCodec["decode"]>
      try {
        decoded = codec.decode(frame)
      } catch (error) {
        return error instanceof Error ? error.message : String(error)
      }
      const headers: Record<string, string> = {}
      for (const [name, header] of Object.entries(decoded.headers)) {
        if (header.type === "string") headers[name] = header.value
      }
      messages.push({ headers, body: decoded.body })
    }
    return messages
  }

  /** Bytes of a message that never completed. */
  get leftover(): number {
    return this.#buffered
  }
}

/** The response body as event stream messages; the body is destroyed when the stream ends early. */
export const eventStreamMessages = (provider: string, response: UpstreamResponse): Stream.Stream<EventStreamMessage, UpstreamFailure> =>
  Stream.suspend(() => {
    const framer = new EventStreamFramer()
    return Stream.fromAsyncIterable(response.body as AsyncIterable<Uint8Array>, (error) => transportFailure(provider, error)).pipe(
      Stream.mapAccumArrayEffect(constVoid, (_, reads) => {
        const messages: Array<EventStreamMessage> = []
        for (const bytes of reads) {
          const framed = framer.push(bytes)
          if (typeof framed === "string") return Effect.fail(malformedStream(provider, response.status, framed))
          messages.push(...framed)
        }
        return Effect.succeed([undefined, messages] as const)
      }),
      Stream.concat(Stream.suspend(() =>
        framer.leftover === 0
          ? Stream.empty
          : Stream.fail(malformedStream(provider, response.status, `the stream ended inside a message (${framer.leftover} bytes)`))
      )),
      Stream.ensuring(Effect.sync(() => response.body.destroy()))
    )
  })
