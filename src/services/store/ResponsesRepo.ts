/**
 * Stored Responses (migration 9): one row per stored response, one per item of it that has an
 * id. Every read and delete matches the owner too, so another key's (or subject's) response is
 * exactly as absent as an unknown one.
 *
 * Expiry is written and judged by the store's clock (issue 35 item 6), like the credit leases:
 * replicas share these rows, and one whose clock ran 31 days ahead found the others' fresh
 * responses expired (and its sweep deleted them).
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import { SqlClient } from "effect/sql/SqlClient"
import { decodeRows, NullableString, Num } from "./rows.ts"
import { SqliteDatabase, sqliteTry } from "./sqlite-client.ts"
import { storeDialect, storeIso } from "./store-clock.ts"
import { storeOp, type StoreError } from "./StoreError.ts"

export interface StoredResponseRecord {
  readonly id: string
  readonly owner: string
  /** The upstream provider whose id this is (a passthrough); null for the gateway's own ids. */
  readonly provider: string | null
  readonly model: string
  readonly previous_response_id: string | null
  /** The response object as answered, JSON. */
  readonly response: string
  /** The request's own input items (references resolved), a JSON array. */
  readonly input_items: string
  readonly bytes: number
  readonly created_at: string
  readonly expires_at: string
}

export interface StoredItemRecord {
  readonly item_id: string
  readonly response_id: string
  /** The item, JSON. */
  readonly item: string
}

/** An item found by id, with the provider of the response it belongs to. */
export interface FoundItemRecord extends StoredItemRecord {
  readonly provider: string | null
}

const ResponseRow = Schema.Struct({
  id: Schema.String,
  owner: Schema.String,
  provider: NullableString,
  model: Schema.String,
  previous_response_id: NullableString,
  response: Schema.String,
  input_items: Schema.String,
  bytes: Num,
  created_at: Schema.String,
  expires_at: Schema.String
})

const ItemRow = Schema.Struct({
  item_id: Schema.String,
  response_id: Schema.String,
  item: Schema.String,
  provider: NullableString,
  created_at: Schema.String
})

const decodeResponses = decodeRows(ResponseRow)

