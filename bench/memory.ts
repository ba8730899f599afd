/**
 * `node bench/memory.ts [options] -- [variant ...]`: the gateway's resident memory, idle and under load, for
 * a few ways of starting it, with the requests per second and CPU per request of the same load
 * so that memory is never bought with CPU unseen. Each variant is one `modelgate serve` child
 * (bin/modelgate.js, the full paid pipeline of `npm run bench`: SQLite, auth, in-process limiter,
 * request budget, 1 credit per request, audit); the variants take turns, `--rounds` times.
 *
 * A variant is Node flags and environment assignments in one argument, for example
 *
 *   node bench/memory.ts --rounds 3 -- "" "--max-semi-space-size=2 --heap-growing-percent=50" "MALLOC_ARENA_MAX=2"
 *
 * "" is `modelgate serve` as shipped (bin/serve-flags.ts); a heap flag replaces those defaults.
 * Options: --rounds N (2), --seconds S (per load phase, 6), --quick (1 round, 2 s phases).
 *
 * Load, after the idle reading: paid chat completions at concurrency 32, then chat -> Anthropic
 * translation at concurrency 32, then streams of 200 chunks at concurrency 32. Peak RSS is the
 * process's VmHWM at the end; idle RSS is read 3 s after start-up and key creation. Each variant is
 * started once untimed first, so its compile cache is warm (as on an operator's second start).
 */
import { readFileSync } from "node:fs"
import { basename, resolve } from "node:path"
import { parseArgs } from "node:util"
import { makePool, mean, type Target, throughputWindows } from "./load.ts"
import { cleanupAll, cpuTimeMs, createKey, installSignalHandlers, peakRssMiB, rssMiB, startGateway, startUpstream, stopping, tempDir } from "./processes.ts"
import { table } from "./report.ts"

// Options first, then `--`, then the variants (which start with dashes themselves).
const split = process.argv.indexOf("--", 2)
const { values } = parseArgs({
  args: process.argv.slice(2, split < 0 ? undefined : split),
  options: {
    rounds: { type: "string", default: "2" },
    seconds: { type: "string", default: "6" },
    quick: { type: "boolean", default: false },
    roots: { type: "string" }
  }
})
const positionals = split < 0 ? [] : process.argv.slice(split + 1)
const ROUNDS = values.quick ? 1 : Number(values.rounds)
const PHASE_MS = (values.quick ? 2 : Number(values.seconds)) * 1000
const IDLE_SETTLE_MS = 3000
const CONCURRENCY = 32
const UPSTREAM_KEY = "sk-bench-upstream"
const flagVariants = positionals.length === 0 ? [""] : positionals
/**
 * `--roots A,B`: every variant for the gateway of each source tree (a checkout or a `git archive`
 * with a node_modules), to judge a change to what the gateway holds in one run. A variant is then
 * `<variant>@<tree>`.
 */
const roots = values.roots?.split(",").map((root) => resolve(root))
const AT = "@@"
const variants = roots === undefined ? flagVariants : flagVariants.flatMap((variant) => roots.map((root) => `${variant}${AT}${root}`))
const rootOf = (variant: string) => variant.includes(AT) ? variant.slice(variant.indexOf(AT) + AT.length) : undefined
const flagsOf = (variant: string) => variant.includes(AT) ? variant.slice(0, variant.indexOf(AT)) : variant
const nameOf = (variant: string) => {
  const root = rootOf(variant)
  const flags = flagsOf(variant)
  return `${flags === "" ? "as shipped" : `\`${flags}\``}${root === undefined ? "" : ` @${basename(root)}`}`
}

const log = (message: string) => process.stderr.write(`memory: ${message}\n`)

const parseVariant = (variant: string) => {
  const root = rootOf(variant)
  const words = flagsOf(variant).split(/\s+/).filter((word) => word !== "")
  return {
    nodeFlags: words.filter((word) => word.startsWith("-")),
    env: Object.fromEntries(words.filter((word) => !word.startsWith("-")).map((word) => {
      const at = word.indexOf("=")
      if (at < 1) throw new Error(`memory: ${word} is neither a flag nor NAME=value`)
      return [word.slice(0, at), word.slice(at + 1)]
    })),
    ...(root === undefined ? {} : { root })
  }
}

const config = (upstream: string, store: string) => ({
  server: { host: "127.0.0.1" },
  store,
  workspace: { credits: 1_000_000_000 },
  limits: { requests_per_minute: 50, concurrent_streams: 5 },
  providers: [
    { name: "up-openai", kind: "openai", base_url: `${upstream}/d0/n1/v1`, api_key: UPSTREAM_KEY },
    { name: "up-anthropic", kind: "anthropic", base_url: `${upstream}/d0/n1`, api_key: UPSTREAM_KEY },
    { name: "up-stream", kind: "openai", base_url: `${upstream}/d0/n200/v1`, api_key: UPSTREAM_KEY }
  ],
  models: [
    { id: "bench", provider: "up-openai", credits: 1, max_tokens: 4096 },
    { id: "claude-bench", provider: "up-anthropic", credits: 1, max_tokens: 4096 },
    { id: "bench-n200", provider: "up-stream", credits: 1, max_tokens: 4096 }
  ]
})

interface Reading {
  readonly idle: number
  readonly peak: number
  readonly rps: number
  readonly cpuUs: number
  readonly streamsPerS: number
  /** Right after the load: file-backed pages (the Node binary's, mostly) and anonymous memory. */
  readonly file: number
  readonly anon: number
}

const statusMiB = (pid: number, field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB$`, "m").exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1]) / 1024

