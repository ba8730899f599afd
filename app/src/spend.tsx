/**
 * Spend (issue 33): what the gateway's requests cost, per UTC day, by team, key, model and end
 * user, and the top spenders of the range; in money next to credits when `credits.currency` is
 * configured. Everything comes from `GET /usage` (the audit trail's totals); the CSV link is the
 * same report as a file.
 */
import { BarController, BarElement, CategoryScale, Chart, Legend, LinearScale, Tooltip } from "chart.js"
import { useEffect, useRef, useState } from "preact/hooks"
import { api, KEY_CHOICES, type KeyView, type ModelView, query, type UsageReport, type UsageRow } from "./api.ts"
import { Empty, Field, FormError, fmtNumber, PageHead, valueOf } from "./ui.tsx"

Chart.register(BarController, BarElement, CategoryScale, LinearScale, Legend, Tooltip)

type Dimension = "team" | "key" | "model" | "end_user"
const DIMENSIONS: ReadonlyArray<{ readonly dimension: Dimension; readonly label: string }> = [
  { dimension: "team", label: "team" },
  { dimension: "key", label: "key" },
  { dimension: "model", label: "model" },
  { dimension: "end_user", label: "end user" }
]
const column = (d: Dimension) => (d === "team" ? "team_id" : d === "key" ? "key_id" : d) as "team_id" | "key_id" | "model" | "end_user"

// Colour-blind-safe palette (Okabe-Ito), as on the Usage page.
const palette = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#6B6B00", "#000000"]
const OTHER_COLOUR = "#6B7280"
const TOP = 10

const isoDay = (date: Date) => date.toISOString().slice(0, 10)
const addDays = (day: string, n: number) => isoDay(new Date(Date.parse(`${day}T00:00:00Z`) + n * 86_400_000))
const daysBetween = (from: string, to: string) => {
  const days: Array<string> = []
  for (let d = from; d <= to && days.length < 400; d = addDays(d, 1)) days.push(d)
  return days
}

/** The measure a row is charted and ranked by: its cost when a currency is set, else its credits. */
const spendOf = (row: UsageRow, money: boolean) => (money ? row.cost?.amount ?? 0 : row.credits)

interface Series {
  label: string
  values: Array<number>
  colour: string
}

/** One series per group over the days, zero-filled; the top 7 by total, then "other". */
const seriesOf = (rows: Array<UsageRow>, days: Array<string>, money: boolean, nameOf: (r: UsageRow) => string): Array<Series> => {
  const index = new Map(days.map((d, i) => [d, i]))
  const byGroup = new Map<string, Array<number>>()
  for (const row of rows) {
    const i = index.get(row.day ?? "")
    if (i === undefined) continue
    const name = nameOf(row)
    const values = byGroup.get(name) ?? days.map(() => 0)
    values[i] = (values[i] ?? 0) + spendOf(row, money)
    byGroup.set(name, values)
  }
  const total = (v: Array<number>) => v.reduce((a, b) => a + b, 0)
  const sorted = [...byGroup.entries()].sort((a, b) => total(b[1]) - total(a[1]) || a[0].localeCompare(b[0]))
  const colours = new Map([...byGroup.keys()].sort().map((g, i) => [g, palette[i % palette.length]!]))
  const top = sorted.slice(0, 7).map(([label, values]) => ({ label, values, colour: colours.get(label)! }))
  const rest = sorted.slice(7)
  if (rest.length > 0) top.push({ label: "other", values: days.map((_, i) => rest.reduce((sum, [, v]) => sum + (v[i] ?? 0), 0)), colour: OTHER_COLOUR })
  return top
}

