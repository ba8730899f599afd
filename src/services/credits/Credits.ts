/**
 * The workspace credit pool (docs/decisions.md sections 4 and 10). A paid request takes its
 * model's price before the provider is called, from a block of the pool this replica leased
 * (BlockWriter.ts: no store round trip per request; the charge is written, held open as a
 * reservation owned by this replica, by the next group commit); the charge ends with the
 * request: settled (it stays) or refunded when the request failed with a 5xx, so a retry is never
 * charged twice. Every movement is a ledger row, and the ledger always sums to the balance.
 *
 * Faults: what cannot reach the store stays pending in memory and is retried with backoff, then
 * spooled at stop. This replica renews a lease in the store; the reservations and the block of a
 * replica whose lease lapsed (it died) are settled by a live one: each reservation refunded with
 * an audit record whose slug is `replica_lost`, the block's unspent rest returned to the pool.
 */
import * as Clock from "effect/Clock"
import * as Context from "effect/Context"
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { randomBytes } from "node:crypto"
import { BudgetExhausted, DependencyUnavailable, InsufficientCredits, ValidationFailed } from "../../domain/errors.ts"
import { periodKey, resetsAt } from "../../domain/budget-periods.ts"
import { fromMicros, MAX_MICROS } from "../../domain/money.ts"
import type { BudgetLimits, CreditMovement, Principal, Reservation } from "../../domain/records.ts"
import { type AlertObservation, Alerts, budgetObservation, poolObservation } from "../alerts/Alerts.ts"
import { Audit } from "../audit/Audit.ts"
import { abandonAfter } from "../durability/backoff.ts"
import { keepRunning } from "../durability/keep-running.ts"
import type { BudgetHold, BudgetRefusal } from "../store/credit-batches.ts"
import type { BudgetUsageAfter } from "../store/credit-batches.ts"
import { DEFAULT_WORKSPACE } from "../store/rows.ts"
import { CreditsRepo } from "../store/CreditsRepo.ts"
import { makeBlockWriter } from "./BlockWriter.ts"

/**
 * A request's reservation (issue 33): `amount` micro-credits (src/domain/money.ts) taken from the
 * pool and counted against every budget that applies, until `settle` keeps its cost.
 */
export interface Charge {
  readonly amount: number
  readonly key_id: string
  readonly request_id: string
  readonly model: string
  readonly method?: string | null | undefined
  readonly endpoint?: string | null | undefined
}

export const REPLICA_LOST = "replica_lost"

/**
 * A key's or team's credit budget as a commit left it, as an alert sees it (issue 33): the
 * period's first instant from the row's period (`month:2026-11-01`), the epoch for a budget that
 * never resets. A subject's budget raises none (alerts name keys, teams and the pool).
 */
export const budgetAlertOf = (row: BudgetUsageAfter): AlertObservation | undefined => {
  const kind = row.holder.startsWith("team_") ? "team_budget" : row.holder.startsWith("key_") ? "key_budget" : undefined
  if (kind === undefined) return undefined
  const at = row.period.indexOf(":")
  const period = at === -1 ? undefined : row.period.slice(0, at)
  const start = at === -1 ? "1970-01-01" : row.period.slice(at + 1)
  return budgetObservation(
    kind,
    row.holder,
    { max_credits_micros: row.max_credits, period: period === "day" || period === "week" || period === "month" ? period : undefined },
    row.credits,
    `${start}T00:00:00.000Z`
  )
}

/**
 * The request id the client was given, from a reservation's: a fallback at another price is
 * reserved under `<request id>.N` (admission.ts `repriceCharge`; gateway request ids are
 * `req_<hex>`, never with a dot), and its `replica_lost` record belongs under the client's id
 * (issue 35 item 1), where the one audit record of the request is.
 */
export const clientRequestIdOf = (reservationId: string): string => reservationId.replace(/^(req_[0-9a-f]+)\.\d+$/, "$1")

export const storeUnavailable = (cause: unknown) =>
  new DependencyUnavailable({
    message: `the store is unavailable: ${(cause as { message?: string })?.message ?? "unknown error"}`,
    details: { dependency: "store" }
  })

/**
 * The budgets a request of `principal` is counted against now (issue 33): its own (a key's or a
 * subject's policy's) and its team's, each in its current period by `nowMs`.
 */
export const budgetHolds = (principal: Principal, nowMs: number): ReadonlyArray<BudgetHold> => {
  const holds: Array<BudgetHold> = []
  const hold = (holder: string, budget: BudgetLimits, subject?: BudgetHold["subject"]) =>
    holds.push({
      holder,
      period: periodKey(budget.period, nowMs),
      max_requests: budget.max_requests,
      max_credits: budget.max_credits_micros,
      ...(subject === undefined ? {} : { subject })
    })
  if (principal.budget !== null) {
    hold(principal.id, principal.budget, principal.kind === "subject" ? { issuer: principal.issuer, subject: principal.subject } : undefined)
  }
  if (principal.team?.budget !== null && principal.team?.budget !== undefined) hold(principal.team.id, principal.team.budget)
  return holds
}

