/** Runs `modelgate` as a real child process (for signals, the CLI, and several replicas). */
import { type ChildProcess, spawn } from "node:child_process"
import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { stringify } from "yaml"
import { serverEntryFile } from "../../bin/server-bundle.ts"
import * as TerminalCapabilities from "effect/cli/TerminalCapabilities"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Fiber from "effect/Fiber"
import { Console as NodeConsole } from "node:console"
import { Writable } from "node:stream"

export const ROOT = resolve(import.meta.dirname, "../..")
export const NODE = process.execPath
/**
 * What a child runs: what `modelgate` runs (bin/server-bundle.ts), the server bundle when it was
 * built from the sources as they are (as after `npm ci`, and in CI), the sources otherwise (after
 * an edit, until `npm run build:server`). A child from the bundle starts on about a third of the
 * CPU; the tests about which modules load name src/main.ts themselves.
 */
export const ENTRY = serverEntryFile(process.env, ROOT)

export const tempDir = (prefix = "modelgate-test-") => mkdtempSync(join(tmpdir(), prefix))

/**
 * The environment of a child Node: the test's, plus a compile cache shared by every child of
 * every run. Each child otherwise compiles the gateway and its dependencies from scratch, which
 * is most of its start (about 1.4 s of CPU, 0.85 s with the cache) and the suites here start
 * dozens; the cache is keyed by file contents and Node version, so a changed file is recompiled.
 */
export const childEnv = (env: Record<string, string> = {}): NodeJS.ProcessEnv => ({
  NODE_COMPILE_CACHE: join(tmpdir(), "modelgate-test-compile-cache"),
  ...process.env,
  ...env
})

export const writeConfig = (dir: string, config: Record<string, unknown>) => {
  const path = join(dir, "modelgate.yaml")
  writeFileSync(path, stringify(config))
  return path
}

export interface GatewayProcess {
  readonly url: string
  readonly child: ChildProcess
  readonly output: () => string
  readonly stop: (signal?: NodeJS.Signals) => Promise<number | null>
}

/** `entry`: the script Node runs, ENTRY unless a test needs the installed command (`bin/modelgate.js`) or the sources. */
export const spawnGateway = (configPath: string, env: Record<string, string> = {}, entry = ENTRY): Promise<GatewayProcess> =>
  new Promise((resolvePromise, reject) => {
    const child = spawn(NODE, [entry, "--config", configPath, "serve", "--port", "0"], {
      cwd: ROOT,
      env: childEnv(env),
      stdio: ["ignore", "pipe", "pipe"]
    })
    let output = ""
    const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)))
    const timer = setTimeout(() => reject(new Error(`gateway did not start:\n${output}`)), 45_000)
    const onData = (chunk: Buffer) => {
      output += chunk.toString()
      const match = /listening on (http:\/\/[^\s"]+)/.exec(output)
      if (match) {
        clearTimeout(timer)
        resolvePromise({
          url: match[1]!,
          child,
          output: () => output,
          stop: (signal = "SIGTERM") => {
            if (child.exitCode === null) child.kill(signal)
            return exited
          }
        })
      }
    }
    child.stdout!.on("data", onData)
    child.stderr!.on("data", onData)
    child.once("exit", (code) => {
      clearTimeout(timer)
      reject(new Error(`gateway exited with ${code}:\n${output}`))
    })
  })

/**
 * The command line's module, loaded by the first test that runs a command: most files import this
 * one for `tempDir` or `spawnGateway` only, and need not load the CLI's grammar.
 */
const commandLine = () => import("../../src/command-line.ts")

