/**
 * `node bench/generators.ts [model] [seconds] [budget]`: which generator functions a gateway
 * makes per request (README, Round 8: each one costs V8 a map and a prototype at its first
 * call). Runs bench/profile.ts's load (same models, same arguments; default `bench-free`, 6 s,
 * `nobudget`) on a gateway from its sources with bench/generators-hook.ts loaded, then prints
 * every call site of `Effect.gen`, `Effect.fnUntraced` or `Effect.fn` that was given a generator
 * function it had not seen, with how many per request. On the request path the answer should be
 * none but Effect's own stream operators; test/hot-path-generators.test.ts holds the same rule
 * for the source it can read.
 */
import { spawnSync } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"

const [model = "bench-free", seconds = "6", budget = "nobudget"] = process.argv.slice(2)
const ROOT = resolve(import.meta.dirname, "..")
const dir = mkdtempSync(join(tmpdir(), "modelgate-generators-"))
const out = join(dir, "sites.json")
/** Sites made fewer times per request than this are the gateway's start, or rare paths. */
const PER_REQUEST_FLOOR = 0.01

try {
  const run = spawnSync(process.execPath, [join(ROOT, "bench", "profile.ts"), model, seconds, "32", budget], {
    cwd: ROOT,
    env: { ...process.env, BENCH_GATEWAY_NODE_FLAGS: `--import ${join(ROOT, "bench", "generators-hook.ts")}`, BENCH_GENERATORS_OUT: out },
    encoding: "utf8"
  })
  const summary = /(\d+) requests/.exec(run.stderr)
  if (run.status !== 0 || summary === null) throw new Error(`bench/profile.ts failed (${run.status}):\n${run.stderr.slice(-2000)}`)
  const requests = Number(summary[1])
  const sites = JSON.parse(readFileSync(out, "utf8")) as Array<[string, number]>
  const perRequest = sites.map(([site, count]) => [site, count / requests] as const).filter(([, rate]) => rate >= PER_REQUEST_FLOOR)
  process.stdout.write(`${model}: ${requests} requests; generator functions made per request, by call site:\n`)
  if (perRequest.length === 0) process.stdout.write("  none\n")
  for (const [site, rate] of perRequest.sort((a, b) => b[1] - a[1])) process.stdout.write(`  ${rate.toFixed(2).padStart(6)}  ${site}\n`)
} finally {
  rmSync(dir, { recursive: true, force: true })
}
