/**
 * The public surface, and the check that keeps CHANGELOG.md honest about it (issue 40; spec
 * section 9: additive changes are announced in a changelog, deprecations ahead, slugs stable).
 *
 * The surface is what a client, an operator or a tool depends on: every route the gateway
 * serves, the admin API's OpenAPI document (GET /openapi.json, built by the same function), the
 * config file's keys, the error slug table with its statuses, the gateway's metric names and
 * the declared deprecations. docs/surface.json is the surface of the last release; the check
 * fails when
 *   - the surface differs from it and CHANGELOG.md's "Unreleased" section says nothing, or
 *   - a slug or a route was removed and Unreleased does not name it under Deprecated or Removed.
 *
 *   node scripts/surface.ts            check (exit 1 with the reasons); test/docs/surface.test.ts runs it under npm test
 *   node scripts/surface.ts --write    write the current surface as the snapshot (at a release)
 */
import { readFileSync, writeFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { Effect } from "effect"
import { DEPRECATIONS } from "../src/domain/deprecation.ts"
import { errorTable } from "../src/domain/errors.ts"
import { VERSION } from "../src/domain/version.ts"
import { withDeprecations } from "../src/http/deprecation.ts"
import { adminRoutes } from "../src/http/routes/admin.ts"
import { makeAdminAuth } from "../src/http/routes/admin-auth.ts"
import { CALLBACK_PATH, START_PATH } from "../src/http/routes/admin-oidc.ts"
import { adminReloadRoutes } from "../src/http/routes/admin-reload.ts"
import { adminSubjectRoutes } from "../src/http/routes/admin-subjects.ts"
import { appRoutes } from "../src/http/routes/app.ts"
import { changelogRoutes } from "../src/http/routes/changelog.ts"
import { completionRoutes } from "../src/http/routes/completions.ts"
import { healthRoutes, metricsRoute } from "../src/http/routes/health.ts"
import { modelRoutes } from "../src/http/routes/models.ts"
import { openApiDocument, openApiRoutes } from "../src/http/routes/openapi.ts"
import { keyTree, type KeyNode } from "../src/services/config/schema.ts"
import { makeMetrics } from "../src/services/metrics/Metrics.ts"

export const SNAPSHOT_FILE = fileURLToPath(new URL("../docs/surface.json", import.meta.url))
export const CHANGELOG_FILE = fileURLToPath(new URL("../CHANGELOG.md", import.meta.url))

export interface Surface {
  /** The release this surface is (package.json's version when it was written). */
  readonly version: string
  /** `<METHOD> <path>` of every route, sorted. */
  readonly routes: ReadonlyArray<string>
  /** Error slug -> HTTP status. */
  readonly errors: Readonly<Record<string, number>>
  /** Every config key as a dotted path (`models[].deployments[].weight`), sorted. */
  readonly config: ReadonlyArray<string>
  /** Metric name -> type, the gateway's own (`modelgate_*`, `gen_ai_*`; not Node's default ones). */
  readonly metrics: Readonly<Record<string, string>>
  /** The declared deprecations (src/domain/deprecation.ts). */
  readonly deprecations: Readonly<Record<string, unknown>>
  /** GET /openapi.json without its info.version (which changes with every release by itself). */
  readonly openapi: Readonly<Record<string, unknown>>
}

const configKeys = (node: KeyNode, prefix: string): Array<string> => {
  if (node === "scalar") return [prefix]
  if (typeof node === "object" && "items" in node && Object.keys(node).length === 1 && typeof node.items !== "undefined") {
    return configKeys(node.items as KeyNode, `${prefix}[]`)
  }
  return Object.entries(node as Record<string, KeyNode>).flatMap(([key, child]) => configKeys(child, prefix === "" ? key : `${prefix}.${key}`))
}

/** The routes the gateway serves, as gateway.ts assembles them (the identity-provider sign-in when configured). */
const servedRoutes = (): Array<string> => {
  const auth = makeAdminAuth({ token: "s".repeat(32), secure: false })
  const routes = withDeprecations([
    ...healthRoutes(1000),
    metricsRoute(undefined),
    ...modelRoutes,
    ...completionRoutes,
    ...adminRoutes({ auth }),
    ...adminSubjectRoutes({ auth }),
    ...adminReloadRoutes({ auth }),
    ...openApiRoutes(VERSION),
    ...changelogRoutes,
    ...appRoutes({ auth, identityProvider: undefined })
  ])
  return [...routes.map((r) => `${r.method} ${r.path}`), `GET ${START_PATH}`, `GET ${CALLBACK_PATH}`].sort()
}

const metricTypes = async (): Promise<Record<string, string>> => {
  const text = await Effect.runPromise(makeMetrics().render({ auditBuffered: 0, auditDropped: 0 }))
  const types: Record<string, string> = {}
  for (const match of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    if (match[1]!.startsWith("modelgate_") || match[1]!.startsWith("gen_ai_")) types[match[1]!] = match[2]!
  }
  return Object.fromEntries(Object.entries(types).sort(([a], [b]) => a.localeCompare(b)))
}

export const currentSurface = async (): Promise<Surface> => {
  const { info, ...openapi } = openApiDocument(VERSION) as { info: Record<string, unknown> } & Record<string, unknown>
  const { version: _, ...infoWithoutVersion } = info
  return {
    version: VERSION,
    routes: servedRoutes(),
    errors: Object.fromEntries(Object.values(errorTable).map((e) => [e.slug, e.status]).sort(([a], [b]) => String(a).localeCompare(String(b)))),
    config: configKeys(keyTree, "").sort(),
    metrics: await metricTypes(),
    deprecations: DEPRECATIONS,
    openapi: { ...openapi, info: infoWithoutVersion }
  }
}

/** What changed between two surfaces, one line per change, and which of them are removals that need a notice. */
export const diffSurfaces = (before: Surface, after: Surface) => {
  const changes: Array<string> = []
  const removed: Array<{ readonly kind: "route" | "slug"; readonly name: string }> = []
  const lists = (kind: string, a: ReadonlyArray<string>, b: ReadonlyArray<string>) => {
    for (const x of b) if (!a.includes(x)) changes.push(`${kind} added: ${x}`)
    for (const x of a) if (!b.includes(x)) changes.push(`${kind} removed: ${x}`)
  }
  const records = (kind: string, a: Readonly<Record<string, unknown>>, b: Readonly<Record<string, unknown>>) => {
    for (const key of new Set([...Object.keys(a), ...Object.keys(b)])) {
      if (!(key in a)) changes.push(`${kind} added: ${key}`)
      else if (!(key in b)) changes.push(`${kind} removed: ${key}`)
      else if (JSON.stringify(a[key]) !== JSON.stringify(b[key])) changes.push(`${kind} changed: ${key}`)
    }
  }
  lists("route", before.routes, after.routes)
  records("error slug", before.errors, after.errors)
  lists("config key", before.config, after.config)
  records("metric", before.metrics, after.metrics)
  records("deprecation", before.deprecations, after.deprecations)
  const paths = (s: Surface) => (s.openapi.paths ?? {}) as Record<string, unknown>
  records("admin API path", paths(before), paths(after))
  const { paths: _a, ...restBefore } = before.openapi
  const { paths: _b, ...restAfter } = after.openapi
  if (JSON.stringify(restBefore) !== JSON.stringify(restAfter)) changes.push("OpenAPI document changed outside its paths (schemas, info)")
  for (const route of before.routes) if (!after.routes.includes(route)) removed.push({ kind: "route", name: route })
  for (const slug of Object.keys(before.errors)) if (!(slug in after.errors)) removed.push({ kind: "slug", name: slug })
  return { changes, removed }
}

/** The text of one `## [Unreleased]` section, without its heading; "" when absent. */
export const unreleasedSection = (changelog: string): string => {
  const start = changelog.search(/^## \[Unreleased\]/m)
  if (start < 0) return ""
  const rest = changelog.slice(start).split("\n").slice(1).join("\n")
  const end = rest.search(/^## /m)
  return end < 0 ? rest : rest.slice(0, end)
}

/** The bullet text under `### <name>` within a section. */
const subsection = (section: string, name: string): string => {
  const start = section.search(new RegExp(`^### ${name}\\s*$`, "m"))
  if (start < 0) return ""
  const rest = section.slice(start).split("\n").slice(1).join("\n")
  const end = rest.search(/^### /m)
  return end < 0 ? rest : rest.slice(0, end)
}

/** An entry is a list item; headings, link references and comments are not. */
const hasEntry = (text: string) => /^\s*[-*] \S/m.test(text.replace(/<!--[\s\S]*?-->/g, ""))

/**
 * The check: a list of problems, empty when CHANGELOG.md accounts for every difference.
 * A removed slug or route must be named (in backquotes or not) under Deprecated or Removed.
 */
export const checkSurface = (snapshot: Surface, current: Surface, changelog: string): Array<string> => {
  const { changes, removed } = diffSurfaces(snapshot, current)
  if (changes.length === 0) return []
  const unreleased = unreleasedSection(changelog)
  const problems: Array<string> = []
  if (!hasEntry(unreleased)) {
    problems.push(
      `the public surface changed since ${snapshot.version} and CHANGELOG.md's "Unreleased" section has no entry:\n` +
        changes.map((c) => `  ${c}`).join("\n")
    )
  }
  const notices = subsection(unreleased, "Deprecated") + subsection(unreleased, "Removed")
  for (const { kind, name } of removed) {
    const named = kind === "slug" ? name : name.split(" ")[1]!
    if (!notices.includes(named)) {
      problems.push(`${kind} ${name} was removed without a notice under "Deprecated" or "Removed" in CHANGELOG.md's "Unreleased" section`)
    }
  }
  return problems
}

export const readSnapshot = (file = SNAPSHOT_FILE): Surface => JSON.parse(readFileSync(file, "utf8")) as Surface

if (import.meta.main) {
  const current = await currentSurface()
  if (process.argv.includes("--write")) {
    writeFileSync(SNAPSHOT_FILE, `${JSON.stringify(current, null, 2)}\n`)
    console.log(`wrote ${SNAPSHOT_FILE} (${current.version})`)
  } else {
    const problems = checkSurface(readSnapshot(), current, readFileSync(CHANGELOG_FILE, "utf8"))
    for (const problem of problems) console.error(problem)
    if (problems.length > 0) process.exit(1)
    console.log(`public surface: accounted for by CHANGELOG.md (snapshot ${readSnapshot().version})`)
  }
}
