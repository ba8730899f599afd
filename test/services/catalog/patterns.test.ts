/** The glob matcher behind `match:` routes and `allowed_models` patterns. */
import { describe, expect, it } from "vitest"
import { bySpecificity, compilePattern, matchesPattern, ROUTABLE_NAME } from "../../../src/services/catalog/patterns.ts"

const matches = (pattern: string, name: string) => matchesPattern(compilePattern(pattern), name)

describe("model-name patterns", () => {
  it("`*` stands for any run of characters, the empty one included", () => {
    expect(matches("claude-*", "claude-sonnet-4-5-20250929")).toBe(true)
    expect(matches("claude-*", "claude-")).toBe(true)
    expect(matches("claude-*", "claude")).toBe(false)
    expect(matches("claude-*", "my-claude-x")).toBe(false)
    expect(matches("o1*", "o1")).toBe(true)
    expect(matches("o1*", "o1-mini")).toBe(true)
    expect(matches("o1*", "o3-mini")).toBe(false)
    expect(matches("*", "anything")).toBe(true)
    expect(matches("*", "")).toBe(true)
    expect(matches("*-latest", "claude-3-5-haiku-latest")).toBe(true)
    expect(matches("*-latest", "claude-3-5-haiku")).toBe(false)
  })

  it("a pattern without `*` is an exact, case-sensitive name", () => {
    expect(matches("gpt-4o", "gpt-4o")).toBe(true)
    expect(matches("gpt-4o", "gpt-4o-mini")).toBe(false)
    expect(matches("gpt-4o", "GPT-4o")).toBe(false)
    expect(matches("claude-*", "Claude-x")).toBe(false)
  })

  it("middle pieces must appear in order, between the fixed ends, without overlapping them", () => {
    expect(matches("claude-*-4-5*", "claude-sonnet-4-5-20250929")).toBe(true)
    expect(matches("claude-*-4-5*", "claude-sonnet-4-1")).toBe(false)
    expect(matches("a*b*c", "abc")).toBe(true)
    expect(matches("a*b*c", "acb")).toBe(false)
    expect(matches("a*b*c", "aXbYbZc")).toBe(true)
    // The fixed prefix and suffix may not share characters: "ab" is not "ab" + "b".
    expect(matches("ab*b", "ab")).toBe(false)
    expect(matches("ab*b", "abb")).toBe(true)
    expect(matches("a*aa*a", "aaa")).toBe(false)
    expect(matches("a*aa*a", "aaaa")).toBe(true)
    expect(matches("a**b", "ab")).toBe(true)
    // A middle piece found only inside the suffix does not count.
    expect(matches("x*yz*z", "xyz")).toBe(false)
    expect(matches("x*yz*z", "xyzz")).toBe(true)
  })

  it("stays linear on names built to make a backtracking matcher slow", () => {
    const pattern = compilePattern("*a*a*a*a*a*a*a*a*a*b")
    const name = "a".repeat(200_000)
    // CPU, not the wall clock: on a loaded machine the worker may wait for a core longer than it computes.
    const started = process.cpuUsage()
    expect(matchesPattern(pattern, name)).toBe(false)
    const spent = process.cpuUsage(started)
    // A backtracking matcher takes seconds here; a linear one about a millisecond.
    expect((spent.user + spent.system) / 1000).toBeLessThan(200)
  })

  it("orders by literal characters, then by literal prefix; equal ones compare equal", () => {
    const sorted = ["*", "claude-*", "*-haiku-*", "claude-3-*", "c*", "*-haiku-4*"].map(compilePattern).sort(bySpecificity).map((p) => p.source)
    // "*-haiku-*" and "claude-*" both have 7 literal characters: the literal prefix decides.
    expect(sorted).toEqual(["claude-3-*", "*-haiku-4*", "claude-*", "*-haiku-*", "c*", "*"])
    expect(bySpecificity(compilePattern("ab*"), compilePattern("ab*"))).toBe(0)
    // Same literal count: the longer prefix is more specific.
    expect(bySpecificity(compilePattern("abc*d"), compilePattern("a*bcd"))).toBeLessThan(0)
  })

  it("routes only names made of the characters real model ids use", () => {
    for (const ok of ["claude-sonnet-4-5", "gpt-4.1-mini", "anthropic/claude-3.5", "llama3:8b", "claude-3@20240229", "ft:gpt-4o:org+x"]) {
      expect(ROUTABLE_NAME.test(ok), ok).toBe(true)
    }
    for (const bad of ["", "claude-*", "claude sonnet", "claude\n", "-x", "a".repeat(257), "é"]) {
      expect(ROUTABLE_NAME.test(bad), bad).toBe(false)
    }
  })
})
