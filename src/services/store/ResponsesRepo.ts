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
import type { SqlError } from "effect/sql/SqlError"
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
const decodeResponse = Schema.decodeUnknownEffect(ResponseRow)

const RESPONSE_COLUMNS = `id, owner, provider, model, previous_response_id, response, input_items, bytes, created_at, expires_at`
const ITEM_COLUMNS = `owner, item_id, response_id, item, created_at, expires_at`

/**
 * Item rows per INSERT statement on SQLite's raw connection: a turn's few items (its input
 * message, the answer's message and tool calls) go in one statement instead of one each.
 */
const ITEMS_PER_STATEMENT = 8
/** By row count, 1 to ITEMS_PER_STATEMENT. */
const INSERT_ITEMS = Array.from(
  { length: ITEMS_PER_STATEMENT + 1 },
  (_, rows) => `INSERT INTO stored_response_items (${ITEM_COLUMNS}) VALUES ${Array.from({ length: rows }, () => "(?, ?, ?, ?, ?, ?)").join(", ")}`
)

const decodeItems = decodeRows(ItemRow)

/** A save waiting for the SQLite writer's round; `done` gets what it failed with. */
interface PendingSave {
  readonly response: NewStoredResponse
  readonly items: ReadonlyArray<StoredItemRecord>
  readonly retentionMs: number
  readonly done: (error: unknown) => void
}

