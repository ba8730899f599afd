/**
 * Budget and pool alerts by webhook (issue 33, config `alerts`).
 *
 * The money path calls `observe` after an amount it keeps changed (a key's or team's budget
 * usage, the pool's balance). `observe` is synchronous and cheap when nothing new was crossed: it
 * compares `used` with each threshold share of `limit` and with what this process already knows
 * about the (kind, target, period); no store I/O, no allocation beyond the comparison. A newly
 * crossed threshold is claimed in the store (AlertsRepo: one row per kind, target, period start
 * and threshold, so it is sent once across every replica) and, if this replica's claim created
 * the row, delivered from a fiber of the layer's: one JSON POST
 *
 *   { kind, target, used, limit, period, period_start, threshold, at }
 *
 * (credits as the admin API writes them: decimals of at most six fractional digits), each attempt under `attempt_timeout_ms`, retried with
 * exponential backoff (full jitter, `backoff_ms` doubling up to `max_backoff_ms`) until the
 * receiver answers 2xx. The claim is a lease the delivering replica renews; a replica that dies
 * mid-delivery leaves the row pending with a lapsing lease, and a sweep on every replica takes
 * such rows over (a receiver may then see the same alert twice if the dead replica's last attempt
 * did reach it: at-least-once at that edge, never lost). A delivered alert is audited: one audit
 * record (`endpoint` "alerts:webhook", `method` POST, the receiver's status, the alert in details).
 *
 * What the kinds mean (the caller supplies the numbers):
 * - `key_budget` / `team_budget`: `target` the key or team id, `used`/`limit` the budget's credits
 *   used and `max_credits` in the current period (`period` day|week|month|none, `period_start`
 *   its first instant; "none" periods start at the budget's creation, or the epoch).
 * - `pool`: `target` the workspace id; `limit` is the balance right after the last top-up (or the
 *   initial credits), `used` what was spent since (`limit` - the balance now), `period` "topup"
 *   and `period_start` that top-up's time: each top-up starts a new period, so the thresholds
 *   fire again as the new credits are spent (`poolObservation` builds it).
 */
import { randomUUID } from "node:crypto"
import { Context, Duration, Effect, Layer, Option, Schedule, Semaphore } from "effect"
import { fromMicros } from "../../domain/money.ts"
import type { AuditRecord, BudgetLimits } from "../../domain/records.ts"
import { Audit } from "../audit/Audit.ts"
import { backoffDelayMs } from "../durability/backoff.ts"
import type { AlertKind, AlertRecord } from "../store/AlertsRepo.ts"
import { AlertsRepo } from "../store/AlertsRepo.ts"
import type { GatewayConfig } from "../config/schema.ts"

export type { AlertKind } from "../store/AlertsRepo.ts"

export interface AlertObservation {
  readonly kind: AlertKind
  /** The key id, team id or workspace id. */
  readonly target: string
  readonly used_micros: number
  readonly limit_micros: number
  /** `day`, `week`, `month`, `none` for a budget; `topup` for the pool. */
  readonly period: string
  /** ISO instant the period began. */
  readonly period_start: string
}

export interface AlertsShape {
  /** Sends what `observation` newly crosses (in the background); cheap and silent otherwise. Never fails. */
  readonly observe: (observation: AlertObservation) => void
  /** Waits until every delivery this process started has ended (delivered, or handed over at shutdown). Tests. */
  readonly idle: Effect.Effect<void>
}

/** The JSON body the receiver gets. */
export interface AlertPayload {
  readonly kind: AlertKind
  readonly target: string
  /** Credits, as the admin API writes them: a JSON number with at most six fractional digits. */
  readonly used: number
  readonly limit: number
  readonly period: string
  readonly period_start: string
  readonly threshold: number
  readonly at: string
}

/** The pool's observation: spent since the last top-up against the balance that top-up left. */
export const poolObservation = (workspaceId: string, lastTopup: { readonly ts: string; readonly balance_after_micros: number }, balanceMicros: number): AlertObservation => ({
  kind: "pool",
  target: workspaceId,
  used_micros: Math.max(0, lastTopup.balance_after_micros - balanceMicros),
  limit_micros: lastTopup.balance_after_micros,
  period: "topup",
  period_start: lastTopup.ts
})

/**
 * A key's or team's budget after its usage changed: undefined when the budget has no credit
 * maximum (a request-count budget raises no alert). `periodStart`: the current period's first
 * instant (for a budget without a period, the budget's own start, or the epoch).
 */
