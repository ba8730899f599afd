/** Reads the config the way every command does: --config, else MODELGATE_CONFIG, else the embedded default. */
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import { readFile } from "node:fs/promises"
import { ConfigInvalid, resolveConfig } from "../services/config/load.ts"
import type { GatewayConfig } from "../services/config/schema.ts"

export const loadConfig = (options: {
  readonly path: string | undefined
  readonly env: Readonly<Record<string, string | undefined>>
  readonly flags?: { readonly host?: string | undefined; readonly port?: number | undefined }
}): Effect.Effect<GatewayConfig, ConfigInvalid> =>
  Effect.gen(function*() {
    const path = options.path ?? options.env.MODELGATE_CONFIG
    const fileText = path === undefined
      ? undefined
      : yield* Effect.tryPromise({
        try: () => readFile(path, "utf8"),
        catch: (error) => new ConfigInvalid({ message: `cannot read config file ${path}: ${(error as Error).message}` })
      })
    const result = resolveConfig({ fileText, fileName: path, env: options.env, flags: options.flags })
    return Result.isSuccess(result) ? result.success : yield* result.failure
  })