export interface CliResult {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

/**
 * Runs a command line to completion in this process: the same command tree as `node src/main.ts`
 * (src/command-line.ts), with the test's environment plus `env`, and stdout and stderr captured
 * through a console of its own (Node's, so a line is formatted as the real process prints it).
 * A child Node per command used to be most of the suite's time; `runCliProcess` remains for the
 * tests of the process boundary itself (exit status, module loading).
 */
export const runCli = async (args: ReadonlyArray<string>, env: Record<string, string> = {}): Promise<CliResult> => {
  const run = await inProcess(args, env)
  const code = await Effect.runPromise(run.program)
  return { code, stdout: run.stdout(), stderr: run.stderr() }
}

/** A command line ready to run in this process, its output captured as a pipe would take it. */
const inProcess = async (args: ReadonlyArray<string>, env: Record<string, string>) => {
  const { runCommandLine } = await commandLine()
  let stdout = ""
  let stderr = ""
  const sink = (append: (text: string) => void) =>
    new Writable({
      write(chunk: Buffer | string, _encoding, callback) {
        append(chunk.toString())
        callback()
      }
    })
  const console = new NodeConsole({ stdout: sink((t) => (stdout += t)), stderr: sink((t) => (stderr += t)), colorMode: false })
  const program = runCommandLine(args, { env: { ...process.env, ...env } }).pipe(
    Effect.provideService(Console.Console, console),
    // What the real process detects on a pipe: no colours, no prompts.
    Effect.provideService(TerminalCapabilities.TerminalCapabilities, { canColor: false, canAnimate: false, canPrompt: false })
  )
  return { program, stdout: () => stdout, stderr: () => stderr }
}

export interface ServeInProcess {
  readonly url: string
  /** stdout and stderr so far, in the order written (as spawnGateway's `output`). */
  readonly output: () => string
  /** Stops it as SIGTERM does the process (the command is interrupted, its finalizers drain and flush). */
  readonly stop: () => Promise<void>
}

/**
 * `modelgate --config <path> serve --port 0` run in this process: the same command line, config
 * loading and announcement as `spawnGateway`, without a child Node. For tests of what `serve`
 * prints and does, where the process boundary itself (signals, exit status) is not the point.
 */
export const serveInProcess = async (
  args: ReadonlyArray<string>,
  env: Record<string, string> = {},
  /** The line that says it is up, its first group the URL (another one when the log level hides the listening line). */
  ready: RegExp = /listening on (http:\/\/[^\s"]+)/
): Promise<ServeInProcess> => {
  let output = ""
  const sink = new Writable({
    write(chunk: Buffer | string, _encoding, callback) {
      output += chunk.toString()
      callback()
    }
  })
  const console = new NodeConsole({ stdout: sink, stderr: sink, colorMode: false })
  const { runCommandLine } = await commandLine()
  const fiber = Effect.runFork(
    runCommandLine(args, { env: { ...process.env, ...env } }).pipe(
      Effect.provideService(Console.Console, console),
      Effect.provideService(TerminalCapabilities.TerminalCapabilities, { canColor: false, canAnimate: false, canPrompt: false })
    )
  )
  let ended: number | undefined
  fiber.addObserver((exit) => (ended = Exit.isSuccess(exit) ? exit.value : -1))
  const deadline = Date.now() + 45_000
  for (;;) {
    const match = ready.exec(output)
    if (match) return { url: match[1]!, output: () => output, stop: () =>
          Effect.runPromise(Fiber.interrupt(fiber))
            // Log lines leave once per event-loop turn (src/services/logging/line-sink.ts): one more turn writes the last ones.
            .then(() => new Promise<void>((resolve) => setImmediate(resolve))) }
    if (ended !== undefined) throw new Error(`serve ended with ${ended}:\n${output}`)
    if (Date.now() > deadline) {
      await Effect.runPromise(Fiber.interrupt(fiber))
      throw new Error(`serve did not start:\n${output}`)
    }
    await new Promise((r) => setTimeout(r, 20))
  }
}

/** Runs the command line (ENTRY, or `entry`) as a child process to completion (for what only a real process shows). */
export const runCliProcess = (args: ReadonlyArray<string>, env: Record<string, string> = {}, entry = ENTRY) =>
  new Promise<CliResult>((resolvePromise) => {
    const child = spawn(NODE, [entry, ...args], { cwd: ROOT, env: childEnv(env) })
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (c) => (stdout += c))
    child.stderr.on("data", (c) => (stderr += c))
    child.on("exit", (code) => resolvePromise({ code, stdout, stderr }))
  })