export const budgetObservation = (
  kind: "key_budget" | "team_budget",
  target: string,
  budget: BudgetLimits | null | undefined,
  usedMicros: number,
  periodStart: string
): AlertObservation | undefined =>
  budget?.max_credits_micros === undefined ? undefined : {
    kind,
    target,
    used_micros: usedMicros,
    limit_micros: budget.max_credits_micros,
    period: budget.period ?? "none",
    period_start: periodStart
  }

export type AlertsSettings = GatewayConfig["alerts"]

/** Periods remembered per process; beyond this the oldest are forgotten (a later observe claims again, finding the row). */
const MAX_REMEMBERED = 100_000
/** How many alerts one process delivers at once. */
const DELIVERY_CONCURRENCY = 8
/** Pending alerts a sweep takes over at once. */
const SWEEP_BATCH = 50

export class Alerts extends Context.Service<Alerts, AlertsShape>()("modelgate/Alerts") {
  /** No webhook: every observation is dropped at once. */
  static readonly layerNone = Layer.succeed(Alerts, Alerts.of({ observe: () => {}, idle: Effect.void }))

  static readonly layer = (settings: AlertsSettings): Layer.Layer<Alerts, never, AlertsRepo> => {
    const url = settings.webhook_url
    if (url === undefined) return Alerts.layerNone as Layer.Layer<Alerts, never, AlertsRepo>
    return Layer.effect(Alerts, make(url, settings))
  }
}

