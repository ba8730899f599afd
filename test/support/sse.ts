/**
 * Server-sent events as a client reads them, one parser for the suite (issue 39 item 5): the
 * gateway's streams (chat completions, messages, responses) and the fakes' are split into events
 * here rather than by a parser of each test file's own.
 */

export interface SseFrame {
  /** The `event:` field, when the frame has one. */
  readonly event?: string
  /** The `data:` field, when the frame has one. */
  readonly data?: string
  /** A comment line (`: ...`), when the frame has one. */
  readonly comment?: string
  /** The frame's lines as sent. */
  readonly lines: ReadonlyArray<string>
}

/** Splits an SSE body into its frames (blank-line separated), comments included. */
export const sseFrames = (text: string): Array<SseFrame> =>
  text
    .split("\n\n")
    .filter((block) => block.length > 0)
    .map((block) => {
      const lines = block.split("\n")
      const frame: { event?: string; data?: string; comment?: string; lines: Array<string> } = { lines }
      for (const line of lines) {
        if (line.startsWith(":")) frame.comment = line
        else if (line.startsWith("event: ")) frame.event = line.slice("event: ".length)
        else if (line.startsWith("data: ")) frame.data = line.slice("data: ".length)
      }
      return frame
    })

/** The data payloads of the frames that have one, in order (`[DONE]` included). */
export const sseData = (text: string): Array<string> =>
  sseFrames(text).flatMap((frame) => (frame.data === undefined ? [] : [frame.data]))

/** The data payloads parsed as JSON, `[DONE]` left out. */
export const sseJson = <A = Record<string, unknown>>(text: string): Array<A> =>
  sseData(text).filter((data) => data !== "[DONE]").map((data) => JSON.parse(data) as A)
