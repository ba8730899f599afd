/**
 * `npm run bench`: what the gateway adds on top of calling the provider directly.
 *
 * A fake upstream (bench/upstream.ts) runs in its own process; the gateway runs as a real
 * `modelgate serve` child with the full pipeline on (auth, rate limiter, request budget,
 * credits, audit); this process is the load generator. Every scenario measures the upstream
 * directly and through the gateway in the same run, interleaved, and reports the difference
 * and the ratio. Tables go to stdout (markdown), progress to stderr.
 *
 *   npm run bench             full run, about 1-2 minutes on 2 cores
 *   npm run bench -- --quick  a few seconds, to check that everything works (noisy numbers)
 *
 * See bench/README.md for how to read the output.
 */
import { cpus, loadavg, totalmem } from "node:os"
import { resolve } from "node:path"
import { fetchText, latencyRounds, makePool, mean, percentile, type Target, throughputWindows, warmUp } from "./load.ts"
import {
  cleanupAll,
  cpuTimeMs,
  createKey,
  GATEWAY_HEAP_NOTE,
  installSignalHandlers,
  onCleanup,
  peakRssMiB,
  rssMiB,
  startGateway,
  startReferenceProxy,
  startUpstream,
  stopping,
  tempDir
} from "./processes.ts"
import { ladderTable, runLadder } from "./ladder.ts"
import { measureStartup } from "./startup.ts"
import {
  addedP50,
  addedP99,
  type Goal,
  goalLine,
  type LatencyRow,
  type LatencyStats,
  latencyTable,
  mib,
  ms,
  ratio,
  rps,
  section,
  signedMs,
  startupTable,
  type StreamRow,
  streamTable,
  table,
  type Throughput,
  type ThroughputRow,
  throughputTable,
  us
} from "./report.ts"

const QUICK = process.argv.includes("--quick")
/** `--ladder`: only the cost ladder (a minute or two), for judging a hot-path change rung by rung. */
const LADDER_ONLY = process.argv.includes("--ladder")
/** `--ladder --formats`: only the translated-path rungs and their passthroughs (with the hop). */
const FORMATS_ONLY = process.argv.includes("--formats")
/** `--ladder --stored`: of those, only the stored conversation and its passthrough (issue 38). */
const STORED_ONLY = process.argv.includes("--stored")
/** `--roots A,B` (with `--ladder`): the translated-path rungs for the gateways of these source trees, to compare versions in one run. */
const ROOTS = (() => {
  const at = process.argv.indexOf("--roots")
  return at < 0 ? undefined : process.argv[at + 1]!.split(",").map((root) => resolve(root))
})()
const n = (count: number) => Math.max(2, Math.round(count * (QUICK ? 0.1 : 1)))

const UPSTREAM_DELAY_MS = 20
const STREAM_CHUNKS = [50, 200] as const
const CONCURRENCY = 32
const UPSTREAM_KEY = "sk-bench-upstream"
/** One streamed content delta as it appears in JSON, in both wire formats. */
const WORD = "\" token\""

interface LatencyPlan {
  readonly warm: number
  readonly rounds: number
  readonly perRound: number
}

/** How long a started gateway sits without traffic before its resident set counts as idle. */
const IDLE_SETTLE_MS = QUICK ? 1000 : 3000

const PLAN = {
  nonStream: { warm: n(500), rounds: 10, perRound: n(200) },
  delayed: { warm: n(10), rounds: 10, perRound: n(15) },
  stream: { warm: n(60), rounds: 10, perRound: n(30) },
  throughput: { warmMs: QUICK ? 300 : 1000, windows: 3, windowMs: QUICK ? 300 : 1000 }
}

const log = (message: string) => process.stderr.write(`bench: ${message}\n`)
const print = (text: string) => process.stdout.write(`${text}\n`)

// ---------------------------------------------------------------------------------------------
// Requests

const PROMPT = [{ role: "user", content: "Say hello to the benchmark." }]

const chatBody = (model: string, stream: boolean) =>
  JSON.stringify({
    model,
    messages: PROMPT,
    max_tokens: 64,
    // The gateway always asks the upstream for usage; the direct side asks too, so both get the same bytes.
    ...(stream ? { stream: true, stream_options: { include_usage: true } } : {})
  })

const messagesBody = (model: string, stream: boolean) =>
  JSON.stringify({ model, max_tokens: 64, messages: PROMPT, ...(stream ? { stream: true } : {}) })

