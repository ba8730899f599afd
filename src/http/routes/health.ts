/**
 * Health for load balancers and orchestrators, without authentication:
 * - `/healthz` is liveness: the process answers. No store round trip, nothing a client could abuse.
 * - `/readyz` is readiness: 503 `dependency_unavailable` while the store or Redis does not
 *   answer or the server is draining, so traffic goes to another replica; 200 otherwise, listing
 *   the deployments that cool down (`cooling`) when there are any. The dependencies are probed
 *   at most once per `server.readiness_probe_ms` (a second) per gateway; calls in between share
 *   the result.
 * - `/metrics` is the Prometheus exposition, behind `telemetry.metrics_token` when one is set.
 */
import { Duration, Effect, Option } from "effect"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import { DependencyUnavailable, Unauthorized } from "../../domain/errors.ts"
import { VERSION } from "../../domain/version.ts"
import { Drain } from "../../pipelines/drain.ts"
import { json } from "../../pipelines/respond.ts"
import { Audit } from "../../services/audit/Audit.ts"
import { AdminThrottle } from "../../services/limits/AdminThrottle.ts"
import { RedisClient } from "../../services/limits/RedisClient.ts"
import { CurrentRequest } from "../../pipelines/request.ts"
import { McpUpstreams } from "../../services/mcp/McpUpstreams.ts"
import { Metrics } from "../../services/metrics/Metrics.ts"
import { Router } from "../../services/routing/Router.ts"
import { CreditsRepo } from "../../services/store/CreditsRepo.ts"
import { route } from "../router.ts"
import { sameSecret } from "./admin-auth.ts"

/** A readiness probe must answer before the orchestrator's own timeout (often 1 s to a few). */
const PROBE_TIMEOUT = Duration.millis(1500)

/** Did the dependency answer within the probe timeout? Never fails. */
const answers = <A, E, R>(probe: Effect.Effect<A, E, R>, onError: () => void) =>
  probe.pipe(
    Effect.timeoutOption(PROBE_TIMEOUT),
    Effect.map(Option.isSome),
    Effect.orElseSucceed(() => false),
    Effect.tap((ok) => Effect.sync(() => ok || onError()))
  )

const probes = new WeakMap<object, { readonly expires: number; readonly result: Effect.Effect<readonly [boolean, boolean]> }>()

/** `probeMs`: how long one readiness probe's result answers /readyz. */
const readiness = (probeMs: number) => Effect.gen(function*() {
  const drain = yield* Effect.serviceOption(Drain)
  if (Option.isSome(drain) && drain.value.draining()) {
    return yield* new DependencyUnavailable({
      message: "the gateway is draining for a stop; send new requests to another replica",
      details: { dependency: "gateway", reason: "draining" }
    })
  }
  const store = yield* CreditsRepo
  const redis = yield* Effect.serviceOption(RedisClient)
  const metrics = yield* Effect.serviceOption(Metrics)
  const failed = (dependency: "store" | "redis") => () => Option.map(metrics, (m) => m.dependencyError(dependency))
  // One probe per gateway (its store) per `probeMs`: concurrent and later calls in that time
  // share its result, so unauthenticated /readyz traffic is not a store query and a Redis PING
  // each (an amplifier; issue 22). A probe in flight is shared, not repeated.
  const now = performance.now()
  let cached = probes.get(store)
  if (cached === undefined || now >= cached.expires) {
    const probe = Effect.all([
      answers(store.getWorkspace, failed("store")),
      Option.isNone(redis) ? Effect.succeed(true) : answers(redis.value.command(["PING"]), failed("redis"))
    ], { concurrency: "unbounded" })
    cached = { expires: now + probeMs, result: yield* Effect.cached(probe) }
    probes.set(store, cached)
  }
  const [storeUp, redisUp] = yield* cached.result
  const down = [...(storeUp ? [] : ["store"]), ...(redisUp ? [] : ["redis"])]
  if (down.length > 0) {
    return yield* new DependencyUnavailable({
      message: `not ready: ${down.join(" and ")} unreachable`,
      details: { dependency: down[0], unavailable: down }
    })
  }
  // Deployments out of the rotation (issue 20) do not make the gateway unready: it routes around them.
  const router = yield* Effect.serviceOption(Router)
  const cooling = Option.isSome(router) ? router.value.cooling() : []
  // Nor do upstream MCP servers that are down (issue 37): the rest of /v1/mcp still answers.
  const upstreams = yield* Effect.serviceOption(McpUpstreams)
  const mcpDown = Option.isSome(upstreams) ? (yield* upstreams.value.status).filter((s) => s.status === "down").map((s) => s.name) : []
  // The version tells an operator mid-upgrade which build each replica runs (issue 40).
  return json({
    status: "ready",
    version: VERSION,
    ...(cooling.length === 0 ? {} : { cooling }),
    ...(mcpDown.length === 0 ? {} : { mcp_servers_down: mcpDown })
  })
})

