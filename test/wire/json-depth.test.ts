/** The depth check in front of JSON.parse of what an upstream (or a tool call's arguments) holds. */
import { describe, expect, it } from "vitest"
import { nestsDeeperThan, parseJsonWithin } from "../../src/wire/json-depth.ts"

describe("nestsDeeperThan", () => {
  it("counts arrays and objects, not brackets inside strings or escaped quotes", () => {
    expect(nestsDeeperThan(`[[[]]]`, 3)).toBe(false)
    expect(nestsDeeperThan(`[[[[]]]]`, 3)).toBe(true)
    expect(nestsDeeperThan(`{"a":{"b":[1]}}`, 3)).toBe(false)
    expect(nestsDeeperThan(`{"a":{"b":[{}]}}`, 3)).toBe(true)
    expect(nestsDeeperThan(`{"a":"[[[[[[\\"[[[["}`, 1)).toBe(false)
    expect(nestsDeeperThan(`["\\\\",[[]]]`, 2)).toBe(true)
    expect(nestsDeeperThan(`[1],[2],[3],[4]`, 1)).toBe(false)
  })

  it("refuses 100,000 levels with the error JSON.parse throws, and parses what is within", () => {
    const deep = "[".repeat(100_000) + "]".repeat(100_000)
    expect(() => parseJsonWithin(deep)).toThrow(SyntaxError)
    expect(parseJsonWithin(`{"a":[1,{"b":"]]]"}]}`)).toEqual({ a: [1, { b: "]]]" }] })
    expect(() => parseJsonWithin("{")).toThrow(SyntaxError)
  })

  it("is quick on a long text with few structural characters", () => {
    const text = `{"a":"${"x".repeat(8 * 1_048_576)}"}`
    // CPU time of this thread, so a loaded machine does not count; a loop over every character took 40-60 ms.
    const cpu = () => (process.threadCpuUsage().user + process.threadCpuUsage().system) / 1000
    const started = cpu()
    expect(nestsDeeperThan(text, 512)).toBe(false)
    expect(cpu() - started).toBeLessThan(20)
  })
})
