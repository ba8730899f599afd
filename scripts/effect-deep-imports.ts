/**
 * Rewrites `import { Effect, Layer } from "effect"` (and "effect/http", "effect/cli", ...) into one
 * import per module: `import * as Effect from "effect/Effect"`. An index import loads every module
 * of its package (about 250 for "effect"), which a CLI command pays in start-up time and the
 * server in memory; test/architecture.test.ts refuses index imports in src, and this fixes them.
 *
 *   node scripts/effect-deep-imports.ts src            rewrite every .ts file under src
 *   node scripts/effect-deep-imports.ts src/main.ts    one file
 */
import { readdirSync, readFileSync, statSync, writeFileSync } from "node:fs"
import { createRequire } from "node:module"
import { dirname, join } from "node:path"

const require = createRequire(import.meta.url)
const effectDist = dirname(require.resolve("effect"))

/** For one index ("effect", "effect/http"): each exported name and the module it comes from. */
const indexOf = (specifier: string): Map<string, { readonly module: string; readonly namespace: boolean }> => {
  const sub = specifier === "effect" ? "" : specifier.slice("effect/".length)
  const text = readFileSync(join(effectDist, sub, "index.js"), "utf8")
  const names = new Map<string, { module: string; namespace: boolean }>()
  for (const match of text.matchAll(/export \* as (\w+) from "\.\/([\w/]+)\.js"/g)) {
    names.set(match[1]!, { module: sub === "" ? `effect/${match[2]}` : `effect/${sub}/${match[2]}`, namespace: true })
  }
  for (const match of text.matchAll(/export \{([^}]*)\} from "\.\/([\w/]+)\.js"/g)) {
    for (const name of match[1]!.split(",").map((n) => n.trim()).filter(Boolean)) {
      names.set(name, { module: sub === "" ? `effect/${match[2]}` : `effect/${sub}/${match[2]}`, namespace: false })
    }
  }
  return names
}

const indexes = new Map<string, ReturnType<typeof indexOf>>()
const IMPORT = /^import\s+(type\s+)?\{([^}]*)\}\s+from\s+"(effect(?:\/[a-z-]+)?)"\s*;?$/gm

export const rewrite = (source: string, file: string): string =>
  source.replace(IMPORT, (whole, allTypes: string | undefined, list: string, specifier: string) => {
    // A module of a subpackage (effect/sql/SqlClient) is already deep: only indexes are rewritten.
    let index = indexes.get(specifier)
    if (index === undefined) {
      try {
        index = indexOf(specifier)
      } catch {
        return whole
      }
      indexes.set(specifier, index)
    }
    const lines: Array<string> = []
    const named = new Map<string, Array<string>>()
    for (const raw of list.split(",").map((n) => n.trim()).filter(Boolean)) {
      const isType = allTypes !== undefined || raw.startsWith("type ")
      const name = raw.replace(/^type\s+/, "")
      const [imported, local = imported] = name.split(/\s+as\s+/).map((s) => s.trim()) as [string, string?]
      const entry = index.get(imported)
      if (entry === undefined) throw new Error(`${file}: ${specifier} has no export ${imported}`)
      if (entry.namespace) {
        lines.push(`import ${isType ? "type " : ""}* as ${local} from "${entry.module}"`)
      } else {
        const list = named.get(entry.module) ?? []
        list.push(`${isType ? "type " : ""}${imported === local ? imported : `${imported} as ${local}`}`)
        named.set(entry.module, list)
      }
    }
    for (const [module, list] of named) lines.push(`import { ${list.join(", ")} } from "${module}"`)
    return lines.join("\n")
  })

const files = (path: string): Array<string> =>
  statSync(path).isDirectory()
    ? readdirSync(path).flatMap((entry) => files(join(path, entry)))
    : path.endsWith(".ts") ? [path] : []

if (import.meta.main) {
  for (const file of process.argv.slice(2).flatMap(files)) {
    const before = readFileSync(file, "utf8")
    const after = rewrite(before, file)
    if (after !== before) {
      writeFileSync(file, after)
      process.stdout.write(`${file}\n`)
    }
  }
}
