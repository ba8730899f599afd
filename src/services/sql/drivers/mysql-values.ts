/**
 * How MySQL/MariaDB values cross the tool boundary. The connection is opened with
 * `supportBigNumbers`/`bigNumberStrings` (BIGINT and DECIMAL arrive as strings) and `dateStrings`
 * (no lossy Date objects); this module turns the rest into JSON-safe values: binary strings and
 * blobs as base64, DATETIME/TIMESTAMP as ISO 8601 (TIMESTAMP with `Z`: sessions run in UTC),
 * BIT as a number. JSON columns are parsed by mysql2 itself.
 */
import { Buffer } from "node:buffer"
import type { FieldPacket } from "mysql2"
import type { ResultColumn } from "./types.ts"

/** Wire type codes (mysql2's constants/types). */
const TYPE = {
  DECIMAL: 0x00,
  TINY: 0x01,
  SHORT: 0x02,
  LONG: 0x03,
  FLOAT: 0x04,
  DOUBLE: 0x05,
  NULL: 0x06,
  TIMESTAMP: 0x07,
  LONGLONG: 0x08,
  INT24: 0x09,
  DATE: 0x0a,
  TIME: 0x0b,
  DATETIME: 0x0c,
  YEAR: 0x0d,
  NEWDATE: 0x0e,
  VARCHAR: 0x0f,
  BIT: 0x10,
  VECTOR: 0xf2,
  JSON: 0xf5,
  NEWDECIMAL: 0xf6,
  ENUM: 0xf7,
  SET: 0xf8,
  TINY_BLOB: 0xf9,
  MEDIUM_BLOB: 0xfa,
  LONG_BLOB: 0xfb,
  BLOB: 0xfc,
  VAR_STRING: 0xfd,
  STRING: 0xfe,
  GEOMETRY: 0xff
} as const

const FLAG_UNSIGNED = 32
const FLAG_ENUM = 256
const FLAG_SET = 2048
/** Character set 63 is `binary`: the column holds bytes, not text. */
const BINARY_CHARSET = 63

const isBinary = (field: FieldPacket) => field.characterSet === BINARY_CHARSET

const flagsOf = (field: FieldPacket) => (typeof field.flags === "number" ? field.flags : 0)

const NUMERIC_NAMES: Partial<Record<number, string>> = {
  [TYPE.DECIMAL]: "decimal",
  [TYPE.NEWDECIMAL]: "decimal",
  [TYPE.TINY]: "tinyint",
  [TYPE.SHORT]: "smallint",
  [TYPE.INT24]: "mediumint",
  [TYPE.LONG]: "int",
  [TYPE.LONGLONG]: "bigint",
  [TYPE.FLOAT]: "float",
  [TYPE.DOUBLE]: "double",
  [TYPE.YEAR]: "year"
}

const OTHER_NAMES: Partial<Record<number, string>> = {
  [TYPE.NULL]: "null",
  [TYPE.TIMESTAMP]: "timestamp",
  [TYPE.DATE]: "date",
  [TYPE.NEWDATE]: "date",
  [TYPE.TIME]: "time",
  [TYPE.DATETIME]: "datetime",
  [TYPE.BIT]: "bit",
  [TYPE.JSON]: "json",
  [TYPE.ENUM]: "enum",
  [TYPE.SET]: "set",
  [TYPE.GEOMETRY]: "geometry",
  [TYPE.VECTOR]: "vector"
}

const STRING_NAMES: Partial<Record<number, readonly [text: string, binary: string]>> = {
  [TYPE.VARCHAR]: ["varchar", "varbinary"],
  [TYPE.VAR_STRING]: ["varchar", "varbinary"],
  [TYPE.STRING]: ["char", "binary"],
  [TYPE.TINY_BLOB]: ["tinytext", "tinyblob"],
  [TYPE.BLOB]: ["text", "blob"],
  [TYPE.MEDIUM_BLOB]: ["mediumtext", "mediumblob"],
  [TYPE.LONG_BLOB]: ["longtext", "longblob"]
}

/** A readable type name from the column metadata (the wire only has codes, flags and a charset). */
export const mysqlTypeName = (field: FieldPacket): string | undefined => {
  if (field.extendedFormat === "json") return "json"
  if (field.extendedTypeName !== undefined && field.extendedTypeName !== "") return field.extendedTypeName
  const code = field.columnType ?? field.type
  if (code === undefined) return undefined
  const flags = flagsOf(field)
  const numeric = NUMERIC_NAMES[code]
  if (numeric !== undefined) return flags & FLAG_UNSIGNED ? `${numeric} unsigned` : numeric
  if (flags & FLAG_ENUM) return "enum"
  if (flags & FLAG_SET) return "set"
  const strings = STRING_NAMES[code]
  if (strings !== undefined) return isBinary(field) ? strings[1] : strings[0]
  return OTHER_NAMES[code]
}

export const mysqlColumns = (fields: ReadonlyArray<FieldPacket>): Array<ResultColumn> =>
  fields.map((field) => {
    const type = mysqlTypeName(field)
    return type === undefined ? { name: field.name } : { name: field.name, type }
  })

/** `YYYY-MM-DD HH:MM:SS[.f]` as ISO 8601; zero dates have no ISO form and stay as MySQL wrote them. */
const isoDateTime = (text: string, zoned: boolean) =>
  text.startsWith("0000-00-00") ? text : `${text.replace(" ", "T")}${zoned ? "Z" : ""}`

const bitValue = (bytes: Buffer): number | string => {
  let value = 0n
  for (const byte of bytes) value = (value << 8n) | BigInt(byte)
  return value <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(value) : value.toString()
}

const convertValue = (value: unknown, field: FieldPacket): unknown => {
  if (value === null || value === undefined) return null
  const code = field.columnType ?? field.type
  if (typeof value === "string") {
    if (code === TYPE.TIMESTAMP) return isoDateTime(value, true)
    if (code === TYPE.DATETIME) return isoDateTime(value, false)
    return value
  }
  if (Buffer.isBuffer(value)) return code === TYPE.BIT ? bitValue(value) : value.toString("base64")
  if (typeof value === "bigint") return value.toString()
  return value
}

export const mysqlRow = (
  row: Record<string, unknown>,
  fields: ReadonlyArray<FieldPacket>
): Record<string, unknown> => {
  const out: Record<string, unknown> = {}
  for (const field of fields) out[field.name] = convertValue(row[field.name], field)
  return out
}

/**
 * JSON tool arguments as bound values: scalars as they are, objects and arrays as JSON text
 * (MySQL has no array type, and a JSON column accepts the text).
 */
export const toMysqlParams = (params: ReadonlyArray<unknown>): Array<unknown> =>
  params.map((value) => {
    if (value === null || value === undefined) return null
    if (typeof value === "bigint") return value.toString()
    if (value instanceof Uint8Array) return Buffer.from(value.buffer, value.byteOffset, value.byteLength)
    if (value instanceof Date || typeof value !== "object") return value
    return JSON.stringify(value)
  })
