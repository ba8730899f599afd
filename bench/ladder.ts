/**
 * The cost ladder (issue 25): what each layer of the request path costs, rung by rung, in one
 * run against the bare Node hop measured in the same rounds. The floor servers (bench/floor/)
 * show what Node and Effect themselves cost; the gateway rungs switch its stages on one by one:
 * free model, no budget, no audit, no metrics -> + metrics -> + audit -> + request budget ->
 * + credits on SQLite -> + credits on Postgres and Redis -> + tracing on. Every later change to the
 * hot path is judged by where it moves these rows.
 *
 * Every rung is one target of the same interleaved rounds (the order rotates), so drift hits all
 * of them alike: req/s and the server's CPU per request at concurrency 32, then p50 and p99 at
 * concurrency 1 (p99 as the median of the rounds' p99s: one round's tail is noise).
 */
import { cpuTimeMs, createKey, createPostgresDatabase, deleteRedisKeysOf, REDIS_URL, startFloorServer, startGateway, stopping } from "./processes.ts"
import { latencyRounds, makePool, mean, median, percentile, type Target, throughputWindows, warmUp } from "./load.ts"
import { ms, ratio, rps, signedMs, table, us } from "./report.ts"

export interface LadderInput {
  /** The fake upstream's origin. */
  readonly upstream: string
  readonly dir: string
  readonly concurrency: number
  readonly quick: boolean
  /** The direct call and the reference proxy (the hop), already running. */
  readonly direct: Target
  readonly hop: Target
  readonly log: (message: string) => void
}

export interface LadderRow {
  readonly name: string
  readonly rps: number
  readonly cpuUs: number
  readonly p50: number
  readonly p99: number
}

const UNLIMITED = { requests_per_minute: 1_000_000, concurrent_streams: 1_000 }
const UPSTREAM_KEY = "sk-bench-upstream"
const FLOOR_KEY = "sk-mg-0123456789abcdef0123456789abcdef"
const BODY = (model: string) => JSON.stringify({ model, messages: [{ role: "user", content: "Say hello to the benchmark." }], max_tokens: 64 })

const gatewayConfig = (upstream: string, store: string, extra: Record<string, unknown> = {}) => ({
  server: { host: "127.0.0.1" },
  store,
  workspace: { credits: 1_000_000_000 },
  providers: [{ name: "up", kind: "openai", base_url: `${upstream}/d0/n1/v1`, api_key: UPSTREAM_KEY }],
  models: [
    { id: "bench", provider: "up", credits: 1, max_tokens: 4096 },
    { id: "bench-free", provider: "up", credits: 0, max_tokens: 4096 },
    // Token prices (issue 33): the bound reserved at admission, the cost from the answer's usage settled.
    { id: "bench-priced", provider: "up", credits: 0, price: { input: 3, output: 15 }, max_tokens: 4096 }
  ],
  ...extra
})

