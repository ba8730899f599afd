/**
 * Where the server's log lines go: the fiber's console (standard output, or what a test put in
 * its place), written once per turn of the event loop instead of once per line. Under load a
 * turn ends many requests, and their lines leave as one write; through one `console.log` per
 * line (with Effect's pretty logger formatting the annotations by `util.inspect`) the request
 * line at info cost about a fifth of a request's CPU (issue 25, bench A/B rounds). Lines stay in
 * order; what is pending is written when the process exits, so only a kill -9 loses the lines
 * of the current turn.
 */
import type * as Console from "effect/Console"

export interface LineSink {
  readonly line: (text: string) => void
  readonly flush: () => void
}

/** Lines held before a turn ends are written at once past this many. */
const MAX_PENDING = 256

/** `write` gets the lines of a turn joined, without the last newline (as `console.log` wants it). */
export const makeLineSink = (write: (text: string) => void): LineSink => {
  let pending: Array<string> = []
  let scheduled = false
  const flush = () => {
    scheduled = false
    if (pending.length === 0) return
    const text = pending.length === 1 ? pending[0]! : pending.join("\n")
    pending = []
    write(text)
  }
  return {
    line: (text) => {
      pending.push(text)
      if (pending.length >= MAX_PENDING) flush()
      else if (!scheduled) {
        scheduled = true
        setImmediate(flush)
      }
    },
    flush
  }
}

const sinks = new WeakMap<Console.Console, LineSink>()
const live = new Set<LineSink>()
let exitHook = false

/** The sink of one console (made on first use; every sink is flushed when the process exits). */
export const consoleLines = (console: Console.Console): LineSink => {
  let sink = sinks.get(console)
  if (sink === undefined) {
    sink = makeLineSink((text) => console.log(text))
    sinks.set(console, sink)
    live.add(sink)
    if (!exitHook) {
      exitHook = true
      // Writes to a pipe or a file are synchronous on Linux: what is flushed here is written.
      process.once("exit", () => {
        for (const pending of live) pending.flush()
      })
    }
  }
  return sink
}
