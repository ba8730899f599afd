/**
 * Waiting for a state, never for a clock (issue 39): `waitFor` polls a check until it holds. Its
 * deadline is not what a test asserts, only how long it waits before saying what it was waiting
 * for; so it is generous by default (a machine at load 10 is slow, not wrong). A test that needs a
 * promise about time checks the state that keeps it (a poll ran, a lease was renewed, Redis's
 * clock passed a lease's end), or runs on the TestClock.
 */

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

/** How long `waitFor` waits by default before it fails the test, naming what did not happen. */
export const WAIT_MS = 15_000

/** Polls `check` every `everyMs` until it is true; fails with `what` after `ms`. */
export const waitFor = async (what: string, check: () => boolean | Promise<boolean>, ms = WAIT_MS, everyMs = 10) => {
  const deadline = Date.now() + ms
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`not in time (${ms} ms): ${what}`)
    await sleep(everyMs)
  }
}

/** Polls `read` until `done` holds for its value, and returns that value; fails with `what` after `ms`. */
export const waitForValue = async <A>(
  what: string,
  read: () => A | Promise<A>,
  done: (value: A) => boolean,
  ms = WAIT_MS,
  everyMs = 10
): Promise<A> => {
  const deadline = Date.now() + ms
  for (;;) {
    const value = await read()
    if (done(value)) return value
    if (Date.now() > deadline) throw new Error(`not in time (${ms} ms): ${what}; the last value: ${JSON.stringify(value)?.slice(0, 500)}`)
    await sleep(everyMs)
  }
}
