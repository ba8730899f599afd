/**
 * Spend reports (issue 33): `GET /usage` as the admin API answers it. The store totals the audit
 * trail per combination of the asked groups (AuditRepo.usage); this turns those totals into the
 * report a client reads: exact decimal credits, input tokens split into uncached, cache-read and
 * cache-write, money when `credits.currency` is set, as JSON or as CSV.
 *
 * Bounds: every answer holds at most `limit` rows (default DEFAULT_ROWS, at most MAX_USAGE_ROWS);
 * a report with more is refused with a 400 saying how to narrow it, never cut silently. A window
 * grouped by day spans at most MAX_DAYS days.
 */
import { Duration, Effect, Schema } from "effect"
import { HttpServerResponse } from "effect/http"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import { ValidationFailed } from "../../domain/errors.ts"
import { fromMicros, microsToDecimalString } from "../../domain/money.ts"
import { decodeStrict } from "../../domain/validation.ts"
import { Audit } from "../../services/audit/Audit.ts"
import { AppConfig } from "../../services/config/AppConfig.ts"
import { StoreDeadline } from "../../services/store/StoreError.ts"
import { AuditRepo, MAX_USAGE_ROWS, USAGE_DIMENSIONS, type UsageDimension, type UsageRow } from "../../services/store/AuditRepo.ts"
import { json } from "../../pipelines/respond.ts"

const FILTER = Schema.String.check(Schema.isMinLength(1), Schema.isMaxLength(256))

/** GET /usage's query; `group_by` may also be repeated (`group_by=team&group_by=day`). */
export const UsageQuery = Schema.Struct({
  key_id: Schema.optional(FILTER),
  team_id: Schema.optional(FILTER),
  end_user: Schema.optional(FILTER),
  group_by: Schema.optional(Schema.String.check(Schema.isMaxLength(200))),
  since: Schema.optional(Schema.String.check(Schema.isMaxLength(40))),
  until: Schema.optional(Schema.String.check(Schema.isMaxLength(40))),
  limit: Schema.optional(Schema.String.check(Schema.isMaxLength(10))),
  format: Schema.optional(Schema.Literals(["json", "csv"]))
})

export const DEFAULT_ROWS = 10_000
/** The longest window a report grouped by day may span: a year, leap day included. */
export const MAX_DAYS = 366
const DAY_MS = 86_400_000

/** Where a grouping column's value is in a row, and its name in the answer. */
const COLUMNS: Record<UsageDimension, "day" | "key_id" | "team_id" | "model" | "provider" | "end_user"> = {
  day: "day",
  key: "key_id",
  team: "team_id",
  model: "model",
  provider: "provider",
  end_user: "end_user"
}

const invalid = (field: string, message: string) => new ValidationFailed({ message: `${field}: ${message}`, details: { field } })

const isoParam = (name: string, value: string | undefined) =>
  value === undefined
    ? Effect.succeed(undefined)
    : Number.isNaN(Date.parse(value))
    ? Effect.fail(invalid(name, "expected an ISO-8601 timestamp"))
    : Effect.succeed(new Date(value).toISOString())

/**
 * `group_by=day,key,team,model,provider,end_user`: any subset, comma-separated and/or repeated;
 * the default is key and model. The answer's `group_by` and the CSV's columns keep the order asked.
 */
const groupByParam = (values: ReadonlyArray<string>) => {
  if (values.length === 0) return Effect.succeed(undefined)
  const parts = values.flatMap((v) => v.split(",")).map((p) => p.trim()).filter((p) => p !== "")
  const bad = parts.find((p) => !(USAGE_DIMENSIONS as ReadonlyArray<string>).includes(p))
  return bad !== undefined
    ? Effect.fail(invalid("group_by", `expected a comma-separated list of ${USAGE_DIMENSIONS.join(", ")}; got "${bad.slice(0, 50)}"`))
    : Effect.succeed([...new Set(parts)] as ReadonlyArray<UsageDimension>)
}

const limitParam = (value: string | undefined) => {
  if (value === undefined) return Effect.succeed(DEFAULT_ROWS)
  const n = /^\d{1,6}$/.test(value) ? Number(value) : Number.NaN
  return n >= 1 && n <= MAX_USAGE_ROWS
    ? Effect.succeed(n)
    : Effect.fail(invalid("limit", `expected an integer from 1 to ${MAX_USAGE_ROWS}`))
}

/** A positive decimal (config `credits.currency.per_credit`) as an integer over a power of ten. */
const decimalParts = (value: string | number): { readonly units: bigint; readonly scale: number } => {
  const [whole, fraction = ""] = String(value).split(".")
  return { units: BigInt(`${whole}${fraction}`), scale: fraction.length }
}

/**
 * `micros` credits in the currency, in millionths of its unit, rounded half away from zero: exact
 * integer arithmetic, so a sum of costs never drifts the way floating point would.
 */
export const costMicros = (micros: number, perCredit: string | number): bigint => {
  const { units, scale } = decimalParts(perCredit)
  const product = BigInt(micros) * units
  const divisor = 10n ** BigInt(scale)
  const negative = product < 0n
  const magnitude = negative ? -product : product
  const rounded = (magnitude * 2n + divisor) / (2n * divisor)
  return negative ? -rounded : rounded
}

const bigToDecimalString = (value: bigint): string => {
  const negative = value < 0n
  const magnitude = negative ? -value : value
  const text = magnitude.toString().padStart(7, "0")
  return `${negative ? "-" : ""}${text.slice(0, -6)}.${text.slice(-6)}`
}

export interface Currency {
  readonly code: string
  readonly per_credit: string | number
}

