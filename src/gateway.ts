/**
 * Wiring: config in, a served gateway out. This file only composes layers; behaviour lives in
 * the services and pipelines it names.
 */
import { MICROS_PER_CREDIT } from "./domain/money.ts"
import { Clock, Effect, Layer, Logger, Option, References } from "effect"
import { dirname } from "node:path"
import { HttpServer } from "effect/http"
import { coreLayer, type CoreOverrides, storeDeadlineLayer } from "./core.ts"
import { makeHttpApp } from "./http/app.ts"
import { BodyLimits } from "./http/body.ts"
import { makeForwarding } from "./http/forwarded.ts"
import { LOOPBACK_PROXIES } from "./domain/trusted-proxies.ts"
import { adminRoutes } from "./http/routes/admin.ts"
import { makeAdminAuth } from "./http/routes/admin-auth.ts"
import { adminOidcRoutes, START_PATH } from "./http/routes/admin-oidc.ts"
import { adminSubjectRoutes } from "./http/routes/admin-subjects.ts"
import { adminTeamRoutes } from "./http/routes/admin-teams.ts"
import { appRoutes } from "./http/routes/app.ts"
import { AdminThrottle } from "./services/limits/AdminThrottle.ts"
import { healthRoutes, metricsRoute } from "./http/routes/health.ts"
import { modelRoutes } from "./http/routes/models.ts"
import { completionRoutes } from "./http/routes/completions.ts"
import { AppConfig } from "./services/config/AppConfig.ts"
import { Providers, ProvidersSwitchSlot } from "./services/providers/Providers.ts"
import { Router } from "./services/routing/Router.ts"
import { Credits } from "./services/credits/Credits.ts"
import { RateLimiter } from "./services/limits/RateLimiter.ts"
import { RedisClient } from "./services/limits/RedisClient.ts"
import { StreamSlots } from "./services/limits/StreamSlots.ts"
import { TokenLimiter } from "./services/limits/TokenLimiter.ts"
import { LiveLimits } from "./services/limits/LiveLimits.ts"
import { McpSessions } from "./services/mcp/McpSessions.ts"
import { McpUpstreams } from "./services/mcp/McpUpstreams.ts"
import { StatelessMcp } from "./services/mcp/StatelessMcp.ts"
import { Connections } from "./services/sql/Connections.ts"
import { SqlDrivers } from "./services/sql/drivers/SqlDrivers.ts"
import { SqlTools } from "./services/sql/SqlTools.ts"
import { drainOnShutdown, layerNodeServer } from "./http/server.ts"
import { Drain } from "./pipelines/drain.ts"
import { Alerts } from "./services/alerts/Alerts.ts"
import { Audit } from "./services/audit/Audit.ts"
import { Metrics } from "./services/metrics/Metrics.ts"
import { SERVER_INFO } from "./services/mcp/advertised.ts"
import { tracingLayer } from "./services/tracing/Tracing.ts"
import { Auth } from "./services/auth/Auth.ts"
import { ModelCatalog } from "./services/catalog/ModelCatalog.ts"
import { ConfigReload } from "./services/config/ConfigReload.ts"
import { adminReloadRoutes } from "./http/routes/admin-reload.ts"
import { openApiRoutes } from "./http/routes/openapi.ts"
import { changelogRoutes } from "./http/routes/changelog.ts"
import { withDeprecations } from "./http/deprecation.ts"
import type { ConfigInvalid } from "./services/config/load.ts"
import { IdentityTokens } from "./services/identity/IdentityTokens.ts"
import type { GatewayConfig } from "./services/config/schema.ts"
import { AuditRepo } from "./services/store/AuditRepo.ts"
import { TokenEstimator } from "./services/tokens/TokenEstimator.ts"
import { StoredResponses } from "./services/responses/StoredResponses.ts"
import { flatJsonLineLogger, prettyLineLogger } from "./services/logging/formats.ts"

