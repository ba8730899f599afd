/** The statements each key ran on each connection through the SQL tools, newest first. */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { SqlClient } from "effect/sql/SqlClient"
import type { SqlHistoryItem } from "../../domain/records.ts"
import { decodeRows, Num } from "./rows.ts"
import { storeOp, type StoreError } from "./StoreError.ts"

const HistoryRow = Schema.Struct({
  ts: Schema.String,
  statement: Schema.String,
  duration_ms: Num,
  kind: Schema.Literals(["rows", "affected"]),
  row_count: Num
})

const decodeHistory = decodeRows(HistoryRow)

export class SqlHistoryRepo extends Context.Service<SqlHistoryRepo, {
  readonly appendSqlHistory: (
    item: SqlHistoryItem & { readonly key_id: string; readonly connection_id: number }
  ) => Effect.Effect<void, StoreError>
  readonly sqlHistory: (keyId: string, connectionId: number, limit: number) => Effect.Effect<ReadonlyArray<SqlHistoryItem>, StoreError>
}>()("modelgate/SqlHistoryRepo") {
  static readonly layer = Layer.effect(
    SqlHistoryRepo,
    Effect.gen(function*() {
      const sql = yield* SqlClient
      return SqlHistoryRepo.of({
        appendSqlHistory: (item) =>
          sql`INSERT INTO sql_history ${sql.insert({ ...item })}`.pipe(Effect.asVoid, storeOp("SqlHistoryRepo.appendSqlHistory")),
        sqlHistory: (keyId, connectionId, limit) =>
          sql`SELECT ts, statement, duration_ms, kind, row_count FROM sql_history
              WHERE key_id = ${keyId} AND connection_id = ${connectionId} ORDER BY seq DESC LIMIT ${limit}`.pipe(
            decodeHistory,
            storeOp("SqlHistoryRepo.sqlHistory")
          )
      })
    })
  )
}
