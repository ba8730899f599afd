/**
 * Prometheus metrics (issue 16, `GET /metrics`). The per-request numbers come from one place:
 * the audit record each request ends with (`observe`), so the metrics and the audit trail never
 * disagree about what happened. Live values (open streams, the audit buffer) are read at scrape
 * time or kept by the code that owns them.
 *
 * prom-client rather than Effect's `Metric` + `PrometheusMetrics`: its updates are plain
 * synchronous calls, which the places that count need (the audit finalizer, Node callbacks in
 * the Redis client, the provider clients); a registry per gateway keeps several gateways in one
 * process (tests, replicas) apart; and Effect's Prometheus encoder is marked unstable.
 *
 * Cardinality is bounded: `route` is the matched route pattern (or `unmatched`), `status` and
 * `slug` come from fixed tables, `provider` from the config, and `model` is the configured name
 * a request was admitted to (a model's id, a route's pattern: never a client-chosen name), and
 * is still capped at MAX_MODELS distinct values, then `other`.
 * Label children are resolved once per combination and cached, so a request costs a few map
 * lookups and additions, no label objects. The per-request counters and histograms count in plain
 * fields (accumulating.ts) and render as prom-client's own would.
 */
import { fromMicros } from "../../domain/money.ts"
import * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { collectDefaultMetrics, Counter, Gauge, Registry } from "prom-client"
import { AccumulatingCounter, AccumulatingHistogram } from "./accumulating.ts"
import { VERSION } from "../../domain/version.ts"
import type { AuditRecord } from "../../domain/records.ts"
import { AUDIT_CREDIT_MICROS } from "../store/AuditRepo.ts"

export const UNMATCHED_ROUTE = "unmatched"
const countable = (value: number | null): value is number => typeof value === "number" && Number.isFinite(value) && value > 0
const MAX_MODELS = 200
/** Team labels (issue 33) are ids an admin created; still capped, then `other`. */
const MAX_TEAMS = 1000
const OTHER_TEAM = "other"
const OTHER_MODEL = "other"
/** Refusals counted on their own: what an operator tunes limits, budgets and credits by. */
const REFUSALS = ["rate_limited", "budget_exhausted", "insufficient_credits"] as const
export type Dependency = "store" | "redis" | "identity_provider"

type Observer = { readonly observe: (value: number) => void }
type GenAiOperation = "chat" | "embeddings" | "text_completion" | "moderations" | "count_tokens"

/** OpenTelemetry's `gen_ai.operation.name` of a model route (its pattern); its own name where none fits. */
const genAiOperationOf = (route: string): GenAiOperation =>
  route === "/v1/embeddings"
    ? "embeddings"
    : route === "/v1/completions"
    ? "text_completion"
    : route === "/v1/moderations"
    ? "moderations"
    : route.endsWith("/count_tokens")
    ? "count_tokens"
    : "chat"

const SECONDS_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300]

export interface MetricsShape {
  /**
   * Counts one finished request from its audit record; `route` is its pattern or UNMATCHED_ROUTE.
   * `model`: the configured name the request was admitted to (null: not admitted, no per-model
   * counts); absent, the record's model (callers outside the HTTP app).
   */
  readonly observe: (record: AuditRecord, route: string, model?: string | null) => void
  /** A streamed answer started; the returned function ends it (call once). */
  readonly streamOpened: () => () => void
  /** A recorder of upstream time to first byte (response headers) for one provider, resolved once. */
  readonly firstByteRecorder: (provider: string) => (seconds: number) => void
  readonly dependencyError: (dependency: Dependency) => void
  /** An upstream MCP server changed a pinned tool's definition (issue 37). */
  readonly mcpToolChanged: (server: string) => void
  /** Spans the trace exporter handed to the collector, or dropped (no room, or the collector did not take them). */
  readonly traceSpans: (outcome: "exported" | "dropped", count: number) => void
  /** One attempt on a deployment (issue 20) ended: it answered, failed (and cooled), or refused the request itself. */
  readonly routingAttempt: (deployment: string, provider: string, result: "answered" | "failed" | "refused") => void
  /** A deployment left the rotation for a cooldown. */
  readonly routingCooldown: (deployment: string, provider: string) => void
  /** Where the gauge of deployments cooling down reads them at scrape time. */
  readonly coolingSource: (read: () => ReadonlyArray<{ readonly deployment: string; readonly provider: string }>) => void
  /** The exposition text, after `refresh` set the values read at scrape time. */
  readonly render: (refresh: {
    readonly auditBuffered: number
    readonly auditDropped: number
    /** The credit pool as the store holds it (undefined: the store did not answer; its gauges are left out). */
    readonly pool?: { readonly workspace: string; readonly credits: number; readonly leased: number } | undefined
  }) => Effect.Effect<string>
  readonly contentType: string
}

