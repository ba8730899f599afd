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
import { existsSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs"
import { join, relative } from "node:path"
import { pathToFileURL } from "node:url"

export const ROOT = join(import.meta.dirname, "..")
/** Every build in a directory of its own under here, and `current.json` naming the one to run. */
export const BUNDLE_DIR = join(ROOT, "dist", "server")
const MANIFEST = "current.json"
/** A build's directory, as the manifest names it (nothing that could lead out of BUNDLE_DIR). */
const BUILD_ENTRY = /^[a-z0-9-]{1,64}\/main\.js$/
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

export interface Manifest {
  /** sourcesFingerprint() when the build started. */
  readonly fingerprint: string
  /** `<build>/main.js`, relative to the bundle directory. */
  readonly entry: string
}

/** The current build's manifest, or undefined when there is none (or it is not one). */
export const readManifest = (bundleDir: string = BUNDLE_DIR): Manifest | undefined => {
  try {
    const manifest = JSON.parse(readFileSync(join(bundleDir, MANIFEST), "utf8")) as Partial<Manifest>
    return typeof manifest.fingerprint === "string" && typeof manifest.entry === "string" && BUILD_ENTRY.test(manifest.entry)
      ? { fingerprint: manifest.fingerprint, entry: manifest.entry }
      : undefined
  } catch {
    return undefined
  }
}

/**
 * Makes `manifest` the current build (a rename: a process starting meanwhile reads the old
 * manifest or the new one, never half of one), then deletes every other build but the one it
 * replaces: a process still running that one (an upgrade in place, before the restart) imports
 * its lazily loaded files from it later.
 */
export const publishBuild = (manifest: Manifest, bundleDir: string = BUNDLE_DIR): void => {
  const previous = readManifest(bundleDir)
  const staged = join(bundleDir, `${MANIFEST}.${process.pid}.tmp`)
  writeFileSync(staged, JSON.stringify(manifest) + "\n")
  renameSync(staged, join(bundleDir, MANIFEST))
  const keep = new Set([manifest.entry, previous?.entry].flatMap((entry) => entry === undefined ? [] : [entry.split("/")[0]!]))
  for (const name of readdirSync(bundleDir)) {
    if (name === MANIFEST || keep.has(name)) continue
    rmSync(join(bundleDir, name), { recursive: true, force: true })
  }
}

/** The module to run: the current build's entry when it was built from these sources, src/main.ts otherwise. */
export const serverEntryFile = (env: NodeJS.ProcessEnv = process.env, root: string = ROOT): string => {
  const fromSource = join(root, "src", "main.ts")
  if (env.MODELGATE_FROM_SOURCE === "1") return fromSource
  const manifest = readManifest(join(root, "dist", "server"))
  if (manifest === undefined || manifest.fingerprint !== sourcesFingerprint(root)) return fromSource
  // A build deleted by hand (or by a second build running at once) leaves a manifest naming nothing.
  const entry = join(root, "dist", "server", manifest.entry)
  return existsSync(entry) ? entry : fromSource
}

/** serverEntryFile as a URL for `import()`. */
export const serverEntry = (env: NodeJS.ProcessEnv = process.env, root: string = ROOT): string => pathToFileURL(serverEntryFile(env, root)).href
