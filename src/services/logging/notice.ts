/**
 * Lines the process writes outside the logger: the one-time admin token (printed whatever the
 * log level), the notice that a SQLite store is being created, a failure that stops `serve`, and
 * the records lost at a stop. With `log.format: json` each is one flat JSON object like the
 * logger's lines (flat-json.ts: `time`, `level`, `message`, then its fields), so a log collector
 * reading the server's output never meets a plain line (issue 31.5); otherwise it is the plain
 * text as it always was.
 */
export type LogFormat = "pretty" | "json"

export const noticeLine = (
  format: LogFormat | undefined,
  level: "INFO" | "WARN" | "ERROR",
  plain: string,
  json: { readonly message: string; readonly fields?: Readonly<Record<string, unknown>> }
): string =>
  format === "json" ? JSON.stringify({ time: new Date().toISOString(), level, message: json.message, ...json.fields }) : plain
