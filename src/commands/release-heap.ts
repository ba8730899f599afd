/**
 * One memory-reducing full collection once `serve` listens (issue 38: idle RSS). Start-up
 * allocates a lot (config, layers, migrations, about 600 modules), and V8 grows the young
 * generation to its maximum (8 MiB semi-spaces, bin/serve-flags.ts) and the old generation's
 * pages with it, then keeps them: nothing at idle makes it give them back. V8's "last resort"
 * collection (what it runs under memory pressure) compacts, shrinks the young generation and
 * returns the pooled pages; a gateway that idled at 134 MiB then idled at 117-118 MiB, for one
 * collection of about 20-40 ms of CPU at start. Under load the young generation grows again,
 * which is the point of its size.
 *
 * Node has no API for it: `gc` is exposed in a fresh context only (the main context never gets
 * it), and the flag is turned off again at once.
 */
import { setFlagsFromString } from "node:v8"
import { runInNewContext } from "node:vm"

type Gc = (options: { readonly type: "major"; readonly execution: "sync"; readonly flavor: "last-resort" }) => void

/** Whether it ran; a runtime without V8's gc extension just keeps its heap. */
export const releaseStartupHeap = (): boolean => {
  try {
    setFlagsFromString("--expose-gc")
    const gc = runInNewContext("gc") as Gc | undefined
    if (typeof gc !== "function") return false
    gc({ type: "major", execution: "sync", flavor: "last-resort" })
    return true
  } catch {
    return false
  } finally {
    setFlagsFromString("--no-expose-gc")
  }
}
