/**
 * Turns of the event loop on a large request's path (issue 32: no input may hold the event loop
 * more than 50 ms). A 1 MiB body costs several milliseconds at each stage (decoding the bytes,
 * the depth scan, JSON.parse, the schema, the translation, serializing what goes upstream);
 * done in one turn they added up to 50-70 ms of CPU. Between the stages of a large body the
 * request gives the loop a turn (`Effect.yieldNow` is a `setImmediate`: I/O and timers run
 * before it resumes). A small body goes through without one, as before.
 */
import { Effect } from "effect"

/** From this size a body, or what is serialized from it, gives the loop a turn between stages. */
export const LARGE_BODY_BYTES = 65_536

/** A turn of the event loop when `bytes` is large, else nothing. */
export const turnIfLarge = (bytes: number): Effect.Effect<void> => (bytes >= LARGE_BODY_BYTES ? Effect.yieldNow : Effect.void)

/** The parsed bodies of large requests (their size is no longer at hand once parsed). */
const large = new WeakSet<object>()

export const markLarge = (body: object): void => {
  large.add(body)
}

/** A turn of the event loop when `body` was parsed from a large request, else nothing. */
export const turnIfLargeBody = (body: object): Effect.Effect<void> => (large.has(body) ? Effect.yieldNow : Effect.void)
