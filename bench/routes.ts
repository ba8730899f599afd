/**
 * `node bench/routes.ts`: what a request costs by what it does, in CPU per request at
 * concurrency 32, every target in the same interleaved windows (issue 38): Effect's own HTTP
 * server forwarding a body upstream and the gateway-shaped floor, then one gateway (free model,
 * no audit or metrics: bench/serve-variant.ts) answering a probe, an authenticated list, a
 * malformed body, an unknown field, an unknown model, and a chat request its upstream answers.
 * The differences between rows price the stages: the skeleton, the body, the decode, the
 * catalog and the error, the upstream call.
 */
import { cleanupAll, cpuTimeMs, createKey, installSignalHandlers, startFloorServer, startGateway, startUpstream, tempDir } from "./processes.ts"
import { makePool, type Target, throughputWindows, warmUp } from "./load.ts"

/** The key the shaped floor checks (bench/floor/common.ts, which starts a pool when imported). */
const FLOOR_KEY = "sk-mg-0123456789abcdef0123456789abcdef"

installSignalHandlers()
try {
  const upstream = await startUpstream()
  const dir = tempDir()
  const base = `${upstream.url}/d0/n1`
  const gateway = await startGateway(dir, "routes", {
    server: { host: "127.0.0.1" },
    store: `sqlite:${dir}/routes.db`,
    workspace: { credits: 1_000_000_000 },
    providers: [{ name: "up", kind: "openai", base_url: `${base}/v1`, api_key: "sk-bench-upstream" }],
    models: [{ id: "bench-free", provider: "up", credits: 0, max_tokens: 4096 }]
  }, { without: ["audit", "metrics"] })
  const shaped = await startFloorServer("shaped.ts", base)
  const effect = await startFloorServer("effect-http.ts", base)
  const key = await createKey(gateway, { name: "routes", limits: { requests_per_minute: 1_000_000_000, concurrent_streams: 1_000 } })
  const body = JSON.stringify({ model: "bench-free", messages: [{ role: "user", content: "Say hello to the benchmark." }], max_tokens: 64 })
  const json = { "content-type": "application/json" }
  const auth = { ...json, authorization: `Bearer ${key.key}` }
  const on = (server: { url: string; pid: number }, target: Omit<Target, "pool" | "cpuMs">): Target => ({
    ...target,
    pool: makePool(server.url, 32),
    cpuMs: () => cpuTimeMs(server.pid)
  })
  const targets: Array<Target> = [
    on(effect, { label: "floor: Effect HttpServer forwarding the body", path: "/v1/chat/completions", headers: json, body }),
    on(shaped, { label: "floor: + gateway-shaped pipeline", path: "/v1/chat/completions", headers: { ...json, authorization: `Bearer ${FLOOR_KEY}` }, body }),
    on(gateway, { label: "gateway GET /healthz", path: "/healthz", headers: {}, method: "GET" }),
    on(gateway, { label: "gateway GET /v1/models", path: "/v1/models", headers: { authorization: auth.authorization }, method: "GET" }),
    on(gateway, { label: "gateway chat, malformed JSON (400)", path: "/v1/chat/completions", headers: auth, body: body.slice(0, -1), status: 400 }),
    on(gateway, { label: "gateway chat, an unknown field (400)", path: "/v1/chat/completions", headers: auth, body: body.replace('"max_tokens"', '"bogus"'), status: 400 }),
    on(gateway, { label: "gateway chat, an unknown model (404)", path: "/v1/chat/completions", headers: auth, body: body.replace("bench-free", "nope"), status: 404 }),
    on(gateway, { label: "gateway chat, answered upstream", path: "/v1/chat/completions", headers: auth, body })
  ]
  await warmUp(targets, 400, 8)
  const results = await throughputWindows(targets, { windows: 4, windowMs: 1500, concurrency: 32 })
  console.log("| what | CPU per request at c=32 |\n|---|---|")
  for (const target of targets) console.log(`| ${target.label} | ${(results.get(target.label)!.cpuPerRequest * 1000).toFixed(0)} µs |`)
} finally {
  await cleanupAll()
}
