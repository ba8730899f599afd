/**
 * `modelgate credits ...`: the workspace credit pool in the configured store. Loaded by command-line.ts
 * only when a credits command runs.
 */
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { coreLayer } from "../core.ts"
import type { GatewayConfig } from "../services/config/schema.ts"
import { Credits } from "../services/credits/Credits.ts"
import { CreditsRepo } from "../services/store/CreditsRepo.ts"
import { fromMicros, toMicros } from "../domain/money.ts"
import { printJson } from "./print.ts"

/** `amount` in credits, a decimal checked by the command line (at most six fractional digits). */
export const addCredits = (config: GatewayConfig, amount: number, note: Option.Option<string>) =>
  Effect.flatMap(Credits, (credits) => credits.topup({ amount: toMicros(amount)!, actor: "cli", note: Option.getOrNull(note) })).pipe(
    // Not a replica: a one-shot top-up takes no reservations and keeps no lease.
    Effect.provide(Credits.layer({ replica: false }).pipe(Layer.provideMerge(coreLayer(config)))),
    Effect.flatMap((balance) => printJson({ credits: fromMicros(balance) }))
  )

/** The pool as `GET /workspace` shows it: read from the store, so every replica's charges are in it. */
export const showBalance = (config: GatewayConfig) =>
  Effect.flatMap(CreditsRepo, (repo) => repo.getWorkspace).pipe(
    Effect.provide(coreLayer(config)),
    Effect.flatMap((workspace) => printJson({ ...workspace, credits: fromMicros(workspace.credits) }))
  )

/** The newest `limit` ledger rows, as `GET /workspace/ledger` lists them. */
export const showLedger = (config: GatewayConfig, limit: number) =>
  Effect.flatMap(CreditsRepo, (repo) => repo.ledger({ limit })).pipe(
    Effect.provide(coreLayer(config)),
    Effect.flatMap((rows) => printJson(rows.map((row) => ({ ...row, amount: fromMicros(row.amount), balance_after: fromMicros(row.balance_after) }))))
  )