type Child<T> = { readonly inc: (value?: number) => void } & T

export class Metrics extends Context.Service<Metrics, MetricsShape>()("modelgate/Metrics") {
  static readonly layer = Layer.sync(Metrics, () => makeMetrics())
  /** Counts nothing and renders an empty exposition: the bench's ladder rung without metrics. */
  static readonly layerNoop = Layer.succeed(Metrics, {
    observe: () => {},
    streamOpened: () => () => {},
    firstByteRecorder: () => () => {},
    dependencyError: () => {},
    mcpToolChanged: () => {},
    traceSpans: () => {},
    routingAttempt: () => {},
    routingCooldown: () => {},
    coolingSource: () => {},
    render: () => Effect.succeed(""),
    contentType: "text/plain; version=0.0.4; charset=utf-8"
  })
}

/**
 * prom-client writes a NaN sample as `Nan`, which the text format does not have (it is `NaN`):
 * Prometheus and promtool refuse the whole scrape. Node's event-loop-lag gauges are NaN while
 * their histogram holds no sample yet (a scrape within 10 ms of start or of the last scrape).
 */
export const exposition = (text: string): string => text.replace(/^([^#\n][^\n]*) Nan$/gm, "$1 NaN")

export const makeMetrics = (): MetricsShape => {
  const registry = new Registry()
  collectDefaultMetrics({ register: registry })
  // promtool's lint refuses a gauge whose name ends in _total (it reads as a counter): prom-client
  // adds one per active-resource gauge, each the sum of the labelled gauge of the same stem.
  for (const name of ["nodejs_active_resources_total", "nodejs_active_handles_total", "nodejs_active_requests_total"]) {
    registry.removeSingleMetric(name)
  }

  const requests = new AccumulatingCounter(
    "modelgate_requests_total",
    "Requests by matched route pattern, HTTP status and error slug (empty when none)",
    ["route", "status", "slug"],
    registry
  )
  const duration = new AccumulatingHistogram(
    "modelgate_request_duration_seconds",
    "Time from a request's arrival to its end (a stream's last frame), by route pattern",
    ["route"],
    SECONDS_BUCKETS,
    registry
  )
  const firstByte = new AccumulatingHistogram(
    "modelgate_upstream_first_byte_seconds",
    "Time from sending a request to a provider to its response headers, by provider",
    ["provider"],
    SECONDS_BUCKETS,
    registry
  )
  const tokens = new AccumulatingCounter(
    "modelgate_tokens_total",
    "Tokens by model, provider and direction (prompt or completion)",
    ["model", "provider", "direction"],
    registry
  )
  const credits = new AccumulatingCounter(
    "modelgate_credits_total",
    "Credits charged (after refunds) by model and provider",
    ["model", "provider"],
    registry
  )
  const refusals = new AccumulatingCounter(
    "modelgate_refusals_total",
    "Requests refused by a rate limit, a key budget or the credit pool",
    ["reason"],
    registry
  )
  const openStreams = new Gauge({
    name: "modelgate_open_streams",
    help: "Streamed answers in progress",
    registers: [registry]
  })
  const auditBuffered = new Gauge({
    name: "modelgate_audit_buffered_records",
    help: "Audit records waiting to be written to the store",
    registers: [registry]
  })
  const auditDropped = new Counter({
    name: "modelgate_audit_dropped_records_total",
    help: "Audit records dropped because the buffer was full (the store was down too long)",
    registers: [registry]
  })
  const dependencyErrors = new Counter({
    name: "modelgate_dependency_errors_total",
    help: "Failed calls to a dependency (store, redis, or an identity provider's keys)",
    labelNames: ["dependency"] as const,
    registers: [registry]
  })

  const mcpToolChanges = new Counter({
    name: "modelgate_mcp_tool_definition_changes_total",
    help: "Upstream MCP tools withheld because their definition changed from the pinned one, by server",
    labelNames: ["server"] as const,
    registers: [registry]
  })

  // OpenTelemetry's GenAI metrics (semantic conventions), with the buckets it advises; the
  // attributes become labels with dots as underscores, as its Prometheus mapping does.
  const genAiTokens = new AccumulatingHistogram(
    "gen_ai_client_token_usage",
    "Tokens used per model request (gen_ai.client.token.usage), by token type (input or output), operation, provider and model",
    ["gen_ai_token_type", "gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model"],
    [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864],
    registry
  )
  const genAiDuration = new AccumulatingHistogram(
    "gen_ai_server_request_duration_seconds",
    "Time a model request took, to its last byte (gen_ai.server.request.duration), by operation, provider, model and error type (empty when none)",
    ["gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model", "error_type"],
    [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92],
    registry
  )

  const traceSpans = new Counter({
    name: "modelgate_trace_spans_total",
    help: "Spans sent to the OTLP collector (exported) or dropped because it was down, slow or refused them",
    labelNames: ["outcome"] as const,
    registers: [registry]
  })

  // Children that exist from the start, so a scrape before any traffic shows them at 0.
  const atZero = <C extends Child<object>>(child: C): C => {
    child.inc(0)
    return child
  }
  const refusalChildren = new Map<string, Child<object>>(REFUSALS.map((reason) => [reason, atZero(refusals.labels(reason))]))
  const dependencyChildren: Record<Dependency, Child<object>> = {
    store: atZero(dependencyErrors.labels("store")),
    redis: atZero(dependencyErrors.labels("redis")),
    identity_provider: atZero(dependencyErrors.labels("identity_provider"))
  }

  const traceSpanChildren = { exported: atZero(traceSpans.labels("exported")), dropped: atZero(traceSpans.labels("dropped")) }

  interface RouteChildren {
    readonly duration: { readonly observe: (value: number) => void }
    /** status -> slug -> counter child */
    readonly requests: Map<number, Map<string, Child<object>>>
  }
  const routes = new Map<string, RouteChildren>()
  const routeChildren = (route: string): RouteChildren => {
    let children = routes.get(route)
    if (children === undefined) {
      children = { duration: duration.labels(route), requests: new Map() }
      routes.set(route, children)
    }
    return children
  }

  interface ModelChildren {
    readonly prompt: Child<object>
    readonly completion: Child<object>
    readonly credits: Child<object>
    /** By operation: the GenAI histograms' children (the duration's of requests without an error). */
    readonly genAi: Map<GenAiOperation, { readonly input: Observer; readonly output: Observer; readonly duration: Observer }>
  }
  const genAiChildren = (children: ModelChildren, model: string, provider: string, operation: GenAiOperation) => {
    let found = children.genAi.get(operation)
    if (found === undefined) {
      found = {
        input: genAiTokens.labels("input", operation, provider, model),
        output: genAiTokens.labels("output", operation, provider, model),
        duration: genAiDuration.labels(operation, provider, model, "")
      }
      children.genAi.set(operation, found)
    }
    return found
  }
  /** model -> provider -> children */
  const models = new Map<string, Map<string, ModelChildren>>()
  const modelChildren = (requested: string, provider: string): ModelChildren => {
    const model = models.has(requested) || models.size < MAX_MODELS ? requested : OTHER_MODEL
    let byProvider = models.get(model)
    if (byProvider === undefined) {
      byProvider = new Map()
      models.set(model, byProvider)
    }
    let children = byProvider.get(provider)
    if (children === undefined) {
      children = {
        prompt: tokens.labels(model, provider, "prompt"),
        completion: tokens.labels(model, provider, "completion"),
        credits: credits.labels(model, provider),
        genAi: new Map()
      }
      byProvider.set(provider, children)
    }
    return children
  }

  // Routing (issue 20): deployments come from the config, but a route without a fixed id makes
  // one per requested name, so they are capped like models.
  const attempts = new AccumulatingCounter(
    "modelgate_upstream_attempts_total",
    "Attempts on a deployment (provider/model id) by result: answered, failed (counted against it) or refused (the request's own fault)",
    ["deployment", "provider", "result"],
    registry
  )
  const cooldowns = new Counter({
    name: "modelgate_deployment_cooldowns_total",
    help: "Times a deployment left the rotation for a cooldown",
    labelNames: ["deployment", "provider"] as const,
    registers: [registry]
  })
  let readCooling: () => ReadonlyArray<{ readonly deployment: string; readonly provider: string }> = () => []
  const cappedDeployments = new Set<string>()
  /** Bounded with the deployment labels: at most MAX_MODELS + 1 deployments x providers x 3 results. */
  const attemptChildren = new Map<string, { readonly inc: () => void }>()
  const deploymentLabel = (deployment: string) => {
    if (cappedDeployments.has(deployment)) return deployment
    if (cappedDeployments.size >= MAX_MODELS) return OTHER_MODEL
    cappedDeployments.add(deployment)
    return deployment
  }
  new Gauge({
    name: "modelgate_deployments_cooling",
    help: "Deployments out of the rotation for a cooldown now, as this replica knows them",
    labelNames: ["deployment", "provider"] as const,
    registers: [registry],
    collect() {
      this.reset()
      for (const d of readCooling()) this.labels(deploymentLabel(d.deployment), d.provider).set(1)
    }
  })

  // Labelled by workspace so that a scrape whose store read failed can leave them out (an
  // unlabelled gauge always has a sample). Plain numbers: credits may be fractional one day.
  const poolCredits = new Gauge({
    name: "modelgate_workspace_credits",
    help: "Credits in the workspace pool, as the store holds them at scrape time (the same on every replica); a paid request is refused 402 when they run out",
    labelNames: ["workspace"] as const,
    registers: [registry]
  })
  const poolLeased = new Gauge({
    name: "modelgate_workspace_credits_leased",
    help: "Of modelgate_workspace_credits, the unspent part the replicas' blocks hold (spent by those replicas' requests first)",
    labelNames: ["workspace"] as const,
    registers: [registry]
  })

  // Spend per team (issue 33): the team id is the only label; keys and end users are left to
  // the spend reports (GET /usage), where they cost no series.
  const teamCredits = new AccumulatingCounter(
    "modelgate_team_credits_total",
    "Credits charged (after refunds) to requests of a team's keys, by team id, as this replica counted them",
    ["team"],
    registry
  )
  const teamRequests = new AccumulatingCounter(
    "modelgate_team_requests_total",
    "Requests made with a team's keys, by team id",
    ["team"],
    registry
  )
  const teams = new Map<string, { readonly credits: Child<object>; readonly requests: Child<object> }>()
  const teamChildren = (id: string) => {
    const team = teams.has(id) || teams.size < MAX_TEAMS ? id : OTHER_TEAM
    let children = teams.get(team)
    if (children === undefined) {
      children = { credits: atZero(teamCredits.labels(team)), requests: atZero(teamRequests.labels(team)) }
      teams.set(team, children)
    }
    return children
  }

  // Which build this process is (issue 40), the usual Prometheus *_build_info idiom: always 1,
  // the facts in its labels, so `count by (version) (modelgate_build_info)` shows a rollout.
  new Gauge({
    name: "modelgate_build_info",
    help: "Always 1; labelled with this process's modelgate release and Node version",
    labelNames: ["version", "node_version"] as const,
    registers: [registry]
  }).labels(VERSION, process.versions.node).set(1)

  let droppedSeen = 0

  return {
    observe: (record, route, admitted) => {
      const children = routeChildren(route)
      children.duration.observe(record.duration_ms / 1000)
      let bySlug = children.requests.get(record.status)
      if (bySlug === undefined) {
        bySlug = new Map()
        children.requests.set(record.status, bySlug)
      }
      const slug = record.error ?? ""
      let counter = bySlug.get(slug)
      if (counter === undefined) {
        counter = requests.labels(route, String(record.status), slug)
        bySlug.set(slug, counter)
      }
      counter.inc()
      if (record.error !== null) refusalChildren.get(record.error)?.inc()
      if (typeof record.team_id === "string") {
        const team = teamChildren(record.team_id)
        team.requests.inc()
        // Exact to the micro-credit: the counter holds a decimal number of credits.
        if (countable(record.credits)) team.credits.inc(record.credits * AUDIT_CREDIT_MICROS / 1_000_000)
      }
      const model = admitted === undefined ? record.model : admitted
      if (model !== null && record.provider !== null) {
        const usage = modelChildren(model, record.provider)
        // prom-client throws on a negative increment; counts are validated where they enter
        // (pipelines/model/usage.ts), and this keeps a bad one from ever breaking an answer.
        if (countable(record.prompt_tokens)) usage.prompt.inc(record.prompt_tokens)
        if (countable(record.completion_tokens)) usage.completion.inc(record.completion_tokens)
        // The record holds micro-credits (issue 33); the counter counts credits.
        if (countable(record.credits)) usage.credits.inc(fromMicros(record.credits))
        const operation = genAiOperationOf(route)
        const modelLabel = models.has(model) ? model : OTHER_MODEL
        const genAi = genAiChildren(usage, modelLabel, record.provider, operation)
        if (countable(record.prompt_tokens)) genAi.input.observe(record.prompt_tokens)
        if (countable(record.completion_tokens)) genAi.output.observe(record.completion_tokens)
        // Errors are few and their slugs a fixed table: their children are looked up, not cached.
        if (record.error === null) genAi.duration.observe(record.duration_ms / 1000)
        else genAiDuration.labels(operation, record.provider, modelLabel, record.error).observe(record.duration_ms / 1000)
      }
    },
    streamOpened: () => {
      openStreams.inc()
      let open = true
      return () => {
        if (!open) return
        open = false
        openStreams.dec()
      }
    },
    firstByteRecorder: (provider) => {
      const child = firstByte.labels(provider)
      return (seconds) => child.observe(seconds)
    },
    dependencyError: (dependency) => dependencyChildren[dependency].inc(),
    mcpToolChanged: (server) => mcpToolChanges.labels(server).inc(),
    traceSpans: (outcome, count) => traceSpanChildren[outcome].inc(count),
    routingAttempt: (deployment, provider, result) => {
      // Once per request: the child is resolved once per combination, like the request counters'.
      const label = deploymentLabel(deployment)
      const key = `${label}\u0000${provider}\u0000${result}`
      let child = attemptChildren.get(key)
      if (child === undefined) {
        child = attempts.labels(label, provider, result)
        attemptChildren.set(key, child)
      }
      child.inc()
    },
    routingCooldown: (deployment, provider) => cooldowns.labels(deploymentLabel(deployment), provider).inc(),
    coolingSource: (read) => {
      readCooling = read
    },
    render: (refresh) =>
      Effect.promise(() => {
        auditBuffered.set(refresh.auditBuffered)
        poolCredits.reset()
        poolLeased.reset()
        if (refresh.pool !== undefined) {
          poolCredits.labels(refresh.pool.workspace).set(fromMicros(refresh.pool.credits))
          poolLeased.labels(refresh.pool.workspace).set(fromMicros(refresh.pool.leased))
        }
        // The audit trail counts drops since start; the counter follows it.
        if (refresh.auditDropped > droppedSeen) {
          auditDropped.inc(refresh.auditDropped - droppedSeen)
          droppedSeen = refresh.auditDropped
        }
        return registry.metrics().then(exposition)
      }),
    contentType: registry.contentType
  }
}
