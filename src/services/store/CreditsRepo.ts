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
import * as Schema from "effect/Schema"
import { SqlClient } from "effect/sql/SqlClient"
import { classifySqliteError, SqlError } from "effect/sql/SqlError"
import type { CreditMovement, LedgerEntry, LedgerKind, Reservation, WorkspaceRecord } from "../../domain/records.ts"
import { decodeRows, DEFAULT_WORKSPACE, Num, NullableString } from "./rows.ts"
import {
  type BatchResult,
  type BatchTx,
  type BatchWrite,
  type CreditBatch,
  returnOrphanedBlocks,
  runCreditBatch,
  storeNowMs,
  type SubjectBudget
} from "./credit-batches.ts"

export type { SubjectBudget }
import { SqliteDatabase } from "./sqlite-client.ts"
import { storeOp, type StoreError } from "./StoreError.ts"

/**
 * The most credits the pool may hold: the largest integer a JavaScript number (and so every
 * JSON client) reads exactly. Both stores' columns are 64-bit, so this is the tighter bound.
 */
export const MAX_POOL_CREDITS = Number.MAX_SAFE_INTEGER

export type AdmitResult =
  | { readonly _tag: "Admitted"; readonly balance: number | undefined }
  | { readonly _tag: "BudgetExhausted" }
  | { readonly _tag: "Insufficient"; readonly available: number }

export interface ReservationOwner {
  readonly owner: string
  readonly method: string | null
  readonly endpoint: string | null
}

export interface AdmitInput {
  /** The key id, or the subject id when `budget` is a SubjectBudget. */
  readonly keyId: string
  /** false: none; true: the key's own (maximum and count on its row); or a subject's. */
  readonly budget: boolean | SubjectBudget
  readonly charge: CreditMovement | undefined
  readonly reservation?: ReservationOwner | undefined
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

const AdmitRow = Schema.Struct({ budget_ok: Schema.Boolean, balance: Schema.NullOr(Num) })

const decodeWorkspace = decodeRows(WorkspaceRow)
const decodeLedger = decodeRows(LedgerRow)
const decodeReservations = decodeRows(ReservationRow)
const decodeCredits = decodeRows(Schema.Struct({ credits: Num }))
const decodePoolLevels = decodeRows(Schema.Struct({ id: Schema.String, credits: Num, leased: Num }))
const decodeAdmit = decodeRows(AdmitRow)

export class CreditsRepo extends Context.Service<CreditsRepo, {
  readonly dialect: "sqlite" | "postgres"
  /** Creates the workspace with its opening ledger row on the first start; returns it either way. */
  readonly ensureWorkspace: (initialCredits: number) => Effect.Effect<WorkspaceRecord, StoreError>
  readonly getWorkspace: Effect.Effect<WorkspaceRecord, StoreError>
  /** The pool's balance and the part of it replicas' blocks hold (the metrics' gauges, read at scrape time). */
  readonly poolLevels: Effect.Effect<{ readonly workspace: string; readonly credits: number; readonly leased: number }, StoreError>
  /**
   * The paid part of admitting a request, in one transaction (one statement on Postgres, so one
   * commit on the hot path): count it against the key's (or subject's) budget when `budget` is set, then charge
   * `charge.amount` credits with its ledger row. A used-up budget charges nothing; a pool that
   * cannot pay leaves the budget counted (the request was admitted that far) and reports the
   * balance it found. With `reservation`, a charge (which must carry its request id) is also
   * held open in the same transaction, owned by that replica, until `settleReservation` or
   * `refundReservation` ends it.
   */
  readonly admitPaid: (input: AdmitInput) => Effect.Effect<AdmitResult, StoreError>
  /** The request ended and keeps its charge: the reservation goes. Idempotent; false when none was open. */
  readonly settleReservation: (requestId: string) => Effect.Effect<boolean, StoreError>
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