const budgetExhausted = (principal: Principal, refusal: BudgetRefusal, nowMs: number, amount: number) => {
  const team = principal.team !== null && principal.team !== undefined && refusal.holder === principal.team.id ? principal.team : undefined
  const whose = team !== undefined ? `team "${team.name}"` : `this ${principal.kind === "subject" ? "subject" : "key"}`
  const period = (team?.budget ?? principal.budget)?.period
  const resets = resetsAt(period, nowMs)
  const when = period === undefined ? "" : ` this ${period}`
  const message = refusal.limit === "max_requests"
    ? `${whose}'s budget of ${refusal.max} requests${when} is used up`
    : `${whose}'s budget of ${fromMicros(refusal.max)} credits${when} cannot pay this request (${fromMicros(refusal.used)} used, ${fromMicros(amount)} required)`
  return new BudgetExhausted({
    message,
    details: {
      limit: refusal.limit,
      resets_at: resets,
      scope: team !== undefined ? "team" : principal.kind,
      ...(team !== undefined ? { team_id: team.id } : {}),
      ...(refusal.limit === "max_requests"
        ? { max_requests: refusal.max, used_requests: refusal.used }
        : { max_credits: fromMicros(refusal.max), used_credits: fromMicros(refusal.used), required_credits: fromMicros(amount) })
    }
  })
}

const insufficient = (charge: Charge, available: number) =>
  new InsufficientCredits({
    message: `the workspace has ${fromMicros(Math.max(0, available))} credits; model "${charge.model}" needs ${fromMicros(charge.amount)} for this request`,
    details: { model: charge.model, required_credits: fromMicros(charge.amount), available_credits: fromMicros(Math.max(0, available)) }
  })

export interface CreditsOptions {
  /**
   * How long this replica's reservations stay its own without a renewal; it renews every third
   * of that. Default 30 s. Also how long a dead replica's reservations wait for their refund.
   */
  readonly leaseSeconds?: number | undefined
  /** Where the outbox spools on stop (the data directory); none: memory only. */
  readonly dataDir?: string | undefined
  /** Off for one-shot commands (the CLI's top-up): no lease, no sweep, no spool. */
  readonly replica?: boolean | undefined
  /**
   * How long one group commit may take on Postgres before it is abandoned and retried (a frozen
   * store); config `store_timeouts.commit_ms`, default 2 s. The paid requests waiting for it
   * answer 503, so a machine slow enough to pass it refuses them (issue 39: the suite at load 25).
   */
  readonly commitTimeoutMs?: number | undefined
  /** The most micro-credits one block takes from the pool (less as the pool nears empty). Default 200 credits. */
  readonly blockSize?: number | undefined
}

