/**
 * The workspace credit pool (docs/decisions.md sections 4 and 10). A paid request reserves its
 * model's price atomically before the provider is called; the reservation is owned by this
 * replica and ends with the request: settled (the charge stays) or refunded when the request
 * failed with a 5xx, so a retry is never charged twice. Every movement is a ledger row, and the
 * ledger always sums to the balance.
 *
 * Faults: a settlement or refund that cannot reach the store goes to the outbox (Outbox.ts) and
 * lands when the store is back. This replica renews a lease in the store; a reservation whose
 * owner's lease lapsed (the replica died) is refunded by a live replica, with an audit record
 * whose slug is `replica_lost`.
 */
import { Context, Duration, Effect, Layer, Option } from "effect"
import { randomBytes } from "node:crypto"
import { BudgetExhausted, DependencyUnavailable, InsufficientCredits, ValidationFailed } from "../../domain/errors.ts"
import type { CreditMovement, Principal, Reservation } from "../../domain/records.ts"
import { Audit } from "../audit/Audit.ts"
import { abandonAfter } from "../durability/backoff.ts"
import { spoolPath } from "../durability/spool.ts"
import { CreditsRepo, MAX_POOL_CREDITS } from "../store/CreditsRepo.ts"
import { makeOutbox, type PendingMovement, SPOOL_FILE } from "./Outbox.ts"

export interface Charge {
  readonly amount: number
  readonly key_id: string
  readonly request_id: string
  readonly model: string
  readonly method?: string | null | undefined
  readonly endpoint?: string | null | undefined
}

export const REPLICA_LOST = "replica_lost"

