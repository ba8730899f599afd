/**
 * How Postgres values cross the tool boundary. sql-pg reads every column in the binary format;
 * this registry decodes straight to JSON-safe values: int8 and money as strings (numeric already
 * is one), bytea as base64, timestamps as ISO 8601 with full microsecond precision, intervals as
 * ISO 8601 durations, arrays of any dimension. Built-in types sql-pg has no codec for come back
 * as their text when the bytes are text, otherwise as `\x` hex, instead of failing the row.
 */
import * as PgTypes from "@effect/sql-pg/PgTypes"
import * as Result from "effect/Result"
import { Buffer } from "node:buffer"

const { OID } = PgTypes

type Decoded = Result.Result<unknown, PgTypes.CodecError>

const codecError = (message: string) => Result.fail(new PgTypes.CodecError({ message }))

const view = (bytes: Uint8Array) => new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength)

const INT64_MAX = 9223372036854775807n
const INT64_MIN = -9223372036854775808n
const PG_EPOCH_UNIX_MICROS = 946_684_800_000_000n
const MICROS_PER_DAY = 86_400_000_000n

const pad = (value: number | bigint, width: number) => String(value).padStart(width, "0")

/** Microseconds as `.ffffff` without trailing zeros, or nothing for a whole second. */
const fraction = (micros: bigint) => {
  if (micros === 0n) return ""
  return "." + pad(micros, 6).replace(/0+$/, "")
}

/** Proleptic Gregorian date from days since 1970-01-01 (H. Hinnant's algorithm); exact for any int64 timestamp. */
const civilFromDays = (daysSinceUnixEpoch: number): [number, number, number] => {
  const z = daysSinceUnixEpoch + 719_468
  const era = Math.floor(z / 146_097)
  const dayOfEra = z - era * 146_097
  const yearOfEra = Math.floor(
    (dayOfEra - Math.floor(dayOfEra / 1460) + Math.floor(dayOfEra / 36_524) - Math.floor(dayOfEra / 146_096)) / 365
  )
  const dayOfYear = dayOfEra - (365 * yearOfEra + Math.floor(yearOfEra / 4) - Math.floor(yearOfEra / 100))
  const shiftedMonth = Math.floor((5 * dayOfYear + 2) / 153)
  const day = dayOfYear - Math.floor((153 * shiftedMonth + 2) / 5) + 1
  const month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
  const year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
  return [year, month, day]
}

/** ISO 8601 years: four digits inside 0000-9999, otherwise signed six digits (as `Date#toISOString`). */
const isoYear = (year: number) =>
  year >= 0 && year <= 9999 ? pad(year, 4) : (year < 0 ? "-" : "+") + pad(Math.abs(year), 6)

const timeOfDay = (micros: bigint) => {
  const seconds = micros / 1_000_000n
  return `${pad(seconds / 3600n, 2)}:${pad((seconds / 60n) % 60n, 2)}:${pad(seconds % 60n, 2)}${
    fraction(micros % 1_000_000n)
  }`
}

/** Postgres timestamps are int64 microseconds since 2000-01-01; `timestamptz` is UTC on the wire. */
export const formatTimestamp = (pgMicros: bigint, zoned: boolean): string => {
  if (pgMicros === INT64_MAX) return "infinity"
  if (pgMicros === INT64_MIN) return "-infinity"
  const unixMicros = pgMicros + PG_EPOCH_UNIX_MICROS
  let days = unixMicros / MICROS_PER_DAY
  let rest = unixMicros % MICROS_PER_DAY
  if (rest < 0n) {
    rest += MICROS_PER_DAY
    days -= 1n
  }
  const [year, month, day] = civilFromDays(Number(days))
  return `${isoYear(year)}-${pad(month, 2)}-${pad(day, 2)}T${timeOfDay(rest)}${zoned ? "Z" : ""}`
}