const make = Effect.fnUntraced(function*(url: string, settings: AlertsSettings) {
  const repo = yield* AlertsRepo
  const audit = Option.getOrUndefined(yield* Effect.serviceOption(Audit))
  const scope = yield* Effect.scope
  const runFork = Effect.runForkWith(yield* Effect.context<never>())
  const owner = `alerts_${randomUUID()}`
  const thresholds = [...new Set(settings.thresholds)].sort((a, b) => a - b)
  const leaseMs = settings.lease_seconds * 1000
  const backoff = { baseMs: settings.backoff_ms, maxMs: Math.max(settings.backoff_ms, settings.max_backoff_ms) }
  const gate = yield* Semaphore.make(DELIVERY_CONCURRENCY)
  /** Per (kind, target, period start): how many thresholds (from the lowest) are known crossed here. */
  const known = new Map<string, number>()
  let running = 0
  const waiters = new Set<() => void>()
  const settled = () => {
    if (running > 0) return
    for (const wake of waiters) wake()
    waiters.clear()
  }

  const attempt = (payload: AlertPayload) =>
    Effect.tryPromise({
      try: async () => {
        const response = await fetch(url, {
          method: "POST",
          headers: { ...settings.headers, "content-type": "application/json", "user-agent": "modelgate-alerts" },
          body: JSON.stringify(payload),
          redirect: "manual",
          signal: AbortSignal.timeout(settings.attempt_timeout_ms)
        })
        // The body is not needed, but must be read (or dropped) for the connection to be reused.
        await response.body?.cancel().catch(() => undefined)
        return response.status
      },
      catch: (error) => (error instanceof Error ? (error.name === "TimeoutError" ? `no answer within ${settings.attempt_timeout_ms} ms` : error.message) : String(error))
    })

  const auditDelivery = (alert: AlertRecord, status: number, attempts: number, payload: AlertPayload) => {
    if (audit === undefined) return
    const record: AuditRecord = {
      request_id: `alert_${randomUUID()}`,
      ts: new Date().toISOString(),
      key_id: alert.kind === "key_budget" ? alert.target : null,
      method: "POST",
      endpoint: "alerts:webhook",
      status,
      error: null,
      model: null,
      provider: null,
      tool: null,
      connection_id: null,
      credits: 0,
      prompt_tokens: null,
      completion_tokens: null,
      duration_ms: 0,
      stream: false,
      client_addr: null,
      details: {
        alert: { kind: alert.kind, target: alert.target, period: alert.period, period_start: alert.period_start, threshold: payload.threshold },
        used: payload.used,
        limit: payload.limit,
        attempts,
        target: { kind: alert.kind === "pool" ? "workspace" : alert.kind === "key_budget" ? "key" : "team", id: alert.target }
      }
    }
    audit.append(record)
  }

  /** Tries until accepted, renewing the claim; stops when the claim is lost (another replica has it). */
  const deliver = (alert: AlertRecord) =>
    Effect.gen(function*() {
      const payload: AlertPayload = {
        kind: alert.kind,
        target: alert.target,
        used: fromMicros(alert.used_micros),
        limit: fromMicros(alert.limit_micros),
        period: alert.period,
        period_start: alert.period_start,
        threshold: Number(alert.threshold),
        at: alert.crossed_at
      }
      let attempts = alert.attempts
      for (let tries = 0;; tries++) {
        if (tries > 0) {
          yield* Effect.sleep(Duration.millis(backoffDelayMs(tries - 1, backoff)))
          const mine = yield* repo.renew(alert, owner, leaseMs).pipe(Effect.orElseSucceed(() => true))
          if (!mine) return
        }
        attempts++
        const result = yield* Effect.result(attempt(payload))
        if (result._tag === "Success" && result.success >= 200 && result.success < 300) {
          // Marking it delivered may itself meet a store outage: retried until it lands, so another
          // replica does not take over and send it again.
          const marked = yield* repo.delivered(alert, owner).pipe(
            Effect.retry({ schedule: Schedule.spaced(Duration.seconds(1)) })
          )
          if (marked) auditDelivery(alert, result.success, attempts, payload)
          yield* Effect.logInfo(`alert ${alert.kind} ${alert.target} at ${payload.threshold} of ${payload.limit} delivered after ${attempts} attempts`)
          return
        }
        const why = result._tag === "Success" ? `receiver answered ${result.success}` : result.failure
        yield* repo.attemptFailed(alert, owner, why).pipe(Effect.ignore)
        yield* Effect.logWarning(`alert ${alert.kind} ${alert.target} at ${payload.threshold}: attempt ${attempts} failed (${why}); retrying`)
      }
    })

  /** Keeps the claim's lease ahead while `work` runs (a long backoff outlasts the lease otherwise). */
  const leased = <E>(alert: AlertRecord, work: Effect.Effect<void, E>) =>
    Effect.raceFirst(
      work,
      Effect.forever(Effect.andThen(Effect.sleep(Duration.millis(Math.max(100, Math.floor(leaseMs / 3)))), repo.renew(alert, owner, leaseMs).pipe(Effect.ignore)))
    )

  const spawn = <E>(effect: Effect.Effect<void, E>) => {
    running++
    runFork(
      Effect.forkIn(
        effect.pipe(
          gate.withPermits(1),
          Effect.catchCause((cause) => Effect.logError("alert delivery stopped", cause)),
          Effect.ensuring(Effect.sync(() => {
            running--
            settled()
          }))
        ),
        scope
      )
    )
  }

  /** `forget`: the claim could not be made (the store is down): the next observation tries again. */
  const claimAndDeliver = (alert: Omit<AlertRecord, "attempts">, forget: () => void) =>
    Effect.gen(function*() {
      const created = yield* repo.claim(alert, owner, leaseMs).pipe(
        Effect.retry({ times: 5, schedule: Schedule.exponential(Duration.millis(200)) }),
        Effect.tapError(() => Effect.sync(forget))
      )
      if (!created) return
      yield* leased({ ...alert, attempts: 0 }, deliver({ ...alert, attempts: 0 }))
    })

  const observe = (o: AlertObservation): void => {
    if (!(o.limit_micros > 0) || !(o.used_micros > 0)) return
    let crossed = 0
    while (crossed < thresholds.length && o.used_micros >= thresholds[crossed]! * o.limit_micros) crossed++
    if (crossed === 0) return
    const id = `${o.kind}\u0000${o.target}\u0000${o.period_start}`
    const before = known.get(id) ?? 0
    if (crossed <= before) return
    if (known.size >= MAX_REMEMBERED && !known.has(id)) known.delete(known.keys().next().value!)
    known.set(id, crossed)
    const at = new Date().toISOString()
    for (let i = before; i < crossed; i++) {
      const index = i
      spawn(claimAndDeliver({
        kind: o.kind,
        target: o.target,
        period_start: o.period_start,
        threshold: String(thresholds[i]),
        period: o.period,
        used_micros: o.used_micros,
        limit_micros: o.limit_micros,
        crossed_at: at
      }, () => {
        if ((known.get(id) ?? 0) > index) known.set(id, index)
      }))
    }
  }

  // Alerts whose owner stopped renewing (it died, or stopped mid-delivery) are taken over here.
  const sweep = repo.takeOrphans(owner, leaseMs, SWEEP_BATCH).pipe(
    Effect.tap((taken) => Effect.sync(() => {
      for (const alert of taken) spawn(leased(alert, deliver(alert)))
    })),
    Effect.catchCause((cause) => Effect.logWarning("alert sweep failed; next time", cause))
  )
  yield* Effect.forkIn(Effect.repeat(sweep, Schedule.spaced(Duration.millis(Math.max(200, Math.floor(leaseMs / 2))))), scope)

  const idle = Effect.callback<void>((resume) => {
    if (running === 0) return resume(Effect.void)
    const wake = () => resume(Effect.void)
    waiters.add(wake)
    return Effect.sync(() => void waiters.delete(wake))
  })

  return Alerts.of({ observe, idle })
})
