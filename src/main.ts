/**
 * The `modelgate` command: `serve` runs the gateway, `keys ...` and `credits ...` manage the
 * configured store directly, for operators without the admin API.
 *
 * This file is only the process's wiring: the command line itself (command-line.ts) runs with
 * this process's arguments, environment and console, and its exit status becomes the process's.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Cause from "effect/Cause"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Runtime from "effect/Runtime"
import { enableCompileCache } from "node:module"
import { runCommandLine } from "./command-line.ts"
import { losses } from "./services/durability/losses.ts"
import { type LogFormat, noticeLine } from "./services/logging/notice.ts"

// Node compiles every TypeScript module it loads; the cache keeps that work across runs (keyed by
// file contents and Node version). bin/modelgate.js enables it before this file loads; this covers
// `node src/main.ts` for the commands' modules. NODE_DISABLE_COMPILE_CACHE=1 turns it off.
enableCompileCache()

// serve's log.format, once its config is loaded: the line about lost records follows it.
let logFormat: LogFormat | undefined

runCommandLine(process.argv.slice(2), { env: process.env, onLogFormat: (format) => (logFormat = format) }).pipe(
  // A failed command exits at once with its status, as before the split (finalizers already ran).
  Effect.flatMap((code) => code === 0 ? Effect.void : Effect.sync(() => process.exit(code))),
  (program) =>
    NodeRuntime.runMain(program, {
      // A SIGTERM/SIGINT is the normal way to stop a server: once the finalizers ran (audit flushed), exit 0,
      // unless they could not keep every record (issue 21): then 1, saying how many, so a supervisor can tell.
      teardown: (exit, onExit) => {
        const lost = losses()
        if (lost.count > 0) {
          const message = `stopped without keeping ${lost.count} records (${lost.summary}); see the log above`
          process.stderr.write(noticeLine(logFormat, "ERROR", `modelgate: ${message}`, { message }) + "\n")
          return onExit(1)
        }
        return Exit.isFailure(exit) && Cause.hasInterruptsOnly(exit.cause) ? onExit(0) : Runtime.defaultTeardown(exit, onExit)
      }
    })
)
