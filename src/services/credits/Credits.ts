/**
 * The workspace credit pool (decisions section 4): a paid request reserves its model's price
 * atomically before the provider is called, and gets it back if the call then fails with a
 * 5xx, so a retry is never charged twice. Every movement is a ledger row.
 */
import { Context, Effect, Layer } from "effect"
import { DependencyUnavailable, InsufficientCredits } from "../../domain/errors.ts"
import type { CreditMovement } from "../../domain/records.ts"
import { Store } from "../store/Store.ts"

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
  /** Charges `amount` (no-op for free models); fails with 402 when the pool cannot pay. */
  readonly reserve: (charge: Charge) => Effect.Effect<Charge | undefined, InsufficientCredits | DependencyUnavailable>
  readonly refund: (charge: Charge, note: string) => Effect.Effect<void>
  readonly topup: (movement: CreditMovement) => Effect.Effect<number, DependencyUnavailable>
}>()("modelgate/Credits") {
  static readonly layer = Layer.effect(
    Credits,
    Effect.gen(function*() {
      const store = yield* Store
      return Credits.of({
        reserve: (charge) =>
          charge.amount <= 0
            ? Effect.succeed(undefined)
            : store.chargeCredits({ ...charge, actor: charge.key_id }).pipe(
              Effect.mapError(storeUnavailable),
              Effect.flatMap((result) =>
                "balance" in result
                  ? Effect.succeed(charge)
                  : Effect.fail(new InsufficientCredits({
                    message: `the workspace has ${result.insufficient} credits; model "${charge.model}" costs ${charge.amount} per request`,
                    details: { model: charge.model, required_credits: charge.amount, available_credits: result.insufficient }
                  }))
              )
            ),
        refund: (charge, note) =>
          store.addCredits("refund", { ...charge, actor: charge.key_id, note }).pipe(
            Effect.asVoid,
            // A refund that cannot be written is logged loudly: the ledger still shows the charge.
            Effect.catch((error) => Effect.logError(`could not refund ${charge.amount} credits of ${charge.request_id}`, error))
          ),
        topup: (movement) => store.addCredits("topup", movement).pipe(Effect.mapError(storeUnavailable))
      })
    })
  )
}
