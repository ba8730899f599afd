/**
 * `modelgate keys ...`: key operations against the configured store, the same code path as the
 * admin API. Loaded by main.ts only when a keys command runs: the store, not the server.
 */
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import { coreLayer } from "../core.ts"
import type { GatewayConfig } from "../services/config/schema.ts"
import { ApiKeys, toKeyView } from "../services/keys/ApiKeys.ts"
import { printJson } from "./print.ts"

const withKeys = <A, E>(config: GatewayConfig, f: (keys: ApiKeys["Service"]) => Effect.Effect<A, E>) =>
  Effect.flatMap(ApiKeys, f).pipe(Effect.provide(coreLayer(config)))

export interface CreateKeyFlags {
  readonly name: string
  readonly models: Option.Option<string>
  readonly tools: boolean
  readonly budget: Option.Option<number>
  readonly expires: Option.Option<string>
}

export const createKey = (config: GatewayConfig, { name, models, tools, budget, expires }: CreateKeyFlags) =>
  Effect.gen(function*() {
    const created = yield* withKeys(config, (keys) =>
      keys.create({
        name,
        allowed_models: Option.match(models, { onNone: () => null, onSome: (m) => m.split(",").map((s) => s.trim()).filter(Boolean) }),
        tools_enabled: tools,
        budget: Option.match(budget, { onNone: () => null, onSome: (max_requests) => ({ max_requests }) }),
        expires_at: Option.getOrNull(expires)
      }))
    yield* printJson({ ...toKeyView(created.record), key: created.key })
    yield* Console.error("Store the key now: it is shown only once.")
  })

export const listKeys = (config: GatewayConfig) =>
  withKeys(config, (keys) => keys.list).pipe(Effect.flatMap((list) => printJson(list.map(toKeyView))))

export const rotateKey = (config: GatewayConfig, id: string, graceSeconds: number) =>
  withKeys(config, (keys) => keys.rotate(id, { grace_seconds: graceSeconds })).pipe(
    Effect.flatMap((rotated) => printJson({ ...toKeyView(rotated.record), key: rotated.key }))
  )

export const revokeKey = (config: GatewayConfig, id: string) =>
  withKeys(config, (keys) => keys.revoke(id)).pipe(Effect.flatMap((record) => printJson(toKeyView(record))))

export const deleteKey = (config: GatewayConfig, id: string) =>
  withKeys(config, (keys) => keys.remove(id)).pipe(Effect.andThen(Console.log(`deleted ${id}`)))
