/**
 * The benchmark's child processes and throwaway resources (temp dirs, a Postgres database, Redis
 * keys), with one cleanup list that runs on normal exit, on a failure and on Ctrl-C/SIGTERM.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import type { Writable } from "node:stream"
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, Redacted } from "effect"
import { SqlClient } from "effect/sql/SqlClient"
import { createClient } from "redis"
import { stringify } from "yaml"
import { heapChosen, SERVE_ENV, SERVE_NODE_FLAGS } from "../bin/serve-flags.ts"

export const ROOT = resolve(import.meta.dirname, "..")
/** The Node 24 running this script: `npm run bench` puts node_modules/.bin first on PATH. */
export const NODE = process.execPath

// ---------------------------------------------------------------------------------------------
// Cleanup

type Cleanup = () => Promise<void> | void
const cleanups: Array<Cleanup> = []
let cleaning: Promise<void> | undefined

/** Registers a cleanup step; steps run last-registered first. */
export const onCleanup = (step: Cleanup) => {
  cleanups.push(step)
}

export const cleanupAll = (): Promise<void> => {
  cleaning ??= (async () => {
    while (cleanups.length > 0) {
      const step = cleanups.pop()!
      try {
        await step()
      } catch (error) {
        process.stderr.write(`bench: cleanup step failed: ${(error as Error).message ?? String(error)}\n`)
      }
    }
  })()
  return cleaning
}

/** True once cleanup began (Ctrl-C, say): failures after that are its consequence, not findings. */
export const stopping = () => cleaning !== undefined

/** Ctrl-C and SIGTERM still drop the database and stop the children; a second Ctrl-C exits at once. */
export const installSignalHandlers = () => {
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    process.on(signal, () => {
      if (cleaning !== undefined) process.exit(130)
      process.stderr.write(`\nbench: ${signal}, cleaning up...\n`)
      const deadline = setTimeout(() => process.exit(130), 10_000)
      deadline.unref()
      void cleanupAll().finally(() => process.exit(signal === "SIGINT" ? 130 : 143))
    })
  }
}

export const tempDir = () => {
  const dir = mkdtempSync(join(tmpdir(), "modelgate-bench-"))
  onCleanup(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

export const randomSuffix = () => `${Date.now().toString(36)}_${randomBytes(4).toString("hex")}`

// ---------------------------------------------------------------------------------------------
// Child processes

export interface Child {
  readonly process: ChildProcess
  readonly pid: number
  readonly output: () => string
  /** Stops the child (SIGTERM, then SIGKILL after 10 s) and waits for it to exit. */
  readonly stop: () => Promise<void>
}

/**
 * The children's environment without MODELGATE_* variables: the gateway reads those as config
 * overrides, and the benchmark's config must be exactly the file it wrote.
 */
const childEnv = () => Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("MODELGATE_")))

const startChild = (
  args: ReadonlyArray<string>,
  stdin: "pipe" | "ignore",
  env: Record<string, string> = {},
  cwd = ROOT,
  stdout: "pipe" | Writable = "pipe"
): Child => {
  const child = spawn(NODE, args, { cwd, env: { ...childEnv(), ...env }, stdio: [stdin, stdout, "pipe"] })
  // Bounded: only the tail matters for a failure message. Chunks are kept as they come and joined
  // only when asked: a gateway at `log.level: info` sends a chunk per event-loop turn, and copying
  // 20 KB per chunk here took the cores the measured gateway runs on (the ladder's logged rung).
  let chunks: Array<Buffer> = []
  let kept = 0
  const keep = (chunk: Buffer) => {
    chunks.push(chunk)
    kept += chunk.length
    while (chunks.length > 1 && kept - chunks[0]!.length >= 20_000) kept -= chunks.shift()!.length
  }
  const output = () => Buffer.concat(chunks).toString().slice(-20_000)
  child.stdout?.on("data", keep)
  child.stderr!.on("data", keep)
  const exited = new Promise<void>((r) => child.once("exit", () => r()))
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return
    child.kill("SIGTERM")
    const timer = setTimeout(() => child.kill("SIGKILL"), 10_000)
    await exited
    clearTimeout(timer)
  }
  onCleanup(stop)
  return { process: child, pid: child.pid!, output, stop }
}

