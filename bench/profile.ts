/**
 * `node bench/profile.ts [model] [seconds] [concurrency]`: runs one gateway (SQLite store,
 * in-process limits, the bench's full pipeline) under a closed-loop load and writes a CPU profile
 * of it (`--cpu-prof`) to bench/profiles/, then prints the self time by function and by file.
 * Models: `bench-free` (no credits), `bench` (1 credit: the paid path), `bench-stream` (200
 * chunks, passthrough), `bench-stream-paced` (the same, written 1 ms apart: read a token or a
 * few at a time, as from a model generating) or `bench-stream-translated` (200 chunks from an
 * Anthropic upstream; `bench-stream-translated-paced`, 1 ms apart);
 * the translated paths of the ladder, not streamed: `chat-anthropic` (Chat Completions client,
 * Anthropic provider), `messages-openai` (Messages client, OpenAI provider), `responses` (a plain
 * Responses passthrough, `store: false`) and `responses-stored` (continuing a stored conversation,
 * `previous_response_id` and `store: true`) and `responses-chat` (a Responses client, a Chat
 * Completions provider: translated both ways, `store: false`); the fourth argument
 * `nobudget` leaves the key without a request budget, so `bench-free nobudget` is the hot path
 * without any store write.
 */
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { cleanupAll, cpuTimeMs, createKey, installSignalHandlers, ROOT, startGateway, startUpstream, tempDir } from "./processes.ts"
import { makePool, send } from "./load.ts"

const [model = "bench-free", seconds = "8", concurrency = "32", budget = "budget"] = process.argv.slice(2)
const profileDir = join(ROOT, "bench", "profiles")
// The flags are read when processes.ts loads: `npm run`-style env, set by the caller or below.
/** Chunks per streamed answer of the `bench-stream` models (passthrough, and translated from Anthropic). */
const STREAM_CHUNKS = 200
const streamed = model.startsWith("bench-stream")
const profiling = (process.env.BENCH_GATEWAY_NODE_FLAGS ?? "").includes("--cpu-prof")
// A profiled gateway (a CPU or heap profile, an inspector attached, or bench/generators.ts's
// count, which rewrites Effect as it loads) runs the sources rather
// than the server bundle, so its frames name src/ files (the bundle's CPU per request measured
// the same: README, Memory and start-up).
const fromSource = /--cpu-prof|--heap-prof|--inspect|generators-hook/.test(process.env.BENCH_GATEWAY_NODE_FLAGS ?? "")
installSignalHandlers()

const upstream = await startUpstream()
const dir = tempDir()
const gateway = await startGateway(dir, "profile", {
  server: { host: "127.0.0.1" },
  store: `sqlite:${dir}/modelgate.db`,
  workspace: { credits: 1_000_000_000 },
  providers: [
    { name: "up", kind: "openai", base_url: `${upstream.url}/d0/n1/v1`, api_key: "sk-up" },
    { name: "up-stream", kind: "openai", base_url: `${upstream.url}/d0/n${STREAM_CHUNKS}/v1`, api_key: "sk-up" },
    { name: "up-stream-paced", kind: "openai", base_url: `${upstream.url}/d0/n${STREAM_CHUNKS}/g1/v1`, api_key: "sk-up" },
    { name: "up-anthropic", kind: "anthropic", base_url: `${upstream.url}/d0/n${STREAM_CHUNKS}`, api_key: "sk-up" },
    { name: "up-anthropic-paced", kind: "anthropic", base_url: `${upstream.url}/d0/n${STREAM_CHUNKS}/g1`, api_key: "sk-up" },
    { name: "up-anthropic-1", kind: "anthropic", base_url: `${upstream.url}/d0/n1`, api_key: "sk-up" },
    { name: "up-responses", kind: "openai", base_url: `${upstream.url}/d0/n1/v1`, api_key: "sk-up", responses_api: true }
  ],
  models: [
    { id: "bench", provider: "up", credits: 1 },
    { id: "bench-free", provider: "up", credits: 0 },
    { id: "bench-stream", provider: "up-stream", credits: 0 },
    { id: "bench-stream-paced", provider: "up-stream-paced", credits: 0 },
    { id: "bench-stream-translated", provider: "up-anthropic", credits: 0 },
    { id: "bench-stream-translated-paced", provider: "up-anthropic-paced", credits: 0 },
    { id: "claude-bench", provider: "up-anthropic-1", credits: 0 },
    { id: "responses-bench", provider: "up-responses", credits: 0 }
  ]
}, fromSource ? { env: { MODELGATE_FROM_SOURCE: "1" } } : {})
const key = await createKey(gateway, {
  name: "profile",
  ...(budget === "budget" ? { budget: { max_requests: 1_000_000_000 } } : {}),
  limits: { requests_per_minute: 1_000_000, concurrent_streams: 1_000 }
})
const pool = makePool(gateway.url, Number(concurrency))
const headers = { authorization: `Bearer ${key.key}`, "content-type": "application/json" }
const responsesBody = (extra: Record<string, unknown>) => JSON.stringify({ model: "responses-bench", input: "hi", ...extra })
/** The conversation's first turn, which every `responses-stored` request continues. */
const firstTurn = async () => {
  const response = await fetch(`${gateway.url}/v1/responses`, { method: "POST", headers, body: responsesBody({ store: true }) })
  return ((await response.json()) as { id: string }).id
}
const request = model === "chat-anthropic"
  ? { path: "/v1/chat/completions", body: JSON.stringify({ model: "claude-bench", messages: [{ role: "user", content: "hi" }] }) }
  : model === "messages-openai"
  ? { path: "/v1/messages", body: JSON.stringify({ model: "bench-free", max_tokens: 64, messages: [{ role: "user", content: "hi" }] }) }
  : model === "responses"
  ? { path: "/v1/responses", body: responsesBody({ store: false }) }
  : model === "responses-stored"
  ? { path: "/v1/responses", body: responsesBody({ store: true, previous_response_id: await firstTurn() }) }
  : model === "responses-chat"
  ? { path: "/v1/responses", body: JSON.stringify({ model: "bench-free", input: "hi", store: false }) }
  : { path: "/v1/chat/completions", body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }], ...(streamed ? { stream: true } : {}) }) }