const measure = async (upstream: string, dir: string, variant: string, round: number): Promise<Reading> => {
  const name = `memory-${round}-${variants.indexOf(variant)}`
  const gateway = await startGateway(dir, name, config(upstream, `sqlite:${dir}/${name}.db`), parseVariant(variant))
  const pool = makePool(gateway.url, CONCURRENCY)
  try {
    const { key } = await createKey(gateway, { name: "memory", budget: { max_requests: 1_000_000_000 }, limits: { requests_per_minute: 1_000_000, concurrent_streams: 1_000 } })
    await new Promise((r) => setTimeout(r, IDLE_SETTLE_MS))
    const idle = rssMiB(gateway.pid) ?? Number.NaN
    const target = (model: string, stream: boolean): Target => ({
      label: model,
      pool,
      path: "/v1/chat/completions",
      headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
      body: JSON.stringify({
        model,
        messages: [{ role: "user", content: "Say hello to the benchmark." }],
        max_tokens: 64,
        ...(stream ? { stream: true, stream_options: { include_usage: true } } : {})
      }),
      cpuMs: () => cpuTimeMs(gateway.pid)
    })
    const window = { windows: 1, windowMs: PHASE_MS, concurrency: CONCURRENCY }
    const phases: Array<string> = []
    const phase = async (model: string, stream: boolean) => {
      const result = (await throughputWindows([target(model, stream)], window)).get(model)!
      phases.push(`${model} ${(peakRssMiB(gateway.pid) ?? Number.NaN).toFixed(0)}`)
      return result
    }
    const paid = await phase("bench", false)
    await phase("claude-bench", false)
    const streams = await phase("bench-n200", true)
    log(`peak RSS (MiB) after each phase: ${phases.join(", ")}`)
    return {
      idle,
      peak: peakRssMiB(gateway.pid) ?? Number.NaN,
      rps: mean(paid.rates),
      cpuUs: paid.cpuPerRequest * 1000,
      streamsPerS: mean(streams.rates),
      file: statusMiB(gateway.pid, "RssFile"),
      anon: statusMiB(gateway.pid, "RssAnon")
    }
  } finally {
    await pool.close()
    await gateway.stop()
  }
}

const main = async () => {
  installSignalHandlers()
  const dir = tempDir()
  const upstream = await startUpstream()
  // One untimed start per variant: Node keys its compile cache by V8 flags, and a start that
  // misses it compiles every TypeScript module and keeps Node's type stripper resident (about
  // 17 MiB), which an operator's second start never pays.
  for (const variant of variants) {
    log(`warming the compile cache: ${nameOf(variant)}`)
    const gateway = await startGateway(dir, `warm-${variants.indexOf(variant)}`, config(upstream.url, `sqlite:${dir}/warm.db`), parseVariant(variant))
    await gateway.stop()
  }
  const readings = new Map<string, Array<Reading>>(variants.map((v) => [v, []]))
  for (let round = 0; round < ROUNDS; round++) {
    // Rotated each round, so drift does not always favour the same variant.
    for (const variant of [...variants.slice(round % variants.length), ...variants.slice(0, round % variants.length)]) {
      log(`round ${round + 1}/${ROUNDS}: ${nameOf(variant)}`)
      readings.get(variant)!.push(await measure(upstream.url, dir, variant, round))
    }
  }
  const range = (xs: ReadonlyArray<number>, digits = 0) => {
    const lo = Math.min(...xs).toFixed(digits)
    const hi = Math.max(...xs).toFixed(digits)
    return lo === hi ? lo : `${lo} to ${hi}`
  }
  process.stdout.write(
    table(
      ["variant", "idle RSS MiB", "peak RSS MiB", "paid req/s c32", "CPU/req µs", "streams/s c32 (200 chunks)", "after load: file / anon MiB"],
      variants.map((variant) => {
        const rs = readings.get(variant)!
        return [
          nameOf(variant),
          range(rs.map((r) => r.idle)),
          range(rs.map((r) => r.peak)),
          range(rs.map((r) => r.rps)),
          range(rs.map((r) => r.cpuUs)),
          range(rs.map((r) => r.streamsPerS)),
          `${range(rs.map((r) => r.file))} / ${range(rs.map((r) => r.anon))}`
        ]
      })
    ) + "\n"
  )
}

main().then(
  () => cleanupAll().then(() => process.exit(0)),
  (error) => {
    if (stopping()) return
    process.stderr.write(`memory: failed: ${(error as Error).stack ?? String(error)}\n`)
    return cleanupAll().then(() => process.exit(1))
  }
)