      const admitPaidPostgres = (input: AdmitInput) => {
        const { charge, keyId, reservation } = input
        const budget = input.budget !== false
        const amount = charge?.amount ?? 0
        const ts = new Date().toISOString()
        const counted = typeof input.budget === "object"
          ? sql`UPDATE identity_subjects SET budget_used = budget_used + 1
              WHERE id = ${keyId} AND budget_used < ${input.budget.max_requests}
              RETURNING 1 AS ok`
          : sql`UPDATE api_keys SET budget_used = budget_used + 1
              WHERE ${budget} AND id = ${keyId} AND budget_max_requests IS NOT NULL AND budget_used < budget_max_requests
              RETURNING 1 AS ok`
        // A subject's row is made by its first count, in a statement of its own: an upsert that
        // names one conflict target (id) still fails with a unique violation on the table's other
        // unique index (issuer, subject) when two first counts race, and a CTE's update cannot see
        // a row inserted by the same statement. Without a target, every unique index is an arbiter.
        const subjectRow = typeof input.budget === "object"
          ? sql`INSERT INTO identity_subjects (id, issuer, subject, budget_used, first_seen_at, last_seen_at)
              VALUES (${keyId}, ${input.budget.issuer}, ${input.budget.subject}, 0, ${ts}, ${ts})
              ON CONFLICT DO NOTHING`.pipe(Effect.asVoid)
          : Effect.void
        return Effect.andThen(subjectRow, sql`
          WITH b AS (${counted}), c AS (
            UPDATE workspaces SET credits = credits - ${amount}
            WHERE ${amount} > 0 AND id = ${DEFAULT_WORKSPACE} AND credits - leased >= ${amount}
              AND (NOT ${budget} OR EXISTS (SELECT 1 FROM b))
            RETURNING credits
          ), l AS (
            INSERT INTO credit_ledger (ts, workspace_id, kind, amount, balance_after, actor, key_id, request_id, model, note)
            SELECT ${ts}, ${DEFAULT_WORKSPACE}, 'charge', ${-amount}, credits, ${charge?.actor ?? keyId},
                   ${charge?.key_id ?? null}, ${charge?.request_id ?? null}, ${charge?.model ?? null}, ${charge?.note ?? null}
            FROM c RETURNING seq
          ), r AS (
            INSERT INTO credit_reservations (request_id, owner, amount, key_id, model, method, endpoint, created_at)
            SELECT ${charge?.request_id ?? null}, ${reservation?.owner ?? ""}, ${amount}, ${charge?.key_id ?? null},
                   ${charge?.model ?? null}, ${reservation?.method ?? null}, ${reservation?.endpoint ?? null}, ${ts}
            FROM c WHERE ${reservation !== undefined && charge?.request_id != null}
            RETURNING 1
          )
          -- l and r run although nothing reads them: data-modifying CTEs always execute, exactly once.
          SELECT EXISTS (SELECT 1 FROM b) AS budget_ok, (SELECT credits FROM c) AS balance`.pipe(
          decodeAdmit,
          Effect.flatMap((rows) => {
            const row = rows[0]!
            if (budget && !row.budget_ok) return Effect.succeed<AdmitResult>({ _tag: "BudgetExhausted" })
            if (amount <= 0) return Effect.succeed<AdmitResult>({ _tag: "Admitted", balance: undefined })
            // Only a refusal pays a second read: the statement's own snapshot may predate the
            // commits it waited for, so it cannot say what the pool holds now.
            return row.balance === null
              ? Effect.map(
                decodeRows(Schema.Struct({ free: Num }))(sql`SELECT credits - leased AS free FROM workspaces WHERE id = ${DEFAULT_WORKSPACE}`),
                (rows): AdmitResult => ({ _tag: "Insufficient", available: rows[0]!.free })
              )
              : Effect.succeed<AdmitResult>({ _tag: "Admitted", balance: row.balance })
          })
        ))
      }

