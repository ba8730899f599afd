/**
 * Ids drawn from the pooled CSPRNG bytes (src/wire/ids.ts): the right length and alphabet, and
 * never the same twice, across refills of the pool and with draws of mixed sizes.
 */
import { describe, expect, it } from "vitest"
import { newRequestId } from "../../src/pipelines/request.ts"
import { newResponseId, randomHex } from "../../src/wire/ids.ts"

describe("randomHex", () => {
  it("gives `bytes` random bytes as hex, distinct across many pool refills and mixed sizes", () => {
    const seen = new Set<string>()
    for (let i = 0; i < 5_000; i++) {
      const bytes = [16, 12, 5, 16, 33][i % 5]!
      const hex = randomHex(bytes)
      expect(hex).toMatch(new RegExp(`^[0-9a-f]{${bytes * 2}}$`))
      seen.add(hex)
    }
    expect(seen.size).toBe(5_000)
  })

  it("makes request ids that sort by time, so the stores' indexes take them at their end", () => {
    const first = newRequestId()
    const started = Date.now()
    // The next millisecond (a state of the clock, not a wait for a duration).
    while (Date.now() === started) {}
    const later = Array.from({ length: 1_000 }, newRequestId)
    for (const id of later) expect(id > first).toBe(true)
    expect(new Set(later).size).toBe(later.length)
  })

  it("makes the gateway's ids in their formats", () => {
    expect(newResponseId()).toMatch(/^resp_[0-9a-f]{32}$/)
    expect(newRequestId()).toMatch(/^req_[0-9a-f]{32}$/)
    // Larger than the pool's block: still whole.
    expect(randomHex(5_000)).toMatch(/^[0-9a-f]{10000}$/)
  })
})
