import { Cause, Effect, Fiber } from "effect"
let steps = 0
const step = Effect.gen(function*() {
  steps++
  if (steps === 2) return yield* Effect.interrupt
  if (steps === 3) return yield* Effect.die(new Error("boom"))
  yield* Effect.sleep("20 millis")
})
const loop = Effect.forever(Effect.andThen(step.pipe(Effect.catchCause((c) => Effect.sync(() => console.log("caught", Cause.hasInterruptsOnly(c) ? "interrupt" : "other")))), Effect.sleep("10 millis")))
const fiber = Effect.runFork(loop)
await new Promise((r) => setTimeout(r, 300))
console.log("steps before interrupt", steps)
await Effect.runPromise(Fiber.interrupt(fiber))
const after = steps
await new Promise((r) => setTimeout(r, 100))
console.log("ended; steps after", steps - after, fiber.pollUnsafe?.())