const SpendChart = (props: { title: string; days: Array<string>; series: Array<Series>; format: (n: number) => string }) => {
  const canvas = useRef<HTMLCanvasElement>(null)
  useEffect(() => {
    if (!canvas.current) return
    const chart = new Chart(canvas.current, {
      type: "bar",
      data: {
        labels: props.days.map((d) => d.slice(5)),
        datasets: props.series.map((s) => ({ label: s.label, data: s.values, backgroundColor: s.colour, borderWidth: 0 }))
      },
      options: {
        animation: false,
        responsive: true,
        maintainAspectRatio: false,
        plugins: { legend: { display: props.series.length > 0, position: "bottom" } },
        scales: {
          x: { stacked: true, ticks: { color: "#374151" }, grid: { display: false } },
          y: { stacked: true, beginAtZero: true, ticks: { color: "#374151" } }
        }
      }
    })
    return () => chart.destroy()
  }, [props.days, props.series])
  const total = props.series.reduce((sum, s) => sum + s.values.reduce((a, b) => a + b, 0), 0)
  return (
    <figure class="card chart" data-series={props.series.map((s) => s.label).join(";")}>
      <figcaption>{props.title}</figcaption>
      <div class="chart-box">
        <canvas
          ref={canvas}
          role="img"
          aria-label={`${props.title}: ${props.format(total)} in total from ${props.days[0]} to ${props.days[props.days.length - 1]}; the tables below have the top spenders`}
        />
      </div>
    </figure>
  )
}

interface Data {
  currency: UsageReport["currency"]
  byDay: Record<Dimension, Array<UsageRow>>
  totals: Record<Dimension, Array<UsageRow>>
}

