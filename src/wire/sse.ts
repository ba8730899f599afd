/**
 * A Server-Sent Events parser (the WHATWG event-stream format), for reading providers' streams.
 *
 * It reads what Effect's `Sse.makeParser` reads (test/wire/sse.test.ts compares the two on every
 * split of a corpus), with less copying (issue 38): an event whose data is one line, which is every
 * provider's event, gets that line as its data as received (a slice of the decoded chunk), where the
 * general parser built each line, its field and its value as strings of their own and then joined
 * and trimmed the data (13% of what a streamed answer allocated). `retry:` fields are not reported:
 * the gateway never reconnects to an upstream mid-answer.
 */

/** One event as the stream carries it: its name (`message` when unnamed), the last event id seen, its data. */
export interface SseEvent {
  readonly _tag: "Event"
  readonly event: string
  readonly id: string | undefined
  readonly data: string
}

/** The bound of one event (its data and any unterminated line), as Effect's parser has it. */
export const MAX_SSE_EVENT_CHARS = 10 * 1024 * 1024

const LF = 10
const CR = 13
const COLON = 58
const SPACE = 32
const BOM = "\uFEFF"

export interface SseParser {
  /** Parses the next piece of the stream's text; returns the reason when the stream is malformed (an event over the bound). */
  readonly feed: (text: string) => string | undefined
}

export const makeSseParser = (onEvent: (event: SseEvent) => void, maxEventChars: number = MAX_SSE_EVENT_CHARS): SseParser => {
  let first = true
  /** The start of a line not yet ended, from earlier pieces. */
  let pending = ""
  /** The previous piece ended with CR: an LF starting this one belongs to that line end. */
  let skipLf = false
  let data: string | undefined
  let eventName: string | undefined
  let lastId: string | undefined

  /** One line: `text` from `start` to `end` (its end of line excluded). */
  const line = (text: string, start: number, end: number) => {
    if (start === end) {
      if (data !== undefined) onEvent({ _tag: "Event", event: eventName || "message", id: lastId, data })
      data = undefined
      eventName = undefined
      return
    }
    if (text.charCodeAt(start) === COLON) return
    // The field ends at the line's first colon (or with the line): searched within the line only.
    let colon = start
    while (colon < end && text.charCodeAt(colon) !== COLON) colon++
    let from = colon + 1
    if (from < end && text.charCodeAt(from) === SPACE) from++
    const field = colon - start
    if (field === 4 && text.startsWith("data", start)) {
      const value = from >= end ? "" : text.slice(from, end)
      data = data === undefined ? value : `${data}\n${value}`
    } else if (field === 5 && text.startsWith("event", start)) {
      eventName = from >= end ? "" : text.slice(from, end)
    } else if (field === 2 && text.startsWith("id", start)) {
      const id = from >= end ? "" : text.slice(from, end)
      if (!id.includes("\u0000")) lastId = id
    }
  }

  const feed = (piece: string): string | undefined => {
    if (piece.length === 0) return undefined
    let text = piece
    if (first) {
      first = false
      if (text.startsWith(BOM)) text = text.slice(BOM.length)
    }
    const length = text.length
    let at = 0
    if (skipLf) {
      skipLf = false
      if (text.charCodeAt(0) === LF) at = 1
    }
    // The next CR and LF at or after `at`, each searched again only once passed: linear in the piece.
    let lf = -2
    let cr = -2
    while (at < length) {
      if (lf !== -1 && lf < at) lf = text.indexOf("\n", at)
      if (cr !== -1 && cr < at) cr = text.indexOf("\r", at)
      const end = lf === -1 ? cr : cr === -1 ? lf : Math.min(lf, cr)
      if (end === -1) {
        pending = pending === "" ? text.slice(at) : pending + text.slice(at)
        break
      }
      if (pending === "") line(text, at, end)
      else {
        const whole = pending + text.slice(at, end)
        pending = ""
        line(whole, 0, whole.length)
      }
      at = end + 1
      if (text.charCodeAt(end) === CR) {
        if (at === length) skipLf = true
        else if (text.charCodeAt(at) === LF) at++
      }
    }
    if (pending.length + (data?.length ?? 0) > maxEventChars) {
      pending = ""
      data = undefined
      eventName = undefined
      return `an event is larger than ${maxEventChars} characters`
    }
    return undefined
  }

  return { feed }
}
