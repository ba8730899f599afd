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
    // CPU time of this thread, so waiting for a core does not count. But a loaded machine still
    // stretches CPU time (a fixed 20 ms bound failed at 22 ms in a run beside a second suite), so
    // the bound is a ratio to a plain loop over every character measured in the same run: what
    // the check must not become (such a loop took 40-60 ms). The best of three of each.
    const cpu = () => {
      const { user, system } = process.threadCpuUsage()
      return (user + system) / 1000
    }
    const best = (work: () => unknown) => {
      let least = Infinity
      for (let run = 0; run < 3; run++) {
        const started = cpu()
        work()
        least = Math.min(least, cpu() - started)
      }
      return least
    }
    const everyCharacter = () => {
      let brackets = 0
      for (let i = 0; i < text.length; i++) if (text.charCodeAt(i) === 91) brackets++
      return brackets
    }
    // Its expressions compiled (and tiered up) on a short text first, as on a gateway in service.
    expect(nestsDeeperThan(`{"a":"${"x".repeat(1_024)}","b":[[1]]}`, 1)).toBe(true)
    expect(nestsDeeperThan(text, 512)).toBe(false)
    const check = best(() => nestsDeeperThan(text, 512))
    const loop = best(everyCharacter)
    expect(check, `the check took ${check} ms of CPU, a loop over every character ${loop} ms`).toBeLessThan(loop / 2)
  })
})
