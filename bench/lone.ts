/**
 * `node bench/lone.ts --roots A,B [--stores sqlite,pg] [--rounds 10] [--per 150] [--free]`: lone
 * requests (concurrency 1) to gateways built from one or more source trees (a checkout or a `git
 * archive` of each version, with a `node_modules`), every gateway a target of the same
 * interleaved rounds with the bare Node hop (the reference proxy), so two versions of a hot-path
 * change are compared within one run on a noisy machine. Per store, one gateway per tree: SQLite,
 * and Postgres with the limits in Redis (the ladder's paid rungs, the same config); the model costs
 * 1 credit and the key has a request budget (`--free`: the free model, budget only).
 * `--logs none,info`: each tree's `log.level` (to a pipe this process drains, as a log shipper
 * would), so the same tree twice prices the request line.
 * `--kinds free,budget,paid`: several targets per gateway instead, interleaved in the same rounds: the free
 * model with a key without a budget, the free model with a budgeted key, the paid model with a
 * budgeted key (what a paid request costs beyond a free one, measured in one run).
 * Prints p50 beyond the hop and the median of the rounds' p99s. `--cpu`: then the same targets
 * at concurrency 32 in interleaved windows (`--windows`, 2 s each), printing each server's CPU per
 * request and req/s, each gateway's CPU against the first tree's: how a hot-path change is judged
 * on a machine shared with other work (CPU per request moves much less with the load than time).
 *
 * `BENCH_GATEWAY_NODE_FLAGS` is passed to every gateway, e.g. `--import ./timeline-marks.mjs` to
 * preload a script that records a per-request timeline (node:diagnostics_channel gives the HTTP
 * server's and undici's events without touching the gateway).
 */
import { spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { writeFileSync } from "node:fs"
import { createServer } from "node:net"
import { join, resolve } from "node:path"
import { parseArgs } from "node:util"
import { stringify } from "yaml"
import { latencyRounds, makePool, median, percentile, type Target, throughputWindows, WARM_REQUESTS, warmUp } from "./load.ts"
import {
  cleanupAll,
  cpuTimeMs,
  createPostgresDatabase,
  installSignalHandlers,
  onCleanup,
  REDIS_URL,
  startReferenceProxy,
  startUpstream,
  tempDir
} from "./processes.ts"

const { values } = parseArgs({
  options: {
    roots: { type: "string" },
    stores: { type: "string", default: "sqlite,pg" },
    rounds: { type: "string", default: "10" },
    per: { type: "string", default: "150" },
    free: { type: "boolean", default: false },
    kinds: { type: "string" },
    logs: { type: "string" },
    cpu: { type: "boolean", default: false },
    windows: { type: "string", default: "8" }
  }
})
if (values.roots === undefined) throw new Error("--roots A,B: the source trees to compare")
installSignalHandlers()
const roots = values.roots.split(",").map((root) => resolve(root))
const stores = values.stores!.split(",")
/** `--logs none,info`: each tree's log level, in the order of `--roots` (default none). */
const logLevels = (values.logs ?? "").split(",").filter((level) => level !== "")
const dir = tempDir()
const flags = (process.env.BENCH_GATEWAY_NODE_FLAGS ?? "").split(/\s+/).filter((flag) => flag !== "")
const UPSTREAM_KEY = "sk-bench-upstream"
const BODY = (model: string) => JSON.stringify({ model, messages: [{ role: "user", content: "Say hello to the benchmark." }], max_tokens: 64 })

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
const freePort = () =>
  new Promise<number>((resolvePort, reject) => {
    const server = createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      server.close(() => resolvePort(typeof address === "object" && address !== null ? address.port : 0))
    })
  })

/** `modelgate serve` from `root`, with a budgeted key created through the admin API. */
const startGatewayAt = async (root: string, name: string, config: Record<string, unknown>, budgets: ReadonlyArray<boolean> = [true], logLevel = "none") => {
  const adminToken = `bench-admin-${randomBytes(12).toString("hex")}`
  const configPath = join(dir, `${name}.yaml`)
  writeFileSync(configPath, stringify({ ...config, admin: { token: adminToken }, log: { level: logLevel } }))
  const port = await freePort()
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("MODELGATE_")))
  const child = spawn(process.execPath, [...flags, "bin/modelgate.js", "--config", configPath, "serve", "--port", String(port)], {
    cwd: root,
    env: { ...env, BENCH_GATEWAY_NAME: name },
    stdio: ["ignore", logLevel === "none" ? "ignore" : "pipe", "inherit"]
  })
  child.stdout?.resume()
  const exited = new Promise<void>((r) => child.once("exit", () => r()))
  onCleanup(async () => {
    child.kill("SIGTERM")
    await exited
  })
  const url = `http://127.0.0.1:${port}`
  for (let i = 0; !(await fetch(`${url}/healthz`).then((r) => r.ok, () => false)); i++) {
    if (i > 600 || child.exitCode !== null) throw new Error(`gateway ${name} (${root}) did not start`)
    await sleep(50)
  }
  const keys: Array<string> = []
  for (const budget of budgets) {
    const created = await fetch(`${url}/api-keys`, {
      method: "POST",
      headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
      body: JSON.stringify({
        name: "lone",
        ...(budget ? { budget: { max_requests: 1_000_000_000 } } : {}),
        limits: { requests_per_minute: 1_000_000, concurrent_streams: 1_000 }
      })
    })
    if (created.status !== 201) throw new Error(`creating a key failed: ${created.status} ${await created.text()}`)
    keys.push(((await created.json()) as { key: string }).key)
  }
  return { url, pid: child.pid!, key: keys[0]!, keys }
}