/** Layers a test (or an embedding) may swap for its own; everything else is derived from config. */
export interface GatewayOverrides extends CoreOverrides {
  /** The provider clients (for example `scriptedProviders` from services/providers/scripted.ts). */
  readonly providers?: Layer.Layer<Providers> | undefined
  /** Rate limiter, tokens-per-minute limiter and stream slots together. */
  readonly limits?: Layer.Layer<RateLimiter | StreamSlots | TokenLimiter> | undefined
  /** The audit trail (for example `Audit.layerCollect()`); it may use the store. */
  readonly audit?: Layer.Layer<Audit, never, AuditRepo> | undefined
  /** The metrics registry (for example `Metrics.layerNoop`, the bench's ladder rung without metrics). */
  readonly metrics?: Layer.Layer<Metrics> | undefined
  /** Time for key expiry, rotation grace and session TTLs (for example a TestClock). */
  readonly clock?: Clock.Clock | undefined
  /** Where `api_key_env` names are looked up; main passes the process environment. */
  readonly env?: Readonly<Record<string, string | undefined>> | undefined
  /** Reads the configuration again as at start, for a reload (SIGHUP, POST /admin/reload); none: reloads are refused. */
  readonly reload?: Effect.Effect<GatewayConfig, ConfigInvalid> | undefined
}

/**
 * The origin browsers reach the gateway at, for the identity-provider redirect URI:
 * `admin.oidc.public_url`, else (loopback only, load.ts insists) the address the server bound.
 * Never a request's Host header: the client chooses that.
 */
const publicUrlOf = (config: GatewayConfig) =>
  Effect.map(HttpServer.HttpServer, (server) => {
    const configured = config.admin.oidc?.public_url
    if (configured !== undefined) return new URL(configured).origin
    const port = "port" in server.address ? server.address.port : config.server.port
    const host = config.server.host.includes(":") ? `[${config.server.host}]` : config.server.host
    return `${config.server.tls === undefined ? "http" : "https"}://${host}:${port}`
  })

/**
 * The admin sign-in's module (openid-client, and jose under it: about 60 modules), loaded only
 * when `admin.oidc` is configured.
 */
const loadAdminIdentity = Effect.promise(() => import("./services/admin-identity/AdminIdentity.ts"))

const adminIdentityLayer = (config: GatewayConfig) => {
  const settings = config.admin.oidc
  return settings === undefined ? Layer.empty : Layer.unwrap(Effect.map(loadAdminIdentity, (module) => module.AdminIdentity.layer(settings)))
}

/**
 * `server.trust_proxy` as the app applies it: the peers in `server.trusted_proxies` (loopback
 * when the list is empty: trust_proxy alone no longer means every peer, issue 31) are proxies.
 */
const forwardingOf = (config: GatewayConfig) =>
  config.server.trust_proxy
    ? makeForwarding(config.server.trusted_proxies.length > 0 ? config.server.trusted_proxies : LOOPBACK_PROXIES, config.server.trusted_hops)
    : undefined

export const httpLayer = (config: GatewayConfig) =>
  Layer.unwrap(Effect.gen(function*() {
    const options = {
      maxBodyBytes: config.limits.max_body_bytes,
      forwarding: forwardingOf(config),
      tls: config.server.tls !== undefined
    }
    // With trust_proxy every request but the probes arrives over HTTPS (app.ts refuses the rest),
    // so the admin cookies can be Secure and `__Host-` whoever the peer is.
    const secure = config.server.tls !== undefined || config.server.trust_proxy
    const identity = config.admin.oidc === undefined
      ? undefined
      : Option.getOrUndefined(yield* Effect.serviceOption((yield* loadAdminIdentity).AdminIdentity))
    const auth = makeAdminAuth({ token: config.admin.token, secure, identity })
    const publicUrl = identity === undefined ? undefined : yield* publicUrlOf(config)
    const signInRoutes = identity === undefined || publicUrl === undefined
      ? []
      : adminOidcRoutes({ auth, identity, token: config.admin.token, publicUrl, secure })
    const identityProvider = identity === undefined || publicUrl === undefined
      ? undefined
      : { name: identity.name, startUrl: `${publicUrl}${START_PATH}` }
    const routes = [
      ...healthRoutes(config.server.readiness_probe_ms),
      metricsRoute(config.telemetry.metrics_token),
      ...modelRoutes,
      ...completionRoutes,
      ...adminRoutes({ auth }),
      ...adminSubjectRoutes({ auth }),
      ...adminTeamRoutes({ auth }),
      ...adminReloadRoutes({ auth }),
      ...openApiRoutes(SERVER_INFO.version),
      ...changelogRoutes,
      ...appRoutes({ auth, identityProvider }),
      ...signInRoutes
    ]
    return HttpServer.serve(yield* makeHttpApp(withDeprecations(routes), options))
  }))

