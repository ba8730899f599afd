/**
 * Does the Postgres pool come back after a freeze longer than the lease, under a flow of
 * abandoned statements? Renewal-like calls (deadline 667 ms) every 100 ms, plus bursts of
 * audit-like inserts, through a throwaway Postgres frozen 4 s at a random phase; after thaw,
 * measure how long until a renewal lands. Repeats.
 */
import { Duration, Effect, Layer, ManagedRuntime } from "effect"
import { StoreLayer } from "../src/services/store/StoreLayer.ts"
import { CreditsRepo } from "../src/services/store/CreditsRepo.ts"
import { StoreDeadline } from "../src/services/store/StoreError.ts"
import { Cause, Exit, Fiber } from "effect"
import { AttemptTimedOut } from "../src/services/durability/backoff.ts"
const kinds = new Map<string, number>()
const abandonAfter = <A, E>(effect: Effect.Effect<A, E>, timeout: Duration.Input) =>
  Effect.gen(function*() {
    const fiber = yield* Effect.forkDetach(effect)
    const exit = yield* Effect.timeoutOption(Fiber.await(fiber), timeout)
    if (exit._tag === "Some") {
      const e = exit.value
      if (Exit.isFailure(e)) {
        const kind = Cause.hasInterruptsOnly(e.cause) ? "interrupt" : Cause.hasDies(e.cause) ? "die:" + String(Cause.squash(e.cause)).slice(0, 80) : "fail"
        kinds.set(kind, (kinds.get(kind) ?? 0) + 1)
      }
      return yield* e
    }
    yield* Effect.forkDetach(Fiber.interrupt(fiber))
    return yield* Effect.fail(new AttemptTimedOut({ message: "no answer in time" }))
  })
import { startPostgres } from "../test/support/throwaway.ts"

const pg = await startPostgres()
const rt = ManagedRuntime.make(StoreLayer.fromUrl(pg.url).pipe(Layer.provideMerge(Layer.succeed(StoreDeadline, Duration.seconds(6)))))
const repo = await rt.runPromise(Effect.gen(function*() { return yield* CreditsRepo }))
await rt.runPromise(repo.ensureWorkspace(1000))
let landed = 0
let failed = 0
let lastOk = performance.now()
const renew = () =>
  rt.runPromise(abandonAfter(repo.renewReplica("rep_x", 2000), Duration.millis(667)).pipe(
    Effect.tap(() => Effect.sync(() => { landed++; lastOk = performance.now() })),
    Effect.catch(() => Effect.sync(() => { failed++ }))
  ))
let stop = false
const loop = (async () => {
  while (!stop) {
    await renew()
    for (let i = 0; i < Number(process.env.BURST ?? 8); i++) void renew()
    await new Promise((r) => setTimeout(r, 100))
  }
})()
const rounds = Number(process.env.ROUNDS ?? 20)
for (let round = 0; round < rounds; round++) {
  await new Promise((r) => setTimeout(r, 500 + Math.random() * 1500))
  pg.freeze()
  await new Promise((r) => setTimeout(r, 4000))
  pg.thaw()
  const thawed = performance.now()
  while (lastOk < thawed && performance.now() - thawed < 30_000) await new Promise((r) => setTimeout(r, 20))
  const took = lastOk >= thawed ? Math.round(lastOk - thawed) : -1
  console.log(`round ${round}: first renewal after thaw ${took} ms (landed ${landed}, failed ${failed}) ${JSON.stringify([...kinds])}`)
  if (took < 0) { console.log("STUCK"); break }
}
stop = true
await loop
await rt.dispose()
await pg.destroy()
