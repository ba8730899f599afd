/**
 * Paid requests across replicas (issue 14, item 4): the same closed-loop load of paid chat
 * completions (1 credit each; with and without a request budget) against one gateway process,
 * then against three gateway processes on the same Postgres store and Redis, and against one
 * SQLite gateway. Reports requests per second and the gateways' CPU time per paid request (user +
 * system of every gateway process, summed): on a machine with fewer cores than processes the
 * throughput saturates, and CPU per request is the figure that says whether replicas scale. The
 * idle CPU of the processes (timers, lease renewals, polls), measured before the load, is also
 * subtracted in a second column: on a busy machine the throughput is low and it weighs a lot.
 *
 *   node bench/replicas.ts [--quick] [--concurrency 48 | --per-gateway 16] [--only sqlite|postgres]
 *
 * `--concurrency`: that many workers in all, spread over the gateways (3 replicas then share the
 * load one had); `--per-gateway`: that many per gateway (each process sees the same load).
 *
 * Kept apart from bench/run.ts (its own scenario, its own output) so the two evolve separately.
 */
import { loadavg } from "node:os"
import { makePool, send, type Target, warmUp } from "./load.ts"
import {
  checkRedis,
  cleanupAll,
  createKey,
  createPostgresDatabase,
  cpuTimeMs,
  deleteRedisKeysOf,
  type Gateway,
  installSignalHandlers,
  onCleanup,
  REDIS_URL,
  startGateway,
  startUpstream,
  stopping,
  tempDir
} from "./processes.ts"

const args = process.argv.slice(2)
const flag = (name: string) => args.includes(name)
const option = (name: string) => {
  const i = args.indexOf(name)
  return i >= 0 ? args[i + 1] : undefined
}
const QUICK = flag("--quick")
const CONCURRENCY = Number(option("--concurrency") ?? 48)
/** Instead: this many workers per gateway, so each process sees the same load whatever their number. */
const PER_GATEWAY = option("--per-gateway") === undefined ? undefined : Number(option("--per-gateway"))
const workersFor = (gateways: number) => PER_GATEWAY === undefined ? CONCURRENCY : PER_GATEWAY * gateways
const ONLY = option("--only")
const WINDOWS = QUICK ? 2 : 5
const WINDOW_MS = QUICK ? 1_000 : 3_000
const UPSTREAM_KEY = "sk-bench-upstream"

const bodyFor = (model: string) => JSON.stringify({ model, max_tokens: 64, messages: [{ role: "user", content: "Say hello to the benchmark." }] })

const gatewayConfig = (upstream: string, store: string, redis?: string) => ({
  server: { host: "127.0.0.1" },
  store,
  ...(redis === undefined ? {} : { redis }),
  workspace: { credits: 1_000_000_000 },
  limits: { requests_per_minute: 50, concurrent_streams: 5 },
  providers: [{ name: "up", kind: "openai", base_url: `${upstream}/d0/n1/v1`, api_key: UPSTREAM_KEY }],
  models: [
    { id: "bench", provider: "up", credits: 1, max_tokens: 4096 },
    // The same request with nothing written to the store: what more processes cost by themselves.
    { id: "bench-free", provider: "up", credits: 0, max_tokens: 4096 }
  ]
})

const UNLIMITED = { requests_per_minute: 1_000_000, concurrent_streams: 1_000 }
const PAID_KEY = { name: "bench-paid", limits: UNLIMITED }
const BUDGET_KEY = { name: "bench-paid-budget", budget: { max_requests: 1_000_000_000 }, limits: UNLIMITED }

interface Result {
  readonly rps: ReadonlyArray<number>
  /** Gateway CPU per request, ms, all measured gateway processes summed. */
  readonly cpuPerRequest: number
  /** The same, less what the processes burn when idle (timers, lease renewals, polls) over the same time. */
  readonly netCpuPerRequest: number
}