/** A bench helper (the fake upstream, the reference proxy) in its own process; resolves once it listens. */
const startHelper = async (
  script: string,
  args: ReadonlyArray<string>,
  node: { readonly flags: ReadonlyArray<string>; readonly env: Record<string, string> } = { flags: [], env: {} }
): Promise<Child & { readonly url: string }> => {
  const child = startChild([...node.flags, join(ROOT, "bench", script), ...args], "pipe", node.env)
  const url = await new Promise<string>((resolvePromise, reject) => {
    const timer = setTimeout(() => reject(new Error(`${script} did not start:\n${child.output()}`)), 10_000)
    child.process.stdout!.on("data", () => {
      const match = /listening on (http:\/\/\S+)/.exec(child.output())
      if (match) {
        clearTimeout(timer)
        resolvePromise(match[1]!)
      }
    })
    child.process.once("exit", (code) => {
      clearTimeout(timer)
      reject(new Error(`${script} exited with ${code}:\n${child.output()}`))
    })
  })
  return { ...child, url }
}

export const startUpstream = () => startHelper("upstream.ts", [])

/**
 * One of the cost ladder's floor servers (bench/floor/), forwarding to the upstream scenario `base`,
 * with the Node settings `modelgate serve` runs with (bin/serve-flags.ts), so that a rung's ratio
 * to a floor is the pipeline's own work and not serve's heap settings: they trade CPU for memory
 * (a smaller young generation), and under Node's defaults the gateway-shaped floor cost 128 µs a
 * request against 151 µs under serve's (the gateway 311 against 353 µs, same run; issue 38).
 */
export const startFloorServer = (file: string, base: string) =>
  startHelper(join("floor", file), [base], heapChosen(GATEWAY_NODE_FLAGS, process.env.NODE_OPTIONS)
    ? { flags: GATEWAY_NODE_FLAGS, env: {} }
    : { flags: SERVE_NODE_FLAGS, env: Object.fromEntries(Object.entries(SERVE_ENV).filter(([name]) => process.env[name] === undefined)) })

/** The minimal Node proxy in front of `upstream`, the floor any Node gateway starts from. */
export const startReferenceProxy = (upstream: string) => startHelper("proxy.ts", [upstream])

/** A port that was free a moment ago (the gateway announces nothing at `log.level: none`). */
const freePort = () =>
  new Promise<number>((resolvePromise, reject) => {
    const server = createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      server.close(() => resolvePromise(port))
    })
  })

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/**
 * Extra Node flags for the gateway child only, e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof` to
 * profile it under the benchmark's load (Node refuses those flags in NODE_OPTIONS).
 */
const GATEWAY_NODE_FLAGS = (process.env.BENCH_GATEWAY_NODE_FLAGS ?? "").split(/\s+/).filter((flag) => flag !== "")

/** The gateway's heap settings as the report states them: the `modelgate` command's, unless chosen here. */
export const GATEWAY_HEAP_NOTE = heapChosen(GATEWAY_NODE_FLAGS, process.env.NODE_OPTIONS)
  ? [...GATEWAY_NODE_FLAGS, process.env.NODE_OPTIONS ?? ""].join(" ").trim()
  : `${SERVE_NODE_FLAGS.join(" ")} ${Object.entries(SERVE_ENV).map(([name, value]) => `${name}=${value}`).join(" ")} (bin/serve-flags.ts, the defaults of modelgate serve)`

