/**
 * Builds the server bundle that `modelgate` runs (bin/server-bundle.ts says when):
 *
 *   node scripts/build-server.ts [--out DIR]      (npm run build:server; `npm ci` runs it)
 *
 * src/main.ts and everything it imports, with the libraries published as ES modules (Effect, the
 * MCP SDK, jose, openid-client), tree-shaken and minified into a few files in a directory of this
 * build's own under dist/server/, made current when whole (bin/server-bundle.ts).
 * Dynamic imports stay chunks of their own, so a feature's code still loads only when a
 * deployment uses it. Libraries published as CommonJS (undici, the SQL drivers and parsers, the
 * Redis client, prom-client, yaml) are left to Node to load from node_modules as before: they are
 * not tree-shaken by a bundler anyway, and some of them find their own files at run time.
 *
 * Function and class names are kept (stack traces stay readable) and source maps are written
 * next to the files: `NODE_OPTIONS=--enable-source-maps` points a trace at src/.
 *
 * A file the sources name relative to themselves (`new URL("../../package.json", import.meta.url)`:
 * the admin app, the changelog, the workers) is re-pointed from the output directory, so it is
 * the same file; any other use of import.meta fails the build rather than the running gateway.
 *
 * Without src/ (a container build installs the dependencies before it copies the sources) there
 * is nothing to build yet: the Dockerfile runs this again once they are there.
 */
import { existsSync, mkdirSync, readFileSync, rmSync } from "node:fs"
import { dirname, join, relative, resolve } from "node:path"
import { parseArgs } from "node:util"

const ROOT = resolve(import.meta.dirname, "..")
const SRC = join(ROOT, "src")
if (!existsSync(join(SRC, "main.ts"))) {
  console.log("build-server: no src/ here yet, nothing to build (the Dockerfile builds once it copies the sources)")
  process.exit(0)
}
// Loaded once the sources are known to be here (bin/ comes with them in a container build).
const { BUNDLE_DIR, publishBuild, sourcesFingerprint } = await import("../bin/server-bundle.ts")

// Taken before the build reads the sources: an edit made during the build leaves the bundle stale.
const fingerprint = sourcesFingerprint()
// `--out DIR`: the files only, straight into DIR (tests). Otherwise a directory of this build's
// own under dist/server/, made current once whole (bin/server-bundle.ts, publishBuild).
const { values } = parseArgs({ options: { out: { type: "string" } } })
const build = `${Date.now().toString(36)}-${fingerprint.slice(0, 8)}`
const outDir = values.out === undefined ? join(BUNDLE_DIR, build) : resolve(values.out)

/** `@scope/name` or `name` of a bare specifier; undefined for paths and `node:` modules. */
const packageOf = (specifier: string): string | undefined => {
  if (specifier.startsWith(".") || specifier.startsWith("/") || specifier.includes(":")) return undefined
  const parts = specifier.split("/")
  return specifier.startsWith("@") ? parts.slice(0, 2).join("/") : parts[0]
}

/** The directory of the copy of `name` that `importer` resolves to (the nearest node_modules above it). */
const installedFrom = (name: string, importer: string): string | undefined => {
  for (let dir = dirname(importer);; dir = dirname(dir)) {
    const candidate = join(dir, "node_modules", name)
    if (existsSync(join(candidate, "package.json"))) return candidate
    if (dirname(dir) === dir) return undefined
  }
}

const esModule = new Map<string, boolean>()
const isEsModule = (packageDir: string): boolean => {
  let known = esModule.get(packageDir)
  if (known === undefined) {
    known = (JSON.parse(readFileSync(join(packageDir, "package.json"), "utf8")) as { type?: string }).type === "module"
    esModule.set(packageDir, known)
  }
  return known
}

/**
 * Left to Node: built-ins, and CommonJS packages that the bundle's directory resolves to the very
 * copy the importer would have (a copy nested under another package is bundled instead).
 */
const external = (specifier: string, importer: string | undefined): boolean => {
  if (specifier.startsWith("node:")) return true
  const name = packageOf(specifier)
  if (name === undefined || importer === undefined) return false
  const wanted = installedFrom(name, importer)
  if (wanted === undefined) return false
  return !isEsModule(wanted) && wanted === join(ROOT, "node_modules", name)
}

const URL_OF_FILE = /new URL\((["'])([^"'`]+)\1,\s*import\.meta\.url\)/g
const REQUIRE_HERE = /createRequire\(import\.meta\.url\)/g

/** Re-points `new URL("<relative>", import.meta.url)` in a src module from the output directory. */
const sameFiles = {
  name: "modelgate:same-files",
  transform(code: string, id: string) {
    if (!id.startsWith(SRC + "/") || !code.includes("import.meta")) return null
    const rewritten = code.replace(URL_OF_FILE, (_match, quote: string, path: string) => {
      let target = relative(outDir, resolve(dirname(id), path))
      if (path.endsWith("/")) target += "/"
      if (!target.startsWith(".")) target = `./${target}`
      return `new URL(${quote}${target}${quote}, import.meta.url)`
    })
    const left = rewritten.replace(URL_OF_FILE, "").replace(REQUIRE_HERE, "")
    if (left.includes("import.meta")) {
      throw new Error(`${relative(ROOT, id)} uses import.meta in a way the bundle cannot keep: name a file as new URL("<relative path>", import.meta.url)`)
    }
    return { code: rewritten, map: null }
  }
}

const { rolldown } = await import("rolldown")
const started = performance.now()
const bundle = await rolldown({
  input: { main: join(SRC, "main.ts") },
  platform: "node",
  cwd: ROOT,
  external,
  plugins: [sameFiles],
  logLevel: "warn"
})
rmSync(outDir, { recursive: true, force: true })
mkdirSync(outDir, { recursive: true })
const written = await bundle.write({
  dir: outDir,
  format: "esm",
  sourcemap: true,
  minify: { compress: { keepNames: { function: true, class: true } }, mangle: { keepNames: true } }
})
await bundle.close()
// Published last: a build that failed half-way is never current, and the previous one (or the
// sources) still runs.
if (values.out === undefined) publishBuild({ fingerprint, entry: `${build}/main.js` })
const files = written.output.filter((file) => file.type === "chunk").length
console.log(`build-server: ${files} files in ${relative(ROOT, outDir) || outDir} (${Math.round(performance.now() - started)} ms)`)