export const runLadder = async (input: LadderInput): Promise<{ rows: Array<LadderRow>; notes: Array<string> }> => {
  const { concurrency, dir, log, upstream } = input
  const notes: Array<string> = []
  const targets: Array<Target> = [input.direct, input.hop]
  const names = new Map<string, string>([[input.direct.label, "upstream direct (no hop)"], [input.hop.label, "bare Node hop (node:http + keep-alive agent): 1.00x"]])
  const rung = (label: string, name: string, target: Omit<Target, "label">) => {
    targets.push({ ...target, label })
    names.set(label, name)
  }
  const poolOf = (url: string) => makePool(url, concurrency)

  log("ladder: floor servers")
  const base = `${upstream}/d0/n1`
  const floors: ReadonlyArray<readonly [string, string]> = [
    ["plain.ts", "node:http + undici, JSON parsed"],
    ["fiber.ts", "+ one Effect fiber per request"],
    ["effect-http.ts", "Effect HttpServer (platform-node)"],
    ["shaped.ts", "Effect HttpServer + gateway-shaped pipeline"]
  ]
  for (const [file, name] of floors) {
    const server = await startFloorServer(file, base)
    rung(`floor:${file}`, `floor: ${name}`, {
      pool: poolOf(server.url),
      path: "/v1/chat/completions",
      headers: { "content-type": "application/json", authorization: `Bearer ${FLOOR_KEY}` },
      body: BODY("bench-upstream"),
      cpuMs: () => cpuTimeMs(server.pid)
    })
  }

  const viaGateway = (label: string, name: string, gateway: { url: string; pid: number }, key: string, model: string) =>
    rung(label, name, {
      pool: poolOf(gateway.url),
      path: "/v1/chat/completions",
      headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
      body: BODY(model),
      cpuMs: () => cpuTimeMs(gateway.pid)
    })

  log("ladder: gateways on SQLite")
  const bare = await startGateway(dir, "ladder-bare", gatewayConfig(upstream, `sqlite:${dir}/ladder-bare.db`), { without: ["audit", "metrics"] })
  const bareKey = await createKey(bare, { name: "ladder", limits: UNLIMITED })
  viaGateway("gw:bare", "gateway: free model, no budget, no audit, no metrics (SQLite)", bare, bareKey.key, "bench-free")

  const metered = await startGateway(dir, "ladder-metrics", gatewayConfig(upstream, `sqlite:${dir}/ladder-metrics.db`), { without: ["audit"] })
  const meteredKey = await createKey(metered, { name: "ladder", limits: UNLIMITED })
  viaGateway("gw:metrics", "+ metrics", metered, meteredKey.key, "bench-free")

  const full = await startGateway(dir, "ladder-sqlite", gatewayConfig(upstream, `sqlite:${dir}/ladder-sqlite.db`))
  const freeKey = await createKey(full, { name: "ladder-free", limits: UNLIMITED })
  const budgetKey = await createKey(full, { name: "ladder-budget", budget: { max_requests: 1_000_000_000 }, limits: UNLIMITED })
  viaGateway("gw:audit", "+ audit", full, freeKey.key, "bench-free")
  viaGateway("gw:budget", "+ request budget", full, budgetKey.key, "bench-free")
  viaGateway("gw:credits", "+ 1 credit per request (SQLite): the full paid pipeline", full, budgetKey.key, "bench")
  viaGateway("gw:priced", "token prices instead of 1 credit: the bound reserved, the cost settled (SQLite)", full, budgetKey.key, "bench-priced")

  try {
    log("ladder: gateways on Postgres and Redis")
    const pg = await startGateway(dir, "ladder-pg", gatewayConfig(upstream, await createPostgresDatabase(), { redis: REDIS_URL }))
    const pgKey = await createKey(pg, { name: "ladder-pg", budget: { max_requests: 1_000_000_000 }, limits: UNLIMITED })
    viaGateway("gw:pg", "+ credits on Postgres, limits in Redis (instead of SQLite, in process)", pg, pgKey.key, "bench")
    const traced = await startGateway(
      dir,
      "ladder-traced",
      gatewayConfig(upstream, await createPostgresDatabase(), { redis: REDIS_URL, telemetry: { otlp_endpoint: upstream, sample_ratio: 1 } })
    )
    const tracedKey = await createKey(traced, { name: "ladder-traced", budget: { max_requests: 1_000_000_000 }, limits: UNLIMITED })
    viaGateway("gw:traced", "+ tracing on (every request sampled, spans exported over OTLP/JSON)", traced, tracedKey.key, "bench")
    await deleteRedisKeysOf([pgKey.id, tracedKey.id]).catch(() => undefined)
  } catch (error) {
    if (stopping()) throw error
    const reason = ((error as Error).message ?? String(error)).split("\n")[0]!
    log(`ladder: Postgres/Redis rungs skipped: ${reason}`)
    notes.push(`The Postgres/Redis rungs were skipped: ${reason}`)
  }

  // The rungs above run with `log.level: none`; as shipped, every request writes a line at info.
  const logged = await startGateway(dir, "ladder-logged", gatewayConfig(upstream, `sqlite:${dir}/ladder-logged.db`), { logLevel: "info" })
  const loggedKey = await createKey(logged, { name: "ladder-logged", budget: { max_requests: 1_000_000_000 }, limits: UNLIMITED })
  viaGateway("gw:logged", "full paid pipeline (SQLite) + a request line at info, to a pipe: `modelgate serve` as shipped", logged, loggedKey.key, "bench")

  const windows = input.quick ? 1 : 3
  const windowMs = input.quick ? 300 : 1000
  log(`ladder: ${targets.length} targets at concurrency ${concurrency}`)
  await warmUp(targets, input.quick ? 50 : 400, 4)
  const throughput = await throughputWindows(targets, { windows, windowMs, concurrency })
  log("ladder: latency at concurrency 1")
  const rounds = input.quick ? 3 : 10
  const perRound = input.quick ? 20 : 150
  const latency = await latencyRounds(targets, { rounds, perRound })

  const rows = targets.map((target): LadderRow => {
    const t = throughput.get(target.label)!
    const samples = latency.get(target.label)!.samples.map((s) => s.total)
    const roundP99s = Array.from({ length: rounds }, (_, i) => percentile(samples.slice(i * perRound, (i + 1) * perRound), 99))
    return { name: names.get(target.label)!, rps: mean(t.rates), cpuUs: t.cpuPerRequest * 1000, p50: percentile(samples, 50), p99: median(roundP99s) }
  })
  for (const target of targets) await target.pool.close().catch(() => undefined)
  return { rows, notes }
}

/** The ladder as a markdown table: each rung against the hop (row 2) of the same run. */
export const ladderTable = (rows: ReadonlyArray<LadderRow>) => {
  const hop = rows[1]!
  return table(
    ["rung", `req/s at c=32`, "vs the hop", "server CPU per request", "p50 at c=1", "p50 beyond the hop", "p99 at c=1", "p99 beyond the hop"],
    rows.map((row, i) => [
      row.name,
      rps(row.rps),
      ratio(row.rps / hop.rps),
      Number.isNaN(row.cpuUs) ? "n/a" : us(row.cpuUs),
      ms(row.p50),
      i < 2 ? "" : signedMs(row.p50 - hop.p50),
      ms(row.p99),
      i < 2 ? "" : signedMs(row.p99 - hop.p99)
    ])
  )
}