interface Scenario {
  readonly name: string
  readonly gateways: ReadonlyArray<Gateway>
  readonly key: string
  readonly model?: string
}

const targetsOf = (scenario: Scenario): Array<Target> =>
  scenario.gateways.map((g) => ({
    label: g.url,
    pool: makePool(g.url, Math.ceil(workersFor(scenario.gateways.length) / scenario.gateways.length)),
    path: "/v1/chat/completions",
    headers: { "content-type": "application/json", authorization: `Bearer ${scenario.key}` },
    body: bodyFor(scenario.model ?? "bench")
  }))

const cpuOf = (gateways: ReadonlyArray<Gateway>) => gateways.reduce((sum, g) => sum + cpuTimeMs(g.pid), 0)

/** CPU ms per second the gateways use with no traffic at all. */
const idleCpuRate = async (gateways: ReadonlyArray<Gateway>) => {
  const before = cpuOf(gateways)
  const start = performance.now()
  await new Promise((r) => setTimeout(r, QUICK ? 1_000 : 3_000))
  return (cpuOf(gateways) - before) / ((performance.now() - start) / 1000)
}

/**
 * Closed loop: `concurrency` workers spread over a scenario's gateways (worker i sends to gateway i
 * mod n). The scenarios' windows are interleaved (window w runs every scenario once, in an order
 * that rotates), so drift on a shared machine hits them alike.
 */
const measure = async (scenarios: ReadonlyArray<Scenario>): Promise<Map<string, Result>> => {
  const all = [...new Set(scenarios.flatMap((s) => s.gateways))]
  const targets = new Map(scenarios.map((s) => [s.name, targetsOf(s)]))
  try {
    // Every gateway warm (JIT, pools, caches) before anything counts.
    for (const scenario of scenarios) await warmUp(targets.get(scenario.name)!, QUICK ? 300 : 1_500, 8)
    const idle = await idleCpuRate(all)
    const acc = new Map(scenarios.map((s) => [s.name, { rps: [] as Array<number>, cpu: 0, idle: 0, requests: 0 }]))
    for (let window = 0; window < WINDOWS; window++) {
      const k = window % scenarios.length
      for (const scenario of [...scenarios.slice(k), ...scenarios.slice(0, k)]) {
        const into = acc.get(scenario.name)!
        const list = targets.get(scenario.name)!
        const before = cpuOf(scenario.gateways)
        const start = performance.now()
        const deadline = start + WINDOW_MS
        let completed = 0
        await Promise.all(Array.from({ length: workersFor(list.length) }, async (_, worker) => {
          const target = list[worker % list.length]!
          while (performance.now() < deadline) {
            await send(target)
            completed++
          }
        }))
        const seconds = (performance.now() - start) / 1000
        into.rps.push(completed / seconds)
        into.cpu += cpuOf(scenario.gateways) - before
        into.idle += (idle * scenario.gateways.length / all.length) * seconds
        into.requests += completed
      }
    }
    return new Map([...acc].map(([name, a]) => [name, { rps: a.rps, cpuPerRequest: a.cpu / a.requests, netCpuPerRequest: (a.cpu - a.idle) / a.requests }]))
  } finally {
    await Promise.all([...targets.values()].flat().map((t) => t.pool.close()))
  }
}

const mean = (xs: ReadonlyArray<number>) => xs.reduce((a, b) => a + b, 0) / xs.length
const rows: Array<[string, string, string, string, string]> = []
const record = (name: string, result: Result, base?: Result) => {
  const rps = mean(result.rps)
  rows.push([
    name,
    `${Math.round(rps).toLocaleString("en-US")} (${Math.round(Math.min(...result.rps))}-${Math.round(Math.max(...result.rps))})`,
    `${(result.cpuPerRequest * 1000).toFixed(0)} us`,
    `${(result.netCpuPerRequest * 1000).toFixed(0)} us`,
    base === undefined
      ? ""
      : `${(rps / mean(base.rps)).toFixed(2)}x req/s, ${(result.netCpuPerRequest / base.netCpuPerRequest).toFixed(2)}x net CPU/req`
  ])
  process.stderr.write(`  ${name}: ${rows.at(-1)!.slice(1).join(", ")}\n`)
}

