/**
 * The accumulating counters and histograms (issue 38) render exactly what prom-client's own would
 * for the same calls: same series, order, labels and values, so `/metrics` did not change.
 */
import { Counter, Histogram, Registry } from "prom-client"
import { describe, expect, it } from "vitest"
import { AccumulatingCounter, AccumulatingHistogram } from "../../../src/services/metrics/accumulating.ts"

const BUCKETS = [0.01, 0.1, 1, 10]

/** A deterministic stream of label sets and values (a small linear congruential generator). */
const calls = (n: number) => {
  let seed = 7
  const next = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648
  return Array.from({ length: n }, () => ({ route: ["/a", "/b", "/c\"quoted\""][Math.floor(next() * 3)]!, status: String(200 + Math.floor(next() * 3)), value: next() * 20 }))
}

describe("accumulating metrics", () => {
  it("render the same exposition as prom-client's counter and histogram for the same calls", async () => {
    const theirs = new Registry()
    const ours = new Registry()
    const counter = new Counter({ name: "t_requests_total", help: "requests", labelNames: ["route", "status"], registers: [theirs] })
    const histogram = new Histogram({ name: "t_seconds", help: "time", labelNames: ["route"], buckets: BUCKETS, registers: [theirs] })
    const fastCounter = new AccumulatingCounter("t_requests_total", "requests", ["route", "status"], ours)
    const fastHistogram = new AccumulatingHistogram("t_seconds", "time", ["route"], BUCKETS, ours)
    // Made before any call: a series at zero.
    counter.labels("/zero", "200").inc(0)
    fastCounter.labels("/zero", "200").inc(0)
    for (const call of calls(500)) {
      counter.labels(call.route, call.status).inc(call.value)
      fastCounter.labels(call.route, call.status).inc(call.value)
      histogram.labels(call.route).observe(call.value)
      fastHistogram.labels(call.route).observe(call.value)
    }
    // Exactly on a bound, and past the last one.
    for (const value of [0.01, 1, 10, 11]) {
      histogram.labels("/edge").observe(value)
      fastHistogram.labels("/edge").observe(value)
    }
    expect(await ours.metrics()).toBe(await theirs.metrics())
  })

  it("refuses what prom-client refuses at the call, and reset zeroes the series the callers still hold", async () => {
    const registry = new Registry()
    const counter = new AccumulatingCounter("t_total", "t", ["k"], registry)
    const histogram = new AccumulatingHistogram("t_seconds", "t", ["k"], BUCKETS, registry)
    const child = counter.labels("a")
    expect(() => child.inc(-1)).toThrow(/cannot go down/)
    expect(() => child.inc(Number.NaN)).toThrow(/finite/)
    expect(() => histogram.labels("a").observe(Number.POSITIVE_INFINITY)).toThrow(/finite/)
    expect(() => counter.labels("a", "b")).toThrow(/label values/)
    child.inc(3)
    histogram.labels("a").observe(0.5)
    registry.resetMetrics()
    child.inc(2)
    const text = await registry.metrics()
    expect(text).toContain('t_total{k="a"} 2')
    expect(text).toContain('t_seconds_count{k="a"} 0')
  })
})