/**
 * A process of its own that reads a logging gateway's standard output and throws it away, as a
 * log shipper or the container runtime does. Read by the bench process itself, the lines waited
 * for the load generator (busy on the same cores) and the gateway's writes to a full pipe took
 * time the logging does not cost where someone reads the pipe (the ladder's logged rung: +26% CPU
 * per request against +8% with a reader of its own, bench/lone.ts --logs none,info).
 */
const logReader = async (): Promise<Writable> => {
  const reader = spawn("cat", [], { stdio: ["pipe", "ignore", "ignore"] })
  onCleanup(async () => {
    reader.kill("SIGTERM")
  })
  await new Promise<void>((resolve, reject) => {
    reader.once("spawn", () => resolve())
    reader.once("error", reject)
  })
  return reader.stdin!
}

export interface Gateway extends Child {
  readonly url: string
  readonly adminToken: string
}

/**
 * Runs `node bin/modelgate.js --config <file> serve --port <free port>` (what `npm start` and the
 * installed command run) and waits for /healthz, polling every `pollMs`. Retries on a fresh port
 * if another process took the chosen one in between.
 */
export const startGateway = async (
  dir: string,
  name: string,
  config: Record<string, unknown>,
  options: {
    readonly pollMs?: number
    /** Stages swapped for layers that do nothing (bench/serve-variant.ts): the cost ladder's lowest gateway rungs. */
    readonly without?: ReadonlyArray<"audit" | "metrics">
    /** The log level (default none: no request lines); the lines go to a pipe the bench reads. */
    readonly logLevel?: "none" | "info"
    /** Node flags for this gateway (bench/memory.ts's variants), instead of BENCH_GATEWAY_NODE_FLAGS. */
    readonly nodeFlags?: ReadonlyArray<string>
    /** More environment for this gateway (MALLOC_ARENA_MAX, NODE_OPTIONS). */
    readonly env?: Record<string, string>
    /**
     * The source tree to run (a checkout or a `git archive` of another version, with a
     * node_modules), to compare two versions in one run; this checkout by default.
     */
    readonly root?: string
  } = {}
): Promise<Gateway> => {
  const adminToken = `bench-admin-${randomBytes(12).toString("hex")}`
  const configPath = join(dir, `${name}.yaml`)
  writeFileSync(configPath, stringify({ ...config, admin: { token: adminToken }, log: { level: options.logLevel ?? "none" } }))
  for (let attempt = 1;; attempt++) {
    const port = await freePort()
    const command = options.without === undefined
      ? ["bin/modelgate.js", "--config", configPath, "serve", "--port", String(port)]
      // With serve's own Node settings, which bin/modelgate.js would have applied (SERVE_ENV below).
      : [
        ...(heapChosen(GATEWAY_NODE_FLAGS, process.env.NODE_OPTIONS) ? [] : SERVE_NODE_FLAGS),
        "bench/serve-variant.ts",
        "--config",
        configPath,
        "--port",
        String(port),
        "--without",
        options.without.join(",")
      ]
    const variantEnv = options.without !== undefined && !heapChosen(GATEWAY_NODE_FLAGS, process.env.NODE_OPTIONS)
      ? Object.fromEntries(Object.entries(SERVE_ENV).filter(([name]) => process.env[name] === undefined))
      : {}
    const child = startChild(
      [...(options.nodeFlags ?? GATEWAY_NODE_FLAGS), ...command],
      "ignore",
      { ...variantEnv, ...options.env },
      options.root,
      options.logLevel === "info" ? await logReader() : "pipe"
    )
    const url = `http://127.0.0.1:${port}`
    const started = Date.now()
    while (child.process.exitCode === null && Date.now() - started < 30_000) {
      const healthy = await fetch(`${url}/healthz`).then((r) => r.ok, () => false)
      if (healthy) return { ...child, url, adminToken }
      await sleep(options.pollMs ?? 50)
    }
    await child.stop()
    if (attempt >= 3) throw new Error(`gateway ${name} did not start:\n${child.output()}`)
  }
}

