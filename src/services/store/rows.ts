/**
 * Column codecs the repositories share. Both stores answer in their own types: SQLite returns
 * numbers, Postgres returns BIGINT and aggregates as strings; booleans are 0/1 integers and
 * structured values JSON text in both. Every row is decoded through these, so a row that does not
 * match its table fails as a StoreError instead of flowing on half-typed.
 */
import * as Effect from "effect/Effect"
import * as Schema from "effect/Schema"
import * as SchemaTransformation from "effect/SchemaTransformation"
import type { SqlClient } from "effect/sql/SqlClient"

export const DEFAULT_WORKSPACE = "ws_default"

/** A BIGINT the driver hands over as a bigint, read as the number every caller uses (as before: `Number`). */
const NumberFromBigInt = Schema.BigInt.pipe(
  Schema.decodeTo(Schema.Number, SchemaTransformation.transform({ decode: (n: bigint) => Number(n), encode: (n: number) => BigInt(n) }))
)

/** A number column: a JS number from SQLite; a bigint or a numeric string (SUM, COUNT) from Postgres. */
export const Num = Schema.Union([Schema.Number, Schema.NumberFromString, NumberFromBigInt])

export const NullableNum = Schema.NullOr(Num)

export const NullableString = Schema.NullOr(Schema.String)

/** An INTEGER 0/1 flag column. */
export const Flag = Schema.Union([Schema.BooleanFromBit, Schema.Boolean])

/** A nullable TEXT column holding JSON. */
export const NullableJson = <S extends Schema.Constraint>(schema: S) => Schema.NullOr(Schema.fromJsonString(schema))

/** Decodes every row of a result with `row`. */
export const decodeRows = <S extends Schema.Constraint>(row: S) => {
  const decode = Schema.decodeUnknownEffect(Schema.Array(row))
  return <E, R>(rows: Effect.Effect<ReadonlyArray<unknown>, E, R>) => Effect.flatMap(rows, decode)
}

/** Bumps the counter every replica's key cache polls: keys and grants both change what a key may do. */
export const bumpKeyVersion = (sql: SqlClient) => sql`UPDATE key_changes SET version = version + 1 WHERE id = 1`

/**
 * One page of a keyset-paged list (issue 31): the query asked for `limit + 1` rows in the list's
 * order, so a row beyond the page says whether another page follows, without counting. `last` is
 * the page's last row, whose sort key the next page continues after; the audit trail and the
 * admin lists page this one way.
 */
export const keysetPage = <A>(rows: ReadonlyArray<A>, limit: number): { readonly items: ReadonlyArray<A>; readonly last: A | undefined } => {
  const items = rows.length > limit ? rows.slice(0, limit) : rows
  return { items, last: rows.length > limit ? items[items.length - 1] : undefined }
}

/** A LIKE pattern matching `text` literally (with `ESCAPE '\\'`). */
export const likeLiteral = (text: string) => text.replace(/[\\%_]/g, (c) => `\\${c}`)
