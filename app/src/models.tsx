/**
 * Models: every configured model and `match:` route with its price and deployments, and per
 * deployment what routing knows (`GET /models/routing`): cooling down until when and why, the
 * recent errors, requests in flight and time to first byte. Where an operator starts when a
 * model is slow or failing.
 */
import { useEffect, useState } from "preact/hooks"
import { api, type DeploymentRouting, type ModelRouting, type RecentCounts, type RoutingView } from "./api.ts"
import { Empty, FormError, fmtNumber, fmtTime, PageHead, Status } from "./ui.tsx"

/** Seconds between refreshes when auto-refresh is on. */
const AUTO_REFRESH_S = 10

/** HH:MM:SS in the browser's time zone. */
const clock = (iso: string) =>
  new Date(iso).toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23" })

const SOURCES: Record<RoutingView["cooldowns"], string> = {
  shared: "Cooldowns are every replica's (shared through Redis).",
  replica: "Cooldowns are this replica's (no Redis is configured, so each replica keeps its own).",
  replica_redis_unavailable: "Redis did not answer in time: cooldowns shown are this replica's only; other replicas may have more."
}

const plural = (n: number, one: string, many: string) => `${fmtNumber(n)} ${n === 1 ? one : many}`

/** A time to first byte: milliseconds under a second, else seconds. */
const duration = (seconds: number) => (seconds < 1 ? `${Math.round(seconds * 1000)} ms` : `${seconds.toFixed(2)} s`)

const percent = (part: number, whole: number) => (whole === 0 ? "0%" : `${Math.round((100 * part) / whole)}%`)

const DeploymentStatus = (props: { d: DeploymentRouting }) => {
  const { d } = props
  if (d.cooldown !== null) {
    return (
      <>
        <Status kind="bad">cooling down</Status>
        <div class="small status-why">
          until <time dateTime={d.cooldown.until} title={fmtTime(d.cooldown.until, true)}>{clock(d.cooldown.until)}</time>{" "}
          {d.cooldown.cause === null ? "(cause not known)" : <>because “<span class="cause">{d.cooldown.cause}</span>”</>}
        </div>
      </>
    )
  }
  if (d.key === null) return <Status kind="muted">not used yet</Status>
  const recent = d.recent?.last_5m
  if (recent !== undefined && recent.errors > 0) {
    return (
      <>
        <Status kind="warn">healthy, with errors</Status>
        <div class="small status-why">{fmtNumber(recent.errors)} of {plural(recent.attempts, "attempt", "attempts")} failed in 5 min ({percent(recent.errors, recent.attempts)})</div>
      </>
    )
  }
  return <Status kind="ok">healthy</Status>
}

const Counts = (props: { counts: RecentCounts | undefined }) => {
  const { counts } = props
  if (counts === undefined) return <span class="muted">not counted</span>
  const reasons = Object.entries(counts.by_error).sort((a, b) => b[1] - a[1])
  return (
    <>
      <span class="nowrap">{plural(counts.attempts, "attempt", "attempts")}, {plural(counts.errors, "error", "errors")}</span>
      {reasons.length > 0 && (
        <ul class="reasons">
          {reasons.map(([reason, n]) => <li key={reason}><span class="mono">{reason}</span>: {fmtNumber(n)}</li>)}
        </ul>
      )}
    </>
  )
}

const ModelCard = (props: { model: ModelRouting }) => {
  const { model } = props
  const title = model.kind === "route" ? `Route ${model.match}` : model.name
  return (
    <section class="card model-card" aria-label={title}>
      <h2>{title}</h2>
      <dl class="facts">
        {model.kind === "model" && model.alias !== null && <div><dt>Id</dt><dd class="mono">{model.id}</dd></div>}
        {model.kind === "route" && <div><dt>Sends</dt><dd>{model.id === null ? "the requested name" : <span class="mono">{model.id}</span>}</dd></div>}
        <div><dt>Price</dt><dd>{plural(model.credits, "credit", "credits")} a request</dd></div>
        <div><dt>Max tokens</dt><dd>{fmtNumber(model.max_tokens)}</dd></div>
        <div><dt>Serves</dt><dd>{model.endpoints.join(", ")}</dd></div>
        <div><dt>Fallbacks</dt><dd>{model.fallbacks.length === 0 ? "none" : model.fallbacks.join(", ")}</dd></div>
      </dl>
      <div class="table-wrap">
        <table class="cards" aria-label={`Deployments of ${title}`}>
          <thead>
            <tr>
              <th scope="col">Deployment</th><th scope="col">Status</th><th scope="col" class="num">Weight</th>
              <th scope="col" class="num">In flight</th><th scope="col" class="num">First byte</th>
              <th scope="col">Last 5 min</th><th scope="col">Last 60 min</th>
            </tr>
          </thead>
          <tbody>
            {model.deployments.map((d, i) => (
              <tr key={d.key ?? `${d.provider}-${i}`} data-deployment={d.key ?? ""}>
                <th scope="row" data-label="Deployment">
                  {d.provider} <span class="muted small">({d.provider_kind})</span>
                  {d.upstream_id === null ? <div class="muted small">the requested name</div> : <div class="mono small">{d.upstream_id}</div>}
                </th>
                <td data-label="Status"><DeploymentStatus d={d} /></td>
                <td data-label="Weight" class="num">{d.weight}</td>
                <td data-label="In flight" class="num">{fmtNumber(d.in_flight)}</td>
                <td data-label="First byte" class="num">{d.ttfb_seconds === null ? <span class="muted">—</span> : duration(d.ttfb_seconds)}</td>
                <td data-label="Last 5 min"><Counts counts={d.recent?.last_5m} /></td>
                <td data-label="Last 60 min"><Counts counts={d.recent?.last_60m} /></td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </section>
  )
}

export const ModelsPage = () => {
  const [view, setView] = useState<RoutingView>()
  const [error, setError] = useState<string>()
  const [busy, setBusy] = useState(false)
  const [auto, setAuto] = useState(false)

  const load = async () => {
    setBusy(true)
    try {
      setView(await api<RoutingView>("GET", "/models/routing"))
      setError(undefined)
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e))
    } finally {
      setBusy(false)
    }
  }
  useEffect(() => {
    void load()
  }, [])
  useEffect(() => {
    if (!auto) return
    const timer = setInterval(() => void load(), AUTO_REFRESH_S * 1000)
    return () => clearInterval(timer)
  }, [auto])

  return (
    <section>
      <PageHead title="Models">
        <label class="check">
          <input type="checkbox" checked={auto} onChange={(e) => setAuto(e.currentTarget.checked)} />
          Refresh every {AUTO_REFRESH_S} s
        </label>
        <button type="button" onClick={() => void load()} disabled={busy}>{busy ? "Refreshing…" : "Refresh"}</button>
      </PageHead>
      <FormError message={error} />
      {view === undefined ? <p aria-busy="true">Loading…</p> : (
        <>
          <p class="muted" data-testid="routing-source">
            {SOURCES[view.cooldowns]} In flight, first byte and error counts are replica <span class="mono">{view.replica}</span>'s
            (each replica counts its own). Updated <time dateTime={view.generated_at}>{clock(view.generated_at)}</time>.
          </p>
          {view.data.length === 0 ? <Empty>No models are configured.</Empty> : (
            <div class="stack">
              {view.data.map((m) => <ModelCard key={`${m.kind}:${m.name}`} model={m} />)}
            </div>
          )}
        </>
      )}
    </section>
  )
}
