/**
 * `log.format: json`: one flat JSON object a line, what log collectors (Loki, Elasticsearch,
 * CloudWatch, `jq`) index without a nested path: `time`, `level`, `message`, the log annotations
 * as top-level keys, and `cause` when the line carries one. Effect's own JSON logger nests the
 * annotations under `annotations` and adds `fiberId` and `spans`, which are noise to an operator
 * (the request id is the correlation key, and traces hold the spans).
 */
import { Cause, Formatter, type Logger, References } from "effect"

/** The keys the line itself owns; an annotation of the same name is kept under `annotation.<key>`. */
const OWN_KEYS = new Set(["time", "level", "message", "cause"])

/** A log call's message: one value as itself, several as an array. */
const messageOf = (message: unknown): unknown => Array.isArray(message) ? (message.length === 1 ? message[0] : message) : message

export const flatJsonLine = ({ cause, date, fiber, logLevel, message }: Logger.Options<unknown>): string => {
  const line: Record<string, unknown> = { time: date.toISOString(), level: logLevel.toUpperCase(), message: messageOf(message) }
  if (cause.reasons.length > 0) line.cause = Cause.pretty(cause)
  const annotations = fiber.getRef(References.CurrentLogAnnotations)
  for (const key in annotations) line[OWN_KEYS.has(key) ? `annotation.${key}` : key] = annotations[key]
  // Plain JSON first (the request line is strings and numbers); Formatter.formatJson copes with
  // what JSON.stringify does not (bigints, cycles, errors, redacted values), at several times the cost.
  if (typeof line.message === "string") {
    try {
      return JSON.stringify(line)
    } catch {
      // a bigint or a cycle in an annotation: the formatter below copes
    }
  }
  return Formatter.formatJson(line)
}
