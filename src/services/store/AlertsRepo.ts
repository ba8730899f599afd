/**
 * Budget and pool alerts (issue 33), claimed in the store so each is sent once across replicas.
 * An alert is keyed by (kind, target, period start, threshold). The replica whose insert created
 * the row owns its delivery while its lease (the store's clock, store-clock.ts) runs; it renews
 * the lease while it tries, and marks the row delivered once the receiver accepted it. A row
 * left pending with a lapsed lease (its owner died or stopped) is taken over by another replica.
 */
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Schema from "effect/Schema"
import { SqlClient } from "effect/sql/SqlClient"
import { decodeRows, Num } from "./rows.ts"
import { storeDialect, storeIso } from "./store-clock.ts"
import { storeOp, type StoreError } from "./StoreError.ts"

export type AlertKind = "pool" | "key_budget" | "team_budget"

/** Which alert: one per kind, target, period and threshold. */
export interface AlertId {
  readonly kind: AlertKind
  readonly target: string
  /** ISO instant the period (or, for the pool, the top-up) began. */
  readonly period_start: string
  /** The threshold as written in the config (`0.8`). */
  readonly threshold: string
}

export interface AlertRecord extends AlertId {
  readonly period: string
  readonly used_micros: number
  readonly limit_micros: number
  /** When the crossing was seen. */
  readonly crossed_at: string
  readonly attempts: number
}

const AlertRow = Schema.Struct({
  kind: Schema.Literals(["pool", "key_budget", "team_budget"]),
  target: Schema.String,
  period_start: Schema.String,
  threshold: Schema.String,
  period: Schema.String,
  used_micros: Num,
  limit_micros: Num,
  crossed_at: Schema.String,
  attempts: Num
})
const decodeAlerts = decodeRows(AlertRow)
const COLUMNS = "kind, target, period_start, threshold, period, used_micros, limit_micros, crossed_at, attempts"

export class AlertsRepo extends Context.Service<AlertsRepo, {
  /**
   * Claims the alert for `owner` for `leaseMs`: true when this call created it (the caller
   * delivers it), false when it exists already (another replica's, or sent before).
   */
  readonly claim: (alert: Omit<AlertRecord, "attempts">, owner: string, leaseMs: number) => Effect.Effect<boolean, StoreError>
  /** Extends `owner`'s lease on a pending alert; false when it is no longer `owner`'s to deliver. */
  readonly renew: (alert: AlertId, owner: string, leaseMs: number) => Effect.Effect<boolean, StoreError>
  /** One failed attempt, with why (bounded text). */
  readonly attemptFailed: (alert: AlertId, owner: string, error: string) => Effect.Effect<void, StoreError>
  /** The receiver accepted it: delivered, after `attempts` attempts in all. False when it was not `owner`'s. */
  readonly delivered: (alert: AlertId, owner: string) => Effect.Effect<boolean, StoreError>
  /** Takes over up to `limit` pending alerts whose lease lapsed; returns those now `owner`'s. */
  readonly takeOrphans: (owner: string, leaseMs: number, limit: number) => Effect.Effect<ReadonlyArray<AlertRecord>, StoreError>
  /** The alert's row as stored (tests, and the admin's questions). */
  readonly find: (alert: AlertId) => Effect.Effect<(AlertRecord & { readonly state: string; readonly delivered_at: string | null }) | undefined, StoreError>
}>()("modelgate/AlertsRepo") {
  static readonly layer = Layer.effect(
    AlertsRepo,
    Effect.gen(function*() {
      const sql = yield* SqlClient
      const dialect = yield* storeDialect
      const now = sql.literal(storeIso(dialect))
      const until = (leaseMs: number) => sql.literal(storeIso(dialect, leaseMs))
      const where = (a: AlertId) =>
        sql`kind = ${a.kind} AND target = ${a.target} AND period_start = ${a.period_start} AND threshold = ${a.threshold}`
      return AlertsRepo.of({
        claim: (alert, owner, leaseMs) =>
          sql`INSERT INTO alerts (kind, target, period_start, threshold, period, used_micros, limit_micros, crossed_at, state, owner, lease_until, attempts)
              VALUES (${alert.kind}, ${alert.target}, ${alert.period_start}, ${alert.threshold}, ${alert.period},
                ${alert.used_micros}, ${alert.limit_micros}, ${alert.crossed_at}, 'pending', ${owner}, ${until(leaseMs)}, 0)
              ON CONFLICT (kind, target, period_start, threshold) DO NOTHING
              RETURNING kind`.pipe(
            Effect.map((rows) => rows.length === 1),
            storeOp("AlertsRepo.claim")
          ),
        renew: (alert, owner, leaseMs) =>
          sql`UPDATE alerts SET lease_until = ${until(leaseMs)}
              WHERE ${where(alert)} AND state = 'pending' AND owner = ${owner} RETURNING kind`.pipe(
            Effect.map((rows) => rows.length === 1),
            storeOp("AlertsRepo.renew")
          ),
        attemptFailed: (alert, owner, error) =>
          sql`UPDATE alerts SET attempts = attempts + 1, last_error = ${error.slice(0, 500)}
              WHERE ${where(alert)} AND state = 'pending' AND owner = ${owner}`.pipe(
            Effect.asVoid,
            storeOp("AlertsRepo.attemptFailed")
          ),
        delivered: (alert, owner) =>
          sql`UPDATE alerts SET state = 'delivered', attempts = attempts + 1, delivered_at = ${now}, owner = NULL, lease_until = NULL, last_error = NULL
              WHERE ${where(alert)} AND state = 'pending' AND owner = ${owner} RETURNING kind`.pipe(
            Effect.map((rows) => rows.length === 1),
            storeOp("AlertsRepo.delivered")
          ),
        takeOrphans: (owner, leaseMs, limit) =>
          Effect.gen(function*() {
            const lapsed = yield* sql`SELECT ${sql.literal(COLUMNS)} FROM alerts
                WHERE state = 'pending' AND lease_until < ${now} ORDER BY lease_until LIMIT ${limit}`.pipe(decodeAlerts)
            const taken: Array<AlertRecord> = []
            for (const alert of lapsed) {
              // Only if still lapsed: another replica may have taken it between the read and here.
              const rows = yield* sql`UPDATE alerts SET owner = ${owner}, lease_until = ${until(leaseMs)}
                  WHERE ${where(alert)} AND state = 'pending' AND lease_until < ${now} RETURNING kind`
              if (rows.length === 1) taken.push(alert)
            }
            return taken
          }).pipe(storeOp("AlertsRepo.takeOrphans")),
        find: (alert) =>
          sql`SELECT ${sql.literal(COLUMNS)}, state, delivered_at FROM alerts WHERE ${where(alert)}`.pipe(
            decodeRows(Schema.Struct({ ...AlertRow.fields, state: Schema.String, delivered_at: Schema.NullOr(Schema.String) })),
            Effect.map((rows) => rows[0]),
            storeOp("AlertsRepo.find")
          )
      })
    })
  )
}
