/**
 * The CI check of issue 40 (scripts/surface.ts): the public surface (routes, GET /openapi.json,
 * config keys, error slugs, metric names, deprecations) against docs/surface.json, the last
 * release's. A difference needs an entry under CHANGELOG.md's "Unreleased"; a removed slug or
 * route needs one under Deprecated or Removed. Run by `npm test`, so `.ci/run` runs it.
 */
import { beforeAll, describe, expect, it } from "@effect/vitest"
import { readFileSync } from "node:fs"
import { CHANGELOG_FILE, checkSurface, currentSurface, readSnapshot, type Surface, unreleasedSection } from "../../scripts/surface.ts"

const CHANGELOG_EMPTY = "# Changelog\n\n## [Unreleased]\n\n## [0.1.0] - 2026-11-22\n\n### Added\n\n- The gateway.\n"
const withUnreleased = (entries: string) => CHANGELOG_EMPTY.replace("## [Unreleased]\n", `## [Unreleased]\n\n${entries}\n`)

describe("the public surface against the last release's (docs/surface.json)", () => {
  let current: Surface
  beforeAll(async () => {
    current = await currentSurface()
  })

  it("is accounted for by CHANGELOG.md (the check CI runs)", () => {
    expect(checkSurface(readSnapshot(), current, readFileSync(CHANGELOG_FILE, "utf8"))).toEqual([])
  })

  it("covers every part it promises", () => {
    expect(current.routes).toEqual(expect.arrayContaining(["POST /v1/chat/completions", "GET /openapi.json", "GET /changelog", "GET /readyz"]))
    expect(current.errors).toMatchObject({ unauthorized: 401, validation_failed: 400, dependency_unavailable: 503 })
    expect(current.config).toEqual(expect.arrayContaining(["server.port", "server.trusted_proxies[]", "models[].deployments[].provider", "routing.allowed_fails"]))
    expect(current.metrics).toMatchObject({ modelgate_requests_total: "counter", modelgate_build_info: "gauge" })
    expect(Object.keys(current.metrics).every((name) => name.startsWith("modelgate_") || name.startsWith("gen_ai_"))).toBe(true)
    expect((current.openapi.paths as Record<string, unknown>)["/api-keys"]).toBeDefined()
    expect(current.openapi.info).not.toHaveProperty("version")
  })

  it("an unchanged surface passes whatever Unreleased says", () => {
    expect(checkSurface(current, current, CHANGELOG_EMPTY)).toEqual([])
  })

  it("an added config key, route or metric fails while Unreleased is empty, and passes with an entry", () => {
    const grown: Surface = {
      ...current,
      config: [...current.config, "server.new_setting"],
      metrics: { ...current.metrics, modelgate_new_total: "counter" }
    }
    const [problem, ...rest] = checkSurface(current, grown, CHANGELOG_EMPTY)
    expect(rest).toEqual([])
    expect(problem).toContain(`changed since ${current.version} and CHANGELOG.md's "Unreleased" section has no entry`)
    expect(problem).toContain("config key added: server.new_setting")
    expect(problem).toContain("metric added: modelgate_new_total")
    // A heading alone, or a comment, is not an entry.
    expect(checkSurface(current, grown, withUnreleased("### Added\n\n<!-- - server.new_setting -->"))).toHaveLength(1)
    expect(checkSurface(current, grown, withUnreleased("### Added\n\n- `server.new_setting` sets the new thing."))).toEqual([])
  })

  it("a changed admin API body fails without an entry", () => {
    const paths = current.openapi.paths as Record<string, Record<string, unknown>>
    const changed: Surface = {
      ...current,
      openapi: { ...current.openapi, paths: { ...paths, "/api-keys": { ...paths["/api-keys"], post: { summary: "different" } } } }
    }
    expect(checkSurface(current, changed, CHANGELOG_EMPTY).join("\n")).toContain("admin API path changed: /api-keys")
  })

  it("a removed slug fails even with an entry, unless Deprecated or Removed names it", () => {
    const { query_too_dangerous: _, ...errors } = current.errors
    const fewer: Surface = { ...current, errors }
    expect(checkSurface(current, fewer, CHANGELOG_EMPTY)).toHaveLength(2)
    expect(checkSurface(current, fewer, withUnreleased("### Changed\n\n- Dangerous queries are refused as `validation_failed`."))).toEqual([
      `slug query_too_dangerous was removed without a notice under "Deprecated" or "Removed" in CHANGELOG.md's "Unreleased" section`
    ])
    expect(checkSurface(current, fewer, withUnreleased("### Removed\n\n- The `query_too_dangerous` slug (deprecated in 0.5.0)."))).toEqual([])
  })

  it("a removed route fails unless Deprecated or Removed names its path", () => {
    const fewer: Surface = { ...current, routes: current.routes.filter((r) => r !== "POST /v1/moderations") }
    expect(checkSurface(current, fewer, withUnreleased("### Changed\n\n- Moderations moved."))).toEqual([
      `route POST /v1/moderations was removed without a notice under "Deprecated" or "Removed" in CHANGELOG.md's "Unreleased" section`
    ])
    expect(checkSurface(current, fewer, withUnreleased("### Deprecated\n\n- `POST /v1/moderations`: sunset 2027-03-01."))).toEqual([])
  })

  it("reads only the Unreleased section", () => {
    const text = "# Changelog\n\n## [Unreleased]\n\n### Added\n\n- a\n\n## [0.2.0] - 2026-11-23\n\n### Removed\n\n- b\n"
    expect(unreleasedSection(text)).toBe("\n### Added\n\n- a\n\n")
    expect(unreleasedSection("# Changelog\n")).toBe("")
  })
})
