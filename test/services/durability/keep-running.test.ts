/**
 * Background loops that must not stop on their own (issue 39: a replica's lease renewal that
 * stopped would let the other replicas refund its live charges). A step that dies, fails or is
 * interrupted from inside is logged and the loop goes on; only the loop's own interruption ends
 * it. And a call abandoned by `abandonAfter` that something else cut off is a failure of the
 * call, not an interruption of its caller.
 */
import { describe, expect, it } from "vitest"
import { Cause, Deferred, Effect, Exit, Fiber, Logger } from "effect"
import { abandonAfter, AttemptTimedOut } from "../../../src/services/durability/backoff.ts"
import { keepRunning } from "../../../src/services/durability/keep-running.ts"

describe("keepRunning", () => {
  it("runs on after a step that fails, dies or is interrupted from inside, and ends when interrupted", async () => {
    const logged: Array<string> = []
    const logger = Logger.make(({ message }) => logged.push(String(Array.isArray(message) ? message[0] : message)))
    let steps = 0
    const program = Effect.gen(function*() {
      const sixth = yield* Deferred.make<void>()
      const step = Effect.suspend(() => {
        steps++
        if (steps === 2) return Effect.fail("store down")
        if (steps === 3) return Effect.die(new Error("a defect"))
        if (steps === 4) return Effect.interrupt
        if (steps === 6) return Deferred.succeed(sixth, undefined)
        return Effect.void
      })
      const loop = yield* Effect.forkDetach(keepRunning("the test loop", step, "1 millis"))
      yield* Deferred.await(sixth)
      yield* Fiber.interrupt(loop)
      return yield* Fiber.await(loop)
    })
    const exit = await Effect.runPromise(program.pipe(Effect.provide(Logger.layer([logger]))))
    expect(steps).toBeGreaterThanOrEqual(6)
    expect(Exit.isFailure(exit) && Cause.hasInterruptsOnly(exit.cause)).toBe(true)
    expect(logged.filter((line) => line.includes("a step failed"))).toHaveLength(2)
    expect(logged.filter((line) => line.includes("a step was interrupted"))).toHaveLength(1)
  })
})

describe("abandonAfter", () => {
  it("answers a call cut off by something else with a failure, not by interrupting the caller", async () => {
    const exit = await Effect.runPromiseExit(abandonAfter(Effect.interrupt, "5 seconds"))
    expect(Exit.isFailure(exit)).toBe(true)
    if (Exit.isFailure(exit)) {
      expect(Cause.hasInterrupts(exit.cause)).toBe(false)
      expect(Cause.squash(exit.cause)).toBeInstanceOf(AttemptTimedOut)
    }
  })

  it("passes a call's own failure and value through", async () => {
    expect(await Effect.runPromise(abandonAfter(Effect.succeed(7), "5 seconds"))).toBe(7)
    const failed = await Effect.runPromiseExit(abandonAfter(Effect.fail("no"), "5 seconds"))
    expect(Exit.isFailure(failed) && Cause.squash(failed.cause)).toBe("no")
  })
})
