/**
 * The credit pool and everything that moves it: the workspace row, the ledger, the open
 * reservations of in-flight requests, and the replica leases that say whose reservations are
 * still owned. Key budgets are counted here too, because admitting a paid request counts the
 * budget and charges the pool in one transaction.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import * as Scheduler from "effect/Scheduler"
import * as Schema from "effect/Schema"
import { SqlClient } from "effect/sql/SqlClient"
import type { SqlError } from "effect/sql/SqlError"
import type { CreditMovement, LedgerEntry, LedgerKind, Reservation, WorkspaceRecord } from "../../domain/records.ts"
import { decodeRows, DEFAULT_WORKSPACE, Num, NullableString } from "./rows.ts"
import {
  type BatchResult,
  type BatchTx,
  type BatchWrite,
  type CreditBatch,
  decodeBudgetRows,
  releaseBudgets,
  returnOrphanedBlocks,
  runCreditBatch,
  storeNowMs
} from "./credit-batches.ts"
import { commitCallArgument, commitCallResult, commitsInOneCall } from "./credit-admit-pg.ts"
import { SqliteDatabase, sqliteTry } from "./sqlite-client.ts"
import { storeOp, type StoreError } from "./StoreError.ts"

/**
 * The most credits the pool may hold: the largest integer a JavaScript number (and so every
 * JSON client) reads exactly. Both stores' columns are 64-bit, so this is the tighter bound.
 */
export const MAX_POOL_CREDITS = Number.MAX_SAFE_INTEGER

/** A holder's usage of its budget in one period (issue 33): requests, and micro-credits reserved or spent. */
export interface BudgetUsage {
  readonly requests: number
  readonly credits: number
}

const WorkspaceRow = Schema.Struct({ id: Schema.String, name: Schema.String, credits: Num, created_at: Schema.String })

const LedgerRow = Schema.Struct({
  seq: Num,
  ts: Schema.String,
  kind: Schema.Literals(["initial", "charge", "refund", "topup"]),
  amount: Num,
  balance_after: Num,
  actor: Schema.String,
  key_id: NullableString,
  request_id: NullableString,
  model: NullableString,
  note: NullableString
})

const ReservationRow = Schema.Struct({
  request_id: Schema.String,
  owner: Schema.String,
  amount: Num,
  key_id: NullableString,
  model: NullableString,
  method: NullableString,
  endpoint: NullableString,
  created_at: Schema.String
})


const decodeWorkspace = decodeRows(WorkspaceRow)
const decodeLedger = decodeRows(LedgerRow)
const decodeReservations = decodeRows(ReservationRow)
const decodeCredits = decodeRows(Schema.Struct({ credits: Num }))
const decodePoolLevels = decodeRows(Schema.Struct({ id: Schema.String, credits: Num, leased: Num }))
const decodeUsage = decodeRows(Schema.Struct({ holder: Schema.String, period_start: Schema.String, requests: Num, credits: Num }))