/** ISO 8601 duration with Postgres' `iso_8601` interval style rules: each part carries its own sign. */
export const formatInterval = (months: number, days: number, micros: bigint): string => {
  const years = Math.trunc(months / 12)
  const restMonths = months % 12
  let date = ""
  if (years !== 0) date += `${years}Y`
  if (restMonths !== 0) date += `${restMonths}M`
  if (days !== 0) date += `${days}D`
  let time = ""
  if (micros !== 0n) {
    const negative = micros < 0n
    const magnitude = negative ? -micros : micros
    const sign = negative ? "-" : ""
    const hours = magnitude / 3_600_000_000n
    const minutes = (magnitude / 60_000_000n) % 60n
    const seconds = magnitude % 60_000_000n
    if (hours !== 0n) time += `${sign}${hours}H`
    if (minutes !== 0n) time += `${sign}${minutes}M`
    if (seconds !== 0n) time += `${sign}${seconds / 1_000_000n}${fraction(seconds % 1_000_000n)}S`
  }
  if (date === "" && time === "") return "PT0S"
  return `P${date}${time === "" ? "" : `T${time}`}`
}

const decodeInt8 = (bytes: Uint8Array): Decoded =>
  bytes.length === 8 ? Result.succeed(view(bytes).getBigInt64(0).toString()) : codecError("int8 must be 8 bytes")

const decodeMoney = (bytes: Uint8Array): Decoded => {
  if (bytes.length !== 8) return codecError("money must be 8 bytes")
  // Cents: the two fraction digits of every common lc_monetary.
  const cents = view(bytes).getBigInt64(0)
  const magnitude = cents < 0n ? -cents : cents
  return Result.succeed(`${cents < 0n ? "-" : ""}${magnitude / 100n}.${pad(magnitude % 100n, 2)}`)
}

const decodeTimestamp = (zoned: boolean) => (bytes: Uint8Array): Decoded =>
  bytes.length === 8
    ? Result.succeed(formatTimestamp(view(bytes).getBigInt64(0), zoned))
    : codecError("timestamp must be 8 bytes")

const decodeTime = (bytes: Uint8Array): Decoded =>
  bytes.length === 8 ? Result.succeed(timeOfDay(view(bytes).getBigInt64(0))) : codecError("time must be 8 bytes")

const decodeInterval = (bytes: Uint8Array): Decoded => {
  if (bytes.length !== 16) return codecError("interval must be 16 bytes")
  const data = view(bytes)
  return Result.succeed(formatInterval(data.getInt32(12), data.getInt32(8), data.getBigInt64(0)))
}

const decodeBytea = (bytes: Uint8Array): Decoded =>
  Result.succeed(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("base64"))

const decodeBits = (bytes: Uint8Array): Decoded => {
  if (bytes.length < 4) return codecError("bit string too short")
  const length = view(bytes).getInt32(0)
  let text = ""
  for (let index = 0; index < length; index++) {
    const byte = bytes[4 + (index >> 3)]
    if (byte === undefined) return codecError("bit string truncated")
    text += (byte >> (7 - (index & 7))) & 1 ? "1" : "0"
  }
  return Result.succeed(text)
}

const strictUtf8 = new TextDecoder("utf-8", { fatal: true })
// eslint-disable-next-line no-control-regex
const controlCharacters = /[\u0000-\u0008\u000b\u000c\u000e-\u001f]/

/**
 * Many built-in types send their text form as their binary form (xml, enums, jsonpath after a
 * version byte...). Anything that is not clean text is binary structure; hex keeps it visible.
 */
const decodeUnknown = (bytes: Uint8Array): Decoded => {
  let text: string | undefined
  try {
    text = strictUtf8.decode(bytes)
  } catch {
    text = undefined
  }
  return Result.succeed(
    text !== undefined && !controlCharacters.test(text)
      ? text
      : "\\x" + Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("hex")
  )
}

/** Binary array layout: ndim, has-null flag, element OID, (length, lower bound) per dimension, elements. */
const decodeArray = (registry: PgTypes.Registry) => (bytes: Uint8Array): Decoded => {
  if (bytes.length < 12) return codecError("array header truncated")
  const data = view(bytes)
  const dimensions = data.getInt32(0)
  const elementOid = data.getUint32(8)
  if (dimensions === 0) return Result.succeed([])
  if (dimensions < 0 || bytes.length < 12 + dimensions * 8) return codecError("array dimensions truncated")
  const lengths: Array<number> = []
  for (let dimension = 0; dimension < dimensions; dimension++) lengths.push(data.getInt32(12 + dimension * 8))
  let offset = 12 + dimensions * 8
  const readLevel = (level: number): Result.Result<Array<unknown>, PgTypes.CodecError> => {
    const out: Array<unknown> = []
    const count = lengths[level] ?? 0
    for (let index = 0; index < count; index++) {
      if (level < dimensions - 1) {
        const nested = readLevel(level + 1)
        if (Result.isFailure(nested)) return nested
        out.push(nested.success)
        continue
      }
      if (offset + 4 > bytes.length) return codecError("array element truncated")
      const size = data.getInt32(offset)
      offset += 4
      if (size < 0) {
        out.push(null)
        continue
      }
      if (offset + size > bytes.length) return codecError("array element truncated")
      const element = PgTypes.decode(bytes.subarray(offset, offset + size), elementOid, 1, registry)
      offset += size
      if (Result.isFailure(element)) return Result.fail(element.failure)
      out.push(element.success)
    }
    return Result.succeed(out)
  }
  return readLevel(0)
}

