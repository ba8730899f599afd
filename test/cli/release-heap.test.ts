import { describe, expect, it } from "vitest"
import { runInNewContext } from "node:vm"
import { releaseStartupHeap } from "../../src/commands/release-heap.ts"

describe("the heap given back once serve listens", () => {
  it("runs V8's memory-reducing collection without exposing gc to the gateway's code", () => {
    expect(releaseStartupHeap()).toBe(true)
    // Neither the main context nor a context made afterwards gets `gc`.
    expect((globalThis as { gc?: unknown }).gc).toBeUndefined()
    expect(runInNewContext("typeof gc")).toBe("undefined")
  })
})
