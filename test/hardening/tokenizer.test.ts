/**
 * Issue 22, finding 1: the count_tokens estimate must be linear in the text. One 98 KB request of
 * a single CJK character repeated took the event loop 2-8 s (9.6 s here) because byte-pair
 * encoding costs the square of a piece's length and an unbroken run is one piece.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { countTokens } from "gpt-tokenizer/encoding/o200k_base"
import { countSliced, estimateWith, SLICE_CHARS } from "../../src/services/tokens/TokenEstimator.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { watchLoopCpu } from "../support/loop-cpu.ts"

const cjk = "中".repeat(32_768)

describe("the token estimate is linear by construction", () => {
  it("never hands the tokenizer a piece longer than SLICE_CHARS", () => {
    const seen: Array<number> = []
    const recording = (text: string) => {
      seen.push(text.length)
      return countTokens(text)
    }
    estimateWith(recording, { messages: [{ role: "user", content: cjk }] })
    expect(Math.max(...seen)).toBeLessThanOrEqual(SLICE_CHARS)
    expect(seen.reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(cjk.length)
  })

  it("keeps the count of ordinary text close to the whole count, and splits no surrogate pair", () => {
    const prose = "The quick brown fox jumps over the lazy dog, again and again. ".repeat(600)
    const whole = countTokens(prose)
    const sliced = countSliced(countTokens, prose)
    expect(Math.abs(sliced - whole) / whole).toBeLessThan(0.02)
    const emoji = "😀".repeat(2_000)
    const pieces: Array<string> = []
    countSliced((text) => (pieces.push(text), 1), emoji)
    expect(pieces.join("")).toBe(emoji)
    for (const piece of pieces) expect(piece.isWellFormed()).toBe(true)
  })

  describe("through the real server", () => {
    let gw: TestGateway
    beforeAll(async () => {
      gw = await startGateway(testConfig())
    })
    afterAll(async () => {
      await gw?.close()
    })

    it("a 98 KB unbroken CJK run is counted without holding the event loop", async () => {
      const { key } = await gw.createKey()
      // Measure the loop, not the request, in CPU time of its thread (a loaded machine stretches
      // wall-clock gaps with time spent waiting for a core, not this).
      const loop = watchLoopCpu()
      let worstTurnMs = 0
      try {
        const response = await fetch(`${gw.url}/v1/messages/count_tokens`, {
          method: "POST",
          headers: { "x-api-key": key, "content-type": "application/json", "anthropic-version": "2023-06-01" },
          body: JSON.stringify({ model: "echo", messages: [{ role: "user", content: cjk }] })
        })
        expect(response.status).toBe(200)
        const { input_tokens } = (await response.json()) as { input_tokens: number }
        expect(input_tokens).toBeGreaterThan(1_000)
      } finally {
        worstTurnMs = loop.stop()
      }
      // Before the fix: seconds (9.6 s measured). After: a few ms of tokenizing plus the
      // tokenizer's first load (about 180 ms of CPU, README "Memory and start-up").
      expect(worstTurnMs, "the longest turn of the event loop, in CPU ms of its thread").toBeLessThan(1_000)
    })
  })
})
