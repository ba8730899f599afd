/**
 * The tokenizer's own thread (issue 32: no input may hold the event loop more than 50 ms): the
 * estimate counts on it exactly what it counted on the gateway's thread, a thread that dies is
 * started again, and one that cannot start leaves the estimates to the gateway's thread rather
 * than failing them.
 */
import { countTokens } from "gpt-tokenizer/encoding/o200k_base"
import { afterEach, describe, expect, it } from "vitest"
import { countSliced, TokenizerThread } from "../../../src/services/tokens/TokenEstimator.ts"

const threads: Array<TokenizerThread> = []
const thread = (url?: URL) => {
  const made = new TokenizerThread(url)
  threads.push(made)
  return made
}
afterEach(async () => {
  await Promise.all(threads.splice(0).map((t) => t.close()))
})

const prose = "The quick brown fox jumps over the lazy dog. 中文也算。 ".repeat(400)

describe("the tokenizer's thread", () => {
  it("counts what the gateway's thread counted, for many texts at once", async () => {
    const tokenizer = thread()
    expect(tokenizer.running).toBe(false)
    const texts = [prose, "", "one", "中".repeat(5_000), "😀".repeat(700)]
    const counts = await Promise.all(texts.map((text) => tokenizer.count(text)))
    expect(counts).toEqual(texts.map((text) => countSliced(countTokens, text)))
    expect(tokenizer.running).toBe(true)
    expect(tokenizer.takeFallback()).toBeUndefined()
  })

  it("starts again after it died, and the count that killed it is answered", async () => {
    const tokenizer = thread(new URL("../../support/tokenizer-worker-flaky.ts", import.meta.url))
    expect(await tokenizer.count("abc")).toBe(3)
    // "die" kills the stand-in: the retry on a new thread dies too, so it is counted here.
    expect(await tokenizer.count("die")).toBe(countSliced(countTokens, "die"))
    expect(tokenizer.takeFallback()).toMatch(/the tokenizer thread stopped: it exited with code 3/)
    expect(tokenizer.takeFallback()).toBeUndefined()
  })

  it("a thread that dies once is replaced, and the others' counts go on", async () => {
    const tokenizer = thread(new URL("../../support/tokenizer-worker-flaky.ts", import.meta.url))
    const [killed, other] = await Promise.allSettled([tokenizer.count("die"), tokenizer.count("abcd")])
    expect(killed.status).toBe("fulfilled")
    expect(other).toEqual({ status: "fulfilled", value: expect.any(Number) })
  })

  it("one that cannot start leaves the estimates to the gateway's thread, said once", async () => {
    const tokenizer = thread(new URL("../../support/no-such-worker.ts", import.meta.url))
    expect(await tokenizer.count(prose)).toBe(countSliced(countTokens, prose))
    expect(tokenizer.takeFallback()).toMatch(/the tokenizer thread could not start/)
    expect(await tokenizer.count("more")).toBe(countSliced(countTokens, "more"))
    expect(tokenizer.takeFallback()).toBeUndefined()
  })
})