try {
  const upstream = await startUpstream()
  const hop = await startReferenceProxy(upstream.url)
  const path = "/v1/chat/completions"
  const targets: Array<Target> = [{
    label: "hop",
    pool: makePool(hop.url, 1),
    path: `/d0/n1${path}`,
    headers: { "content-type": "application/json", authorization: `Bearer ${UPSTREAM_KEY}` },
    body: BODY("bench-upstream")
  }]
  const origin = new Map<string, string>()
  const pids = new Map<string, number>([["hop", hop.pid]])
  const urls = new Map<string, string>([["hop", hop.url]])
  /** Per target of a gateway: its label's suffix, whether its key has a budget, the model. */
  const kinds = values.kinds === undefined
    ? [{ suffix: "", budget: true, model: values.free ? "bench-free" : "bench" }]
    : values.kinds.split(",").map((kind) => {
      if (kind !== "free" && kind !== "budget" && kind !== "paid") throw new Error(`--kinds: ${kind} is not free, budget or paid`)
      return { suffix: `:${kind}`, budget: kind !== "free", model: kind === "paid" ? "bench" : "bench-free" }
    })
  for (const store of stores) {
    for (const [i, root] of roots.entries()) {
      const name = `${store}-${i}`
      const gateway = await startGatewayAt(root, name, {
        server: { host: "127.0.0.1" },
        store: store === "sqlite" ? `sqlite:${dir}/${name}.db` : await createPostgresDatabase(),
        ...(store === "pg" ? { redis: REDIS_URL } : {}),
        workspace: { credits: 1_000_000_000 },
        providers: [{ name: "up", kind: "openai", base_url: `${upstream.url}/d0/n1/v1`, api_key: UPSTREAM_KEY }],
        models: [{ id: "bench", provider: "up", credits: 1, max_tokens: 4096 }, { id: "bench-free", provider: "up", credits: 0, max_tokens: 4096 }]
      }, kinds.map((kind) => kind.budget), logLevels[i])
      for (const [k, kind] of kinds.entries()) {
        const label = `${name}${kind.suffix}`
        origin.set(label, root)
        pids.set(label, gateway.pid)
        urls.set(label, gateway.url)
        targets.push({
          label,
          pool: makePool(gateway.url, 1),
          path,
          headers: { "content-type": "application/json", authorization: `Bearer ${gateway.keys[k]}` },
          body: BODY(kind.model)
        })
      }
    }
  }
  await warmUp(targets, 400, 1)
  const rounds = Number(values.rounds)
  const per = Number(values.per)
  const latency = await latencyRounds(targets, { rounds, perRound: per })
  const hopP50 = percentile(latency.get("hop")!.samples.map((s) => s.total), 50)
  for (const target of targets) {
    const samples = latency.get(target.label)!.samples.map((s) => s.total)
    const p99s = Array.from({ length: rounds }, (_, i) => percentile(samples.slice(i * per, (i + 1) * per), 99))
    const p50 = percentile(samples, 50)
    console.log(
      `${target.label.padEnd(16)} p50 ${p50.toFixed(3)} ms, beyond the hop ${(p50 - hopP50).toFixed(3)} ms; p99 ${median(p99s).toFixed(3)} ms` +
        (origin.has(target.label) ? `  (${origin.get(target.label)})` : "")
    )
  }
  for (const target of targets) await target.pool.close()
  if (values.cpu) {
    const CONCURRENCY = 32
    const loaded = targets.map((target): Target => ({
      ...target,
      pool: makePool(urls.get(target.label)!, CONCURRENCY),
      cpuMs: () => cpuTimeMs(pids.get(target.label)!)
    }))
    await warmUp(loaded, WARM_REQUESTS, CONCURRENCY)
    const throughput = await throughputWindows(loaded, { windows: Number(values.windows), windowMs: 2000, concurrency: CONCURRENCY })
    const firstOf = new Map<string, number>()
    for (const target of loaded) {
      const result = throughput.get(target.label)!
      const cpuUs = result.cpuPerRequest * 1000
      const store = target.label.split("-")[0]!
      if (origin.has(target.label) && !firstOf.has(store)) firstOf.set(store, cpuUs)
      const against = origin.has(target.label) ? `, ${(cpuUs / firstOf.get(store)!).toFixed(3)}x the first tree's` : ""
      console.log(
        `${target.label.padEnd(16)} c=${CONCURRENCY}: CPU ${cpuUs.toFixed(0)} us/request${against}; ${median(result.rates).toFixed(0)} req/s` +
          (origin.has(target.label) ? `  (${origin.get(target.label)})` : "")
      )
    }
    for (const target of loaded) await target.pool.close()
  }
} finally {
  await cleanupAll()
}
