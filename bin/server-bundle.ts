/**
 * Which code `modelgate` runs: the server bundle (`dist/server/`, built by scripts/build-server.ts
 * on `npm ci` and in the container image) when it was built from the sources as they are now, the
 * sources themselves otherwise.
 *
 * The bundle is the same program in a few files: the modules the process loads are tree-shaken and
 * minified together, so the process holds about a fifth less heap at rest and compiles one file
 * rather than ~830 when it starts (README, Memory and start-up). A bundle older than an edit to
 * the sources would run code that is no longer there, so each build records a fingerprint of what
 * it was built from (every file's path, size and modification time under src/, the lockfile and
 * the build script) and a start whose sources no longer match runs from the sources, silently: a
 * developer's edit takes effect without a rebuild, at the sources' cost.
 *
 * MODELGATE_FROM_SOURCE=1 runs from the sources regardless (profiles that name src/ files).
 */
import { createHash } from "node:crypto"
import { readdirSync, readFileSync, statSync } from "node:fs"
import { join, relative } from "node:path"
import { pathToFileURL } from "node:url"

export const ROOT = join(import.meta.dirname, "..")
export const BUNDLE_DIR = join(ROOT, "dist", "server")
export const BUNDLE_ENTRY = join(BUNDLE_DIR, "main.js")
export const FINGERPRINT_FILE = join(BUNDLE_DIR, "sources.json")
/** What, besides src/, decides the bundle's contents. */
const INPUTS = ["package-lock.json", "package.json", join("scripts", "build-server.ts")]

/** Path, size and modification time of every input, hashed (about 2 ms for src/'s ~270 files). */
export const sourcesFingerprint = (root: string = ROOT): string => {
  const hash = createHash("sha256")
  const src = join(root, "src")
  const files = readdirSync(src, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => join(entry.parentPath, entry.name))
    .sort()
  for (const file of [...files, ...INPUTS.map((input) => join(root, input))]) {
    let line: string
    try {
      const stat = statSync(file)
      line = `${relative(root, file)}\t${stat.size}\t${stat.mtimeMs}\n`
    } catch {
      line = `${relative(root, file)}\tmissing\n`
    }
    hash.update(line)
  }
  return hash.digest("hex")
}

/** The fingerprint the bundle was built from, or undefined when there is no bundle. */
export const bundledFingerprint = (root: string = ROOT): string | undefined => {
  try {
    const recorded = JSON.parse(readFileSync(join(root, "dist", "server", "sources.json"), "utf8")) as { fingerprint?: unknown }
    return typeof recorded.fingerprint === "string" ? recorded.fingerprint : undefined
  } catch {
    return undefined
  }
}

/** The module to run: the bundle's entry when it matches the sources, src/main.ts otherwise. */
export const serverEntryFile = (env: NodeJS.ProcessEnv = process.env, root: string = ROOT): string => {
  const fromSource = join(root, "src", "main.ts")
  if (env.MODELGATE_FROM_SOURCE === "1") return fromSource
  const recorded = bundledFingerprint(root)
  return recorded !== undefined && recorded === sourcesFingerprint(root) ? join(root, "dist", "server", "main.js") : fromSource
}

/** serverEntryFile as a URL for `import()`. */
export const serverEntry = (env: NodeJS.ProcessEnv = process.env, root: string = ROOT): string => pathToFileURL(serverEntryFile(env, root)).href
