/**
 * Paid requests across replicas (issue 14, item 4): the same closed-loop load of paid chat
 * completions (1 credit each; with and without a request budget) against one gateway process,
 * then against three gateway processes on the same Postgres store and Redis, and against one
 * SQLite gateway. Reports requests per second and the gateways' CPU time per paid request (user +
 * system of every gateway process, summed): on a machine with fewer cores than processes the
 * throughput saturates, and CPU per request is the figure that says whether replicas scale.
 *
 *   node bench/replicas.ts [--quick] [--concurrency 48] [--only sqlite|postgres]
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
const ONLY = option("--only")
const WINDOWS = QUICK ? 2 : 5
const WINDOW_MS = QUICK ? 1_000 : 3_000
const UPSTREAM_KEY = "sk-bench-upstream"

const body = JSON.stringify({ model: "bench", max_tokens: 64, messages: [{ role: "user", content: "Say hello to the benchmark." }] })

const gatewayConfig = (upstream: string, store: string, redis?: string) => ({
  server: { host: "127.0.0.1" },
  store,
  ...(redis === undefined ? {} : { redis }),
  workspace: { credits: 1_000_000_000 },
  limits: { requests_per_minute: 50, concurrent_streams: 5 },
  providers: [{ name: "up", kind: "openai", base_url: `${upstream}/d0/n1/v1`, api_key: UPSTREAM_KEY }],
  models: [{ id: "bench", provider: "up", credits: 1, max_tokens: 4096 }]
})

const UNLIMITED = { requests_per_minute: 1_000_000, concurrent_streams: 1_000 }
const PAID_KEY = { name: "bench-paid", limits: UNLIMITED }
const BUDGET_KEY = { name: "bench-paid-budget", budget: { max_requests: 1_000_000_000 }, limits: UNLIMITED }

interface Result {
  readonly rps: ReadonlyArray<number>
  readonly cpuPerRequest: number
}

/** `concurrency` workers spread over the gateways (worker i sends to gateway i mod n), for each window. */
const closedLoop = async (gateways: ReadonlyArray<Gateway>, key: string): Promise<Result> => {
  const targets: Array<Target> = gateways.map((g) => ({
    label: g.url,
    pool: makePool(g.url, Math.ceil(CONCURRENCY / gateways.length)),
    path: "/v1/chat/completions",
    headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
    body
  }))
  try {
    await warmUp(targets, QUICK ? 200 : 1_000, 8)
    const rps: Array<number> = []
    let cpu = 0
    let requests = 0
    const cpuNow = () => gateways.reduce((sum, g) => sum + cpuTimeMs(g.pid), 0)
    for (let window = 0; window < WINDOWS; window++) {
      const before = cpuNow()
      const start = performance.now()
      const deadline = start + WINDOW_MS
      let completed = 0
      await Promise.all(Array.from({ length: CONCURRENCY }, async (_, worker) => {
        const target = targets[worker % targets.length]!
        while (performance.now() < deadline) {
          await send(target)
          completed++
        }
      }))
      rps.push(completed / ((performance.now() - start) / 1000))
      cpu += cpuNow() - before
      requests += completed
    }
    return { rps, cpuPerRequest: cpu / requests }
  } finally {
    await Promise.all(targets.map((t) => t.pool.close()))
  }
}

const mean = (xs: ReadonlyArray<number>) => xs.reduce((a, b) => a + b, 0) / xs.length
const rows: Array<[string, string, string, string]> = []
const record = (name: string, result: Result, base?: Result) => {
  const rps = mean(result.rps)
  rows.push([
    name,
    `${Math.round(rps).toLocaleString("en-US")} (${Math.round(Math.min(...result.rps))}-${Math.round(Math.max(...result.rps))})`,
    `${(result.cpuPerRequest * 1000).toFixed(0)} us`,
    base === undefined ? "" : `${(rps / mean(base.rps)).toFixed(2)}x req/s, ${(result.cpuPerRequest / base.cpuPerRequest).toFixed(2)}x CPU/req`
  ])
  process.stderr.write(`  ${name}: ${rows.at(-1)!.slice(1).join(", ")}\n`)
}

const load = () => loadavg().map((l) => l.toFixed(1)).join(" ")

const main = async () => {
  installSignalHandlers()
  process.stderr.write(`load average at start: ${load()}; concurrency ${CONCURRENCY}, ${WINDOWS} windows of ${WINDOW_MS} ms\n`)
  const dir = tempDir()
  const upstream = await startUpstream()

  if (ONLY !== "postgres") {
    const gateway = await startGateway(dir, "sqlite", gatewayConfig(upstream.url, `sqlite:${dir}/sqlite.db`))
    const paid = await createKey(gateway, PAID_KEY)
    const budget = await createKey(gateway, BUDGET_KEY)
    record("SQLite, 1 process: paid", await closedLoop([gateway], paid.key))
    record("SQLite, 1 process: paid + budget", await closedLoop([gateway], budget.key))
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
    const one = await closedLoop([gateways[0]!], paid.key)
    record("Postgres + Redis, 1 replica: paid", one)
    record("Postgres + Redis, 3 replicas: paid", await closedLoop(gateways, paid.key), one)
    const oneBudget = await closedLoop([gateways[0]!], budget.key)
    record("Postgres + Redis, 1 replica: paid + budget", oneBudget)
    record("Postgres + Redis, 3 replicas: paid + budget", await closedLoop(gateways, budget.key), oneBudget)
  }

  const header = ["scenario", "paid req/s (min-max window)", "gateway CPU per request", "vs 1 replica"]
  const line = (cells: ReadonlyArray<string>) => `| ${cells.join(" | ")} |`
  console.log([line(header), line(header.map(() => "---")), ...rows.map(line)].join("\n"))
  console.log(`\nload average at the end: ${load()}`)
}

main().then(
  () => cleanupAll().then(() => process.exit(0)),
  (error) => {
    if (stopping()) return
    process.stderr.write(`bench: failed: ${(error as Error).stack ?? String(error)}\n`)
    return cleanupAll().then(() => process.exit(1))
  }
)
