/**
 * Stream steps that keep an upstream read's events together. Effect streams carry arrays
 * (chunks); `Stream.flattenIterable` opens a stream per element and re-chunks one element at a
 * time, so every later stage, and the write to the client, would run once per event. These keep
 * one chunk in, one chunk out (bench/profile.ts measured the difference per streamed chunk).
 */
import { Stream } from "effect"
import { constVoid } from "effect/Function"

/** Each element is a list of events (a translator's output for one upstream event): all of one chunk's lists, as one chunk. */
export const flattenEach = <A, E, R>(self: Stream.Stream<ReadonlyArray<A>, E, R>): Stream.Stream<A, E, R> =>
  Stream.mapAccumArray(self, constVoid, (_, lists) => [undefined, lists.flat() as Array<A>] as const)
