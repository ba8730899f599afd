/**
 * The workspace credit pool (docs/decisions.md section 4): a paid request reserves its model's price
 * atomically before the provider is called, and gets it back if the call then fails with a
 * 5xx, so a retry is never charged twice. Every movement is a ledger row.
 */
import { Context, Effect, Layer } from "effect"
import { BudgetExhausted, DependencyUnavailable, InsufficientCredits, ValidationFailed } from "../../domain/errors.ts"
import type { CreditMovement } from "../../domain/records.ts"
import { MAX_POOL_CREDITS, Store } from "../store/Store.ts"

export interface Charge {
  readonly amount: number
  readonly key_id: string
  readonly request_id: string
  readonly model: string
}

export const storeUnavailable = (cause: unknown) =>
  new DependencyUnavailable({
    message: `the store is unavailable: ${(cause as { message?: string })?.message ?? "unknown error"}`,
    details: { dependency: "store" }
  })

export class Credits extends Context.Service<Credits, {
  /**
   * Counts the request against the key's budget (when it has one), then charges `amount` (nothing
   * for free models), atomically: 429 budget_exhausted, or 402 when the pool cannot pay.
   */
  readonly reserve: (
    charge: Charge,
    budget: { readonly max_requests: number } | null
  ) => Effect.Effect<Charge | undefined, BudgetExhausted | InsufficientCredits | DependencyUnavailable>
  readonly refund: (charge: Charge, note: string) => Effect.Effect<void>
  readonly topup: (movement: CreditMovement) => Effect.Effect<number, DependencyUnavailable | ValidationFailed>
}>()("modelgate/Credits") {
  static readonly layer = Layer.effect(
    Credits,
    Effect.gen(function*() {
      const store = yield* Store
      return Credits.of({
        reserve: (charge, budget) =>
          budget === null && charge.amount <= 0
            ? Effect.succeed(undefined)
            : store.admitPaid({
              keyId: charge.key_id,
              budget: budget !== null,
              charge: charge.amount > 0 ? { ...charge, actor: charge.key_id } : undefined
            }).pipe(
              Effect.mapError(storeUnavailable),
              Effect.flatMap((result): Effect.Effect<Charge | undefined, BudgetExhausted | InsufficientCredits> => {
                switch (result._tag) {
                  case "Admitted":
                    return Effect.succeed(charge.amount > 0 ? charge : undefined)
                  case "BudgetExhausted":
                    return Effect.fail(new BudgetExhausted({
                      message: `this key's request budget of ${budget?.max_requests} requests is used up`,
                      details: { max_requests: budget?.max_requests }
                    }))
                  case "Insufficient":
                    return Effect.fail(new InsufficientCredits({
                      message: `the workspace has ${result.available} credits; model "${charge.model}" costs ${charge.amount} per request`,
                      details: { model: charge.model, required_credits: charge.amount, available_credits: result.available }
                    }))
                }
              })
            ),
        refund: (charge, note) =>
          store.addCredits("refund", { ...charge, actor: charge.key_id, note }).pipe(
            Effect.flatMap((balance) =>
              balance === undefined
                ? Effect.logError(`could not refund ${charge.amount} credits of ${charge.request_id}: the pool is full`)
                : Effect.void
            ),
            // A refund that cannot be written is logged loudly: the ledger still shows the charge.
            Effect.catch((error) => Effect.logError(`could not refund ${charge.amount} credits of ${charge.request_id}`, error))
          ),
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
          )
      })
    })
  )
}
