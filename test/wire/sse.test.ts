/**
 * The gateway's SSE parser against Effect's (`Sse.makeParser`, which it replaced on the streaming
 * path for copying less): the same events from the same text, however the text is split into
 * pieces, for every line ending, comments, fields without values, multi-line data, ids, named and
 * empty events, a BOM, and an unterminated tail; and the same refusal of an event over the bound.
 */
import * as Sse from "effect/encoding/Sse"
import { describe, expect, it } from "vitest"
import { makeSseParser, type SseEvent } from "../../src/wire/sse.ts"

const CORPUS: ReadonlyArray<readonly [string, string]> = [
  ["one data line per event", "data: {\"a\":1}\n\ndata: {\"b\":2}\n\n"],
  ["CRLF line ends", "data: x\r\n\r\nevent: ping\r\ndata: y\r\n\r\n"],
  ["CR line ends", "data: x\r\rdata: y\r\r"],
  ["mixed line ends", "data: a\r\n\ndata: b\r\r\ndata: c\n\r\n"],
  ["named events (Anthropic)", "event: message_start\ndata: {\"type\":\"message_start\"}\n\nevent: content_block_delta\ndata: {\"delta\":\"hi\"}\n\n"],
  ["comments and keep-alives", ": OPENROUTER PROCESSING\n\n:ping\ndata: z\n\n"],
  ["multi-line data", "data: first\ndata: second\ndata:\ndata: fourth\n\n"],
  ["no space after the colon, two spaces", "data:tight\n\ndata:  two\n\n"],
  ["a field without a colon", "data\n\nevent\ndata: after\n\n"],
  ["ids carry over, NUL ids ignored", "id: 7\ndata: a\n\ndata: b\n\nid: 8\u0000\ndata: c\n\nid\ndata: d\n\n"],
  ["retry and unknown fields ignored", "retry: 1000\nfoo: bar\ndata: kept\n\nretry: x\ndata: also\n\n"],
  ["an empty named event is not dispatched", "event: lonely\n\ndata: next\n\n"],
  ["event name reset per event", "event: one\ndata: 1\n\ndata: 2\n\n"],
  ["empty event name is a message", "event:\ndata: x\n\n"],
  ["a BOM at the start", "\uFEFFdata: bom\n\n"],
  ["an unterminated tail is not an event", "data: done\n\ndata: partial"],
  ["unicode", "data: {\"t\":\"héllo 世界 🎉\"}\n\n"],
  ["blank lines only", "\n\n\r\n\r\r"],
  ["a colon inside the value", "data: {\"url\":\"http://x\"}\n\n"]
]

type Seen = { readonly event: string; readonly id: string | undefined; readonly data: string } | { readonly error: true }

const ours = (pieces: ReadonlyArray<string>, max?: number): Array<Seen> => {
  const seen: Array<Seen> = []
  const parser = makeSseParser((e: SseEvent) => seen.push({ event: e.event, id: e.id, data: e.data }), max)
  for (const piece of pieces) if (parser.feed(piece) !== undefined) seen.push({ error: true })
  return seen
}

const effects = (pieces: ReadonlyArray<string>, max?: number): Array<Seen> => {
  const seen: Array<Seen> = []
  const parser = Sse.makeParser((e) => {
    if (e._tag === "Event") seen.push({ event: e.event, id: e.id, data: e.data })
  }, max === undefined ? undefined : { maxEventSize: max })
  for (const piece of pieces) if (parser.feed(piece) !== undefined) seen.push({ error: true })
  return seen
}

/** Every way of cutting `text` in two, and in pieces of every size from 1 to 7. */
const splits = (text: string): Array<ReadonlyArray<string>> => {
  const out: Array<ReadonlyArray<string>> = [[text]]
  for (let at = 0; at <= text.length; at++) out.push([text.slice(0, at), text.slice(at)])
  for (let size = 1; size <= 7; size++) {
    const pieces: Array<string> = []
    for (let at = 0; at < text.length; at += size) pieces.push(text.slice(at, at + size))
    out.push(pieces)
  }
  return out
}

describe("makeSseParser", () => {
  it.each(CORPUS)("reads what Effect's parser reads: %s", (_, text) => {
    for (const pieces of splits(text)) expect(ours(pieces)).toEqual(effects(pieces))
  })

  it("reads the whole corpus as one stream the same way", () => {
    const text = CORPUS.map(([, t]) => t).join("\n\n")
    for (const pieces of splits(text)) expect(ours(pieces)).toEqual(effects(pieces))
  })

  it("refuses an event held over the bound across pieces, as Effect's parser does", () => {
    // The bound is on what is held between pieces (an event still open, a line not ended); an
    // event that begins and ends within one piece is not held.
    const big = `data: ${"x".repeat(100)}\ndata: ${"y".repeat(100)}\n\n`
    for (const size of [10, 33, 64]) {
      const pieces: Array<string> = []
      for (let at = 0; at < big.length; at += size) pieces.push(big.slice(at, at + size))
      expect(ours(pieces, 150)).toEqual(effects(pieces, 150))
      expect(ours(pieces, 150)).toContainEqual({ error: true })
    }
    expect(ours([big], 150)).toEqual(effects([big], 150))
    // An endless line with no end of line is refused too, not held.
    const endless = Array.from({ length: 20 }, () => "z".repeat(10))
    expect(ours(["data: ", ...endless], 150)).toContainEqual({ error: true })
  })

  it("stays linear on long lines and many short ones", () => {
    const long = `data: ${"a".repeat(2_000_000)}\n\n`
    const many = "data\n".repeat(200_000) + "\n"
    const started = performance.now()
    expect(ours([long])).toHaveLength(1)
    expect(ours([many])).toEqual([{ event: "message", id: undefined, data: "\n".repeat(199_999) }])
    // Generous for a machine at load 10: the quadratic scan this guards against takes minutes.
    expect(performance.now() - started).toBeLessThan(5_000)
  })
})