export const storeUnavailable = (cause: unknown) =>
  new DependencyUnavailable({
    message: `the store is unavailable: ${(cause as { message?: string })?.message ?? "unknown error"}`,
    details: { dependency: "store" }
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
  /** How long an inline settlement or refund may take before it is left to the outbox. */
  readonly inlineTimeout?: Duration.Input | undefined
}

export class Credits extends Context.Service<Credits, {
  /** This process's replica id: the owner of the reservations it takes. */
  readonly replicaId: string
  /**
   * Counts the request against the budget of the key or subject it acts for (when it has one),
   * then reserves `amount` (nothing for free models), atomically: 429 budget_exhausted, or 402
   * when the pool cannot pay. `charge.key_id` is the principal's id.
   */
  readonly reserve: (
    charge: Charge,
    principal: Principal
  ) => Effect.Effect<Charge | undefined, BudgetExhausted | InsufficientCredits | DependencyUnavailable>
  /** The request ended and keeps its charge. Never fails: what cannot be written now is retried. */
  readonly settle: (charge: Charge) => Effect.Effect<void>
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
        const replicaId = `rep_${randomBytes(8).toString("hex")}`
        const leaseMs = Math.max(300, Math.round((options.leaseSeconds ?? 30) * 1000))
        const replica = options.replica ?? true
        const inlineTimeout = options.inlineTimeout ?? Duration.seconds(2)

        const apply = (movement: PendingMovement) =>
          movement.op === "settle"
            ? Effect.asVoid(store.settleReservation(movement.request_id))
            : Effect.asVoid(store.refundReservation(movement.request_id, movement.actor, movement.note))

        const outbox = yield* makeOutbox({
          apply,
          spoolPath: replica && options.dataDir !== undefined ? spoolPath(options.dataDir, SPOOL_FILE) : undefined
        })

        /**
         * Postgres can freeze (a partition), and a query on a frozen connection can neither answer
         * nor be interrupted: the attempt is abandoned after `inlineTimeout` and the outbox takes
         * over. SQLite is in this process and cannot: its attempt runs on the request's own fiber,
         * with no hand-over to a second one on the hot path.
         */
        const attempt = (movement: PendingMovement) =>
          store.dialect === "sqlite" ? apply(movement) : abandonAfter(apply(movement), inlineTimeout)

        /** Once inline (unless the store is known to be down), else queued; idempotent either way. */
        const end = (movement: PendingMovement): Effect.Effect<void> =>
          outbox.down()
            ? Effect.sync(() => outbox.enqueue(movement))
            : attempt(movement).pipe(
              Effect.catch(() => Effect.sync(() => outbox.enqueue(movement)))
            )

        const lostRecord = (reservation: Reservation) => ({
          request_id: reservation.request_id,
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
          details: { owner: reservation.owner, refunded_credits: reservation.amount, settled_by: replicaId }
        })

        const sweep = Effect.gen(function*() {
          const orphans = yield* store.orphanedReservations(replicaId, Date.now(), 500)
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
          return refunded
        }).pipe(Effect.catch((error) => Effect.as(Effect.logDebug(`reservation sweep failed: ${error.message}`), 0)))

        const renew = store.renewReplica(replicaId, Date.now() + leaseMs).pipe(
          // An outage is logged once by the outbox or the audit writer, not once per renewal here.
          Effect.catch((error) => Effect.logDebug(`replica lease not renewed: ${error.message}`))
        )

        if (replica) {
          yield* renew
          yield* Effect.forkScoped(
            Effect.forever(
              Effect.gen(function*() {
                yield* renew
                yield* sweep
                yield* Effect.sleep(Duration.millis(Math.floor(leaseMs / 3)))
              })
            )
          )
          // Runs before the outbox's finalizer (added after it): gives the lease up only when
          // nothing of ours is left pending, so a live replica then refunds any leftover at once.
          yield* Effect.addFinalizer(() =>
            outbox.pending() === 0 ? Effect.ignore(store.removeReplica(replicaId)) : Effect.void
          )
        }

        return Credits.of({
          replicaId,
          reserve: (charge, principal) => {
            const budget = principal.budget
            return budget === null && charge.amount <= 0
              ? Effect.succeed(undefined)
              : store.admitPaid({
                keyId: charge.key_id,
                budget: budget === null
                  ? false
                  : principal.kind === "subject"
                  ? { max_requests: budget.max_requests, issuer: principal.issuer, subject: principal.subject }
                  : true,
                charge: charge.amount > 0 ? { ...charge, actor: charge.key_id } : undefined,
                reservation: replica
                  ? { owner: replicaId, method: charge.method ?? null, endpoint: charge.endpoint ?? null }
                  : undefined
              }).pipe(
                Effect.tapError(() =>
                  // The charge may have committed with its reply lost: queue its refund, which
                  // does nothing unless a reservation for this request id exists.
                  charge.amount > 0 && replica
                    ? Effect.sync(() => outbox.enqueue({ op: "refund", request_id: charge.request_id, actor: charge.key_id, note: "the admission's outcome was unknown (store error)" }))
                    : Effect.void
                ),
                Effect.mapError(storeUnavailable),
                Effect.flatMap((result): Effect.Effect<Charge | undefined, BudgetExhausted | InsufficientCredits> => {
                  switch (result._tag) {
                    case "Admitted":
                      return Effect.succeed(charge.amount > 0 ? charge : undefined)
                    case "BudgetExhausted":
                      return Effect.fail(new BudgetExhausted({
                        message: `this ${principal.kind === "subject" ? "subject" : "key"}'s request budget of ${budget?.max_requests} requests is used up`,
                        details: { max_requests: budget?.max_requests }
                      }))
                    case "Insufficient":
                      return Effect.fail(new InsufficientCredits({
                        message: `the workspace has ${result.available} credits; model "${charge.model}" costs ${charge.amount} per request`,
                        details: { model: charge.model, required_credits: charge.amount, available_credits: result.available }
                      }))
                  }
                })
              )
          },
          settle: (charge) =>
            replica ? end({ op: "settle", request_id: charge.request_id, actor: charge.key_id, note: "" }) : Effect.void,
          refund: (charge, note) =>
            replica
              ? end({ op: "refund", request_id: charge.request_id, actor: charge.key_id, note })
              // Without a replica there is no reservation to end: the refund is a plain movement.
              : Effect.ignore(store.addCredits("refund", { ...charge, actor: charge.key_id, note })),
          topup: (movement) =>
            store.addCredits("topup", movement).pipe(
              Effect.mapError(storeUnavailable),
              Effect.flatMap((balance) =>
                balance === undefined
                  ? Effect.fail(new ValidationFailed({
                    message: `a top-up of ${movement.amount} credits would take the pool past ${MAX_POOL_CREDITS} credits`,
                    details: { field: "credits", max_pool_credits: MAX_POOL_CREDITS }
                  }))
                  : Effect.succeed(balance)
              )
            ),
          pending: outbox.pending,
          sweep
        })
      })
    )
}