const load = () => loadavg().map((l) => l.toFixed(1)).join(" ")

const main = async () => {
  installSignalHandlers()
  const workers = PER_GATEWAY === undefined ? `concurrency ${CONCURRENCY} in all` : `concurrency ${PER_GATEWAY} per gateway`
  process.stderr.write(`load average at start: ${load()}; ${workers}, ${WINDOWS} windows of ${WINDOW_MS} ms\n`)
  const dir = tempDir()
  const upstream = await startUpstream()

  if (ONLY !== "postgres") {
    const gateway = await startGateway(dir, "sqlite", gatewayConfig(upstream.url, `sqlite:${dir}/sqlite.db`))
    const paid = await createKey(gateway, PAID_KEY)
    const budget = await createKey(gateway, BUDGET_KEY)
    const results = await measure([
      { name: "SQLite, 1 process: paid", gateways: [gateway], key: paid.key },
      { name: "SQLite, 1 process: paid + budget", gateways: [gateway], key: budget.key }
    ])
    for (const [name, result] of results) record(name, result)
    await gateway.stop()
  }

  if (ONLY !== "sqlite") {
    await checkRedis()
    const store = await createPostgresDatabase()
    const config = gatewayConfig(upstream.url, store, REDIS_URL)
    const gateways: Array<Gateway> = []
    for (let i = 0; i < 3; i++) gateways.push(await startGateway(dir, `pg-${i}`, config))
    const paid = await createKey(gateways[0]!, PAID_KEY)
    const budget = await createKey(gateways[0]!, BUDGET_KEY)
    onCleanup(() => deleteRedisKeysOf([paid.id, budget.id]))
    const results = await measure([
      { name: "1 replica: paid", gateways: [gateways[0]!], key: paid.key },
      { name: "3 replicas: paid", gateways, key: paid.key },
      { name: "1 replica: paid + budget", gateways: [gateways[0]!], key: budget.key },
      { name: "3 replicas: paid + budget", gateways, key: budget.key },
      { name: "1 replica: free", gateways: [gateways[0]!], key: paid.key, model: "bench-free" },
      { name: "3 replicas: free", gateways, key: paid.key, model: "bench-free" }
    ])
    const get = (name: string) => results.get(name)!
    record("Postgres + Redis, 1 replica: paid", get("1 replica: paid"))
    record("Postgres + Redis, 3 replicas: paid", get("3 replicas: paid"), get("1 replica: paid"))
    record("Postgres + Redis, 1 replica: paid + budget", get("1 replica: paid + budget"))
    record("Postgres + Redis, 3 replicas: paid + budget", get("3 replicas: paid + budget"), get("1 replica: paid + budget"))
    record("Postgres + Redis, 1 replica: free model (no store write)", get("1 replica: free"))
    record("Postgres + Redis, 3 replicas: free model (no store write)", get("3 replicas: free"), get("1 replica: free"))
  }

  const header = ["scenario", "paid req/s (min-max window)", "gateway CPU per request", "less idle CPU", "vs 1 replica"]
  const line = (cells: ReadonlyArray<string>) => `| ${cells.join(" | ")} |`
  console.log([line(header), line(header.map(() => "---")), ...rows.map(line)].join("\n"))
  console.log(`\n${workers}; load average at the end: ${load()}`)
}

main().then(
  () => cleanupAll().then(() => process.exit(0)),
  (error) => {
    if (stopping()) return
    process.stderr.write(`bench: failed: ${(error as Error).stack ?? String(error)}\n`)
    return cleanupAll().then(() => process.exit(1))
  }
)