/**
 * Limits live in Redis when one is configured (every replica shares them, and an unreachable
 * Redis fails requests closed), otherwise in this process.
 */
export const limitsLayer = (config: GatewayConfig) => {
  if (config.redis === undefined) return Layer.mergeAll(RateLimiter.layerMemory, StreamSlots.layerMemory, TokenLimiter.layerMemory)
  // The lease is read at each acquire: a config reload's stream_lease_seconds applies to the next slot.
  const slots = Layer.unwrap(Effect.map(Effect.serviceOption(LiveLimits), (live) => {
    const fixed = `${config.limits.stream_lease_seconds} seconds` as const
    return StreamSlots.layerRedis({
      lease: Option.isNone(live) ? fixed : () => `${live.value.current().stream_lease_seconds} seconds` as const
    })
  }))
  return Layer.mergeAll(RateLimiter.layerRedis, slots, TokenLimiter.layerRedis).pipe(Layer.provideMerge(redisClientLayer(config, config.redis)))
}

/**
 * The Redis client, under `redis_timeouts`: one layer value per configuration, so the limits, the
 * admin throttle, routing and MCP sessions of one gateway share one client (a layer is built once
 * per value in a build; four values made four clients and four connections).
 */
const redisClientLayers = new WeakMap<GatewayConfig, Layer.Layer<RedisClient>>()
const redisClientLayer = (config: GatewayConfig, url: string): Layer.Layer<RedisClient> => {
  const known = redisClientLayers.get(config)
  if (known !== undefined) return known
  const layer = RedisClient.layer(url, { commandTimeoutMs: config.redis_timeouts.command_ms, connectTimeoutMs: config.redis_timeouts.connect_ms })
  redisClientLayers.set(config, layer)
  return layer
}

/** Failed admin-token attempts per client address: shared through Redis when there is one. */
export const adminThrottleLayer = (config: GatewayConfig) =>
  config.redis === undefined
    ? AdminThrottle.layerMemory()
    : AdminThrottle.layerRedis().pipe(Layer.provide(redisClientLayer(config, config.redis)))

/**
 * Routing's cooldowns (issue 20): shared through Redis when there is one, per process otherwise.
 * The strategy is read from AppConfig at each pick, so a reload's applies to the next one.
 */
export const routerLayer = (config: GatewayConfig) =>
  config.redis === undefined
    ? Router.layer
    : Router.layer.pipe(Layer.provide(redisClientLayer(config, config.redis)))

/**
 * Where spool files go: `server.data_dir`, else the SQLite store's directory, else ./data for a
 * Postgres store; none for an in-memory store (nothing outlives the process there anyway).
 */
export const dataDirOf = (config: GatewayConfig): string | undefined => {
  if (config.server.data_dir !== undefined) return config.server.data_dir
  if (!config.store.startsWith("sqlite:")) return "./data"
  const file = config.store.slice("sqlite:".length)
  return file === "" || file === ":memory:" ? undefined : dirname(file)
}

/**
 * What a config reload replaces (the model catalog, the provider clients, the limits, the
 * identity-provider issuers and policies) and the reload itself; under the request services,
 * which read them. The configuration AppConfig shows (routing, count_tokens, responses, ...) is
 * replaced through its switch, provided further down with AppConfig.
 */
const reloadableLayer = (config: GatewayConfig, overrides: GatewayOverrides) => {
  const slot = Layer.succeed(ProvidersSwitchSlot, ProvidersSwitchSlot.make())
  const parts = Layer.mergeAll(
    ModelCatalog.layerReloadable(config),
    overrides.providers ?? Providers.layer(config.providers, overrides.env ?? {}),
    LiveLimits.layer(config.limits),
    IdentityTokens.layer(config.auth.oidc)
  ).pipe(Layer.provideMerge(slot))
  return ConfigReload.layer(config, overrides.reload).pipe(Layer.provideMerge(parts))
}