/** A store row as the report shows it: the grouping columns asked, then the totals. */
const reportRow = (row: UsageRow, groups: ReadonlyArray<UsageDimension>, currency: Currency | undefined) => {
  const out: Record<string, unknown> = {}
  for (const d of groups) out[COLUMNS[d]] = row[COLUMNS[d]] ?? null
  const cached = row.cache_read_tokens + row.cache_write_tokens
  Object.assign(out, {
    requests: row.requests,
    errors: row.errors,
    credits: fromMicros(row.credits_micros),
    input_tokens: Math.max(0, row.prompt_tokens - cached),
    output_tokens: row.completion_tokens,
    cache_read_tokens: row.cache_read_tokens,
    cache_write_tokens: row.cache_write_tokens,
    // As before issue 33: every input token (cache included) and every output token.
    prompt_tokens: row.prompt_tokens,
    completion_tokens: row.completion_tokens
  })
  if (currency !== undefined) {
    out.cost = { amount: Number(bigToDecimalString(costMicros(row.credits_micros, currency.per_credit))), currency: currency.code }
  }
  return out
}

/**
 * One CSV cell (RFC 4180): quoted when it holds a comma, a quote, a line break or edge spaces.
 * Text from the audit trail (a key id, a model, an end user a client named) that a spreadsheet
 * would run as a formula (`=`, `+`, `-`, `@`, a tab or a carriage return first) is prefixed with
 * an apostrophe, so it stays text.
 */
export const csvCell = (value: string | number | null): string => {
  if (value === null) return ""
  if (typeof value === "number") return String(value)
  const safe = /^[=+\-@\t\r]/.test(value) ? `'${value}` : value
  return /[",\r\n]|^\s|\s$/.test(safe) ? `"${safe.replace(/"/g, '""')}"` : safe
}

const csvOf = (rows: ReadonlyArray<UsageRow>, groups: ReadonlyArray<UsageDimension>, currency: Currency | undefined): string => {
  const header = [
    ...groups.map((d) => COLUMNS[d]),
    "requests", "errors", "credits", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
    ...(currency === undefined ? [] : ["cost", "currency"])
  ]
  const lines = [header.join(",")]
  for (const row of rows) {
    const cells: Array<string> = groups.map((d) => csvCell(row[COLUMNS[d]] ?? null))
    cells.push(
      String(row.requests),
      String(row.errors),
      microsToDecimalString(row.credits_micros),
      String(Math.max(0, row.prompt_tokens - row.cache_read_tokens - row.cache_write_tokens)),
      String(row.completion_tokens),
      String(row.cache_read_tokens),
      String(row.cache_write_tokens)
    )
    if (currency !== undefined) cells.push(bigToDecimalString(costMicros(row.credits_micros, currency.per_credit)), currency.code)
    lines.push(cells.join(","))
  }
  return lines.join("\r\n") + "\r\n"
}

/** `Accept: text/csv` (or `format=csv`) asks for CSV; `format=json` wins over the header. */
const wantsCsv = (format: "json" | "csv" | undefined, accept: string | undefined) =>
  format !== undefined ? format === "csv" : accept !== undefined && /(^|,)\s*text\/csv\s*(;|,|$)/i.test(accept)

export const usageReport = Effect.gen(function*() {
  const request = yield* HttpServerRequest
  const url = new URL(request.url, "http://local")
  const params = yield* decodeStrict(UsageQuery)(Object.fromEntries(url.searchParams))
  const since = yield* isoParam("since", params.since)
  const until = yield* isoParam("until", params.until)
  const groupBy = yield* groupByParam(url.searchParams.getAll("group_by"))
  const groups = groupBy ?? (["key", "model"] as const)
  const limit = yield* limitParam(params.limit)
  if (since !== undefined && until !== undefined) {
    if (until <= since) return yield* invalid("until", "must be after since")
    if (groups.includes("day") && Date.parse(until) - Date.parse(since) > MAX_DAYS * DAY_MS) {
      return yield* invalid("since", `a report grouped by day spans at most ${MAX_DAYS} days; ask for one year at a time`)
    }
  }
  const config = yield* AppConfig
  const currency = config.credits.currency
  // Records still in the write buffer belong in the report.
  yield* (yield* Audit).flush
  // A report reads a window of the whole trail: it has a time bound of its own
  // (store_timeouts.report_ms), longer than a request-path call's; past it, a 503 as for any
  // store call that does not answer.
  const reportMs = config.store_timeouts.report_ms
  const deadline = yield* StoreDeadline
  const rows = yield* Effect.orDie((yield* AuditRepo).usage({
    since,
    until,
    key_id: params.key_id,
    team_id: params.team_id,
    end_user: params.end_user,
    group_by: groups,
    limit,
    statement_ms: reportMs
  }).pipe(Effect.provideService(StoreDeadline, Duration.isFinite(deadline) ? Duration.millis(reportMs + 1_000) : deadline)))
  if (rows.length > limit) {
    return yield* new ValidationFailed({
      message: `the report has more than ${limit} rows: narrow since/until, filter by key_id, team_id or end_user, group by fewer columns, or raise limit (at most ${MAX_USAGE_ROWS})`,
      details: { field: "limit", limit }
    })
  }
  if (wantsCsv(params.format, request.headers.accept)) {
    return HttpServerResponse.text(csvOf(rows, groups, currency), {
      contentType: "text/csv; charset=utf-8",
      headers: { "content-disposition": `attachment; filename="usage.csv"` }
    })
  }
  return json({
    since: since ?? null,
    until: until ?? null,
    group_by: groups,
    currency: currency === undefined ? null : { code: currency.code, per_credit: String(currency.per_credit) },
    data: rows.map((row) => reportRow(row, groups, currency))
  })
})