export interface CreatedKey {
  readonly id: string
  readonly key: string
}

/** Creates an API key through the admin API, the way an operator would. */
export const createKey = async (gateway: Gateway, body: Record<string, unknown>): Promise<CreatedKey> => {
  const response = await fetch(`${gateway.url}/api-keys`, {
    method: "POST",
    headers: { authorization: `Bearer ${gateway.adminToken}`, "content-type": "application/json" },
    body: JSON.stringify(body)
  })
  const text = await response.text()
  if (response.status !== 201) throw new Error(`creating a key failed: ${response.status} ${text}`)
  const created = JSON.parse(text) as { id: string; key: string }
  return { id: created.id, key: created.key }
}

const statusMiB = (pid: number, field: "VmHWM" | "VmRSS"): number | undefined => {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8")
    const match = new RegExp(`^${field}:\\s+(\\d+)\\s+kB$`, "m").exec(status)
    return match ? Number(match[1]) / 1024 : undefined
  } catch {
    return undefined
  }
}

/** The child's peak resident set (VmHWM), in MiB; Linux only. */
export const peakRssMiB = (pid: number): number | undefined => statusMiB(pid, "VmHWM")

/** The child's resident set now (VmRSS), in MiB; Linux only. */
export const rssMiB = (pid: number): number | undefined => statusMiB(pid, "VmRSS")

const CLOCK_TICKS_PER_SECOND = (() => {
  try {
    return Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100
  } catch {
    return 100
  }
})()

/**
 * User + system CPU time the process has used, in ms (Linux; 10 ms resolution). Unlike wall
 * time it barely moves when other processes compete for the cores.
 */
export const cpuTimeMs = (pid: number): number => {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
  // Fields after the command name, which is in parentheses and may itself contain spaces.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS_PER_SECOND
}

// ---------------------------------------------------------------------------------------------
// Postgres and Redis

export const POSTGRES_ADMIN_URL = process.env.BENCH_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/postgres"
export const REDIS_URL = process.env.BENCH_REDIS_URL ?? "redis://127.0.0.1:6379"

const pgQuery = (url: string, text: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient
    yield* sql.unsafe(text)
  }).pipe(
    Effect.provide(PgClient.layer({ url: Redacted.make(url), maxConnections: 1 }).pipe(Layer.fresh)),
    Effect.runPromise
  )

/** A throwaway database for the Postgres store, dropped on cleanup. */
export const createPostgresDatabase = async (): Promise<string> => {
  const name = `mg_bench_${randomSuffix()}`
  await pgQuery(POSTGRES_ADMIN_URL, `CREATE DATABASE ${name}`)
  onCleanup(() => pgQuery(POSTGRES_ADMIN_URL, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`))
  const url = new URL(POSTGRES_ADMIN_URL)
  url.pathname = `/${name}`
  return url.toString()
}

/** Fails fast with a readable message when Redis is not there, instead of a gateway that never starts. */
export const checkRedis = async () => {
  const client = createClient({ url: REDIS_URL, socket: { connectTimeout: 2_000, reconnectStrategy: false } })
  client.on("error", () => {})
  await client.connect()
  await client.ping()
  await client.quit()
}

/**
 * Deletes the gateway's Redis keys for these API key ids (rate-limit buckets, stream slots).
 * They expire by themselves within a minute; deleting them leaves the server as it was at once.
 */
export const deleteRedisKeysOf = async (keyIds: ReadonlyArray<string>) => {
  const client = createClient({ url: REDIS_URL, socket: { connectTimeout: 2_000, reconnectStrategy: false } })
  client.on("error", () => {})
  await client.connect()
  try {
    for (const id of keyIds) {
      const found: Array<string> = []
      for await (const batch of client.scanIterator({ MATCH: `modelgate:*${id}*`, COUNT: 1000 })) found.push(...batch)
      if (found.length > 0) await client.del(found)
    }
  } finally {
    await client.quit()
  }
}
