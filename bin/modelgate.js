#!/usr/bin/env node
// Runs on the Node 24 that `npm ci` installs into node_modules/.bin (npm and npx put it first on PATH).
import { enableCompileCache } from "node:module"

// Enabled before any TypeScript module loads, serve-flags.ts included (hence the dynamic import
// below: a static one would load before this line runs). Node compiles every TypeScript module on
// load, and a cached compilation is most of a fast start; a module that misses the cache also
// loads Node's type stripper (a WebAssembly build of swc), which stays in the process for good:
// about 4 MiB of heap and 17 MiB of resident memory.
enableCompileCache()
const { heapChosen, SERVE_ENV, SERVE_NODE_FLAGS } = await import("./serve-flags.ts")

// `serve` runs with the Node flags and environment of serve-flags.ts unless the operator chose
// heap settings of their own (then all of these step aside). Heap sizes are fixed when V8 starts
// and glibc reads its malloc settings as the process starts, so Node is started again with them:
// execve keeps the process id, stdio and signals (what a supervisor sees), and costs one Node
// start (about 40 ms). A variable the operator set wins over serve's default for it.
if (process.argv.slice(2).includes("serve") && !heapChosen(process.execArgv, process.env.NODE_OPTIONS) && typeof process.execve === "function") {
  try {
    process.execve(process.execPath, [process.execPath, ...process.execArgv, ...SERVE_NODE_FLAGS, ...process.argv.slice(1)], { ...SERVE_ENV, ...process.env })
  } catch (error) {
    // execve returns only when it failed (a sandbox may forbid it): serve with Node's defaults.
    process.emitWarning(`modelgate: could not restart Node with ${SERVE_NODE_FLAGS.join(" ")}: ${error.message}`)
  }
}

// The server bundle when it was built from these sources, the sources otherwise (server-bundle.ts).
const { serverEntry } = await import("./server-bundle.ts")
await import(serverEntry())