export const gatewayLayer = (config: GatewayConfig, overrides: GatewayOverrides = {}) => {
  const dataDir = dataDirOf(config)
  const audit = overrides.audit ??
    Audit.makeLayer({ flushInterval: config.audit.flush_interval_ms, batchSize: config.audit.batch_size, dataDir })
  const requestServices = Layer.mergeAll(
    overrides.limits ?? limitsLayer(config),
    adminThrottleLayer(config),
    Credits.layer({
      leaseSeconds: config.credits.reservation_lease_seconds,
      blockSize: config.credits.block_size * MICROS_PER_CREDIT,
      commitTimeoutMs: config.store_timeouts.commit_ms,
      dataDir
    }),
    StatelessMcp.layer.pipe(Layer.provideMerge(SqlTools.layer.pipe(Layer.provideMerge(SqlDrivers.layer)))),
    // With Redis, a session's cancellation reaches the replica running the request it names.
    config.redis === undefined
      ? McpSessions.layer(config.mcp.session_ttl_seconds)
      : McpSessions.layer(config.mcp.session_ttl_seconds).pipe(Layer.provide(redisClientLayer(config, config.redis))),
    McpUpstreams.layer(config.mcp.servers, overrides.env ?? {}),
    Auth.layer,
    adminIdentityLayer(config),
    TokenEstimator.layer,
    StoredResponses.layer,
    routerLayer(config),
    Layer.succeed(BodyLimits, { timeoutMs: config.server.body_timeout_ms, maxJsonDepth: config.limits.max_json_depth }),
    Drain.layer
  ).pipe(
    // Under the rest: the credits' group commit tells it what budgets now hold.
    Layer.provideMerge(Alerts.layer(config.alerts)),
    // Under the rest: admission, authentication and the limiter read what a reload replaces.
    Layer.provideMerge(reloadableLayer(config, overrides)),
    // Under the rest: the credit sweep records what it refunds, and the audit trail is flushed
    // (or spooled) after everything that appends to it has stopped.
    Layer.provideMerge(audit),
    // Under the rest: every store call of the request services and their background fibers sees its deadline.
    Layer.provideMerge(Layer.mergeAll(Connections.layer(config.connections), AppConfig.layerReloadable(config), storeDeadlineLayer(config))),
    Layer.provideMerge(coreLayer(config, overrides))
  )
  const server = layerNodeServer({
    host: config.server.host,
    port: config.server.port,
    tls: config.server.tls,
    shutdownGraceSeconds: config.server.shutdown_grace_seconds,
    headersTimeoutMs: config.server.headers_timeout_ms,
    bodyTimeoutMs: config.server.body_timeout_ms,
    keepAliveTimeoutMs: config.server.keep_alive_timeout_ms,
    maxConnectionsPerClient: config.server.max_connections_per_client
  })
  const gateway = drainOnShutdown(config.server.shutdown_grace_seconds).pipe(
    Layer.provideMerge(httpLayer(config)),
    Layer.provideMerge(server),
    Layer.provideMerge(requestServices)
  )
  const observed = gateway.pipe(
    // Under everything that makes spans, so its exporter sends the last of them after they ended.
    Layer.provideMerge(tracingLayer(config.telemetry, SERVER_INFO.version)),
    // At the bottom: the Redis client, the provider clients, the audit writer and the trace exporter count into it.
    Layer.provideMerge(overrides.metrics ?? Metrics.layer)
  )
  const logged = Layer.provide(observed, loggingLayer(config))
  return overrides.clock === undefined ? logged : Layer.provide(logged, Layer.succeed(Clock.Clock, overrides.clock))
}

const LOG_LEVELS = { debug: "Debug", info: "Info", warn: "Warn", error: "Error", none: "None" } as const

/**
 * `log.level` and `log.format` for everything the gateway runs, request fibers included (the
 * server's handlers run with the context it was built in), so an embedded gateway honours them too.
 */
export const loggingLayer = (config: GatewayConfig) =>
  Layer.mergeAll(
    Layer.succeed(References.MinimumLogLevel, LOG_LEVELS[config.log.level]),
    // One flat JSON object a line for log collectors; the default stays readable in a terminal.
    // Either way one line per log call, written once per event-loop turn (services/logging).
    Logger.layer([config.log.format === "json" ? flatJsonLineLogger : prettyLineLogger])
  )