/** Upstream base URL of one scenario (see bench/upstream.ts). */
const scenarioBase = (upstream: string, delayMs: number, chunks: number) => `${upstream}/d${delayMs}/n${chunks}`

interface Sides {
  readonly directPool: Target["pool"]
  readonly upstreamCpu: () => number
}

const directChat = (sides: Sides, delayMs: number, chunks: number, stream: boolean): Target => ({
  label: "direct",
  pool: sides.directPool,
  path: `/d${delayMs}/n${chunks}/v1/chat/completions`,
  headers: { "content-type": "application/json", authorization: `Bearer ${UPSTREAM_KEY}` },
  body: chatBody("bench-upstream", stream),
  cpuMs: sides.upstreamCpu
})

const directMessages = (sides: Sides, chunks: number, stream: boolean): Target => ({
  label: "direct",
  pool: sides.directPool,
  path: `/d0/n${chunks}/v1/messages`,
  headers: { "content-type": "application/json", "x-api-key": UPSTREAM_KEY, "anthropic-version": "2023-06-01" },
  body: messagesBody("bench-upstream", stream),
  cpuMs: sides.upstreamCpu
})

interface GatewaySide {
  readonly pool: Target["pool"]
  readonly pid: number
}

const viaGateway = (gateway: GatewaySide, label: string, key: string, model: string, stream: boolean): Target => ({
  label,
  pool: gateway.pool,
  path: "/v1/chat/completions",
  headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
  body: chatBody(model, stream),
  cpuMs: () => cpuTimeMs(gateway.pid)
})

interface ProxySide {
  readonly pool: Target["pool"]
  readonly pid: number
}

/** The direct request, sent through the reference proxy. */
const viaProxy = (proxy: ProxySide, direct: Target): Target => ({
  ...direct,
  label: "proxy",
  pool: proxy.pool,
  cpuMs: () => cpuTimeMs(proxy.pid)
})

const PROXY_ROW = "reference: minimal Node proxy, no pipeline"

// ---------------------------------------------------------------------------------------------
// Gateway configuration

interface ModelSpec {
  readonly id: string
  readonly kind: "openai" | "anthropic"
  readonly delayMs: number
  readonly chunks: number
  readonly credits: number
}

const gatewayConfig = (upstream: string, store: string, models: ReadonlyArray<ModelSpec>, redis?: string) => ({
  server: { host: "127.0.0.1" },
  store,
  ...(redis === undefined ? {} : { redis }),
  workspace: { credits: 1_000_000_000 },
  // The shipped defaults; the benchmark keys carry their own overrides.
  limits: { requests_per_minute: 50, concurrent_streams: 5 },
  // One provider per model: each model's base URL selects its upstream scenario.
  providers: models.map((m) => ({
    name: `up-${m.id}`,
    kind: m.kind,
    base_url: m.kind === "openai" ? `${scenarioBase(upstream, m.delayMs, m.chunks)}/v1` : scenarioBase(upstream, m.delayMs, m.chunks),
    api_key: UPSTREAM_KEY
  })),
  models: models.map((m) => ({ id: m.id, provider: `up-${m.id}`, credits: m.credits, max_tokens: 4096 }))
})

/** Never refused (1M requests per minute is the largest limit there is), yet every request is still counted. */
const UNLIMITED = { requests_per_minute: 1_000_000, concurrent_streams: 1_000 }
const FULL_KEY = { name: "bench-full", budget: { max_requests: 1_000_000_000 }, limits: UNLIMITED }

const MODELS: ReadonlyArray<ModelSpec> = [
  { id: "bench", kind: "openai", delayMs: 0, chunks: 1, credits: 1 },
  { id: "bench-free", kind: "openai", delayMs: 0, chunks: 1, credits: 0 },
  { id: "bench-delay", kind: "openai", delayMs: UPSTREAM_DELAY_MS, chunks: 1, credits: 1 },
  { id: "claude-bench", kind: "anthropic", delayMs: 0, chunks: 1, credits: 1 },
  ...STREAM_CHUNKS.flatMap((chunks): Array<ModelSpec> => [
    { id: `bench-n${chunks}`, kind: "openai", delayMs: 0, chunks, credits: 1 },
    { id: `claude-bench-n${chunks}`, kind: "anthropic", delayMs: 0, chunks, credits: 1 }
  ])
]

// ---------------------------------------------------------------------------------------------
// Checks: each side answers what the scenario says, once, before it is timed

const countOf = (text: string, needle: string) => text.split(needle).length - 1

