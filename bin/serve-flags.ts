/**
 * V8 heap settings for `modelgate serve`, chosen by measurement (README, Performance): Node's
 * defaults size the young generation by the machine's memory (up to 64 MiB per semi-space here)
 * and let the old generation grow to four times what survives a full GC, so a gateway that idles
 * at 160 MiB peaked at 300-390 MiB under the benchmark's load. A smaller young generation and a
 * slower growing old one hold it near 140 MiB idle and under 200 MiB under load, for a few
 * percent more CPU per request. Neither is a hard limit: a burst that needs more heap gets it.
 */
export const SERVE_HEAP_FLAGS: ReadonlyArray<string> = ["--max-semi-space-size=8", "--heap-growing-percent=50"]

const HEAP_FLAG = /--(max-semi-space-size|min-semi-space-size|max-old-space-size|max-heap-size|heap-growing-percent)\b/

/** Whether the operator chose heap settings already (node's command line or NODE_OPTIONS): theirs win. */
export const heapChosen = (execArgv: ReadonlyArray<string>, nodeOptions: string | undefined): boolean => [...execArgv, nodeOptions ?? ""].some((flag) => HEAP_FLAG.test(flag))
