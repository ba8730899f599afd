/**
 * `modelgate serve`: the whole gateway. Loaded by command-line.ts only when this command runs, so the
 * other commands never load the HTTP server, the providers, MCP or the metrics.
 */
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { randomBytes } from "node:crypto"
import * as HttpServer from "effect/http/HttpServer"
import { gatewayLayer, loggingLayer } from "../gateway.ts"
import type { GatewayConfig } from "../services/config/schema.ts"
import { ConfigReload } from "../services/config/ConfigReload.ts"
import { noticeLine } from "../services/logging/notice.ts"
import type { ConfigInvalid } from "../services/config/load.ts"

const isLoopback = (host: string) => host === "localhost" || host === "::1" || host.startsWith("127.")

/**
 * SIGHUP reloads the configuration (services/config/ConfigReload) instead of ending the process,
 * Node's default; the outcome is logged either way, and a refused reload changes nothing.
 */
const reloadOnSighup = Layer.effectDiscard(Effect.gen(function*() {
  const reloader = yield* ConfigReload
  const context = yield* Effect.context<never>()
  const onHangup = () => {
    Effect.runForkWith(context)(Effect.ignore(Effect.andThen(Effect.logInfo("SIGHUP: reloading the configuration"), reloader.reload)))
  }
  yield* Effect.acquireRelease(Effect.sync(() => process.on("SIGHUP", onHangup)), () => Effect.sync(() => process.off("SIGHUP", onHangup)))
}))

/** Serves until interrupted (SIGTERM/SIGINT), then drains and runs the finalizers. */
export const serve = (
  configured: GatewayConfig,
  env: Readonly<Record<string, string | undefined>>,
  reload?: Effect.Effect<GatewayConfig, ConfigInvalid>
) => {
  // With no admin token and only this machine able to connect (the embedded default), a
  // one-time token printed here lets `npm ci && npm start` open the admin app at once; it
  // lasts as long as the process. Anywhere else an unset token keeps the admin API disabled;
  // so does trust_proxy, even on loopback: a trusted proxy (server.trusted_proxies, loopback ones
  // when the list is empty) makes the admin API reachable from wherever the proxy is (issue 22).
  const oneTimeToken = configured.admin.token === undefined && isLoopback(configured.server.host) && !configured.server.trust_proxy
    ? randomBytes(24).toString("base64url")
    : undefined
  const config = oneTimeToken === undefined ? configured : { ...configured, admin: { ...configured.admin, token: oneTimeToken } }
  const announce = Layer.effectDiscard(
    HttpServer.addressFormattedWith((formatted) => {
      const address = config.server.tls ? formatted.replace("http://", "https://") : formatted
      return Effect.andThen(
        Effect.log(`modelgate listening on ${address}`),
        oneTimeToken === undefined
          ? config.admin.token === undefined ? Effect.void : Effect.log(`admin app: ${address}/app`)
          // Printed whatever the log level: without it the admin app cannot be opened.
          : Console.log(noticeLine(
            config.log.format,
            "INFO",
            `admin app: ${address}/app, sign in with this one-time admin token (valid until the process stops; ` +
              `set admin.token or MODELGATE_ADMIN_TOKEN to choose a lasting one): ${oneTimeToken}`,
            {
              message: "admin app: sign in with this one-time admin token (valid until the process stops; " +
                "set admin.token or MODELGATE_ADMIN_TOKEN to choose a lasting one)",
              fields: { admin_app: `${address}/app`, one_time_admin_token: oneTimeToken }
            }
          ))
      )
    })
  )
  // A reload keeps the one-time admin token: the file never had one to reload.
  const reloadWithToken = reload === undefined || oneTimeToken === undefined
    ? reload
    : Effect.map(reload, (next) => next.admin.token === undefined ? { ...next, admin: { ...next.admin, token: oneTimeToken } } : next)
  const launched = Layer.mergeAll(announce, reloadOnSighup).pipe(
    Layer.provideMerge(gatewayLayer(config, { env, reload: reloadWithToken }))
  )
  return Layer.launch(launched).pipe(
    // The gateway's own layer applies these too; here they also cover the announcement.
    Effect.provide(loggingLayer(config))
  )
}
