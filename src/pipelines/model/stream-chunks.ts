/**
 * Stream steps that keep an upstream read's events together. Effect streams carry arrays
 * (chunks); `Stream.flattenIterable` opens a stream per element and re-chunks one element at a
 * time, so every later stage, and the write to the client, would run once per event. These keep
 * one chunk in, one chunk out (bench/profile.ts measured the difference per streamed chunk).
 */
import { type Array as Arr, type Cause, Channel, type Context, Effect, Exit, Pull, Scope, Stream } from "effect"
import { constVoid } from "effect/Function"

/** Each element is a list of events (a translator's output for one upstream event): all of one chunk's lists, as one chunk. */
export const flattenEach = <A, E, R>(self: Stream.Stream<ReadonlyArray<A>, E, R>): Stream.Stream<A, E, R> =>
  Stream.mapAccumArray(self, constVoid, (_, lists) => [undefined, lists.flat() as Array<A>] as const)

/**
 * The stream's pull, run in the context it was opened in (the request's: its span, its log
 * annotations), as `Stream.toPull` runs it. That one provides the context with
 * `Effect.provideContext` on every pull, which merges it into the running fiber's by copying
 * every service into a new map, and takes a semaphore each time; this reader is one fiber
 * pulling in turn, and sets the context it captured as it is (issue 38).
 */
const pullIn = <A, E>(stream: Stream.Stream<A, E>, scope: Scope.Scope): Effect.Effect<Pull.Pull<Arr.NonEmptyReadonlyArray<A>, E>> =>
  Effect.contextWith((context: Context.Context<never>) =>
    Effect.map(
      Channel.toPullScoped(Stream.toChannel(stream), scope),
      (pull) => Effect.updateContext(pull, (_: Context.Context<never>) => context)
    )
  )

/**
 * The stream with its first chunk already read (issue 20 follow-up). An upstream that accepted
 * the request and then fails before its first event (an in-band `error` event, a cut, an idle
 * timeout) fails this effect, inside the routing attempt that opened it: it is retried or failed
 * over, and when nothing answers the client gets the error's status (a 502 with `retry-after`
 * its SDK retries) instead of a 200 followed by an in-band error. A stream that ends without any
 * event stays empty. The pull's scope is closed when the returned stream ends, however it ends.
 */
export const withFirstChunk = <A, E>(stream: Stream.Stream<A, E>): Effect.Effect<Stream.Stream<A, E>, E> =>
  Effect.uninterruptibleMask((restore) => Effect.gen(() => firstChunkSteps(stream, restore)))

/** withFirstChunk's steps: a generator defined once, not made per stream (README, Generators made per request). */
function* firstChunkSteps<A, E>(stream: Stream.Stream<A, E>, restore: <X, Y, Z>(effect: Effect.Effect<X, Y, Z>) => Effect.Effect<X, Y, Z>) {
  const scope = yield* Scope.make()
  const pull = yield* pullIn(stream, scope)
  const first = yield* Effect.exit(restore(pull))
  if (Exit.isFailure(first)) {
    yield* Scope.close(scope, first)
    if (Pull.isDoneCause(first.cause)) return Stream.empty
    return yield* Effect.failCause(first.cause as Cause.Cause<E>)
  }
  let pending: Arr.NonEmptyReadonlyArray<A> | undefined = first.value
  const replay = Effect.suspend(() => {
    if (pending === undefined) return pull
    const chunk = pending
    pending = undefined
    return Effect.succeed(chunk)
  })
  return Stream.fromPull(Effect.succeed(replay)).pipe(Stream.ensuring(Scope.close(scope, Exit.void)))
}
