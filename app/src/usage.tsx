/**
 * Usage: requests, errors, tokens and credits per UTC day, for the whole workspace, per key, per
 * model and per provider (the one that answered: a routed model spreads over deployments), as
 * charts (Chart.js, bundled) and as a table, over a chosen date range.
 */
import { BarController, BarElement, CategoryScale, Chart, Legend, LinearScale, Tooltip } from "chart.js"
import { useEffect, useRef, useState } from "preact/hooks"
import { api, KEY_CHOICES, type KeyView, type ModelView, query, type UsageRow } from "./api.ts"
import { Empty, Field, FormError, fmtNumber, PageHead, valueOf } from "./ui.tsx"

Chart.register(BarController, BarElement, CategoryScale, LinearScale, Legend, Tooltip)

type Metric = "requests" | "errors" | "tokens" | "credits"
const metricLabels: Record<Metric, string> = { requests: "Requests", errors: "Errors", tokens: "Tokens", credits: "Credits" }
const valueFor = (row: UsageRow, metric: Metric) =>
  metric === "tokens" ? row.prompt_tokens + row.completion_tokens : row[metric]

// Colour-blind-safe palette (Okabe-Ito), each dark enough against white for bar edges.
const palette = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#6B6B00", "#000000"]

const isoDay = (date: Date) => date.toISOString().slice(0, 10)
const addDays = (day: string, n: number) => isoDay(new Date(Date.parse(`${day}T00:00:00Z`) + n * 86_400_000))
const daysBetween = (from: string, to: string) => {
  const days: Array<string> = []
  for (let d = from; d <= to && days.length < 400; d = addDays(d, 1)) days.push(d)
  return days
}

interface Series {
  label: string
  values: Array<number>
  /** Fixed per series for the page's data, whatever the measure: a key keeps its colour. */
  colour: string
}

const OTHER_COLOUR = "#6B7280"

/** A colour per group, from the groups' names alone (sorted), so switching the measure keeps them. */
const coloursFor = (groups: Iterable<string>): Map<string, string> =>
  new Map([...new Set(groups)].sort().map((g, i) => [g, palette[i % palette.length]!]))

const BarChart = (props: { title: string; days: Array<string>; series: Array<Series>; stacked: boolean; metric: Metric }) => {
  const canvas = useRef<HTMLCanvasElement>(null)
  useEffect(() => {
    if (!canvas.current) return
    const chart = new Chart(canvas.current, {
      type: "bar",
      data: {
        labels: props.days.map((d) => d.slice(5)),
        datasets: props.series.map((s) => ({
          label: s.label,
          data: s.values,
          backgroundColor: s.colour,
          borderWidth: 0
        }))
      },
      options: {
        animation: false,
        responsive: true,
        maintainAspectRatio: false,
        plugins: { legend: { display: props.series.length > 1, position: "bottom" } },
        scales: {
          x: { stacked: props.stacked, ticks: { color: "#374151" }, grid: { display: false } },
          y: { stacked: props.stacked, beginAtZero: true, ticks: { color: "#374151", precision: 0 } }
        }
      }
    })
    return () => chart.destroy()
  }, [props.days, props.series, props.stacked])
  const total = props.series.reduce((sum, s) => sum + s.values.reduce((a, b) => a + b, 0), 0)
  return (
    // data-series names each series' colour, for a check that it does not change with the measure.
    <figure class="card chart" data-series={props.series.map((s) => `${s.label}=${s.colour}`).join(";")}>
      <figcaption>{props.title}</figcaption>
      <div class="chart-box">
        <canvas
          ref={canvas}
          role="img"
          aria-label={`${props.title}: ${fmtNumber(total)} ${metricLabels[props.metric].toLowerCase()} in total from ${props.days[0]} to ${props.days[props.days.length - 1]}; the table below has the numbers`}
        />
      </div>
    </figure>
  )
}

/** One series per group value (key or model), zero-filled over the range; the top 7 and "other". */
const seriesBy = (rows: Array<UsageRow>, days: Array<string>, metric: Metric, groupOf: (r: UsageRow) => string): Array<Series> => {
  const colours = coloursFor(rows.map(groupOf))
  const index = new Map(days.map((d, i) => [d, i]))
  const byGroup = new Map<string, Array<number>>()
  for (const row of rows) {
    const i = index.get(row.day ?? "")
    if (i === undefined) continue
    const group = groupOf(row)
    const values = byGroup.get(group) ?? days.map(() => 0)
    values[i] = (values[i] ?? 0) + valueFor(row, metric)
    byGroup.set(group, values)
  }
  const sorted = [...byGroup.entries()].sort((a, b) => b[1].reduce((x, y) => x + y, 0) - a[1].reduce((x, y) => x + y, 0))
  const top = sorted.slice(0, 7).map(([label, values]) => ({ label, values, colour: colours.get(label)! }))
  const rest = sorted.slice(7)
  if (rest.length > 0) {
    top.push({ label: "other", values: days.map((_, i) => rest.reduce((sum, [, v]) => sum + (v[i] ?? 0), 0)), colour: OTHER_COLOUR })
  }
  return top
}