type PoolLevels = Effect.Success<CreditsRepo["Service"]["poolLevels"]>
const poolReads = new WeakMap<object, { readonly expires: number; readonly result: Effect.Effect<PoolLevels | undefined> }>()

/**
 * The credit pool as the store holds it now, for the gauges: every replica's scrape reads the
 * same row, so they agree (a cached copy per replica would not), and nothing is read on the
 * request path. Bounded like a readiness probe: a store that does not answer in time leaves the
 * gauges out of this scrape (an alert on them sees no data, not a false 0) and the scrape still
 * answers. Reads within a second share one query, so an open /metrics is no store amplifier.
 */
const poolLevels = Effect.gen(function*() {
  const store = yield* CreditsRepo
  const metrics = yield* Metrics
  const now = performance.now()
  let cached = poolReads.get(store)
  if (cached === undefined || cached.expires <= now) {
    const read = store.poolLevels.pipe(
      Effect.timeoutOption(PROBE_TIMEOUT),
      Effect.map(Option.getOrUndefined),
      Effect.orElseSucceed(() => undefined),
      Effect.tap((levels) => Effect.sync(() => levels === undefined && metrics.dependencyError("store")))
    )
    cached = { expires: now + 1000, result: yield* Effect.cached(read) }
    poolReads.set(store, cached)
  }
  return yield* cached.result
})

export const metricsRoute = (token: string | undefined) =>
  route(
    "GET",
    "/metrics",
    Effect.gen(function*() {
      if (token !== undefined) {
        const request = yield* HttpServerRequest
        const header = request.headers["authorization"] ?? ""
        const given = header.startsWith("Bearer ") ? header.slice("Bearer ".length) : ""
        // Guessing is throttled like the admin token (issue 22, finding 11), under its own count
        // so a misconfigured scraper cannot lock the operator out of the admin API.
        const throttle = yield* AdminThrottle
        const address = `metrics:${(yield* CurrentRequest).clientAddr ?? "unknown"}`
        yield* throttle.check(address)
        if (!sameSecret(given, token)) {
          if (request.headers["authorization"] !== undefined) yield* throttle.fail(address)
          return yield* new Unauthorized({
            message: "GET /metrics wants `Authorization: Bearer <telemetry.metrics_token>`",
            // No credential at all gets the bare challenge (RFC 6750 section 3.1), a wrong one names the error.
            missing: request.headers["authorization"] === undefined
          })
        }
      }
      const metrics = yield* Metrics
      const audit = yield* Audit
      const pool = yield* poolLevels
      const text = yield* metrics.render({ auditBuffered: audit.buffered(), auditDropped: audit.dropped(), pool })
      return HttpServerResponse.text(text, { contentType: metrics.contentType })
    })
  )

/**
 * Claude Code probes `HEAD /api/hello` on every start to see whether its base URL answers
 * (Anthropic's servers do): a 404 there is noise in its log and in ours. Like `/healthz`, it
 * says only that the process answers.
 */
const hello = Effect.succeed(json({ status: "ok" }))

export const healthRoutes = (readinessProbeMs: number) => [
  route("GET", "/healthz", Effect.succeed(json({ status: "ok" }))),
  route("GET", "/readyz", readiness(readinessProbeMs)),
  route("GET", "/api/hello", hello),
  route("HEAD", "/api/hello", hello)
]