export class CreditsRepo extends Context.Service<CreditsRepo, {
  readonly dialect: "sqlite" | "postgres"
  /** Creates the workspace with its opening ledger row on the first start; returns it either way. */
  readonly ensureWorkspace: (initialCredits: number) => Effect.Effect<WorkspaceRecord, StoreError>
  readonly getWorkspace: Effect.Effect<WorkspaceRecord, StoreError>
  /** The pool's last top-up or initial credits: when, and the balance it left (micros); by the partial index of migration 17. */
  readonly lastTopup: Effect.Effect<{ readonly ts: string; readonly balance_after_micros: number } | undefined, StoreError>
  /** The pool's balance and the part of it replicas' blocks hold (the metrics' gauges, read at scrape time). */
  readonly poolLevels: Effect.Effect<{ readonly workspace: string; readonly credits: number; readonly leased: number }, StoreError>
  /** The usage of each [holder, period] asked for (absent: nothing counted yet), keyed `${holder} ${period}`. */
  readonly budgetUsage: (rows: ReadonlyArray<readonly [string, string]>) => Effect.Effect<ReadonlyMap<string, BudgetUsage>, StoreError>
  /** Forgets what `holder` has used of its budget, in every period (an admin's reset). */
  readonly resetBudget: (holder: string) => Effect.Effect<void, StoreError>
  /**
   * The request ended and gets its charge back, in one transaction with its ledger row. Idempotent:
   * only the first call for a request id (whoever makes it) refunds; the rest return undefined.
   */
  readonly refundReservation: (requestId: string, actor: string, note: string) => Effect.Effect<Reservation | undefined, StoreError>
  /**
   * Writes this replica's lease: `leaseMs` from now by the store's clock (issue 21: never a
   * replica's own, so a replica whose clock runs ahead cannot make the others look dead);
   * reservations it owns are safe from others until then.
   */
  readonly renewReplica: (id: string, leaseMs: number) => Effect.Effect<void, StoreError>
  readonly removeReplica: (id: string) => Effect.Effect<void, StoreError>
  /**
   * One group commit of a replica's credit movements (credit-batches.ts): all of it or nothing.
   * `newBlockId` names a block leased by it.
   */
  readonly commitBatch: (batch: CreditBatch, newBlockId: () => string) => Effect.Effect<BatchResult, StoreError>
  /** The counter replicas bump to ask the others for their blocks back. */
  readonly reclaimCounter: Effect.Effect<number, StoreError>
  /** Returns the blocks of replicas (not `self`) with no lease valid now by the store's clock; how many, and their credits. */
  readonly returnOrphanedBlocks: (self: string) => Effect.Effect<{ readonly blocks: number; readonly credits: number }, StoreError>
  /**
   * Open reservations whose owner is not `self` and has no lease valid by the store's clock,
   * `laterMs` from now (tests look ahead; the sweep asks about now).
   */
  readonly orphanedReservations: (self: string, limit: number, laterMs?: number) => Effect.Effect<ReadonlyArray<Reservation>, StoreError>
  /**
   * Gives credits back (refund of a failed call) or adds them (top-up), with its ledger row;
   * undefined, and nothing changed, when the pool would pass MAX_POOL_CREDITS.
   */
  readonly addCredits: (
    kind: Extract<LedgerKind, "refund" | "topup">,
    movement: CreditMovement
  ) => Effect.Effect<number | undefined, StoreError>
  readonly ledger: (query: {
    readonly before_seq?: number | undefined
    readonly limit: number
    readonly request_id?: string | undefined
    readonly key_id?: string | undefined
    readonly kind?: LedgerKind | undefined
  }) => Effect.Effect<ReadonlyArray<LedgerEntry>, StoreError>
}>()("modelgate/CreditsRepo") {
  static readonly layer = Layer.effect(
    CreditsRepo,
    Effect.gen(function*() {
      const sql = yield* SqlClient
      // The SQLite client layer also provides the raw connection; its presence is what says SQLite.
      const sqlite = Option.getOrUndefined(yield* Effect.serviceOption(SqliteDatabase))
      const dialect = sqlite === undefined ? "postgres" as const : "sqlite" as const

      const getWorkspace = sql`SELECT id, name, credits, created_at FROM workspaces WHERE id = ${DEFAULT_WORKSPACE}`.pipe(
        decodeWorkspace,
        Effect.flatMap((rows) =>
          rows[0] === undefined ? Effect.fail(new Error(`workspace ${DEFAULT_WORKSPACE} is missing`)) : Effect.succeed(rows[0])
        )
      )

      const writeLedger = (kind: LedgerKind, signedAmount: number, balance: number, movement: CreditMovement) =>
        sql`INSERT INTO credit_ledger ${
          sql.insert({
            ts: new Date().toISOString(),
            workspace_id: DEFAULT_WORKSPACE,
            kind,
            amount: signedAmount,
            balance_after: balance,
            actor: movement.actor,
            key_id: movement.key_id ?? null,
            request_id: movement.request_id ?? null,
            model: movement.model ?? null,
            note: movement.note ?? null
          })
        }`

      const pgTx = postgresBatchTx(sql)

      /** Statements through the SqlClient (inside its transaction), `$n` placeholders on both dialects. */
      const sqlTx: BatchTx = {
        ...pgTx,
        dialect,
        all: (text, params) => sql.unsafe<Record<string, unknown>>(dialect === "sqlite" ? text.replace(/\$(\d+)/g, "?$1") : text, params as Array<unknown>)
      }

      /** A batch on Postgres in one SqlClient transaction; on SQLite in one synchronous transaction on the raw connection. */
      const inTransaction = <A, E = never>(work: (tx: BatchTx) => Effect.Effect<A, SqlError | E>): Effect.Effect<A, SqlError | E> => {
        if (sqlite === undefined) return sql.withTransaction(work(pgTx))
        const raw = sqlite
        const tx = sqliteTx(raw)
        // Made only when needed: a generator function made per batch costs a map and prototype (README, Generators made per request).
        const reserved = () => Effect.scoped(Effect.gen(function*() {
          // Holding the client's connection lease: no SqlClient statement can run in between.
          yield* sql.reserve
          yield* sqliteTry(() => raw.db.exec("BEGIN IMMEDIATE"), "BEGIN")
          const result = yield* work(tx).pipe(
            Effect.onError(() => Effect.sync(() => {
              if (raw.db.isTransaction) raw.db.exec("ROLLBACK")
            }))
          )
          yield* sqliteTry(() => raw.db.exec("COMMIT"), "COMMIT")
          return result
        }))
        // Issue 38: with no SqlClient transaction open on the connection, the batch runs from BEGIN
        // to COMMIT without giving the event loop a turn (node:sqlite is synchronous, and the
        // scheduler is told not to yield in between), so no other statement can run inside it
        // and the connection's lease (a scope and a semaphore permit, about 10 us of a paid
        // commit's 160) is not needed. A transaction a fiber holds open across an await (a
        // SqlClient transaction of another repository) is waited for through the lease, as before.
        const rollback = () => {
          try {
            if (raw.db.isTransaction) raw.db.exec("ROLLBACK")
          } catch {
            // The connection rolled it back itself (SQLite does on some errors).
          }
        }
        return Effect.suspend(() => {
          if (raw.db.isTransaction) return reserved()
          return sqliteTry(() => raw.db.exec("BEGIN IMMEDIATE"), "BEGIN").pipe(
            Effect.andThen(work(tx)),
            Effect.provideService(Scheduler.PreventSchedulerYield, true),
            Effect.matchCauseEffect({
              onFailure: (cause) => Effect.andThen(Effect.sync(rollback), Effect.failCause(cause)),
              onSuccess: (result) => Effect.as(Effect.tapError(sqliteTry(() => raw.db.exec("COMMIT"), "COMMIT"), () => Effect.sync(rollback)), result)
            })
          )
        })
      }

      return CreditsRepo.of({
        dialect,
        commitBatch: (batch, newBlockId) => {
          if (sqlite === undefined && commitsInOneCall(batch)) {
            return sql.unsafe<{ r: unknown }>(`SELECT modelgate_commit_batch($1::jsonb) AS r`, [commitCallArgument(batch, new Date().toISOString())]).pipe(
              Effect.map((rows) => commitCallResult(rows[0]!.r)),
              storeOp("CreditsRepo.commitBatch")
            )
          }
          const careful = inTransaction((tx) => runCreditBatch(tx, batch, newBlockId)).pipe(Effect.catchTag("OptimisticMiss", Effect.die))
          // Postgres: the block charges go with the other writes, unless the batch also returns
          // blocks (a block returned with the charges it paid must be charged first).
          const optimistic = sqlite === undefined && batch.returns.length === 0 && batch.strays === undefined
          return (optimistic
            ? inTransaction((tx) => runCreditBatch(tx, batch, newBlockId, true)).pipe(Effect.catchTag("OptimisticMiss", () => careful))
            : careful).pipe(storeOp("CreditsRepo.commitBatch"))
        },
        reclaimCounter: sql`SELECT reclaim FROM workspaces WHERE id = ${DEFAULT_WORKSPACE}`.pipe(
          decodeRows(Schema.Struct({ reclaim: Num })),
          Effect.map((rows) => rows[0]?.reclaim ?? 0),
          storeOp("CreditsRepo.reclaimCounter")
        ),
        returnOrphanedBlocks: (self) => inTransaction((tx) => returnOrphanedBlocks(tx, self)).pipe(storeOp("CreditsRepo.returnOrphanedBlocks")),
        ensureWorkspace: (initialCredits) =>
          sql.withTransaction(
            Effect.gen(function*() {
              const inserted = yield* sql`INSERT INTO workspaces (id, name, credits, created_at)
                VALUES (${DEFAULT_WORKSPACE}, ${"default"}, ${initialCredits}, ${new Date().toISOString()})
                ON CONFLICT (id) DO NOTHING RETURNING id`
              // The first start opens the ledger, so its rows always add up to the balance.
              if (inserted.length > 0) {
                yield* writeLedger("initial", initialCredits, initialCredits, { amount: initialCredits, actor: "config", note: "initial pool" })
              }
              return yield* getWorkspace
            })
          ).pipe(storeOp("CreditsRepo.ensureWorkspace")),
        getWorkspace: getWorkspace.pipe(storeOp("CreditsRepo.getWorkspace")),
        poolLevels: decodePoolLevels(sql`SELECT id, credits, leased FROM workspaces WHERE id = ${DEFAULT_WORKSPACE}`).pipe(
          Effect.flatMap((rows) =>
            rows[0] === undefined
              ? Effect.fail(new Error(`workspace ${DEFAULT_WORKSPACE} is missing`))
              : Effect.succeed({ workspace: rows[0].id, credits: rows[0].credits, leased: rows[0].leased })
          ),
          storeOp("CreditsRepo.poolLevels")
        ),
        budgetUsage: (rows) =>
          Effect.gen(function*() {
            const out = new Map<string, BudgetUsage>()
            for (let i = 0; i < rows.length; i += 200) {
              const part = rows.slice(i, i + 200)
              if (part.length === 0) continue
              const found = yield* decodeUsage(sql`SELECT holder, period_start, requests, credits FROM budget_usage WHERE ${
                sql.or(part.map(([holder, period]) => sql`(holder = ${holder} AND period_start = ${period})`))
              }`)
              for (const r of found) out.set(`${r.holder} ${r.period_start}`, { requests: r.requests, credits: r.credits })
            }
            return out as ReadonlyMap<string, BudgetUsage>
          }).pipe(storeOp("CreditsRepo.budgetUsage")),
        lastTopup: sql<{ ts: string; balance_after: unknown }>`SELECT ts, balance_after FROM credit_ledger
          WHERE kind IN ('initial', 'topup') ORDER BY seq DESC LIMIT 1`.pipe(
          Effect.map((rows) => rows.length === 0 ? undefined : { ts: String(rows[0]!.ts), balance_after_micros: Number(rows[0]!.balance_after) }),
          storeOp("CreditsRepo.lastTopup")
        ),
        resetBudget: (holder) => sql`DELETE FROM budget_usage WHERE holder = ${holder}`.pipe(Effect.asVoid, storeOp("CreditsRepo.resetBudget")),
        addCredits: (kind, movement) =>
          sql.withTransaction(
            Effect.gen(function*() {
              // The pool stays within what every layer reads exactly: a larger sum changes nothing.
              const rows = yield* decodeCredits(sql`UPDATE workspaces SET credits = credits + ${movement.amount}
                WHERE id = ${DEFAULT_WORKSPACE} AND credits <= ${MAX_POOL_CREDITS - movement.amount} RETURNING credits`)
              if (rows.length === 0) return undefined
              const balance = rows[0]!.credits
              yield* writeLedger(kind, movement.amount, balance, movement)
              return balance
            })
          ).pipe(storeOp("CreditsRepo.addCredits")),
        refundReservation: (requestId, actor, note) =>
          sql.withTransaction(
            Effect.gen(function*() {
              // The workspace row first, as a batch takes it: a sweeper and a batch never wait on each other in a cycle.
              if (dialect === "postgres") yield* sql`SELECT 1 FROM workspaces WHERE id = ${DEFAULT_WORKSPACE} FOR UPDATE`
              // The delete decides who refunds: concurrent callers (the owner's batch, sweepers on
              // other replicas) serialise on the row, and only the one that removed it goes on.
              const deleted = yield* sql<Record<string, unknown>>`DELETE FROM credit_reservations WHERE request_id = ${requestId} RETURNING *`
              const rows = yield* decodeReservations(Effect.succeed(deleted))
              if (rows.length === 0) return undefined
              const reservation: Reservation = rows[0]!
              // The budgets it counted against get its credits back too.
              yield* releaseBudgets(sqlTx, decodeBudgetRows(deleted[0]!.budgets), reservation.amount)
              const updated = yield* decodeCredits(sql`UPDATE workspaces SET credits = credits + ${reservation.amount}
                WHERE id = ${DEFAULT_WORKSPACE} RETURNING credits`)
              yield* writeLedger("refund", reservation.amount, updated[0]!.credits, {
                amount: reservation.amount,
                actor,
                key_id: reservation.key_id,
                request_id: reservation.request_id,
                model: reservation.model,
                note
              })
              return reservation
            })
          ).pipe(storeOp("CreditsRepo.refundReservation")),
        renewReplica: (id, leaseMs) =>
          sql`INSERT INTO replicas (id, lease_until, started_at)
              VALUES (${id}, ${sql.literal(storeNowMs(dialect))} + ${Math.round(leaseMs)}, ${new Date().toISOString()})
              ON CONFLICT (id) DO UPDATE SET lease_until = excluded.lease_until`.pipe(Effect.asVoid, storeOp("CreditsRepo.renewReplica")),
        removeReplica: (id) => sql`DELETE FROM replicas WHERE id = ${id}`.pipe(Effect.asVoid, storeOp("CreditsRepo.removeReplica")),
        orphanedReservations: (self, limit, laterMs = 0) =>
          sql`SELECT r.* FROM credit_reservations r LEFT JOIN replicas p ON p.id = r.owner
              WHERE r.owner <> ${self} AND (p.id IS NULL OR p.lease_until < ${sql.literal(storeNowMs(dialect))} + ${Math.round(laterMs)})
              ORDER BY r.created_at LIMIT ${limit}`.pipe(decodeReservations, storeOp("CreditsRepo.orphanedReservations")),
        ledger: (query) =>
          sql`SELECT * FROM credit_ledger WHERE ${
            sql.and([
              query.before_seq !== undefined ? sql`seq < ${query.before_seq}` : undefined,
              query.request_id !== undefined ? sql`request_id = ${query.request_id}` : undefined,
              query.key_id !== undefined ? sql`key_id = ${query.key_id}` : undefined,
              query.kind !== undefined ? sql`kind = ${query.kind}` : undefined
            ].filter((c) => c !== undefined))
          } ORDER BY seq DESC LIMIT ${query.limit}`.pipe(decodeLedger, storeOp("CreditsRepo.ledger"))
      })
    })
  )
}


