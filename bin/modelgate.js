#!/usr/bin/env node
// Runs on the Node 24 that `npm ci` installs into node_modules/.bin (npm and npx put it first on PATH).
// The compile cache is enabled before src/main.ts loads so that it covers main's own imports too:
// Node compiles every TypeScript module on load, and a cached compilation is most of a fast start.
import { enableCompileCache } from "node:module"

enableCompileCache()
await import("../src/main.ts")