/** Every OID Postgres assigns to built-in types is below this; user-defined types start here. */
const FIRST_NORMAL_OBJECT_ID = 16_384

const makeRegistry = (): PgTypes.Registry => {
  const registry = PgTypes.makeRegistry()
  const overridden = new Set<number>()
  const register = (oid: number, decode: (bytes: Uint8Array) => Decoded) => {
    overridden.add(oid)
    // Parameters are bound as untyped text (see toPgParams), so encoding only ever sees the
    // Date and Uint8Array values a caller passes directly; the built-in encoders handle those.
    registry.register(oid, { encode: (value) => PgTypes.encode(value, oid), decode })
  }
  register(OID.int8, decodeInt8)
  register(OID.bytea, decodeBytea)
  register(OID.timestamp, decodeTimestamp(false))
  register(OID.timestamptz, decodeTimestamp(true))
  register(OID.time, decodeTime)
  register(OID.interval, decodeInterval)
  register(790, decodeMoney)
  register(1560, decodeBits)
  register(1562, decodeBits)
  const array = decodeArray(registry)
  for (const [name, oid] of Object.entries(OID)) {
    if (name.endsWith("Array")) register(oid, array)
  }
  // int2vector and oidvector use the array layout; the others are arrays of the types above.
  for (const oid of [22, 30, 143, 791, 1561, 1563]) register(oid, array)
  // The reg* aliases of oid (regproc, regtype, regrole...) as the number they carry.
  for (const oid of [24, 2202, 2203, 2204, 2206, 3734, 3769, 4089, 4096, 4191]) {
    register(oid, (bytes) => PgTypes.decode(bytes, OID.oid, 1))
  }
  const handled = new Set<number>([...Object.values(OID), ...overridden])
  for (let oid = 1; oid < FIRST_NORMAL_OBJECT_ID; oid++) {
    if (!handled.has(oid)) register(oid, decodeUnknown)
  }
  return registry
}

let shared: PgTypes.Registry | undefined

/** One registry for every Postgres driver: it is immutable once built and costs a few thousand map entries. */
export const pgRegistry = (): PgTypes.Registry => (shared ??= makeRegistry())

const arrayElement = (value: unknown): string => {
  if (value === null || value === undefined) return "NULL"
  if (Array.isArray(value)) return arrayLiteral(value)
  const text = typeof value === "object" && !(value instanceof Date)
    ? JSON.stringify(value)
    : value instanceof Date
    ? value.toISOString()
    : String(value)
  return `"${text.replace(/["\\]/g, "\\$&")}"`
}

const arrayLiteral = (values: ReadonlyArray<unknown>): string => `{${values.map(arrayElement).join(",")}}`

/**
 * JSON tool arguments become untyped text parameters, so Postgres infers each one from the
 * statement exactly as it would a quoted literal: `5` compares with a bigint, a numeric or a
 * text column alike, and an array becomes an array literal for `= ANY($1)`. They stay bound
 * parameters: nothing is ever spliced into the SQL text.
 */
export const toPgParams = (params: ReadonlyArray<unknown>): Array<unknown> =>
  params.map((value) => {
    if (value === null || value === undefined) return null
    if (typeof value === "string" || value instanceof Uint8Array || value instanceof Date) return value
    if (typeof value === "number" || typeof value === "bigint" || typeof value === "boolean") return String(value)
    if (Array.isArray(value)) return arrayLiteral(value)
    return JSON.stringify(value)
  })