export class Credits extends Context.Service<Credits, {
  /** This process's replica id: the owner of the reservations it takes. */
  readonly replicaId: string
  /**
   * Counts the request (one more request, and `amount` micros) against every budget that applies
   * (the key's or subject's own, and `principal.team?.budget` under the team's id), each in its
   * current period, and reserves `amount` from the pool (nothing for free models), atomically:
   * 429 budget_exhausted, or 402 when the pool cannot pay. `charge.key_id` is the principal's id.
   */
  readonly reserve: (
    charge: Charge,
    principal: Principal,
    /** `countRequest: false`: the request was counted already (a fallback's price replacing its reservation): only the amount is. */
    options?: { readonly countRequest?: boolean | undefined }
  ) => Effect.Effect<Charge | undefined, BudgetExhausted | InsufficientCredits | DependencyUnavailable>
  /**
   * The request ended and keeps `costMicros` of its charge (clamped to the amount; absent: all of
   * it); the rest goes back to the pool and to every budget the reservation counted against, with
   * a ledger row. Never fails: what cannot be written now is retried (or spooled).
   */
  readonly settle: (charge: Charge, costMicros?: number) => Effect.Effect<void>
  /** The request failed on our side: the charge goes back. Never fails: retried until it lands. */
  readonly refund: (charge: Charge, note: string) => Effect.Effect<void>
  readonly topup: (movement: CreditMovement) => Effect.Effect<number, DependencyUnavailable | ValidationFailed>
  /** Movements waiting for the store (tests and health). */
  readonly pending: () => number
  /** Refunds the reservations of replicas whose lease lapsed; returns how many. Runs by itself every lease/3. */
  readonly sweep: Effect.Effect<number>
}>()("modelgate/Credits") {
  static readonly layer = (options: CreditsOptions = {}) =>
    Layer.effect(
      Credits,
      Effect.gen(function*() {
        const store = yield* CreditsRepo
        const audit = Option.getOrUndefined(yield* Effect.serviceOption(Audit))
        const alerts = Option.getOrUndefined(yield* Effect.serviceOption(Alerts))
        /**
         * The pool's last top-up (or its initial credits), what a pool alert measures against
         * (Alerts.poolObservation): read at start and with each lease renewal, so another
         * replica's top-up is seen within a third of a lease. Only with alerts configured.
         */
        let lastTopup: { readonly ts: string; readonly balance_after_micros: number } | undefined
        const readLastTopup = alerts === undefined
          ? Effect.void
          : store.lastTopup.pipe(
            Effect.tap((found) => Effect.sync(() => {
              lastTopup = found
            })),
            Effect.ignore
          )
        const replicaId = `rep_${randomBytes(8).toString("hex")}`
        const leaseMs = Math.max(300, Math.round((options.leaseSeconds ?? 30) * 1000))
        const replica = options.replica ?? true
        const commitTimeout = Duration.millis(options.commitTimeoutMs ?? 2_000)

        const lostRecord = (reservation: Reservation) => ({
          request_id: clientRequestIdOf(reservation.request_id),
          ts: new Date().toISOString(),
          key_id: reservation.key_id,
          method: reservation.method ?? "POST",
          endpoint: reservation.endpoint ?? "(unknown)",
          status: 503,
          error: REPLICA_LOST,
          model: reservation.model,
          provider: null,
          tool: null,
          connection_id: null,
          credits: 0,
          prompt_tokens: null,
          completion_tokens: null,
          duration_ms: Math.max(0, Date.now() - Date.parse(reservation.created_at)),
          stream: false,
          client_addr: null,
          details: {
            owner: reservation.owner,
            refunded_credits: fromMicros(reservation.amount),
            settled_by: replicaId,
            ...(reservation.request_id === clientRequestIdOf(reservation.request_id) ? {} : { reservation: reservation.request_id })
          }
        })

        /**
         * Since when (this process's monotonic clock) every renewal of ours has reached the store
         * in time; undefined while they fail. A sweeper sweeps only after a whole lease of that
         * (issue 21): a replica's renewal that is merely late because the store was out of reach
         * for everyone (a stall) looks exactly like a dead replica to a sweeper that just got
         * through itself. After a lease of contact, every replica that can reach the store has
         * renewed (each renews every third of a lease), so a lapsed lease is a lost replica.
         */
        let contactSince: number | undefined
        let lastRenewed: number | undefined
        const monotonic = () => performance.now()

        const sweep = Effect.gen(function*() {
          if (contactSince === undefined || monotonic() - contactSince < leaseMs) return 0
          const orphans = yield* store.orphanedReservations(replicaId, 500)
          let refunded = 0
          for (const orphan of orphans) {
            const note = `${REPLICA_LOST}: replica ${orphan.owner} stopped renewing its lease before the request ended`
            const reservation = yield* store.refundReservation(orphan.request_id, `replica:${replicaId}`, note)
            // Another live replica may have refunded it first: only the one that did records it.
            if (reservation === undefined) continue
            refunded++
            audit?.append(lostRecord(reservation))
          }
          if (refunded > 0) yield* Effect.logWarning(`refunded ${refunded} reservations of replicas that stopped (${REPLICA_LOST})`)
          const blocks = yield* store.returnOrphanedBlocks(replicaId)
          if (blocks.blocks > 0) {
            yield* Effect.logWarning(`returned ${blocks.blocks} credit blocks (${fromMicros(blocks.credits)} unspent credits) of replicas that stopped to the pool`)
          }
          return refunded
        }).pipe(Effect.catch((error) => Effect.as(Effect.logDebug(`reservation sweep failed: ${error.message}`), 0)))

        // The lease runs from the store's clock (issue 21). Bounded by a third of the lease: a
        // renewal that takes longer is no contact (and the next one is due).
        const renew = abandonAfter(store.renewReplica(replicaId, leaseMs), Duration.millis(Math.floor(leaseMs / 3))).pipe(
          Effect.andThen(Effect.sync(() => {
            const now = monotonic()
            // A gap of more than half a lease between two renewals (this process was stalled, or a
            // renewal took that long) starts the contact over, like a failure.
            if (contactSince === undefined || lastRenewed === undefined || now - lastRenewed > leaseMs / 2) contactSince = now
            lastRenewed = now
          })),
          // An outage is logged once by the outbox or the audit writer, not once per renewal here.
          Effect.catch((error) =>
            Effect.andThen(
              Effect.sync(() => {
                contactSince = undefined
              }),
              Effect.logDebug(`replica lease not renewed: ${error.message}`)
            )
          )
        )

        if (replica) {
          yield* renew
          yield* readLastTopup
          // Added before the writer, so it runs after the writer's finalizer has written (or
          // spooled) everything: gives the lease up only when nothing of ours is left pending, so
          // a live replica then refunds any leftover at once.
          yield* Effect.addFinalizer(() =>
            writer !== undefined && writer.pending() === 0 ? Effect.ignore(store.removeReplica(replicaId)) : Effect.void
          )
        }
        const writer = replica
          ? yield* makeBlockWriter({
            store,
            owner: replicaId,
            blockSize: Math.max(1, options.blockSize ?? 200_000_000),
            commitTimeout,
            spoolDir: options.dataDir,
            onCommitted: alerts === undefined ? undefined : (result) => {
              for (const row of result.budgetUsage) {
                const observation = budgetAlertOf(row)
                if (observation !== undefined) alerts.observe(observation)
              }
              if (lastTopup !== undefined) alerts.observe(poolObservation(DEFAULT_WORKSPACE, lastTopup, result.balance))
            }
          })
          : undefined

        if (replica) {
          yield* Effect.forkScoped(
            keepRunning(
              "the replica's lease",
              Effect.gen(function*() {
                yield* renew
                yield* sweep
                yield* readLastTopup
              }),
              Duration.millis(Math.floor(leaseMs / 3))
            )
          )
        }

        return Credits.of({
          replicaId,
          // Defined once, not a generator made per call (README, Generators made per request); untraced:
          // Effect.fn captures a stack trace on every call, and this runs on every paid request.
          reserve: Effect.fnUntraced(function*(charge, principal, options) {
            const nowMs = yield* Clock.currentTimeMillis
            const requests = options?.countRequest === false ? 0 : 1
            const holds = requests === 0 && charge.amount <= 0 ? [] : budgetHolds(principal, nowMs)
            if (holds.length === 0 && charge.amount <= 0) return undefined
            if (writer === undefined) {
              // One-shot commands (the CLI's top-up) hold no replica: nothing they run is admitted here.
              return yield* Effect.die(new Error("Credits.reserve needs a replica (Credits.layer without `replica: false`)"))
            }
            if (holds.length > 0 && charge.amount > 0) {
              // One commit for the count and the charge (the charge written only if the count admitted it).
              const outcome = yield* writer.countAndSpend(charge, holds, requests)
              switch (outcome._tag) {
                case "Admitted":
                  return charge
                case "Exhausted":
                  return yield* Effect.fail(budgetExhausted(principal, outcome.refusal, nowMs, charge.amount))
                case "StoreFailed":
                  return yield* Effect.fail(storeUnavailable(outcome.error))
                case "Insufficient":
                  return yield* Effect.fail(insufficient(charge, outcome.available))
              }
            }
            if (holds.length > 0) {
              const counted = yield* writer.countBudget(holds, 0)
              if (counted._tag === "StoreFailed") return yield* Effect.fail(storeUnavailable(counted.error))
              if (counted._tag === "Exhausted") return yield* Effect.fail(budgetExhausted(principal, counted.refusal, nowMs, 0))
              return undefined
            }
            const spent = yield* writer.spend(charge)
            switch (spent._tag) {
              case "Admitted":
                return charge
              case "StoreFailed":
                return yield* Effect.fail(storeUnavailable(spent.error))
              case "Insufficient":
                return yield* Effect.fail(insufficient(charge, spent.available))
            }
          }),
          settle: (charge, costMicros) =>
            writer?.end(charge.request_id, "settle", "", costMicros === undefined ? undefined : Math.min(charge.amount, Math.max(0, Math.floor(costMicros)))) ??
              Effect.void,
          refund: (charge, note) =>
            writer !== undefined
              ? writer.end(charge.request_id, "refund", note)
              // Without a replica there is no reservation to end: the refund is a plain movement.
              : Effect.ignore(store.addCredits("refund", { ...charge, actor: charge.key_id, note })),
          topup: (movement) =>
            store.addCredits("topup", movement).pipe(
              Effect.tap(() => readLastTopup),
              Effect.mapError(storeUnavailable),
              Effect.flatMap((balance) =>
                balance === undefined
                  ? Effect.fail(new ValidationFailed({
                    message: `a top-up of ${fromMicros(movement.amount)} credits would take the pool past ${fromMicros(MAX_MICROS)} credits`,
                    details: { field: "credits", max_pool_credits: fromMicros(MAX_MICROS) }
                  }))
                  : Effect.succeed(balance)
              )
            ),
          pending: () => writer?.pending() ?? 0,
          sweep
        })
      })
    )
}