/** The times the store gave a response (and its items). */
interface Times {
  readonly created_at: string
  readonly expires_at: string
}

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
      // A response's items carry its `expires_at` (written in the same statement's instant), so
      // the expiry index finds them: its replacement and its deletion read the few items of that
      // millisecond (migration 20 dropped the `response_id` index on SQLite, a random key and so
      // a page of its own in every save's commit; issue 38). SQLite, without statistics, would
      // plan `owner = ?` from the primary key's prefix and read every item the owner ever stored
      // (about 300 µs per save after 5,000 responses): the index is named. Postgres plans from
      // statistics (and still has the `response_id` index).
      const itemsByExpiry = dialect === "sqlite" ? "stored_response_items INDEXED BY stored_response_items_expiry" : "stored_response_items"
      const deleteItemsOf = (expiresAt: string, id: string, owner: string) =>
        sql`DELETE FROM ${sql.literal(itemsByExpiry)} WHERE expires_at = ${expiresAt} AND response_id = ${id} AND owner = ${owner}`
      const deleteResponse = (id: string, owner: string) =>
        sql<Times>`DELETE FROM stored_responses WHERE id = ${id} AND owner = ${owner} RETURNING expires_at`
      /**
       * The response row, its times the store's (one instant for both). An id this owner stored
       * before is replaced (a client replaying a vendor id keeps the newest answer): the first
       * INSERT skips it, and the old row and its items are deleted before the second. Another
       * owner's id fails the second INSERT with the primary key, as it always did.
       */
      const onConflict = (replace: "skip" | "fail") => replace === "skip" ? "ON CONFLICT (id) DO NOTHING " : ""
      const INSERT_RESPONSE = (retentionMs: number, replace: "skip" | "fail") =>
        `INSERT INTO stored_responses (${RESPONSE_COLUMNS})
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ${storeIso(dialect)}, ${storeIso(dialect, retentionMs)})
         ${onConflict(replace)}RETURNING created_at, expires_at`
      const sqlite = Option.getOrUndefined(yield* Effect.serviceOption(SqliteDatabase))

      /** Postgres: the same transaction through the client (defined once: README, Generators made per request). */
      const insertClient = Effect.fnUntraced(
        function*(response: NewStoredResponse, items: ReadonlyArray<StoredItemRecord>, retentionMs: number) {
          const r = response
          const insertResponse = (replace: "skip" | "fail") =>
            sql<Times>`INSERT INTO stored_responses (${sql.literal(RESPONSE_COLUMNS)})
              VALUES (${r.id}, ${r.owner}, ${r.provider}, ${r.model}, ${r.previous_response_id}, ${r.response}, ${r.input_items}, ${r.bytes},
                ${now}, ${sql.literal(storeIso(dialect, retentionMs))})
              ${sql.literal(onConflict(replace))}RETURNING created_at, expires_at`
          let [times] = yield* insertResponse("skip")
          if (times === undefined) {
            for (const old of yield* deleteResponse(r.id, r.owner)) yield* deleteItemsOf(old.expires_at, r.id, r.owner)
            ;[times] = yield* insertResponse("fail")
          }
          const created_at = String(times?.created_at)
          const expires_at = String(times?.expires_at)
          for (let start = 0; start < items.length; start += ITEM_BATCH) {
            const rows = items.slice(start, start + ITEM_BATCH).map((item) => ({
              owner: response.owner,
              item_id: item.item_id,
              response_id: item.response_id,
              item: item.item,
              created_at,
              expires_at
            }))
            const [first, ...rest] = rows
            if (first !== undefined) yield* sql`INSERT INTO stored_response_items ${sql.insert([first, ...rest])}`
            // Inside the transaction: readers see all of the response or none of it, and a crash
            // leaves nothing (it is rolled back).
            yield* Effect.yieldNow
          }
        },
        (effect) => sql.withTransaction(effect)
      )

      /**
       * SQLite: the same transaction on the raw connection, each statement prepared once and run
       * synchronously. Through the SqlClient its statements cost about 25 µs of machinery each,
       * which made a stored conversation's turn cost about twice a plain passthrough (issue 38);
       * a save is now the response's INSERT (its times returned by it) and one INSERT per
       * ITEMS_PER_STATEMENT items. Saves of at most ITEM_BATCH items go through the writer below;
       * a larger one holds the client's connection lease (as CreditsRepo's batches do) and gives
       * the event loop a turn between batches of ITEM_BATCH items.
       */
      const sqliteWrites = (raw: SqliteDatabase["Service"], response: NewStoredResponse, retentionMs: number) => {
        const r = response
        const values = [r.id, r.owner, r.provider, r.model, r.previous_response_id, r.response, r.input_items, r.bytes] as const
        let times = raw.prepare(INSERT_RESPONSE(retentionMs, "skip")).get(...values) as unknown as Times | undefined
        if (times === undefined) {
          const old = raw.prepare(`DELETE FROM stored_responses WHERE id = ? AND owner = ? RETURNING expires_at`).get(r.id, r.owner) as unknown as Times | undefined
          if (old !== undefined) {
            raw.prepare(`DELETE FROM ${itemsByExpiry} WHERE expires_at = ? AND response_id = ? AND owner = ?`).run(old.expires_at, r.id, r.owner)
          }
          times = raw.prepare(INSERT_RESPONSE(retentionMs, "fail")).get(...values) as unknown as Times
        }
        const { created_at, expires_at } = times
        return (batch: ReadonlyArray<StoredItemRecord>) => {
          for (let start = 0; start < batch.length; start += ITEMS_PER_STATEMENT) {
            const rows = Math.min(ITEMS_PER_STATEMENT, batch.length - start)
            const params: Array<string> = []
            for (let index = start; index < start + rows; index++) {
              const item = batch[index]!
              params.push(response.owner, item.item_id, item.response_id, item.item, created_at, expires_at)
            }
            raw.prepare(INSERT_ITEMS[rows]!).run(...params)
          }
        }
      }
      const rollback = (raw: SqliteDatabase["Service"]) => {
        if (raw.db.isTransaction) raw.db.exec("ROLLBACK")
      }
      /**
       * Saves in one transaction, from BEGIN to COMMIT in one synchronous step: when no
       * transaction is open, nothing can run in between, so it needs no lease.
       */
      const writeRound = (raw: SqliteDatabase["Service"], saves: ReadonlyArray<PendingSave>) => {
        // Prepared once: exec() would parse them on every round.
        raw.prepare("BEGIN IMMEDIATE").run()
        try {
          for (const save of saves) sqliteWrites(raw, save.response, save.retentionMs)(save.items)
          raw.prepare("COMMIT").run()
        } catch (error) {
          rollback(raw)
          throw error
        }
      }

      /**
       * SQLite's saves of at most ITEM_BATCH items go through one writer fiber, in one transaction
       * per round (a group commit, as the credit writer's): the saves that reach it in the same
       * tick of the event loop share a commit, whose WAL frames, locks and checkpoints were most
       * of a stored turn's cost (issue 38). Nothing waits for a timer or for a round to fill: a
       * save waits for the commit of its own round, which starts as soon as the writer gets its
       * turn (at concurrency 1 a round holds one save, as before). The answer still goes out
       * only once its save is committed. A round that fails (a response id another owner holds,
       * which the store refuses) is written again one save per transaction, so only the save that
       * cannot be written fails. A round takes saves up to ITEM_BATCH items in all: one
       * synchronous step holds the event loop no longer than one slice of a large save.
       */
      const writer = sqlite === undefined ? undefined : yield* Effect.gen(function*() {
        const raw = sqlite
        let pending: Array<PendingSave> = []
        let wakeUp: (() => void) | undefined
        const idle = Effect.callback<void>((resume) => {
          wakeUp = () => {
            wakeUp = undefined
            resume(Effect.void)
          }
          return Effect.sync(() => {
            wakeUp = undefined
          })
        })
        const take = (): ReadonlyArray<PendingSave> => {
          let count = 1
          let items = pending[0]!.items.length
          while (count < pending.length && items + pending[count]!.items.length <= ITEM_BATCH) items += pending[count++]!.items.length
          return pending.splice(0, count)
        }
        const write = (saves: ReadonlyArray<PendingSave>) =>
          Effect.sync(() => {
            try {
              writeRound(raw, saves)
              for (const save of saves) save.done(undefined)
            } catch (error) {
              if (saves.length === 1) return saves[0]!.done(error)
              for (const save of saves) {
                try {
                  writeRound(raw, [save])
                  save.done(undefined)
                } catch (error) {
                  save.done(error)
                }
              }
            }
          })
        const round = Effect.suspend(() => {
          if (pending.length === 0) return Effect.void
          const saves = take()
          // Another fiber's transaction holds the connection across an await (a large save, a
          // SqlClient transaction): the round waits for the connection's lease.
          return raw.db.isTransaction
            ? Effect.scoped(Effect.andThen(sql.reserve, write(saves))).pipe(
              Effect.catch((error) => Effect.sync(() => saves.forEach((save) => save.done(error))))
            )
            : write(saves)
        })
        yield* Effect.forkScoped(Effect.gen(function*() {
          while (true) {
            if (pending.length === 0) yield* idle
            // Let the saves of this tick join the round.
            yield* Effect.yieldNow
            yield* round
          }
        }))
        // A stop: what is still waiting is written before the connection closes.
        yield* Effect.addFinalizer(() =>
          Effect.gen(function*() {
            while (pending.length > 0) yield* round
          })
        )
        /** A save's outcome as the store's error, as its own transaction would have failed. */
        const outcome = (error: unknown) =>
          sqliteTry(() => {
            if (error !== undefined) throw error
          }, "insert")
        return {
          save: (response: NewStoredResponse, items: ReadonlyArray<StoredItemRecord>, retentionMs: number) =>
            Effect.callback<void, SqlError>((resume) => {
              pending.push({ response, items, retentionMs, done: (error) => resume(outcome(error)) })
              wakeUp?.()
            })
        }
      })

      const insertSqlite = (raw: SqliteDatabase["Service"], response: NewStoredResponse, items: ReadonlyArray<StoredItemRecord>, retentionMs: number) =>
        items.length <= ITEM_BATCH && writer !== undefined
          ? writer.save(response, items, retentionMs)
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
      const FIND = `SELECT ${RESPONSE_COLUMNS} FROM stored_responses WHERE id = ? AND owner = ? AND expires_at > ${storeIso(dialect)}`

      return ResponsesRepo.of({
        insert: (input, items, retentionMs) =>
          (sqlite === undefined ? insertClient(input, items, retentionMs) : insertSqlite(sqlite, input, items, retentionMs)).pipe(
            Effect.asVoid,
            storeOp("ResponsesRepo.insert")
          ),
        find: (id, owner) =>
          (sqlite !== undefined && !sqlite.db.isTransaction
            ? Effect.flatMap(
              sqliteTry(() => sqlite.prepare(FIND).get(id, owner), "find"),
              (row) => row === undefined ? Effect.succeed(undefined) : decodeResponse(row)
            )
            : sql`SELECT ${sql.literal(RESPONSE_COLUMNS)}
              FROM stored_responses WHERE id = ${id} AND owner = ${owner} AND expires_at > ${now}`.pipe(
              decodeResponses,
              Effect.map((rows) => rows[0])
            )).pipe(storeOp("ResponsesRepo.find")),
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
            const gone = yield* deleteResponse(id, owner)
            for (const old of gone) yield* deleteItemsOf(old.expires_at, id, owner)
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