/** The batch statements on SQLite's raw connection: `$n` placeholders become `?n`, inserts go row by row on one prepared statement. */
const sqliteTx = (raw: SqliteDatabase["Service"]): BatchTx => {
  const texts = new Map<string, string>()
  const text = (pg: string) => {
    let t = texts.get(pg)
    if (t === undefined) {
      t = pg.replace(/\$(\d+)/g, "?$1")
      if (texts.size < 500) texts.set(pg, t)
    }
    return t
  }
  return {
    dialect: "sqlite",
    all: (sql, params) =>
      sqliteTry(() => {
        const statement = raw.prepare(text(sql))
        const values = params as Array<string | number | null>
        return statement.columns().length > 0
          ? statement.all(...values) as Array<Record<string, unknown>>
          : (statement.run(...values), [])
      }, "commitBatch"),
    writeAll: (writes) =>
      sqliteTry(() => {
        const counts: Array<number> = []
        for (const write of writes) {
          if ("text" in write) {
            const statement = raw.prepare(text(write.text))
            const params = write.params as Array<string | number | null>
            if (write.check === true) counts.push(statement.all(...params).length)
            else statement.run(...params)
            continue
          }
          const statement = raw.prepare(`INSERT INTO ${write.table} (${write.columns.join(", ")}) VALUES (${write.columns.map(() => "?").join(", ")})`)
          for (const row of write.rows) statement.run(...(row as Array<string | number | null>))
        }
        return counts
      }, "commitBatch")
  }
}

