/**
 * Node settings for `modelgate serve`, chosen by measurement (README, Memory and start-up;
 * `node bench/memory.ts` compares settings). Node's defaults size the young generation by the
 * machine's memory (up to 64 MiB per semi-space here) and let the old generation grow to four
 * times what survives a full GC, so a gateway that idles at 160 MiB peaked at 300-390 MiB under
 * the benchmark's load. None of these is a hard limit: a burst that needs more heap gets it.
 *
 * - An 8 MiB semi-space (young generation 16 MiB, grown to its maximum by start-up and kept: a
 *   memory-reducing collection once serve listened gave it back but cost 13% more CPU per request,
 *   README, Memory and start-up). Smaller ones hold the peak a little lower but cost CPU on every request (more
 *   scavenges): 4 MiB about 6% more CPU per request for 8 to 25 MiB less idle, 2 MiB with the old
 *   generation growing by 25% about 20% more, for no lower peak in a quiet run (README, Node
 *   settings). An operator who wants the smaller footprint sets them (see heapChosen below).
 * - The old generation grows by 50% of what survives a full GC rather than by up to 4x.
 * - WebAssembly stays on its baseline compiler (Liftoff): undici parses HTTP answers with llhttp
 *   compiled to WebAssembly, and under load V8 re-compiled its parser with its optimizing
 *   compiler, whose working memory peaked at 15 MiB and stayed with the process.
 */
export const SERVE_NODE_FLAGS: ReadonlyArray<string> = ["--max-semi-space-size=8", "--heap-growing-percent=50", "--liftoff-only"]

/**
 * Environment for `modelgate serve`, where the operator's environment does not set it: glibc
 * keeps a malloc arena per thread that allocates (V8's compiler and GC threads do), and memory
 * freed in them stays resident; two arenas hold the peak lower with no cost measured.
 */
export const SERVE_ENV: Readonly<Record<string, string>> = { MALLOC_ARENA_MAX: "2" }

const HEAP_FLAG = /--(max-semi-space-size|min-semi-space-size|max-old-space-size|max-heap-size|heap-growing-percent)\b/

/** Whether the operator chose heap settings already (node's command line or NODE_OPTIONS): theirs win. */
export const heapChosen = (execArgv: ReadonlyArray<string>, nodeOptions: string | undefined): boolean => [...execArgv, nodeOptions ?? ""].some((flag) => HEAP_FLAG.test(flag))