const INSERT_RESPONSE =
  `INSERT INTO stored_responses (id, owner, provider, model, previous_response_id, response, input_items, bytes, created_at, expires_at)
   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
const INSERT_ITEM = `INSERT INTO stored_response_items (owner, item_id, response_id, item, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)`

const decodeItems = decodeRows(ItemRow)

/** A response to insert: its times are the store's (`created_at` now, `expires_at` `retentionMs` later). */
export type NewStoredResponse = Omit<StoredResponseRecord, "created_at" | "expires_at">

/**
 * Rows per INSERT statement for items: well under both drivers' bound-parameter limits, and the
 * event loop gets a turn between statements (on SQLite each runs synchronously: the 20,000 items
 * of a 1 MiB body written at once held the loop 100-150 ms, issue 32).
 */
const ITEM_BATCH = 200

export class ResponsesRepo extends Context.Service<ResponsesRepo, {
  /** The response and its items, in one transaction (a reference never finds half of it). */
  readonly insert: (response: NewStoredResponse, items: ReadonlyArray<StoredItemRecord>, retentionMs: number) => Effect.Effect<void, StoreError>
  /** This owner's unexpired response with this id, or undefined. */
  readonly find: (id: string, owner: string) => Effect.Effect<StoredResponseRecord | undefined, StoreError>
  /** This owner's unexpired items with these ids, newest first (an id may be in several responses). */
  readonly findItems: (owner: string, ids: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<FoundItemRecord>, StoreError>
  /** Deletes this owner's response and its items; whether there was one. */
  readonly remove: (id: string, owner: string) => Effect.Effect<boolean, StoreError>
  readonly deleteExpired: Effect.Effect<void, StoreError>
}>()("modelgate/ResponsesRepo") {
  static readonly layer = Layer.effect(
    ResponsesRepo,
    Effect.gen(function*() {
      const sql = yield* SqlClient
      const dialect = yield* storeDialect
      const now = sql.literal(storeIso(dialect))
      // SQLite, without statistics, answers `response_id = ? AND owner = ?` from the primary key
      // (owner, item_id, response_id) by its owner prefix: every item the owner ever stored was
      // read on each save, a cost that grew with the conversation history (about 300 µs per
      // request after 5,000 responses; issue 38). The index on response_id finds the few rows
      // directly. Postgres plans from statistics and needs no hint.
      const itemsByResponse = sql.literal(dialect === "sqlite" ? "stored_response_items INDEXED BY stored_response_items_response" : "stored_response_items")
      const sqlite = Option.getOrUndefined(yield* Effect.serviceOption(SqliteDatabase))

      /** Through the SqlClient (Postgres; and SQLite while another fiber's transaction holds the connection). */
      const insertClient = (response: NewStoredResponse, items: ReadonlyArray<StoredItemRecord>, retentionMs: number) =>
        sql.withTransaction(Effect.gen(function*() {
          const [times] = yield* sql<{ readonly created_at: string; readonly expires_at: string }>`SELECT ${now} AS created_at, ${
            sql.literal(storeIso(dialect, retentionMs))
          } AS expires_at`
          const record: StoredResponseRecord = { ...response, created_at: String(times?.created_at), expires_at: String(times?.expires_at) }
          // The same id stored twice (a client replaying a vendor id) keeps the newest answer.
          yield* sql`DELETE FROM ${itemsByResponse} WHERE response_id = ${record.id} AND owner = ${record.owner}`
          yield* sql`DELETE FROM stored_responses WHERE id = ${record.id} AND owner = ${record.owner}`
          yield* sql`INSERT INTO stored_responses ${sql.insert({ ...record })}`
          for (let start = 0; start < items.length; start += ITEM_BATCH) {
            const rows = items.slice(start, start + ITEM_BATCH).map((item) => ({
              owner: record.owner,
              item_id: item.item_id,
              response_id: item.response_id,
              item: item.item,
              created_at: record.created_at,
              expires_at: record.expires_at
            }))
            const [first, ...rest] = rows
            if (first !== undefined) yield* sql`INSERT INTO stored_response_items ${sql.insert([first, ...rest])}`
            // Inside the transaction: readers see all of the response or none of it, and a crash
            // leaves nothing (it is rolled back). On SQLite the transaction holds the one
            // connection, so other statements wait for it rather than run in between.
            yield* Effect.yieldNow
          }
        }))

      /**
       * SQLite: the same transaction on the raw connection, each statement prepared once and run
       * synchronously. Through the SqlClient its seven statements (BEGIN to COMMIT) cost about
       * 25 µs of machinery each, which made a stored conversation's turn cost about twice a plain
       * passthrough (issue 38). A save of at most ITEM_BATCH items, when no transaction is open,
       * runs from BEGIN to COMMIT in one synchronous step: nothing can run in between, so it needs
       * no lease. A larger one holds the client's connection lease (as CreditsRepo's batches do)
       * and gives the event loop a turn between batches of ITEM_BATCH items.
       */
      const sqliteWrites = (raw: SqliteDatabase["Service"], response: NewStoredResponse, retentionMs: number) => {
        const times = raw.prepare(`SELECT ${storeIso(dialect)} AS created_at, ${storeIso(dialect, retentionMs)} AS expires_at`).get() as {
          readonly created_at: string
          readonly expires_at: string
        }
        raw.prepare(`DELETE FROM stored_response_items INDEXED BY stored_response_items_response WHERE response_id = ? AND owner = ?`)
          .run(response.id, response.owner)
        raw.prepare(`DELETE FROM stored_responses WHERE id = ? AND owner = ?`).run(response.id, response.owner)
        raw.prepare(INSERT_RESPONSE).run(
          response.id,
          response.owner,
          response.provider,
          response.model,
          response.previous_response_id,
          response.response,
          response.input_items,
          response.bytes,
          times.created_at,
          times.expires_at
        )
        const insertItem = raw.prepare(INSERT_ITEM)
        return (batch: ReadonlyArray<StoredItemRecord>) => {
          for (const item of batch) insertItem.run(response.owner, item.item_id, item.response_id, item.item, times.created_at, times.expires_at)
        }
      }
      const rollback = (raw: SqliteDatabase["Service"]) => {
        if (raw.db.isTransaction) raw.db.exec("ROLLBACK")
      }
      const insertSqlite = (raw: SqliteDatabase["Service"], response: NewStoredResponse, items: ReadonlyArray<StoredItemRecord>, retentionMs: number) =>
        items.length <= ITEM_BATCH && !raw.db.isTransaction
          ? sqliteTry(() => {
            raw.db.exec("BEGIN IMMEDIATE")
            try {
              sqliteWrites(raw, response, retentionMs)(items)
              raw.db.exec("COMMIT")
            } catch (error) {
              rollback(raw)
              throw error
            }
          }, "insert")
          : Effect.scoped(Effect.gen(function*() {
            yield* sql.reserve
            yield* sqliteTry(() => raw.db.exec("BEGIN IMMEDIATE"), "BEGIN")
            yield* Effect.gen(function*() {
              const insertItems = yield* sqliteTry(() => sqliteWrites(raw, response, retentionMs), "insert")
              for (let start = 0; start < items.length; start += ITEM_BATCH) {
                if (start > 0) yield* Effect.yieldNow
                yield* sqliteTry(() => insertItems(items.slice(start, start + ITEM_BATCH)), "insert")
              }
            }).pipe(Effect.onError(() => Effect.sync(() => rollback(raw))))
            yield* sqliteTry(() => raw.db.exec("COMMIT"), "COMMIT")
          }))

      /** SQLite, outside any transaction: one synchronous read on the raw connection (nothing can run in between). */
      const FIND = `SELECT id, owner, provider, model, previous_response_id, response, input_items, bytes, created_at, expires_at
              FROM stored_responses WHERE id = ? AND owner = ? AND expires_at > ${storeIso(dialect)}`

      return ResponsesRepo.of({
        insert: (input, items, retentionMs) =>
          (sqlite === undefined ? insertClient(input, items, retentionMs) : insertSqlite(sqlite, input, items, retentionMs)).pipe(
            Effect.asVoid,
            storeOp("ResponsesRepo.insert")
          ),
        find: (id, owner) =>
          (sqlite !== undefined && !sqlite.db.isTransaction
            ? sqliteTry(() => sqlite.prepare(FIND).all(id, owner), "find")
            : sql`SELECT id, owner, provider, model, previous_response_id, response, input_items, bytes, created_at, expires_at
              FROM stored_responses WHERE id = ${id} AND owner = ${owner} AND expires_at > ${now}`).pipe(
            decodeResponses,
            Effect.map((rows) => rows[0]),
            storeOp("ResponsesRepo.find")
          ),
        findItems: (owner, ids) =>
          ids.length === 0
            ? Effect.succeed([])
            : sql`SELECT i.item_id, i.response_id, i.item, r.provider, i.created_at
                  FROM stored_response_items i JOIN stored_responses r ON r.id = i.response_id AND r.owner = i.owner
                  WHERE i.owner = ${owner} AND ${sql.in("i.item_id", ids)} AND i.expires_at > ${now}
                  ORDER BY i.created_at DESC`.pipe(
              decodeItems,
              Effect.map((rows) => rows.map(({ item, item_id, provider, response_id }) => ({ item, item_id, provider, response_id }))),
              storeOp("ResponsesRepo.findItems")
            ),
        remove: (id, owner) =>
          sql.withTransaction(Effect.gen(function*() {
            const gone = yield* sql`DELETE FROM stored_responses WHERE id = ${id} AND owner = ${owner} RETURNING id`
            yield* sql`DELETE FROM ${itemsByResponse} WHERE response_id = ${id} AND owner = ${owner}`
            return gone.length > 0
          })).pipe(storeOp("ResponsesRepo.remove")),
        deleteExpired: Effect.gen(function*() {
            yield* sql`DELETE FROM stored_response_items WHERE expires_at <= ${now}`
            yield* sql`DELETE FROM stored_responses WHERE expires_at <= ${now}`
          }).pipe(Effect.asVoid, storeOp("ResponsesRepo.deleteExpired"))
      })
    })
  )
}