type PgStatement = { readonly text: string; readonly params: ReadonlyArray<unknown>; readonly check?: boolean | undefined }

/**
 * The transaction path's statements on Postgres, through `sql` (exported for the test that holds
 * the one-call commit to the same results, test/services/store/commit-batch-pg.test.ts).
 */
export const postgresBatchTx = (sql: SqlClient): BatchTx => ({
  dialect: "postgres",
  all: (text, params) => sql.unsafe<Record<string, unknown>>(text, params as Array<unknown>),
  writeAll: Effect.fnUntraced(function*(writes) {
    // One statement of data-modifying CTEs (each runs exactly once), under Postgres's 65,535
    // parameters per statement: a larger batch goes in several.
    // A checked write's row count is what the statement's final SELECT returns for it.
    const counts: Array<number> = []
    let group: Array<PgStatement> = []
    let count = 0
    const flush = Effect.suspend(() => {
      if (group.length === 0) return Effect.void
      const params: Array<unknown> = []
      const checked: Array<number> = []
      const parts = group.map((write, i) => {
        const offset = params.length
        params.push(...write.params)
        if (write.check === true) checked.push(i)
        return `w${i} AS (${write.text.replace(/\$(\d+)/g, (_, d: string) => `$${Number(d) + offset}`)})`
      })
      const sent = group
      const text = sent.length === 1
        ? sent[0]!.text
        : `WITH ${parts.join(", ")} SELECT ${checked.length === 0 ? "1" : checked.map((i) => `(SELECT COUNT(*) FROM w${i}) AS c${i}`).join(", ")}`
      group = []
      count = 0
      return Effect.map(sql.unsafe<Record<string, unknown>>(text, params), (rows) => {
        if (sent.length === 1) {
          if (sent[0]!.check === true) counts.push(rows.length)
        } else for (const i of checked) counts.push(Number(rows[0]![`c${i}`]))
      })
    })
    for (const write of writes.flatMap(pgStatements)) {
      if (count + write.params.length > 60_000) yield* flush
      group.push(write)
      count += write.params.length
    }
    yield* flush
    return counts
  })
})

/** A write as Postgres statements: rows as multi-row INSERTs of at most 30,000 parameters each. */
const pgStatements = (write: BatchWrite): Array<PgStatement> => {
  if ("text" in write) return [write]
  const { columns, rows, table } = write
  const statements: Array<{ text: string; params: ReadonlyArray<unknown> }> = []
  const perStatement = Math.floor(30_000 / columns.length)
  for (let i = 0; i < rows.length; i += perStatement) {
    const part = rows.slice(i, i + perStatement)
    const values = part.map((_, r) => `(${columns.map((_, c) => `$${r * columns.length + c + 1}`).join(", ")})`).join(", ")
    statements.push({ text: `INSERT INTO ${table} (${columns.join(", ")}) VALUES ${values}`, params: part.flat() })
  }
  return statements
}
