/**
 * `log.format: json`: one flat JSON object a line, what log collectors (Loki, Elasticsearch,
 * CloudWatch, `jq`) index without a nested path: `time`, `level`, `message`, the log annotations
 * as top-level keys, and `cause` when the line carries one. Effect's own JSON logger nests the
 * annotations under `annotations` and adds `fiberId` and `spans`, which are noise to an operator
 * (the request id is the correlation key, and traces hold the spans).
 */
import { Cause, Formatter, Logger, References } from "effect"

/** The keys the line itself owns; an annotation of the same name is kept under `annotation.<key>`. */
const OWN_KEYS = new Set(["time", "level", "message", "cause"])

/** A log call's message: one value as itself, several as an array. */
const messageOf = (message: unknown): unknown => Array.isArray(message) ? (message.length === 1 ? message[0] : message) : message

export const flatJsonLogger: Logger.Logger<unknown, string> = Logger.make(({ cause, date, fiber, logLevel, message }) => {
  const line: Record<string, unknown> = { time: date.toISOString(), level: logLevel.toUpperCase(), message: messageOf(message) }
  if (cause.reasons.length > 0) line.cause = Cause.pretty(cause)
  for (const [key, value] of Object.entries(fiber.getRef(References.CurrentLogAnnotations))) {
    line[OWN_KEYS.has(key) ? `annotation.${key}` : key] = value
  }
  // Formatter.formatJson copes with what JSON.stringify does not (bigints, cycles, errors, redacted values).
  return Formatter.formatJson(line)
})

/** The flat JSON logger writing to the console (stdout), one line per log call. */
export const consoleFlatJson = Logger.withConsoleLog(flatJsonLogger)
