/**
 * The layering the README draws, enforced: imports only point down
 * wire -> domain -> services -> pipelines -> http -> gateway/main, the wire package imports
 * nothing of the gateway's, and the import graph of src has no cycle.
 */
import { readdirSync, readFileSync } from "node:fs"
import { dirname, join, relative, resolve } from "node:path"
import { describe, expect, it } from "vitest"

const root = resolve(import.meta.dirname, "..", "src")
const files = (dir: string): Array<string> =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory() ? files(join(dir, entry.name)) : entry.name.endsWith(".ts") ? [join(dir, entry.name)] : []
  )

const importPattern = /(?:^|\n)\s*(?:import|export)\b[^"']*?from\s*["'](\.[^"']+)["']/g
/** A lazy `import("./x.ts")` is an edge too: loading later does not make an upward import right. */
const dynamicImportPattern = /\bimport\(\s*["'](\.[^"']+)["']\s*\)/g
const graph = new Map<string, Array<string>>()
for (const file of files(root)) {
  const text = readFileSync(file, "utf8")
  const targets = [...text.matchAll(importPattern), ...text.matchAll(dynamicImportPattern)]
  graph.set(relative(root, file), targets.map((m) => relative(root, resolve(dirname(file), m[1]!))))
}

const LAYERS = ["wire", "domain", "services", "pipelines", "http", "cli", "top"] as const
const layerOf = (path: string) => {
  const first = path.split("/")[0]!
  return (LAYERS as ReadonlyArray<string>).includes(first) ? first : "top"
}

describe("architecture", () => {
  it("imports only point down the layers", () => {
    const upward: Array<string> = []
    for (const [file, imports] of graph) {
      for (const target of imports) {
        if (LAYERS.indexOf(layerOf(target) as never) > LAYERS.indexOf(layerOf(file) as never)) upward.push(`${file} -> ${target}`)
      }
    }
    expect(upward).toEqual([])
  })

  it("counts a lazy import() as an edge", () => {
    expect(graph.get("command-line.ts")).toContain("commands/serve.ts")
  })

  it("the wire package imports only itself", () => {
    const outside = [...graph].filter(([file]) => file.startsWith("wire/"))
      .flatMap(([file, imports]) => imports.filter((t) => !t.startsWith("wire/")).map((t) => `${file} -> ${t}`))
    expect(outside).toEqual([])
  })

  it("has no import cycle", () => {
    const state = new Map<string, "visiting" | "done">()
    const cycles: Array<string> = []
    const visit = (file: string, trail: Array<string>) => {
      if (state.get(file) === "done") return
      if (state.get(file) === "visiting") {
        cycles.push([...trail.slice(trail.indexOf(file)), file].join(" -> "))
        return
      }
      state.set(file, "visiting")
      for (const next of graph.get(file) ?? []) visit(next, [...trail, file])
      state.set(file, "done")
    }
    for (const file of graph.keys()) visit(file, [])
    expect(cycles).toEqual([])
  })
})