export const SpendPage = () => {
  const today = isoDay(new Date())
  const [from, setFrom] = useState(addDays(today, -29))
  const [to, setTo] = useState(today)
  const [range, setRange] = useState({ from: addDays(today, -29), to: today })
  const [data, setData] = useState<Data>()
  const [keys, setKeys] = useState<Array<KeyView>>([])
  const [teams, setTeams] = useState<Array<{ id: string; name: string }>>([])
  const [catalogue, setCatalogue] = useState<Array<ModelView>>([])
  const [error, setError] = useState<string>()

  useEffect(() => {
    void api<{ data: Array<KeyView> }>("GET", KEY_CHOICES).then((k) => setKeys(k.data), () => {})
    void api<{ data: Array<{ id: string; name: string }> }>("GET", "/teams?limit=1000").then((t) => setTeams(t.data), () => {})
    void api<{ data: Array<ModelView> }>("GET", "/models").then((m) => setCatalogue(m.data), () => {})
  }, [])
  const window = { since: `${range.from}T00:00:00Z`, until: `${addDays(range.to, 1)}T00:00:00Z` }
  useEffect(() => {
    const get = (groupBy: string) => api<UsageReport>("GET", `/usage${query({ ...window, group_by: groupBy, limit: 100000 })}`)
    setError(undefined)
    // Requests without a key (the admin API, unknown keys) cost nothing and are left out.
    const keyed = (report: UsageReport) => report.data.filter((r) => r.key_id !== null)
    Promise.all(DIMENSIONS.map(({ dimension }) => get(dimension === "key" ? "day,key" : `day,key,${dimension}`))).then(
      (reports) => {
        const byDay = Object.fromEntries(DIMENSIONS.map(({ dimension }, i) => [dimension, keyed(reports[i]!)])) as Record<Dimension, Array<UsageRow>>
        // Totals per group over the range, from the day rows (one request per dimension, not two).
        const totals = Object.fromEntries(DIMENSIONS.map(({ dimension }) => {
          const sums = new Map<string, UsageRow>()
          for (const row of byDay[dimension]) {
            const id = (row[column(dimension)] ?? "") as string
            const seen = sums.get(id)
            sums.set(id, seen === undefined ? { ...row, day: undefined } : {
              ...seen,
              requests: seen.requests + row.requests,
              errors: seen.errors + row.errors,
              prompt_tokens: seen.prompt_tokens + row.prompt_tokens,
              completion_tokens: seen.completion_tokens + row.completion_tokens,
              credits: Math.round((seen.credits + row.credits) * 1e6) / 1e6,
              ...(seen.cost && row.cost ? { cost: { amount: Math.round((seen.cost.amount + row.cost.amount) * 1e6) / 1e6, currency: seen.cost.currency } } : {})
            })
          }
          return [dimension, [...sums.values()].sort((a, b) => b.credits - a.credits).slice(0, TOP)]
        })) as Record<Dimension, Array<UsageRow>>
        setData({ currency: reports[0]!.currency, byDay, totals })
      },
      (e) => setError(e instanceof Error ? e.message : String(e))
    )
  }, [range])

  const money = data?.currency != null
  const moneyFormat = data?.currency ? new Intl.NumberFormat(undefined, { style: "currency", currency: data.currency.code, maximumFractionDigits: 4 }) : undefined
  const fmtCredits = (n: number) => n.toLocaleString(undefined, { maximumFractionDigits: 6 })
  const fmtSpend = (n: number) => (moneyFormat ? moneyFormat.format(n) : `${fmtCredits(n)} credits`)
  const keyName = (id: string | null | undefined) => (id ? keys.find((k) => k.id === id)?.name ?? id : "no key")
  const teamName = (id: string | null | undefined) => (id ? teams.find((t) => t.id === id)?.name ?? id : "no team")
  const modelName = (model: string | null | undefined) =>
    model ? catalogue.find((m) => m.name === model)?.name ?? catalogue.find((m) => m.id === model)?.name ?? model : "no model"
  const nameOf = (dimension: Dimension) => (row: UsageRow): string => {
    switch (dimension) {
      case "team":
        return teamName(row.team_id)
      case "key":
        return keyName(row.key_id)
      case "model":
        return modelName(row.model)
      case "end_user":
        return row.end_user ?? "not named"
    }
  }
  const days = daysBetween(range.from, range.to)
  const csv = `/usage${query({ ...window, group_by: "day,team,key,model,end_user", format: "csv", limit: 100000 })}`

  return (
    <section>
      <PageHead title="Spend" />
      <form
        class="filters"
        aria-label="Date range"
        onSubmit={(e) => {
          e.preventDefault()
          if (from > to) return setError("The start date must not be after the end date.")
          if (daysBetween(from, to).length > 366) return setError("Choose at most 366 days.")
          setRange({ from, to })
        }}
      >
        <Field label="From (UTC day)">{(id) => <input id={id} type="date" value={from} max={to} onInput={(e) => setFrom(valueOf(e))} />}</Field>
        <Field label="To (UTC day)">{(id) => <input id={id} type="date" value={to} min={from} onInput={(e) => setTo(valueOf(e))} />}</Field>
        <button type="submit">Show</button>
        <a class="button" href={csv} download="usage.csv">Download CSV</a>
      </form>
      <FormError message={error} />
      <p class="muted">
        {data?.currency
          ? `Spend in ${data.currency.code} at ${data.currency.per_credit} per credit (credits.currency), by UTC day.`
          : "Spend in credits, by UTC day. Set credits.currency in the configuration to see it in money."}
      </p>
      {data === undefined ? <p aria-busy="true">Loading…</p> : (
        <>
          <div class="charts">
            {DIMENSIONS.map(({ dimension, label }) => (
              <SpendChart
                key={dimension}
                title={`Spend per day by ${label}`}
                days={days}
                series={seriesOf(data.byDay[dimension], days, money, nameOf(dimension))}
                format={fmtSpend}
              />
            ))}
          </div>
          {DIMENSIONS.map(({ dimension, label }) => (
            <div key={dimension}>
              <h2>Top spenders by {label}</h2>
              {data.totals[dimension].length === 0 ? <Empty>No requests in this range.</Empty> : (
                <div class="table-wrap">
                  <table class="cards" aria-label={`Top spenders by ${label}`}>
                    <thead>
                      <tr>
                        <th scope="col">{label[0]!.toUpperCase() + label.slice(1)}</th>
                        <th scope="col" class="num">Requests</th>
                        <th scope="col" class="num">Input tokens</th>
                        <th scope="col" class="num">Output tokens</th>
                        <th scope="col" class="num">Credits</th>
                        {money && <th scope="col" class="num">Cost</th>}
                      </tr>
                    </thead>
                    <tbody>
                      {data.totals[dimension].map((r) => (
                        <tr key={String(r[column(dimension)])}>
                          <th scope="row" data-label={label}>{nameOf(dimension)(r)}</th>
                          <td data-label="Requests" class="num">{fmtNumber(r.requests)}</td>
                          <td data-label="Input tokens" class="num">{fmtNumber(r.prompt_tokens)}</td>
                          <td data-label="Output tokens" class="num">{fmtNumber(r.completion_tokens)}</td>
                          <td data-label="Credits" class="num">{fmtCredits(r.credits)}</td>
                          {money && <td data-label="Cost" class="num">{moneyFormat!.format(r.cost?.amount ?? 0)}</td>}
                        </tr>
                      ))}
                    </tbody>
                  </table>
                </div>
              )}
            </div>
          ))}
        </>
      )}
    </section>
  )
}
