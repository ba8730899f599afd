/**
 * Loaded into a gateway with `--import` by bench/generators.ts: counts the generator functions
 * that `Effect.gen`, `Effect.fnUntraced` and `Effect.fn` see for the first time, by the first
 * call site outside Effect (README, Round 8: a generator function made per request costs V8 a
 * map and a prototype). Effect's source is rewritten as it loads (a module hook, nothing on
 * disk changes). The counts go to the file named by BENCH_GENERATORS_OUT every second; the
 * generators of the gateway's start are counted once each, so per request they round to nothing.
 */
import { writeFileSync } from "node:fs"
import { registerHooks } from "node:module"

const out = process.env.BENCH_GENERATORS_OUT
const seen = new WeakSet<object>()
const sites = new Map<string, number>()

/** Called from the rewritten Effect with each generator body it is given. */
;(globalThis as { __modelgateNoteGenerator?: (body: unknown) => void }).__modelgateNoteGenerator = (body) => {
  if (typeof body !== "function" || seen.has(body) || body.constructor?.name !== "GeneratorFunction") return
  seen.add(body)
  const frames = (new Error().stack ?? "").split("\n").slice(2, 14).map((line) => line.trim().replace(/^at /, "").replace(/file:\/\/\/.*?\/(src|node_modules)\//, "$1/"))
  const own = frames.filter((frame) => !frame.includes("node_modules/effect/"))
  const site = (own.length > 0 ? own.slice(0, 2) : frames.slice(0, 3)).join(" < ")
  sites.set(site, (sites.get(site) ?? 0) + 1)
}

const NOTE = "globalThis.__modelgateNoteGenerator?."
/** Each rewrite must apply: an Effect whose source moved on fails loudly rather than counting nothing. */
const REWRITES: ReadonlyArray<readonly [string, string]> = [
  ["const body = args[0];", `const body = args[0]; ${NOTE}(body);`],
  ["const [options, body] = args;", `const [options, body] = args; ${NOTE}(body);`],
  ["export const fnUntraced = (bodyOrOptions, ...pipeables) => {\n  const body = fnBody(bodyOrOptions, pipeables);", `export const fnUntraced = (bodyOrOptions, ...pipeables) => {\n  const body = fnBody(bodyOrOptions, pipeables); ${NOTE}(body);`],
  ["const makeFn = (name, bodyOrOptions, defError, pipeables, addSpan, spanOptions) => {\n  const body = fnBody(bodyOrOptions, pipeables);", `const makeFn = (name, bodyOrOptions, defError, pipeables, addSpan, spanOptions) => {\n  const body = fnBody(bodyOrOptions, pipeables); ${NOTE}(body);`]
]

registerHooks({
  load(url, context, nextLoad) {
    const loaded = nextLoad(url, context)
    if (!url.endsWith("/effect/dist/internal/effect.js") || loaded.source === undefined || loaded.source === null) return loaded
    let source = String(loaded.source)
    for (const [from, to] of REWRITES) {
      if (!source.includes(from)) throw new Error(`bench/generators-hook.ts: Effect's internal/effect.js no longer contains ${JSON.stringify(from)}`)
      source = source.replace(from, to)
    }
    return { ...loaded, source }
  }
})

if (out !== undefined) {
  setInterval(() => writeFileSync(out, JSON.stringify([...sites])), 1000).unref()
}
