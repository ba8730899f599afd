/** The benchmark's output: markdown tables with raw times next to their ratios to the direct baseline. */

export const ms = (value: number) => `${value.toFixed(3)} ms`
export const signedMs = (value: number) => `${value >= 0 ? "+" : "-"}${Math.abs(value).toFixed(3)} ms`
export const us = (value: number) => `${value >= 0 ? "" : "-"}${Math.abs(value).toFixed(1)} µs`
export const ratio = (value: number) => `${value.toFixed(2)}x`
export const rps = (value: number) => Math.round(value).toLocaleString("en-US")
export const mib = (value: number | undefined) => (value === undefined ? "n/a" : `${value.toFixed(1)} MiB`)
const cpu = (value: number) => (Number.isNaN(value) ? "n/a" : ms(value))

export const table = (header: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>): string => {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)))
  const line = (cells: ReadonlyArray<string>) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(" | ")} |`
  return [line(header), `|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`, ...rows.map(line)].join("\n")
}

export const section = (title: string, body: string, notes: ReadonlyArray<string> = []) =>
  [`## ${title}`, "", body, ...(notes.length > 0 ? ["", ...notes] : []), ""].join("\n")

// ---------------------------------------------------------------------------------------------
// Measured values

export interface LatencyStats {
  readonly samples: number
  readonly p50: number
  readonly p99: number
  /** Median time to the first body byte. */
  readonly firstP50: number
  /** ms of CPU the server behind the target used per request (NaN when not metered). */
  readonly cpuPerRequest: number
}

export interface Throughput {
  /** Mean requests per second over the windows, and the slowest and fastest window. */
  readonly mean: number
  readonly min: number
  readonly max: number
  readonly cpuPerRequest: number
}

export interface LatencyRow {
  readonly name: string
  readonly direct: LatencyStats
  readonly gateway: LatencyStats
}

export interface ThroughputRow {
  readonly name: string
  readonly direct: Throughput
  readonly gateway: Throughput
}

export interface StreamRow extends LatencyRow {
  readonly chunks: number
}

export const addedP50 = (r: { readonly direct: LatencyStats; readonly gateway: LatencyStats }) => r.gateway.p50 - r.direct.p50
export const addedP99 = (r: { readonly direct: LatencyStats; readonly gateway: LatencyStats }) => r.gateway.p99 - r.direct.p99

// ---------------------------------------------------------------------------------------------
// Tables

export const latencyTable = (rows: ReadonlyArray<LatencyRow>) =>
  table(
    [
      "scenario",
      "samples",
      "direct p50",
      "gateway p50",
      "added p50",
      "ratio p50",
      "direct p99",
      "gateway p99",
      "added p99",
      "ratio p99",
      "gateway CPU/req"
    ],
    rows.map((r) => [
      r.name,
      String(r.gateway.samples),
      ms(r.direct.p50),
      ms(r.gateway.p50),
      signedMs(addedP50(r)),
      ratio(r.gateway.p50 / r.direct.p50),
      ms(r.direct.p99),
      ms(r.gateway.p99),
      signedMs(addedP99(r)),
      ratio(r.gateway.p99 / r.direct.p99),
      cpu(r.gateway.cpuPerRequest)
    ])
  )

const range = (t: Throughput) => `${rps(t.min)}-${rps(t.max)}`

export const throughputTable = (rows: ReadonlyArray<ThroughputRow>) =>
  table(
    [
      "scenario",
      "direct req/s",
      "gateway req/s",
      "gateway / direct",
      "direct windows",
      "gateway windows",
      "upstream CPU/req (direct)",
      "gateway CPU/req"
    ],
    rows.map((r) => [
      r.name,
      rps(r.direct.mean),
      rps(r.gateway.mean),
      ratio(r.gateway.mean / r.direct.mean),
      range(r.direct),
      range(r.gateway),
      cpu(r.direct.cpuPerRequest),
      cpu(r.gateway.cpuPerRequest)
    ])
  )

export const addedPerChunkUs = (r: StreamRow) => (addedP50(r) * 1000) / r.chunks

export const streamTable = (rows: ReadonlyArray<StreamRow>) =>
  table(
    [
      "scenario",
      "chunks",
      "samples",
      "direct p50",
      "gateway p50",
      "added p50",
      "ratio",
      "added per chunk",
      "added first byte p50",
      "added p99",
      "gateway CPU/req"
    ],
    rows.map((r) => [
      r.name,
      String(r.chunks),
      String(r.gateway.samples),
      ms(r.direct.p50),
      ms(r.gateway.p50),
      signedMs(addedP50(r)),
      ratio(r.gateway.p50 / r.direct.p50),
      us(addedPerChunkUs(r)),
      signedMs(r.gateway.firstP50 - r.direct.firstP50),
      signedMs(addedP99(r)),
      cpu(r.gateway.cpuPerRequest)
    ])
  )

/** The first row is the baseline the others are compared with. */
export const startupTable = (
  rows: ReadonlyArray<{ command: string; runs: number; wallMs: number; cpuMs: number; rssMiB: number; exitCode: number | null }>
) =>
  table(
    ["command", "runs", "wall (median)", "CPU (median)", "RSS (median)", "exit"],
    rows.map((r) => [r.command, String(r.runs), ms(r.wallMs), ms(r.cpuMs), mib(r.rssMiB), r.exitCode === null ? "-" : String(r.exitCode)])
  )

export interface Goal {
  readonly name: string
  readonly pass: boolean
  readonly measured: string
}

export const goalLine = (goal: Goal) => `${goal.pass ? "PASS" : "MISS"}  ${goal.name}: ${goal.measured}`
