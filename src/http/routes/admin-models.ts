/**
 * `GET /models/routing` (issue 31): every configured model and `match:` route with its price,
 * cap and fallbacks, and per deployment what routing knows of it: requests in flight, the
 * decayed time to first byte, whether it cools down, why and until when, and its recent
 * attempts and errors. The admin app's Models page reads it; an operator asking "why is this
 * model slow or failing" starts here rather than in /metrics.
 *
 * Whose view: cooldowns are every replica's when Redis answers within REDIS_DEADLINE_MS (they are
 * shared there), else this replica's alone (`cooldowns` says which); in-flight counts, latency
 * and recent counts are always those of the replica that answers (`replica`). Provider secrets
 * never appear: a deployment names its provider and the provider's kind, nothing else of its config.
 */
import { Effect } from "effect"
import { json } from "../../pipelines/respond.ts"
import { type Deployment, ModelCatalog } from "../../services/catalog/ModelCatalog.ts"
import type { ProviderConfig } from "../../services/config/schema.ts"
import { AppConfig } from "../../services/config/AppConfig.ts"
import { type DeploymentStatus, REPLICA, Router } from "../../services/routing/Router.ts"

/** How long the page waits for Redis's cooldowns before answering with this replica's. */
const REDIS_DEADLINE_MS = 300
/** Upstream names shown per deployment of a `match:` route that sends the requested name. */
const SEEN_PER_ROUTE = 20

interface Row {
  readonly deployment: Deployment
  /** A `match:` route's deployment that sends the requested name and has not served one yet. */
  readonly unseen?: true
}

const view = (row: Row, status: DeploymentStatus, now: number) => ({
  key: row.unseen ? null : row.deployment.key,
  provider: row.deployment.provider.name,
  provider_kind: row.deployment.provider.kind,
  // null: the name the client asked for (a `match:` route's deployment not used yet on this replica).
  upstream_id: row.unseen ? null : row.deployment.id,
  weight: row.deployment.weight,
  status: status.cooling_until === undefined ? "healthy" as const : "cooling" as const,
  cooldown: status.cooling_until === undefined ? null : {
    until: new Date(status.cooling_until).toISOString(),
    seconds_left: Math.max(0, Math.ceil((status.cooling_until - now) / 1000)),
    cause: status.cause
  },
  in_flight: status.in_flight,
  ttfb_seconds: status.ttfb_seconds === null ? null : Math.round(status.ttfb_seconds * 1000) / 1000,
  recent: status.recent
})

export const modelsRouting = Effect.gen(function*() {
  const catalog = yield* ModelCatalog
  const router = yield* Router
  const config = yield* AppConfig
  const providers = new Map<string, ProviderConfig>(config.providers.map((p) => [p.name, p]))
  const entries: Array<{ readonly head: Record<string, unknown>; readonly rows: ReadonlyArray<Row> }> = []

  for (const model of catalog.models) {
    const resolved = catalog.lookup(model.id)
    if (resolved === undefined) continue
    entries.push({
      head: {
        kind: "model",
        name: model.alias ?? model.id,
        id: model.id,
        alias: model.alias ?? null,
        match: null,
        display_name: model.display_name ?? null,
        endpoints: model.endpoints,
        credits: model.credits,
        max_tokens: model.max_tokens,
        fallbacks: model.fallbacks ?? []
      },
      rows: resolved.deployments.map((deployment) => ({ deployment }))
    })
  }

  for (const route of catalog.routes) {
    const rows: Array<Row> = []
    for (const spec of route.deployments ?? [{ provider: route.provider, weight: 1 }]) {
      const provider = providers.get(spec.provider)
      if (provider === undefined) continue
      const fixed = spec.id ?? route.id
      const deployment = (id: string): Deployment => ({ key: `${provider.name}/${id}`, provider, id, weight: spec.weight })
      if (fixed !== undefined) {
        rows.push({ deployment: deployment(fixed) })
        continue
      }
      // The route sends each requested name: its deployments are those this replica has served.
      const seen = router.seenIds(provider.name, SEEN_PER_ROUTE * 10)
        .filter((id) => catalog.lookup(id)?.route === route)
        .slice(0, SEEN_PER_ROUTE)
      if (seen.length === 0) rows.push({ deployment: deployment(""), unseen: true })
      for (const id of seen) rows.push({ deployment: deployment(id) })
    }
    entries.push({
      head: {
        kind: "route",
        name: route.match,
        id: route.id ?? null,
        alias: null,
        match: route.match,
        display_name: null,
        endpoints: route.endpoints,
        credits: route.credits,
        max_tokens: route.max_tokens,
        fallbacks: route.fallbacks ?? []
      },
      rows
    })
  }

  // One Redis round trip for every deployment of the page.
  const all = entries.flatMap((e) => e.rows.map((r) => r.deployment))
  const inspected = yield* router.inspect(all, REDIS_DEADLINE_MS)
  const now = Date.now()
  let i = 0
  const data = entries.map((entry) => ({
    ...entry.head,
    deployments: entry.rows.map((row) => view(row, inspected.deployments[i++]!, now))
  }))
  return json({
    replica: REPLICA,
    generated_at: new Date(now).toISOString(),
    cooldowns: inspected.cooldowns,
    data
  })
})