      const pgTx: BatchTx = {
        dialect: "postgres",
        all: (text, params) => sql.unsafe<Record<string, unknown>>(text, params as Array<unknown>),
        writeAll: (writes) =>
          Effect.gen(function*() {
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
      }

      /** A batch on Postgres in one SqlClient transaction; on SQLite in one synchronous transaction on the raw connection. */
      const inTransaction = <A, E = never>(work: (tx: BatchTx) => Effect.Effect<A, SqlError | E>): Effect.Effect<A, SqlError | E> => {
        if (sqlite === undefined) return sql.withTransaction(work(pgTx))
        const raw = sqlite
        const tx = sqliteTx(raw)
        return Effect.scoped(Effect.gen(function*() {
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
      }

      return CreditsRepo.of({
        dialect,
        commitBatch: (batch, newBlockId) => {
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
        admitPaid: (input) =>
          sqlite === undefined
            ? admitPaidPostgres(input).pipe(storeOp("CreditsRepo.admitPaid"))
            // SQLite: the three statements on the raw connection as one synchronous transaction,
            // without the SqlClient's per-statement machinery (two thirds of the cost of the hot path
            // of every paid request). Holding the client's connection lease meanwhile means no
            // SqlClient transaction can be open across an await while it runs.
            : Effect.scoped(Effect.andThen(sql.reserve, admitPaidSqlite(sqlite, input))).pipe(storeOp("CreditsRepo.admitPaid")),
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
        settleReservation: (requestId) =>
          sql`DELETE FROM credit_reservations WHERE request_id = ${requestId} RETURNING request_id`.pipe(
            Effect.map((rows) => rows.length > 0),
            storeOp("CreditsRepo.settleReservation")
          ),
        refundReservation: (requestId, actor, note) =>
          sql.withTransaction(
            Effect.gen(function*() {
              // The workspace row first, as a batch takes it: a sweeper and a batch never wait on each other in a cycle.
              if (dialect === "postgres") yield* sql`SELECT 1 FROM workspaces WHERE id = ${DEFAULT_WORKSPACE} FOR UPDATE`
              // The delete decides who refunds: concurrent callers (the owner's batch, sweepers on
              // other replicas) serialise on the row, and only the one that removed it goes on.
              const rows = yield* decodeReservations(sql`DELETE FROM credit_reservations WHERE request_id = ${requestId} RETURNING *`)
              if (rows.length === 0) return undefined
              const reservation: Reservation = rows[0]!
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

const admitPaidSqlite = (raw: SqliteDatabase["Service"], input: AdmitInput): Effect.Effect<AdmitResult, SqlError> =>
  Effect.try({
    try: (): AdmitResult => {
      const { db, prepare } = raw
      db.exec("BEGIN IMMEDIATE")
      try {
        const result = ((): AdmitResult => {
          if (typeof input.budget === "object") {
            const ts = new Date().toISOString()
            const counted = prepare(`INSERT INTO identity_subjects (id, issuer, subject, budget_used, first_seen_at, last_seen_at)
              VALUES (?, ?, ?, 1, ?, ?)
              ON CONFLICT (id) DO UPDATE SET budget_used = budget_used + 1 WHERE budget_used < ? RETURNING budget_used`)
              .all(input.keyId, input.budget.issuer, input.budget.subject, ts, ts, input.budget.max_requests)
            if (counted.length === 0) return { _tag: "BudgetExhausted" }
          } else if (input.budget) {
            const counted = prepare(`UPDATE api_keys SET budget_used = budget_used + 1
              WHERE id = ? AND budget_max_requests IS NOT NULL AND budget_used < budget_max_requests RETURNING budget_used`)
              .all(input.keyId)
            if (counted.length === 0) return { _tag: "BudgetExhausted" }
          }
          const charge = input.charge
          if (charge === undefined || charge.amount <= 0) return { _tag: "Admitted", balance: undefined }
          const rows = prepare("UPDATE workspaces SET credits = credits - ? WHERE id = ? AND credits - leased >= ? RETURNING credits")
            .all(charge.amount, DEFAULT_WORKSPACE, charge.amount) as Array<{ credits: number }>
          if (rows.length === 0) {
            const pool = prepare("SELECT credits - leased AS free FROM workspaces WHERE id = ?").get(DEFAULT_WORKSPACE) as { free: number }
            return { _tag: "Insufficient", available: Number(pool.free) }
          }
          const balance = Number(rows[0]!.credits)
          const ts = new Date().toISOString()
          prepare(`INSERT INTO credit_ledger (ts, workspace_id, kind, amount, balance_after, actor, key_id, request_id, model, note)
            VALUES (?, ?, 'charge', ?, ?, ?, ?, ?, ?, ?)`).run(
            ts, DEFAULT_WORKSPACE, -charge.amount, balance, charge.actor,
            charge.key_id ?? null, charge.request_id ?? null, charge.model ?? null, charge.note ?? null
          )
          const reservation = input.reservation
          if (reservation !== undefined && charge.request_id != null) {
            prepare(`INSERT INTO credit_reservations (request_id, owner, amount, key_id, model, method, endpoint, created_at)
              VALUES (?, ?, ?, ?, ?, ?, ?, ?)`).run(
              charge.request_id, reservation.owner, charge.amount, charge.key_id ?? null, charge.model ?? null,
              reservation.method, reservation.endpoint, ts
            )
          }
          return { _tag: "Admitted", balance }
        })()
        db.exec("COMMIT")
        return result
      } catch (error) {
        if (db.isTransaction) db.exec("ROLLBACK")
        throw error
      }
    },
    catch: (cause) => new SqlError({ reason: classifySqliteError(cause, { message: (cause as Error)?.message ?? "SQLite failure", operation: "admitPaid" }) })
  })

const sqliteTry = <A>(f: () => A, operation: string): Effect.Effect<A, SqlError> =>
  Effect.try({
    try: f,
    catch: (cause) => new SqlError({ reason: classifySqliteError(cause, { message: (cause as Error)?.message ?? "SQLite failure", operation }) })
  })

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