const target = { label: "gateway", pool, headers: model === "messages-openai" ? { ...headers, "anthropic-version": "2023-06-01" } : headers, ...request }
const until = Date.now() + Number(seconds) * 1000
let count = 0
const cpuBefore = cpuTimeMs(gateway.pid)
await Promise.all(Array.from({ length: Number(concurrency) }, async () => {
  while (Date.now() < until) {
    await send(target as never)
    count++
  }
}))
const cpu = cpuTimeMs(gateway.pid) - cpuBefore
process.stderr.write(`${count} requests, ${(count / Number(seconds)).toFixed(0)} req/s, gateway CPU ${(cpu / count * 1000).toFixed(0)} us/request${streamed ? ` (${(cpu / count * 1000 / STREAM_CHUNKS).toFixed(1)} us/chunk)` : ""}\n`)
await pool.close()
await gateway.stop()
await cleanupAll()

if (!profiling) process.exit(0)
const newest = readdirSync(profileDir).filter((f) => f.endsWith(".cpuprofile")).sort().at(-1)!
interface Node { id: number; callFrame: { functionName: string; url: string; lineNumber: number }; children?: Array<number> }
const profile = JSON.parse(readFileSync(join(profileDir, newest), "utf8")) as { nodes: Array<Node>; samples: Array<number>; timeDeltas: Array<number> }
const self = new Map<number, number>()
profile.samples.forEach((id, i) => self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)))
const total = [...self.values()].reduce((a, b) => a + b, 0)
const byFunction = new Map<string, number>()
const byFile = new Map<string, number>()
for (const node of profile.nodes) {
  const t = self.get(node.id) ?? 0
  const file = node.callFrame.url.replace(/^file:\/\//, "").replace(ROOT + "/", "") || "(native)"
  const name = `${node.callFrame.functionName || "(anonymous)"} ${file}:${node.callFrame.lineNumber + 1}`
  byFunction.set(name, (byFunction.get(name) ?? 0) + t)
  const group = file.includes("node_modules/") ? file.replace(/^.*node_modules\/((@[^/]+\/)?[^/]+).*$/, "$1") : file
  byFile.set(group, (byFile.get(group) ?? 0) + t)
}
const top = (m: Map<string, number>, n: number) =>
  [...m.entries()].sort((a, b) => b[1] - a[1]).slice(0, n).map(([k, v]) => `${(v / total * 100).toFixed(1).padStart(5)}%  ${k}`).join("\n")
process.stdout.write(`profile ${newest}\n\nby file or package:\n${top(byFile, 30)}\n\nby function:\n${top(byFunction, 40)}\n`)
// Inclusive time of the gateway's own functions (src/), to see which stage costs what.
const parents = new Map<number, number>()
for (const node of profile.nodes) for (const child of node.children ?? []) parents.set(child, node.id)
const byId = new Map(profile.nodes.map((n) => [n.id, n]))
const inclusive = new Map<string, number>()
for (const [id, t] of self) {
  const seen = new Set<string>()
  for (let at: number | undefined = id; at !== undefined; at = parents.get(at)) {
    const frame = byId.get(at)!.callFrame
    if (!frame.url.includes("/src/")) continue
    const name = `${frame.functionName || "(anonymous)"} ${frame.url.replace(/^.*\/src\//, "src/")}:${frame.lineNumber + 1}`
    if (seen.has(name)) continue
    seen.add(name)
    inclusive.set(name, (inclusive.get(name) ?? 0) + t)
  }
}
process.stdout.write(`\ninclusive, gateway functions:\n${top(inclusive, 40)}\n`)