const checkAnswer = async (target: Target, expect: { readonly stream: boolean; readonly chunks: number; readonly anthropic: boolean }) => {
  const text = await fetchText(target)
  const fail = (why: string) => {
    throw new Error(`${target.label} ${target.path}: ${why}; got:\n${text.slice(0, 400)}`)
  }
  if (!expect.stream) {
    const parsed = JSON.parse(text) as { choices?: Array<{ message?: { content?: string } }>; content?: Array<{ text?: string }> }
    const content = expect.anthropic ? parsed.content?.[0]?.text : parsed.choices?.[0]?.message?.content
    if (typeof content !== "string" || content === "") fail("no answer text")
    return
  }
  if (countOf(text, WORD) !== expect.chunks) fail(`expected ${expect.chunks} content chunks, got ${countOf(text, WORD)}`)
  if (expect.anthropic ? !text.includes("event: message_stop") : !text.endsWith("data: [DONE]\n\n")) fail("the stream did not end properly")
}

// ---------------------------------------------------------------------------------------------
// Measurements

const measureLatency = async (targets: ReadonlyArray<Target>, plan: LatencyPlan): Promise<Map<string, LatencyStats>> => {
  await warmUp(targets, plan.warm, 1)
  const results = await latencyRounds(targets, plan)
  return new Map([...results].map(([label, r]) => {
    const totals = r.samples.map((s) => s.total)
    return [label, {
      samples: r.samples.length,
      p50: percentile(totals, 50),
      p99: percentile(totals, 99),
      firstP50: percentile(r.samples.map((s) => s.first), 50),
      cpuPerRequest: r.cpuPerRequest
    }]
  }))
}

const measureThroughput = async (targets: ReadonlyArray<Target>): Promise<Map<string, Throughput>> => {
  const { warmMs, windows, windowMs } = PLAN.throughput
  await throughputWindows(targets, { windows: 1, windowMs: warmMs, concurrency: CONCURRENCY })
  const results = await throughputWindows(targets, { windows, windowMs, concurrency: CONCURRENCY })
  return new Map([...results].map(([label, r]) => [label, {
    mean: mean(r.rates),
    min: Math.min(...r.rates),
    max: Math.max(...r.rates),
    cpuPerRequest: r.cpuPerRequest
  }]))
}

/** Both sides of a two-target measurement, by their labels. */
const pair = <A>(results: Map<string, A>, gatewayLabel = "gateway") => ({
  direct: results.get("direct")!,
  gateway: results.get(gatewayLabel)!
})

// ---------------------------------------------------------------------------------------------
// The run

const loadNote = () => {
  const [one, five] = loadavg()
  return `load average ${one!.toFixed(2)} (1 min), ${five!.toFixed(2)} (5 min)`
}

/** The cost ladder: its own gateways, one per configuration, against the hop in the same rounds. */
const printLadder = async (upstream: string, dir: string, sides: Sides, proxySide: ProxySide) => {
  const ladder = await runLadder({
    upstream,
    dir,
    concurrency: CONCURRENCY,
    quick: QUICK,
    direct: directChat(sides, 0, 1, false),
    hop: viaProxy(proxySide, directChat(sides, 0, 1, false)),
    log,
    only: LADDER_ONLY && STORED_ONLY ? "stored" : LADDER_ONLY && FORMATS_ONLY ? "formats" : "all",
    ...(ROOTS === undefined ? {} : { roots: ROOTS })
  })
  print(section("Cost ladder (non-streaming, upstream 0 ms)", ladderTable(ladder.rows), [
    "Each rung adds one thing to the rung above it; all rows were measured in the same interleaved rounds, so compare",
    "them with each other and with the hop (the reference proxy, row 2), not with other runs. Floor rows: bench/floor/, run with serve's Node settings.",
    "The two lowest gateway rungs run bench/serve-variant.ts (the gateway with its audit trail and metrics swapped for",
    "layers that do nothing); every other gateway rung is `modelgate serve` as shipped. CPU per request: user + system",
    "time of the server process, the median of its concurrency-32 windows, each target warmed with 10,000 requests first.",
    "p99: the median of the rounds' p99s.",
    ...ladder.notes
  ]))
}

