/**
 * The server's two log formats, each one line per log call, written through the console's line
 * sink (line-sink.ts). `json` (flat-json.ts) is for log collectors; `pretty` for a terminal or a
 * plain file: `time LEVEL message key=value ...`, the annotations in logfmt style. Effect's own
 * pretty logger rendered the annotations with `util.inspect`, about 60 us a line (issue 25).
 */
import { Cause, Console, Logger, References } from "effect"
import { flatJsonLine } from "./flat-json.ts"
import { consoleLines } from "./line-sink.ts"

const BARE = /^[\w.:/@+-]+$/

const logfmtValue = (value: unknown): string => {
  if (typeof value === "string") return BARE.test(value) ? value : JSON.stringify(value)
  if (typeof value === "number" || typeof value === "boolean" || value === null || value === undefined) return String(value)
  return safeJson(value)
}

const safeJson = (value: unknown): string => {
  try {
    return JSON.stringify(value) ?? String(value)
  } catch {
    return String(value)
  }
}

const messagePart = (value: unknown): string =>
  typeof value === "string" ? value : value instanceof Error ? (value.stack ?? value.message) : safeJson(value)

export const prettyLine = (options: Logger.Options<unknown>): string => {
  const { message } = options
  let line = `${options.date.toISOString()} ${options.logLevel.toUpperCase()} ${Array.isArray(message) ? message.map(messagePart).join(" ") : messagePart(message)}`
  const annotations = options.fiber.getRef(References.CurrentLogAnnotations)
  for (const key in annotations) line += ` ${key}=${logfmtValue(annotations[key])}`
  if (options.cause.reasons.length > 0) line += `\n${Cause.pretty(options.cause)}`
  return line
}

export const prettyLineLogger: Logger.Logger<unknown, void> = Logger.make((options) =>
  consoleLines(options.fiber.getRef(Console.Console)).line(prettyLine(options))
)

export const flatJsonLineLogger: Logger.Logger<unknown, void> = Logger.make((options) =>
  consoleLines(options.fiber.getRef(Console.Console)).line(flatJsonLine(options))
)
