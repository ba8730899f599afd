import { describe, expect, it } from "vitest"
import { matchesUriTemplate, MAX_TEMPLATE_CHARS, parseUriTemplate } from "../../../src/services/mcp/uri-template.ts"

const matches = (template: string, uri: string) => matchesUriTemplate(parseUriTemplate(template)!, uri)

describe("resource template matching (routing reads of templated URIs to their server)", () => {
  it("recognizes instances by each operator's expansion", () => {
    expect(matches("demo://resource/dynamic/text/{resourceId}", "demo://resource/dynamic/text/7")).toBe(true)
    expect(matches("test://template/{id}/data", "test://template/123/data")).toBe(true)
    expect(matches("file:///{+path}", "file:///a/b/c.txt")).toBe(true)
    expect(matches("x://search{?q,lang}", "x://search?q=1&lang=en")).toBe(true)
    expect(matches("x://search{?q,lang}", "x://search")).toBe(true)
    expect(matches("x://doc{/section}", "x://doc/intro")).toBe(true)
    expect(matches("x://fixed", "x://fixed")).toBe(true)
  })

  it("refuses what the template cannot produce", () => {
    // A simple expression never spans a path separator.
    expect(matches("test://template/{id}/data", "test://template/1/2/data")).toBe(false)
    expect(matches("file:///{path}", "file:///a/b/c.txt")).toBe(false)
    expect(matches("demo://resource/dynamic/text/{resourceId}", "demo://resource/dynamic/blob/7")).toBe(false)
    expect(matches("x://search{?q}", "x://search#frag")).toBe(false)
    expect(matches("x://fixed", "x://fixed/more")).toBe(false)
  })

  it("refuses malformed and oversized templates instead of guessing", () => {
    expect(parseUriTemplate("x://{a")).toBeUndefined()
    expect(parseUriTemplate("x://a}")).toBeUndefined()
    expect(parseUriTemplate("x://{a{b}}")).toBeUndefined()
    expect(parseUriTemplate("x://{}")).toBeUndefined()
    expect(parseUriTemplate(`x://${"a".repeat(MAX_TEMPLATE_CHARS)}`)).toBeUndefined()
  })

  it("stays linear on a hostile template (no backtracking on an upstream's text)", () => {
    // A regular expression built from this template would try every split of the URI among the
    // expressions; the matcher walks the literals once.
    const template = parseUriTemplate(`x://${"{a}-".repeat(200)}end`)!
    const uri = `x://${"b-".repeat(199)}${"b".repeat(1_000)}`
    // No clock: a backtracking matcher takes minutes for one call and runs into the test's timeout.
    for (let i = 0; i < 100; i++) expect(matchesUriTemplate(template, uri)).toBe(false)
  }, 30_000)
})