export const UsagePage = () => {
  const today = isoDay(new Date())
  const [from, setFrom] = useState(addDays(today, -13))
  const [to, setTo] = useState(today)
  const [range, setRange] = useState({ from: addDays(today, -13), to: today })
  const [metric, setMetric] = useState<Metric>("requests")
  const [data, setData] = useState<{ byKey: Array<UsageRow>; byModel: Array<UsageRow>; byProvider: Array<UsageRow>; totals: Array<UsageRow> }>()
  const [keys, setKeys] = useState<Array<KeyView>>([])
  const [catalogue, setCatalogue] = useState<Array<ModelView>>([])
  const [error, setError] = useState<string>()

  useEffect(() => {
    void api<{ data: Array<KeyView> }>("GET", KEY_CHOICES).then((k) => setKeys(k.data), () => {})
    void api<{ data: Array<ModelView> }>("GET", "/models").then((m) => setCatalogue(m.data), () => {})
  }, [])
  useEffect(() => {
    const window = { since: `${range.from}T00:00:00Z`, until: `${addDays(range.to, 1)}T00:00:00Z` }
    const get = (groupBy: string) => api<{ data: Array<UsageRow> }>("GET", `/usage${query({ ...window, group_by: groupBy })}`)
    setError(undefined)
    // Requests without a key (admin API calls, unknown keys) are not usage of the gateway's
    // models; they stay in the audit trail. Per-model rows come per key too, to drop those.
    const keyed = (rows: Array<UsageRow>) => rows.filter((r) => r.key_id !== null)
    Promise.all([get("day,key"), get("day,key,model"), get("key,model"), get("day,key,provider")]).then(
      ([byKey, byModel, totals, byProvider]) =>
        setData({ byKey: keyed(byKey.data), byModel: keyed(byModel.data), byProvider: keyed(byProvider.data), totals: keyed(totals.data) }),
      (e) => setError(e instanceof Error ? e.message : String(e))
    )
  }, [range])

  const keyName = (id: string | null | undefined) => (id ? keys.find((k) => k.id === id)?.name ?? id : "no key")
  // Records hold the upstream model id; the key form and the ledger say the configured name, so this page does too.
  const modelName = (model: string | null | undefined) =>
    model ? catalogue.find((m) => m.name === model)?.name ?? catalogue.find((m) => m.id === model)?.name ?? model : "no model"
  const days = daysBetween(range.from, range.to)
  const workspace = data ? seriesBy(data.byKey, days, metric, () => "workspace") : []
  const perKey = data ? seriesBy(data.byKey, days, metric, (r) => keyName(r.key_id)) : []
  const perModel = data ? seriesBy(data.byModel, days, metric, (r) => modelName(r.model)) : []
  const perProvider = data ? seriesBy(data.byProvider, days, metric, (r) => r.provider ?? "no provider") : []

  return (
    <section>
      <PageHead title="Usage" />
      <form
        class="filters"
        aria-label="Date range"
        onSubmit={(e) => {
          e.preventDefault()
          if (from > to) return setError("The start date must not be after the end date.")
          setRange({ from, to })
        }}
      >
        <Field label="From (UTC day)">{(id) => <input id={id} type="date" value={from} max={to} onInput={(e) => setFrom(valueOf(e))} />}</Field>
        <Field label="To (UTC day)">{(id) => <input id={id} type="date" value={to} min={from} onInput={(e) => setTo(valueOf(e))} />}</Field>
        <button type="submit">Show</button>
        <Field label="Measure">
          {(id) => (
            <select id={id} value={metric} onChange={(e) => setMetric(valueOf(e) as Metric)}>
              {(Object.keys(metricLabels) as Array<Metric>).map((m) => <option key={m} value={m}>{metricLabels[m]}</option>)}
            </select>
          )}
        </Field>
      </form>
      <FormError message={error} />
      <p class="muted">Requests made with an API key, by UTC day. Calls without a key (the admin API, unknown keys) are in the audit trail.</p>
      {data === undefined ? <p aria-busy="true">Loading…</p> : (
        <>
          <div class="charts">
            <BarChart title={`${metricLabels[metric]} per day, workspace`} days={days} series={workspace} stacked={false} metric={metric} />
            <BarChart title={`${metricLabels[metric]} per day, by key`} days={days} series={perKey} stacked metric={metric} />
            <BarChart title={`${metricLabels[metric]} per day, by model`} days={days} series={perModel} stacked metric={metric} />
            <BarChart title={`${metricLabels[metric]} per day, by provider`} days={days} series={perProvider} stacked metric={metric} />
          </div>
          <h2>Totals by key and model</h2>
          {data.totals.length === 0 ? <Empty>No requests in this range.</Empty> : (
            <div class="table-wrap">
              <table class="cards" aria-label="Usage totals by key and model">
                <thead>
                  <tr>
                    <th scope="col">Key</th><th scope="col">Model</th><th scope="col" class="num">Requests</th>
                    <th scope="col" class="num">Errors</th><th scope="col" class="num">Prompt tokens</th>
                    <th scope="col" class="num">Completion tokens</th><th scope="col" class="num">Credits</th>
                  </tr>
                </thead>
                <tbody>
                  {data.totals.map((r) => (
                    <tr key={`${r.key_id}|${r.model}`}>
                      <th scope="row" data-label="Key">{keyName(r.key_id)}</th>
                      <td data-label="Model">{r.model ? modelName(r.model) : <span class="muted">none</span>}</td>
                      <td data-label="Requests" class="num">{fmtNumber(r.requests)}</td>
                      <td data-label="Errors" class="num">{fmtNumber(r.errors)}</td>
                      <td data-label="Prompt tokens" class="num">{fmtNumber(r.prompt_tokens)}</td>
                      <td data-label="Completion tokens" class="num">{fmtNumber(r.completion_tokens)}</td>
                      <td data-label="Credits" class="num">{fmtNumber(r.credits)}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
        </>
      )}
    </section>
  )
}
