/**
 * `node bench/allocations.ts [port] [seconds] [delay]`: what a gateway under load allocates, by
 * function, from V8's sampling heap profiler over the inspector of a gateway started with
 * `--inspect=127.0.0.1:<port>` (default 9339). It waits `delay` seconds (default 8: the gateway's
 * start and the load's warm-up), samples for `seconds` (default 6), then prints each function's
 * share of what was allocated (self) and each src/ function's share with what it called
 * (inclusive). Garbage counts too: what makes the collector run is the allocation rate, not what
 * stays. With bench/profile.ts, which runs an inspected gateway from its sources:
 *
 *   BENCH_GATEWAY_NODE_FLAGS="--inspect=127.0.0.1:9339" node bench/profile.ts bench-stream 16 32 nobudget &
 *   node bench/allocations.ts 9339 6 8
 */
const [port = "9339", seconds = "6", delay = "8"] = process.argv.slice(2)

interface CallFrame {
  readonly functionName: string
  readonly url: string
  readonly lineNumber: number
}
interface SampledNode {
  readonly callFrame: CallFrame
  readonly selfSize: number
  readonly children: ReadonlyArray<SampledNode>
}

await new Promise((resolve) => setTimeout(resolve, Number(delay) * 1000))
const targets = (await (await fetch(`http://127.0.0.1:${port}/json/list`)).json()) as ReadonlyArray<{ webSocketDebuggerUrl: string }>
const socket = new WebSocket(targets[0]!.webSocketDebuggerUrl)
await new Promise((resolve) => socket.addEventListener("open", resolve, { once: true }))
let lastId = 0
const waiting = new Map<number, (result: unknown) => void>()
socket.addEventListener("message", (message) => {
  const parsed = JSON.parse(String(message.data)) as { id?: number; result?: unknown }
  if (parsed.id !== undefined) waiting.get(parsed.id)?.(parsed.result)
})
const call = <A>(method: string, params: Record<string, unknown> = {}) =>
  new Promise<A>((resolve) => {
    const id = ++lastId
    waiting.set(id, (result) => resolve(result as A))
    socket.send(JSON.stringify({ id, method, params }))
  })

await call("HeapProfiler.enable")
await call("HeapProfiler.startSampling", { samplingInterval: 1024, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true })
await new Promise((resolve) => setTimeout(resolve, Number(seconds) * 1000))
const { profile } = await call<{ profile: { head: SampledNode } }>("HeapProfiler.stopSampling")
socket.close()

const self = new Map<string, number>()
const inclusive = new Map<string, number>()
let total = 0
const nameOf = ({ functionName, url, lineNumber }: CallFrame) =>
  `${functionName || "(anonymous)"} ${url.replace(/^.*\/(src|node_modules)\//, "$1/")}:${lineNumber + 1}`
/** A frame's package (node_modules/<name>), file under src/, or Node's own module. */
const placeOf = ({ url }: CallFrame) => {
  const dependency = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url)
  if (dependency !== null) return dependency[1]!
  const own = /\/(src\/.*)$/.exec(url)
  return own !== null ? own[1]! : url === "" ? "(native)" : url
}
const byPlace = new Map<string, number>()
const walk = (node: SampledNode, srcStack: ReadonlyArray<string>) => {
  const name = nameOf(node.callFrame)
  total += node.selfSize
  const place = placeOf(node.callFrame)
  byPlace.set(place, (byPlace.get(place) ?? 0) + node.selfSize)
  self.set(name, (self.get(name) ?? 0) + node.selfSize)
  const stack = node.callFrame.url.includes("/src/") && !srcStack.includes(name) ? [...srcStack, name] : srcStack
  for (const frame of stack) inclusive.set(frame, (inclusive.get(frame) ?? 0) + node.selfSize)
  for (const child of node.children) walk(child, stack)
}
walk(profile.head, [])
const top = (shares: Map<string, number>, count: number) =>
  [...shares].sort((a, b) => b[1] - a[1]).slice(0, count).map(([name, size]) => `${(size / total * 100).toFixed(1).padStart(5)}%  ${name}`).join("\n")
process.stdout.write(`allocated ${(total / 1048576).toFixed(1)} MiB in ${seconds} s\n\nby package or file:\n${top(byPlace, 25)}\n\nself:\n${top(self, 40)}\n\ninclusive, gateway functions:\n${top(inclusive, 30)}\n`)
