/**
 * The suite under load (issue 38: "green five times in a row while a second `npm test` runs on
 * the same machine"): runs `npm test` ROUNDS times in a row while a second `npm test` runs beside
 * it the whole time (restarted whenever it ends), and reports every failed test of every run,
 * the measured runs' and the background's alike, with the machine's load average.
 *
 *   npm run test:stress                  five measured rounds beside a background suite
 *   npm run test:stress -- --rounds 1    one round (to check the script itself)
 *   npm run test:stress -- --no-load     the rounds alone, no background suite
 *   npm run test:stress -- -- test/limits/one-gateway.test.ts
 *                                        what follows `--` goes to vitest (a subset of files)
 *
 * Exit code 0 only when every run (background runs included) passed. Each run's console output
 * and JSON report are kept in a temporary directory, printed at the start.
 */
import { spawn } from "node:child_process"
import { createWriteStream, existsSync, mkdtempSync, readFileSync } from "node:fs"
import { loadavg, tmpdir } from "node:os"
import { join, resolve } from "node:path"

const REPO = resolve(import.meta.dirname, "..")

const usage = (message: string): never => {
  console.error(`test:stress: ${message}\nusage: npm run test:stress -- [--rounds N] [--no-load] [-- <vitest arguments>]`)
  process.exit(2)
}

const argv = process.argv.slice(2)
const separator = argv.indexOf("--")
const own = separator === -1 ? argv : argv.slice(0, separator)
const vitestArgs = separator === -1 ? [] : argv.slice(separator + 1)
let rounds = 5
let withLoad = true
for (let i = 0; i < own.length; i++) {
  const arg = own[i]!
  if (arg === "--rounds") {
    const n = Number(own[++i])
    if (!Number.isInteger(n) || n < 1 || n > 100) usage(`--rounds takes a whole number from 1 to 100, not ${own[i]}`)
    rounds = n
  } else if (arg === "--no-load") withLoad = false
  else usage(`unknown argument ${arg}`)
}

const outDir = mkdtempSync(join(tmpdir(), "modelgate-test-stress-"))
const load = () => loadavg().map((n) => n.toFixed(1)).join(" ")
const log = (line: string) => console.log(`test:stress: ${line}`)

interface Failure {
  readonly file: string
  readonly test: string
  readonly message: string
}

interface RunResult {
  readonly name: string
  readonly exitCode: number | null
  readonly seconds: number
  readonly passed: number
  readonly failures: ReadonlyArray<Failure>
}

interface JsonReport {
  readonly numPassedTests?: number
  readonly testResults?: ReadonlyArray<{
    readonly name: string
    readonly status: string
    readonly message?: string
    readonly assertionResults?: ReadonlyArray<{ readonly fullName: string; readonly status: string; readonly failureMessages?: ReadonlyArray<string> }>
  }>
}

const firstLine = (text: string) => text.split("\n").find((line) => line.trim() !== "")?.trim().slice(0, 300) ?? ""

/** The failures a vitest JSON report lists: failed tests, and files that failed outside any test (a hook, an import). */
const failuresOf = (report: JsonReport): Array<Failure> =>
  (report.testResults ?? []).flatMap((file) => {
    const name = file.name.startsWith(REPO) ? file.name.slice(REPO.length + 1) : file.name
    const tests = (file.assertionResults ?? [])
      .filter((t) => t.status === "failed")
      .map((t) => ({ file: name, test: t.fullName, message: firstLine(t.failureMessages?.[0] ?? "") }))
    if (tests.length === 0 && file.status === "failed") return [{ file: name, test: "(the file itself)", message: firstLine(file.message ?? "") }]
    return tests
  })

let background: ReturnType<typeof spawn> | undefined

/** One `npm test`, its output in `<name>.log` and its JSON report in `<name>.json`. */
const runSuite = (name: string, onStart?: (child: ReturnType<typeof spawn>) => void) =>
  new Promise<RunResult>((done) => {
    const started = performance.now()
    const report = join(outDir, `${name}.json`)
    const output = createWriteStream(join(outDir, `${name}.log`))
    const child = spawn(
      "npm",
      ["test", "--silent", "--", "--reporter=default", "--reporter=json", `--outputFile.json=${report}`, ...vitestArgs],
      { cwd: REPO, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, FORCE_COLOR: "0" }, detached: true }
    )
    onStart?.(child)
    child.stdout.pipe(output, { end: false })
    child.stderr.pipe(output, { end: false })
    child.on("close", (exitCode) => {
      output.end()
      let parsed: JsonReport = {}
      try {
        if (existsSync(report)) parsed = JSON.parse(readFileSync(report, "utf8")) as JsonReport
      } catch {
        // A run killed while writing its report: it is reported as failed without a list.
      }
      const failures = failuresOf(parsed)
      if (exitCode !== 0 && failures.length === 0) {
        failures.push({ file: "(run)", test: "(the run itself)", message: `exit code ${exitCode}, no failed test in its report: see ${name}.log` })
      }
      done({ name, exitCode, seconds: (performance.now() - started) / 1000, passed: parsed.numPassedTests ?? 0, failures })
    })
  })

const results: Array<RunResult> = []
let stopping = false

const describeRun = (run: RunResult) =>
  `${run.name}: ${run.failures.length === 0 ? "green" : `${run.failures.length} failed`}, ${run.passed} passed, ${run.seconds.toFixed(0)} s, load ${load()}`

/** The second suite: runs until the measured rounds are over, each of its runs reported too. */
const backgroundLoop = async () => {
  for (let n = 1; !stopping; n++) {
    const run = await runSuite(`background-${n}`, (child) => {
      background = child
    })
    background = undefined
    // A run cut short because the rounds ended is not a result.
    if (stopping) break
    results.push(run)
    log(describeRun(run))
  }
}

const stopBackground = () => {
  stopping = true
  // Its own process group (detached): npm, vitest and the workers it forked.
  if (background?.pid !== undefined) {
    try {
      process.kill(-background.pid, "SIGTERM")
    } catch {
      // Already gone.
    }
  }
}

process.on("SIGINT", () => {
  stopBackground()
  process.exit(130)
})

log(`${rounds} round(s) of npm test${withLoad ? " beside a second npm test" : ""}; outputs in ${outDir}; load ${load()}`)
const loop = withLoad ? backgroundLoop() : Promise.resolve()
for (let round = 1; round <= rounds; round++) {
  const run = await runSuite(`round-${round}`)
  results.push(run)
  log(describeRun(run))
}
stopBackground()
await loop

const failed = results.filter((run) => run.failures.length > 0)
const byTest = new Map<string, { count: number; runs: Array<string>; message: string }>()
for (const run of failed) {
  for (const failure of run.failures) {
    const id = `${failure.file} > ${failure.test}`
    const entry = byTest.get(id) ?? { count: 0, runs: [], message: failure.message }
    entry.count++
    entry.runs.push(run.name)
    byTest.set(id, entry)
  }
}
const measured = results.filter((run) => run.name.startsWith("round-"))
log(`measured rounds green: ${measured.filter((run) => run.failures.length === 0).length} of ${measured.length}; background runs: ${results.length - measured.length}`)
if (byTest.size === 0) {
  log("no failure")
  process.exit(0)
}
log("failures:")
for (const [id, { count, runs, message }] of [...byTest].sort((a, b) => b[1].count - a[1].count)) {
  console.log(`  ${count}x ${id}\n     in ${runs.join(", ")}\n     ${message}`)
}
process.exit(1)
