/**
 * Start-up: what an operator waits for and what the process holds before any traffic. The CLI
 * commands run as real processes (`node bin/modelgate.js ...`), the way an operator runs them;
 * each reports its own CPU time and peak RSS as it exits (bench/usage-at-exit.ts). `serve` is
 * timed from spawn to its first /healthz 200, and its resident set read once it has sat idle.
 */
import { spawn } from "node:child_process"
import { readFileSync, rmSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { stringify } from "yaml"
import { median } from "./load.ts"
import { cpuTimeMs, NODE, ROOT, rssMiB, startGateway } from "./processes.ts"

export interface StartupRow {
  readonly command: string
  readonly runs: number
  /** Medians over the runs: spawn to exit (or to ready, for serve), CPU of the process, its peak (or idle) RSS. */
  readonly wallMs: number
  readonly cpuMs: number
  readonly rssMiB: number
  readonly exitCode: number | null
}

const BIN = join(ROOT, "bin", "modelgate.js")
const USAGE_HOOK = join(ROOT, "bench", "usage-at-exit.ts")

/** One CLI run: wall time measured here, CPU and peak RSS reported by the child as it exits. */
const runCli = (dir: string, args: ReadonlyArray<string>) =>
  new Promise<{ wallMs: number; cpuMs: number; rssMiB: number; code: number | null }>((resolvePromise, reject) => {
    const usageFile = join(dir, "usage.json")
    rmSync(usageFile, { force: true })
    const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("MODELGATE_")))
    const started = performance.now()
    const child = spawn(NODE, ["--import", USAGE_HOOK, BIN, ...args], {
      cwd: ROOT,
      env: { ...env, BENCH_USAGE_FILE: usageFile },
      stdio: ["ignore", "ignore", "pipe"]
    })
    let stderr = ""
    child.stderr.on("data", (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-2000)))
    child.once("error", reject)
    child.once("exit", (code) => {
      const wallMs = performance.now() - started
      try {
        const usage = JSON.parse(readFileSync(usageFile, "utf8")) as { cpuMs: number; maxRssKiB: number }
        resolvePromise({ wallMs, cpuMs: usage.cpuMs, rssMiB: usage.maxRssKiB / 1024, code })
      } catch {
        reject(new Error(`modelgate ${args.join(" ")} reported no usage (exit ${code}):\n${stderr}`))
      }
    })
  })

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/**
 * `--help`, a config error, `keys list` on a SQLite store with a few keys, and `serve` to ready.
 * One untimed run of each first, so the compile cache is warm as it is on an operator's machine.
 */
export const measureStartup = async (dir: string, options: { readonly runs: number; readonly idleSettleMs: number }) => {
  const good = join(dir, "startup.yaml")
  writeFileSync(good, stringify({ store: `sqlite:${join(dir, "startup.db")}` }))
  const bad = join(dir, "startup-bad.yaml")
  writeFileSync(bad, stringify({ server: { port: "eighty" } }))
  for (let i = 0; i < 3; i++) await runCli(dir, ["--config", good, "keys", "create", "--name", `startup-${i}`])

  const commands: ReadonlyArray<readonly [string, ReadonlyArray<string>]> = [
    ["modelgate --help", ["--help"]],
    ["modelgate keys list (invalid config: exit 1)", ["--config", bad, "keys", "list"]],
    ["modelgate keys list (SQLite, 3 keys)", ["--config", good, "keys", "list"]]
  ]
  const rows: Array<StartupRow> = []
  for (const [command, args] of commands) {
    await runCli(dir, args)
    const runs = []
    for (let i = 0; i < options.runs; i++) runs.push(await runCli(dir, args))
    rows.push({
      command,
      runs: runs.length,
      wallMs: median(runs.map((r) => r.wallMs)),
      cpuMs: median(runs.map((r) => r.cpuMs)),
      rssMiB: median(runs.map((r) => r.rssMiB)),
      exitCode: runs[0]!.code
    })
  }

  const serves = []
  for (let i = 0; i < Math.max(1, Math.ceil(options.runs / 3)); i++) {
    const started = performance.now()
    const gateway = await startGateway(dir, `startup-${i}`, { store: `sqlite:${join(dir, `startup-serve-${i}.db`)}` }, { pollMs: 10 })
    const wallMs = performance.now() - started
    const cpuMs = cpuTimeMs(gateway.pid)
    await sleep(options.idleSettleMs)
    serves.push({ wallMs, cpuMs, rssMiB: rssMiB(gateway.pid) ?? Number.NaN })
    await gateway.stop()
  }
  rows.push({
    command: `modelgate serve, to the first /healthz 200 (RSS: idle ${options.idleSettleMs / 1000} s later)`,
    runs: serves.length,
    wallMs: median(serves.map((r) => r.wallMs)),
    cpuMs: median(serves.map((r) => r.cpuMs)),
    rssMiB: median(serves.map((r) => r.rssMiB)),
    exitCode: null
  })
  return rows
}