const main = async () => {
  installSignalHandlers()
  const started = performance.now()
  const cpu = cpus()
  const startLoad = loadavg()[0]!
  print("# modelgate benchmark")
  print("")
  print(
    `Node ${process.version}, ${cpu.length} x ${cpu[0]?.model.trim() ?? "unknown CPU"}, ${(totalmem() / 2 ** 30).toFixed(1)} GiB RAM, ${
      new Date().toISOString()
    }, ${loadNote()} at start${QUICK ? ". QUICK MODE: few samples, noisy numbers" : ""}.`
  )
  if (startLoad > 0.5) {
    print("")
    print(`Note: the machine was not idle at start; wall-clock numbers are noisier than the CPU/req columns.`)
  }
  print("")

  const dir = tempDir()
  log("starting the fake upstream")
  const upstream = await startUpstream()
  const directPool = makePool(upstream.url, CONCURRENCY)
  onCleanup(() => directPool.destroy())
  const sides: Sides = { directPool, upstreamCpu: () => cpuTimeMs(upstream.pid) }
  log("starting the reference proxy")
  const proxy = await startReferenceProxy(upstream.url)
  const proxySide: ProxySide = { pool: makePool(proxy.url, CONCURRENCY), pid: proxy.pid }
  onCleanup(() => proxySide.pool.destroy())

  if (LADDER_ONLY) {
    await printLadder(upstream.url, dir, sides, proxySide)
    print(`Run time ${((performance.now() - started) / 1000).toFixed(1)} s; ${loadNote()} at the end.`)
    return
  }

  // ---- Gateway 1: the embedded default's stores (SQLite, in-process limits), full pipeline ----
  // One untimed start first, as an operator's first start after an install or upgrade: Node keys
  // its compile cache by file and V8 flags, and a start that misses it keeps Node's TypeScript
  // stripper resident (about 17 MiB more idle and peak RSS) for the life of the process.
  log("warming the compile cache")
  await (await startGateway(dir, "warm", gatewayConfig(upstream.url, `sqlite:${dir}/warm.db`, MODELS))).stop()
  log("starting the gateway (SQLite store, in-process limits)")
  const sqliteGateway = await startGateway(dir, "sqlite", gatewayConfig(upstream.url, `sqlite:${dir}/modelgate.db`, MODELS))
  const sqliteSide: GatewaySide = { pool: makePool(sqliteGateway.url, CONCURRENCY), pid: sqliteGateway.pid }
  onCleanup(() => sqliteSide.pool.destroy())
  const fullKey = await createKey(sqliteGateway, FULL_KEY)
  await new Promise((r) => setTimeout(r, IDLE_SETTLE_MS))
  const idleRss = rssMiB(sqliteGateway.pid)
  const gw = (model: string, stream: boolean) => viaGateway(sqliteSide, "gateway", fullKey.key, model, stream)

  // Non-streaming latency at concurrency 1.
  const latencyRows: Array<LatencyRow> = []
  // The reference proxy runs interleaved with the passthrough rows: it is the floor they sit on.
  const latencyScenarios: ReadonlyArray<readonly [string, Target, Target, LatencyPlan, boolean, boolean]> = [
    ["passthrough, upstream 0 ms", directChat(sides, 0, 1, false), gw("bench", false), PLAN.nonStream, false, true],
    [
      `passthrough, upstream ${UPSTREAM_DELAY_MS} ms`,
      directChat(sides, UPSTREAM_DELAY_MS, 1, false),
      gw("bench-delay", false),
      PLAN.delayed,
      false,
      true
    ],
    ["translation chat -> anthropic, 0 ms", directMessages(sides, 1, false), gw("claude-bench", false), PLAN.nonStream, true, false]
  ]
  let proxyLatency: LatencyRow | undefined
  for (const [name, direct, gateway, plan, anthropic, withProxy] of latencyScenarios) {
    log(`latency: ${name}`)
    await checkAnswer(direct, { stream: false, chunks: 0, anthropic })
    await checkAnswer(gateway, { stream: false, chunks: 0, anthropic: false })
    const targets = withProxy ? [direct, gateway, viaProxy(proxySide, direct)] : [direct, gateway]
    const results = await measureLatency(targets, plan)
    latencyRows.push({ name, ...pair(results) })
    if (withProxy) {
      const row = { name: `${PROXY_ROW}, ${name.replace("passthrough, ", "")}`, ...pair(results, "proxy") }
      latencyRows.push(row)
      proxyLatency ??= row
    }
  }
  print(section("Added latency at concurrency 1 (non-streaming)", latencyTable(latencyRows), [
    "added = gateway - direct; ratio = gateway / direct. Full pipeline: auth, rate limiter, request budget,",
    "1 credit per request from the pool (SQLite ledger), audit. Translation: the client speaks Chat Completions, the",
    "provider is Anthropic-kind; its direct baseline is the same Anthropic call made directly.",
    "gateway CPU/req: user + system CPU of the gateway process per request (all its threads, background work included).",
    "The reference rows put a minimal node:http proxy (bench/proxy.ts: keep-alive http.Agent, bytes piped) where the gateway is, interleaved with",
    "the row above them: what one more Node hop costs on this machine, before any gateway work. With a slow upstream",
    "every process idles between requests, and waking an idle process costs extra on some machines (VMs above all):",
    "compare the 20 ms rows with their reference row, not with the 0 ms rows."
  ]))

  // Throughput at concurrency 32.
  const throughputRows: Array<ThroughputRow> = []
  const throughputScenarios: ReadonlyArray<readonly [string, Target, Target]> = [
    ["passthrough, upstream 0 ms", directChat(sides, 0, 1, false), gw("bench", false)],
    ["translation chat -> anthropic, 0 ms", directMessages(sides, 1, false), gw("claude-bench", false)]
  ]
  let proxyThroughput: ThroughputRow | undefined
  for (const [name, direct, gateway] of throughputScenarios) {
    log(`throughput: ${name}`)
    const withProxy = proxyThroughput === undefined
    const results = await measureThroughput(withProxy ? [direct, gateway, viaProxy(proxySide, direct)] : [direct, gateway])
    throughputRows.push({ name, ...pair(results) })
    if (withProxy) proxyThroughput = { name: `${PROXY_ROW}, ${name.replace("passthrough, ", "")}`, ...pair(results, "proxy") }
  }
  throughputRows.push(proxyThroughput!)
  print(section(`Requests per second at concurrency ${CONCURRENCY}`, throughputTable(throughputRows), [
    `${PLAN.throughput.windows} alternating windows of ${PLAN.throughput.windowMs} ms per side; req/s is the mean of the windows,`,
    "the window columns show their range. The load generator, the upstream and the gateway share the machine's cores,",
    "so a gateway that needs more CPU per request also slows down the upstream it waits for. The last row is the",
    "reference proxy, measured with the first row."
  ]))

  // Streaming at concurrency 1.
  const streamRows: Array<StreamRow> = []
  for (const chunks of STREAM_CHUNKS) {
    const streamScenarios: ReadonlyArray<readonly [string, Target, Target, boolean]> = [
      ["passthrough", directChat(sides, 0, chunks, true), gw(`bench-n${chunks}`, true), false],
      ["translation chat -> anthropic", directMessages(sides, chunks, true), gw(`claude-bench-n${chunks}`, true), true]
    ]
    for (const [name, direct, gateway, anthropic] of streamScenarios) {
      log(`stream: ${name}, ${chunks} chunks`)
      await checkAnswer(direct, { stream: true, chunks, anthropic })
      await checkAnswer(gateway, { stream: true, chunks, anthropic: false })
      streamRows.push({ name, chunks, ...pair(await measureLatency([direct, gateway], PLAN.stream)) })
    }
  }
  streamRows.sort((a, b) => a.name.localeCompare(b.name) || a.chunks - b.chunks)
  const [fewer, more] = STREAM_CHUNKS
  const marginal = (name: string) => {
    const small = streamRows.find((r) => r.name === name && r.chunks === fewer)!
    const large = streamRows.find((r) => r.name === name && r.chunks === more)!
    return {
      wall: ((addedP50(large) - addedP50(small)) * 1000) / (more - fewer),
      cpu: ((large.gateway.cpuPerRequest - small.gateway.cpuPerRequest) * 1000) / (more - fewer)
    }
  }
  const passthroughMarginal = marginal("passthrough")
  const translationMarginal = marginal("translation chat -> anthropic")
  print(section("Streaming at concurrency 1", streamTable(streamRows), [
    "Time runs from sending the request to the last byte of the stream; the upstream writes its chunks back to back.",
    "added per chunk = (gateway - direct) / chunks: it still carries the fixed per-request cost spread over the chunks.",
    `One more chunk (slope between ${fewer} and ${more} chunks): passthrough ${us(passthroughMarginal.wall)} added, ${
      us(passthroughMarginal.cpu)
    } gateway CPU; translation ${us(translationMarginal.wall)} added, ${us(translationMarginal.cpu)} gateway CPU.`
  ]))

  const sqlitePeakRss = peakRssMiB(sqliteGateway.pid)
  const memoryRows: Array<Array<string>> = [["SQLite store, in-process limits (every section but the ladder)", mib(idleRss), mib(sqlitePeakRss)]]
  await sqliteSide.pool.close()
  await sqliteGateway.stop()

  await printLadder(upstream.url, dir, sides, proxySide)

  memoryRows.push(["reference proxy (every section it ran in)", "", mib(peakRssMiB(proxy.pid))])
  print(section("Memory", table(["process", `idle RSS (${IDLE_SETTLE_MS / 1000} s after start)`, "peak RSS (VmHWM)"], memoryRows), [
    "Idle: the gateway started, two keys created through the admin API, then no traffic for the settle time.",
    "Peak: the most the process held at any time, read at its end (the latency, throughput, streaming and limits sections).",
    `Gateway heap settings: ${GATEWAY_HEAP_NOTE}.`
  ]))

  log("start-up: CLI commands and serve")
  const startupRows = await measureStartup(dir, { runs: QUICK ? 2 : 10, idleSettleMs: IDLE_SETTLE_MS })
  print(section("Start-up", startupTable(startupRows), [
    "Real processes as an operator runs them (`node bin/modelgate.js ...`, compile cache warm after one untimed run).",
    "CPU and peak RSS: what the process reports about itself as it exits (getrusage); serve: CPU at its first /healthz 200,",
    "RSS once it sat idle. Wall time on a loaded machine includes waiting for a core: read CPU first."
  ]))

  const headline = latencyRows[0]!
  const headlineRps = throughputRows[0]!
  const floor = proxyLatency!
  const floorRps = proxyThroughput!
  const versusProxy = headlineRps.gateway.mean / floorRps.gateway.mean
  const goals: ReadonlyArray<Goal> = [
    {
      name: `req/s at concurrency ${CONCURRENCY} >= 0.5 x the reference proxy's (passthrough, full pipeline)`,
      pass: versusProxy >= 0.5,
      measured: `${rps(headlineRps.gateway.mean)} / ${rps(floorRps.gateway.mean)} = ${ratio(versusProxy)}`
    },
    {
      name: "added p50 <= 0.15 ms at concurrency 1 (passthrough, full pipeline)",
      pass: addedP50(headline) <= 0.15,
      measured: signedMs(addedP50(headline))
    },
    {
      name: "added p99 <= 1 ms at concurrency 1 (passthrough, full pipeline)",
      pass: addedP99(headline) <= 1,
      measured: signedMs(addedP99(headline))
    },
    {
      name: "streaming: <= 5 µs added per chunk (passthrough, slope between chunk counts)",
      pass: passthroughMarginal.wall <= 5,
      measured: us(passthroughMarginal.wall)
    },
    {
      name: "idle RSS < 100 MiB (SQLite gateway)",
      pass: idleRss !== undefined && idleRss < 100,
      measured: mib(idleRss)
    },
    {
      name: "peak RSS < 150 MiB under the benchmark's load (SQLite gateway)",
      pass: sqlitePeakRss !== undefined && sqlitePeakRss < 150,
      measured: mib(sqlitePeakRss)
    }
  ]
  print(section("Targets", ["```", ...goals.map(goalLine), "```"].join("\n"), [
    `The reference proxy (one Node hop, no pipeline), measured in the same rounds: added p50 ${signedMs(addedP50(floor))}, added p99 ${
      signedMs(addedP99(floor))
    }, ${ratio(floorRps.gateway.mean / floorRps.direct.mean)} the direct req/s.`,
    `CPU per request at concurrency ${CONCURRENCY}: gateway ${ms(headlineRps.gateway.cpuPerRequest)}, reference proxy ${
      ms(floorRps.gateway.cpuPerRequest)
    } (${ratio(headlineRps.gateway.cpuPerRequest / floorRps.gateway.cpuPerRequest)}); at concurrency 1: gateway ${
      ms(headline.gateway.cpuPerRequest)
    }, reference proxy ${ms(floor.gateway.cpuPerRequest)} (${ratio(headline.gateway.cpuPerRequest / floor.gateway.cpuPerRequest)}).`
  ]))
  print(`Run time ${((performance.now() - started) / 1000).toFixed(1)} s; ${loadNote()} at the end.`)
}

main().then(
  () => cleanupAll().then(() => process.exit(0)),
  (error) => {
    // After Ctrl-C the signal handler cleans up and exits; the failure it caused says nothing.
    if (stopping()) return
    process.stderr.write(`bench: failed: ${(error as Error).stack ?? String(error)}\n`)
    return cleanupAll().then(() => process.exit(1))
  }
)
