/**
 * The load generator: plain async code over undici pools with keep-alive, kept as thin as
 * possible so that what it costs is small and the same for the direct and the gateway side.
 *
 * Every measurement interleaves its targets (direct, gateway, ...) in rounds whose order
 * rotates, so drift (CPU frequency, GC, the page cache, other processes) hits all sides alike.
 */
import { Pool } from "undici"

export interface Target {
  readonly label: string
  readonly pool: Pool
  readonly path: string
  readonly headers: Record<string, string>
  /** Absent for a GET (`method`). */
  readonly body?: string
  /** POST unless given. */
  readonly method?: "GET" | "POST"
  /** The status every answer must have (200 unless given): a refusal's own cost is measured with its status. */
  readonly status?: number
  /** CPU time (ms) used so far by the server process behind this target, to charge it per request. */
  readonly cpuMs?: () => number
}

export interface Sample {
  /** Request sent to last body byte read, ms. */
  readonly total: number
  /** Request sent to first body byte read, ms. */
  readonly first: number
}

export const makePool = (origin: string, connections: number) =>
  new Pool(origin, { connections, pipelining: 1, keepAliveTimeout: 60_000, keepAliveMaxTimeout: 600_000 })

/** One request, body read to the end; anything but a 200 stops the benchmark with the answer. */
export const send = async (target: Target): Promise<Sample> => {
  const start = performance.now()
  const { statusCode, body } = await target.pool.request({
    method: target.method ?? "POST",
    path: target.path,
    headers: target.headers,
    body: target.body
  })
  if (statusCode !== (target.status ?? 200)) {
    const text = await body.text()
    throw new Error(`${target.label}: HTTP ${statusCode}: ${text.slice(0, 500)}`)
  }
  let first = -1
  for await (const _chunk of body) {
    if (first < 0) first = performance.now() - start
  }
  const total = performance.now() - start
  return { total, first: first < 0 ? total : first }
}

/** The whole body as text, to check once per scenario that each side answers what it should. */
export const fetchText = async (target: Target): Promise<string> => {
  const { statusCode, body } = await target.pool.request({
    method: target.method ?? "POST",
    path: target.path,
    headers: target.headers,
    body: target.body
  })
  const text = await body.text()
  if (statusCode !== (target.status ?? 200)) throw new Error(`${target.label}: HTTP ${statusCode}: ${text.slice(0, 500)}`)
  return text
}

const rotated = <A>(items: ReadonlyArray<A>, by: number): ReadonlyArray<A> => {
  const k = by % items.length
  return [...items.slice(k), ...items.slice(0, k)]
}

/**
 * Requests each target gets before its CPU per request is measured. A gateway's CPU per request
 * keeps falling for its first ten thousand requests or so (V8 optimizes the request path function
 * by function as each gets hot), so a short warm-up measured a process by how much traffic it
 * had seen: in one run a gateway serving one target of fifteen read 452 µs per free request
 * where another serving four of them read 291 to 315 µs for the same request, and a second of
 * load before each window did not close the gap (.scratch/solo.ts, issue 38). The cost ladder's
 * lone rungs (the floor servers, the gateway without audit or metrics, Postgres, tracing, the
 * logged one) each had a process of their own and read high against the rungs that share one.
 */
export const WARM_REQUESTS = 10_000

/** Untimed traffic so that JIT, pools and caches are warm before any sample counts. */
export const warmUp = async (targets: ReadonlyArray<Target>, requests: number, concurrency: number) => {
  for (const target of targets) {
    let left = requests
    await Promise.all(Array.from({ length: concurrency }, async () => {
      while (left-- > 0) await send(target)
    }))
  }
}

/**
 * Server CPU time per request of one target, batch by batch. What a batch measured is reported as
 * the median over the batches: on a shared machine one window in a few runs slow (a neighbour's
 * burst, a collection of the old generation landing in it), and a sum over the windows let that
 * one window move the whole row (issue 38).
 */
class CpuMeter {
  private cpu = 0
  private requests = 0
  private readonly batches: Array<number> = []
  private readonly read: (() => number) | undefined
  constructor(read: (() => number) | undefined) {
    this.read = read
  }
  async around(batch: () => Promise<number>) {
    const before = this.read?.() ?? 0
    const requests = await batch()
    const cpu = (this.read?.() ?? 0) - before
    this.cpu += cpu
    this.requests += requests
    if (requests > 0) this.batches.push(cpu / requests)
  }
  /** ms of server CPU per request (the median of the batches'), NaN when the target has no meter. */
  perRequest() {
    if (this.read === undefined) return Number.NaN
    return this.batches.length >= 3 ? median(this.batches) : this.cpu / this.requests
  }
}

export interface LatencyResult {
  readonly samples: ReadonlyArray<Sample>
  readonly cpuPerRequest: number
}

/** Sequential requests (concurrency 1): `rounds` rounds of `perRound` requests per target. */
export const latencyRounds = async (
  targets: ReadonlyArray<Target>,
  options: { readonly rounds: number; readonly perRound: number }
): Promise<Map<string, LatencyResult>> => {
  const samples = new Map(targets.map((t) => [t.label, [] as Array<Sample>]))
  const meters = new Map(targets.map((t) => [t.label, new CpuMeter(t.cpuMs)]))
  for (let round = 0; round < options.rounds; round++) {
    for (const target of rotated(targets, round)) {
      const into = samples.get(target.label)!
      await meters.get(target.label)!.around(async () => {
        for (let i = 0; i < options.perRound; i++) into.push(await send(target))
        return options.perRound
      })
    }
  }
  return new Map(targets.map((t) => [t.label, { samples: samples.get(t.label)!, cpuPerRequest: meters.get(t.label)!.perRequest() }]))
}

/**
 * Closed-loop throughput: `concurrency` workers each send back to back for `windowMs`; the rate
 * is completed requests over the time until the last one finished. One rate per window.
 */
export interface ThroughputResult {
  /** Requests per second, one per window. */
  readonly rates: ReadonlyArray<number>
  readonly cpuPerRequest: number
}

export const throughputWindows = async (
  targets: ReadonlyArray<Target>,
  options: { readonly windows: number; readonly windowMs: number; readonly concurrency: number }
): Promise<Map<string, ThroughputResult>> => {
  const rates = new Map(targets.map((t) => [t.label, [] as Array<number>]))
  const meters = new Map(targets.map((t) => [t.label, new CpuMeter(t.cpuMs)]))
  for (let window = 0; window < options.windows; window++) {
    for (const target of rotated(targets, window)) {
      await meters.get(target.label)!.around(async () => {
        const start = performance.now()
        const deadline = start + options.windowMs
        let completed = 0
        await Promise.all(Array.from({ length: options.concurrency }, async () => {
          while (performance.now() < deadline) {
            await send(target)
            completed++
          }
        }))
        rates.get(target.label)!.push((completed * 1000) / (performance.now() - start))
        return completed
      })
    }
  }
  return new Map(targets.map((t) => [t.label, { rates: rates.get(t.label)!, cpuPerRequest: meters.get(t.label)!.perRequest() }]))
}

// ---------------------------------------------------------------------------------------------
// Statistics

/** Nearest-rank percentile (p in 0..100) of unsorted values. */
export const percentile = (values: ReadonlyArray<number>, p: number): number => {
  if (values.length === 0) return Number.NaN
  const sorted = [...values].sort((a, b) => a - b)
  const rank = Math.ceil((p / 100) * sorted.length)
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1]!
}

export const median = (values: ReadonlyArray<number>) => percentile(values, 50)

export const mean = (values: ReadonlyArray<number>) => values.reduce((a, b) => a + b, 0) / values.length
