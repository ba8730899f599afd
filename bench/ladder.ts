/**
 * The cost ladder (issue 25): what each layer of the request path costs, rung by rung, in one
 * run against the bare Node hop measured in the same rounds. The floor servers (bench/floor/)
 * show what Node and Effect themselves cost; the gateway rungs switch its stages on one by one:
 * free model, no budget, no audit, no metrics -> + metrics -> + audit -> + request budget ->
 * + credits on SQLite -> + credits on Postgres and Redis -> + tracing on. Every later change to the
 * hot path is judged by where it moves these rows.
 *
 * The translated paths get rungs of their own beside their passthroughs (issue 38): a Chat
 * Completions client to an Anthropic provider against the same client to an OpenAI one, a Messages
 * client to an OpenAI provider against Messages to Anthropic, and Responses continuing a stored
 * conversation (`previous_response_id`, stored) against a plain Responses passthrough; all on one
 * gateway (free models, audit on), so each pair differs only in its translation.
 *
 * Every rung is one target of the same interleaved rounds (the order rotates), so drift hits all
 * of them alike: req/s and the server's CPU per request at concurrency 32, then p50 and p99 at
 * concurrency 1 (p99 as the median of the rounds' p99s: one round's tail is noise).
 */
import { basename } from "node:path"
import { cpuTimeMs, createKey, createPostgresDatabase, deleteRedisKeysOf, REDIS_URL, ROOT, startFloorServer, startGateway, stopping } from "./processes.ts"
import { latencyRounds, makePool, mean, median, percentile, type Target, throughputWindows, WARM_REQUESTS, warmUp } from "./load.ts"
import { ms, ratio, rps, signedMs, table, us } from "./report.ts"

export interface LadderInput {
  /** The fake upstream's origin. */
  readonly upstream: string
  readonly dir: string
  readonly concurrency: number
  readonly quick: boolean
  /** The direct call and the reference proxy (the hop), already running. */
  readonly direct: Target
  readonly hop: Target
  readonly log: (message: string) => void
  /**
   * `formats`: only the translated-path rungs and their passthroughs (with the hop), to judge a
   * translation change quickly; `stored`: of those, only the stored conversation and its
   * passthrough (a third of the run, so a change to the stored path can be judged more often).
   */
  readonly only?: "all" | "formats" | "stored"
  /**
   * Source trees whose gateways get the translated-path rungs, each its own gateway (labels
   * suffixed by the tree's folder name when there are several): two versions of a translation
   * judged in one run. This checkout when absent.
   */
  readonly roots?: ReadonlyArray<string>
}

export interface LadderRow {
  readonly name: string
  readonly rps: number
  readonly cpuUs: number
  readonly p50: number
  readonly p99: number
}

const UNLIMITED = { requests_per_minute: 1_000_000, concurrent_streams: 1_000 }
const UPSTREAM_KEY = "sk-bench-upstream"
const FLOOR_KEY = "sk-mg-0123456789abcdef0123456789abcdef"
const BODY = (model: string) => JSON.stringify({ model, messages: [{ role: "user", content: "Say hello to the benchmark." }], max_tokens: 64 })

const MESSAGES_BODY = (model: string) => JSON.stringify({ model, max_tokens: 64, messages: [{ role: "user", content: "Say hello to the benchmark." }] })
const RESPONSES_BODY = (model: string, extra: Record<string, unknown>) =>
  JSON.stringify({ model, input: "Say hello to the benchmark.", max_output_tokens: 64, ...extra })

/** The translated-path rungs: one gateway, one provider per wire format, every model free. */
const formatsConfig = (upstream: string, store: string) => ({
  server: { host: "127.0.0.1" },
  store,
  workspace: { credits: 1_000_000_000 },
  providers: [
    { name: "oa", kind: "openai", base_url: `${upstream}/d0/n1/v1`, api_key: UPSTREAM_KEY },
    { name: "an", kind: "anthropic", base_url: `${upstream}/d0/n1`, api_key: UPSTREAM_KEY },
    { name: "oa-responses", kind: "openai", base_url: `${upstream}/d0/n1/v1`, api_key: UPSTREAM_KEY, responses_api: true }
  ],
  models: [
    { id: "gpt-bench", provider: "oa", credits: 0, max_tokens: 4096 },
    { id: "claude-bench", provider: "an", credits: 0, max_tokens: 4096 },
    { id: "responses-bench", provider: "oa-responses", credits: 0, max_tokens: 4096 }
  ]
})

/** Translated rung label -> its passthrough's label: the notes give CPU per request of one over the other. */
const PAIRS: ReadonlyArray<readonly [string, string, string]> = [
  ["fmt:chat-anthropic", "fmt:chat-openai", "chat -> Anthropic"],
  ["fmt:messages-openai", "fmt:messages-anthropic", "messages -> OpenAI"],
  ["fmt:responses-stored", "fmt:responses", "responses, stored conversation"],
  ["fmt:responses-chat", "fmt:responses", "responses -> Chat Completions"]
]
/** Issue 38: a translated path costs at most this much CPU per request of its passthrough. */
const TRANSLATED_TARGET = 1.3

const gatewayConfig = (upstream: string, store: string, extra: Record<string, unknown> = {}) => ({
  server: { host: "127.0.0.1" },
  store,
  workspace: { credits: 1_000_000_000 },
  providers: [{ name: "up", kind: "openai", base_url: `${upstream}/d0/n1/v1`, api_key: UPSTREAM_KEY }],
  models: [
    { id: "bench", provider: "up", credits: 1, max_tokens: 4096 },
    { id: "bench-free", provider: "up", credits: 0, max_tokens: 4096 },
    // Token prices (issue 33): the bound reserved at admission, the cost from the answer's usage settled.
    { id: "bench-priced", provider: "up", credits: 0, price: { input: 3, output: 15 }, max_tokens: 4096 }
  ],
  ...extra
})

export const runLadder = async (input: LadderInput): Promise<{ rows: Array<LadderRow>; notes: Array<string> }> => {
  const { concurrency, dir, log, upstream } = input
  const only = input.only ?? "all"
  const notes: Array<string> = []
  const targets: Array<Target> = [input.direct, input.hop]
  const names = new Map<string, string>([[input.direct.label, "upstream direct (no hop)"], [input.hop.label, "bare Node hop (node:http + keep-alive agent): 1.00x"]])
  const rung = (label: string, name: string, target: Omit<Target, "label">) => {
    targets.push({ ...target, label })
    names.set(label, name)
  }
  const poolOf = (url: string) => makePool(url, concurrency)

  if (only === "all") {
    log("ladder: floor servers")
    const base = `${upstream}/d0/n1`
    const floors: ReadonlyArray<readonly [string, string]> = [
      ["plain.ts", "node:http + undici, JSON parsed"],
      ["fiber.ts", "+ one Effect fiber per request"],
      ["effect-http.ts", "Effect HttpServer (platform-node)"],
      ["shaped.ts", "Effect HttpServer + gateway-shaped pipeline"]
    ]
    for (const [file, name] of floors) {
      const server = await startFloorServer(file, base)
      rung(`floor:${file}`, `floor: ${name}`, {
        pool: poolOf(server.url),
        path: "/v1/chat/completions",
        headers: { "content-type": "application/json", authorization: `Bearer ${FLOOR_KEY}` },
        body: BODY("bench-upstream"),
        cpuMs: () => cpuTimeMs(server.pid)
      })
    }
  }

  const viaGateway = (label: string, name: string, gateway: { url: string; pid: number }, key: string, model: string) =>
    rung(label, name, {
      pool: poolOf(gateway.url),
      path: "/v1/chat/completions",
      headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
      body: BODY(model),
      cpuMs: () => cpuTimeMs(gateway.pid)
    })

  if (only === "all") {
    log("ladder: gateways on SQLite")
    const bare = await startGateway(dir, "ladder-bare", gatewayConfig(upstream, `sqlite:${dir}/ladder-bare.db`), { without: ["audit", "metrics"] })
    const bareKey = await createKey(bare, { name: "ladder", limits: UNLIMITED })
    viaGateway("gw:bare", "gateway: free model, no budget, no audit, no metrics (SQLite)", bare, bareKey.key, "bench-free")

    const metered = await startGateway(dir, "ladder-metrics", gatewayConfig(upstream, `sqlite:${dir}/ladder-metrics.db`), { without: ["audit"] })
    const meteredKey = await createKey(metered, { name: "ladder", limits: UNLIMITED })
    viaGateway("gw:metrics", "+ metrics", metered, meteredKey.key, "bench-free")

    const full = await startGateway(dir, "ladder-sqlite", gatewayConfig(upstream, `sqlite:${dir}/ladder-sqlite.db`))
    const freeKey = await createKey(full, { name: "ladder-free", limits: UNLIMITED })
    const budgetKey = await createKey(full, { name: "ladder-budget", budget: { max_requests: 1_000_000_000 }, limits: UNLIMITED })
    viaGateway("gw:audit", "+ audit", full, freeKey.key, "bench-free")
    viaGateway("gw:budget", "+ request budget", full, budgetKey.key, "bench-free")
    viaGateway("gw:credits", "+ 1 credit per request (SQLite): the full paid pipeline", full, budgetKey.key, "bench")
    viaGateway("gw:priced", "token prices instead of 1 credit: the bound reserved, the cost settled (SQLite)", full, budgetKey.key, "bench-priced")

    try {
      log("ladder: gateways on Postgres and Redis")
      const pg = await startGateway(dir, "ladder-pg", gatewayConfig(upstream, await createPostgresDatabase(), { redis: REDIS_URL }))
      const pgKey = await createKey(pg, { name: "ladder-pg", budget: { max_requests: 1_000_000_000 }, limits: UNLIMITED })
      viaGateway("gw:pg", "+ credits on Postgres, limits in Redis (instead of SQLite, in process)", pg, pgKey.key, "bench")
      const traced = await startGateway(
        dir,
        "ladder-traced",
        gatewayConfig(upstream, await createPostgresDatabase(), { redis: REDIS_URL, telemetry: { otlp_endpoint: upstream, sample_ratio: 1 } })
      )
      const tracedKey = await createKey(traced, { name: "ladder-traced", budget: { max_requests: 1_000_000_000 }, limits: UNLIMITED })
      viaGateway("gw:traced", "+ tracing on (every request sampled, spans exported over OTLP/JSON)", traced, tracedKey.key, "bench")
      await deleteRedisKeysOf([pgKey.id, tracedKey.id]).catch(() => undefined)
    } catch (error) {
      if (stopping()) throw error
      const reason = ((error as Error).message ?? String(error)).split("\n")[0]!
      log(`ladder: Postgres/Redis rungs skipped: ${reason}`)
      notes.push(`The Postgres/Redis rungs were skipped: ${reason}`)
    }

    // The rungs above run with `log.level: none`; as shipped, every request writes a line at info.
    const logged = await startGateway(dir, "ladder-logged", gatewayConfig(upstream, `sqlite:${dir}/ladder-logged.db`), { logLevel: "info" })
    const loggedKey = await createKey(logged, { name: "ladder-logged", budget: { max_requests: 1_000_000_000 }, limits: UNLIMITED })
    viaGateway("gw:logged", "full paid pipeline (SQLite) + a request line at info, to a pipe: `modelgate serve` as shipped", logged, loggedKey.key, "bench")
  }

  const roots = input.roots ?? [ROOT]
  const suffixes: Array<string> = []
  for (const [index, root] of roots.entries()) {
    const suffix = roots.length === 1 ? "" : `@${basename(root)}`
    suffixes.push(suffix)
    log(`ladder: translated paths${suffix}`)
    const formats = await startGateway(dir, `ladder-formats-${index}`, formatsConfig(upstream, `sqlite:${dir}/ladder-formats-${index}.db`), { root })
    const formatsKey = await createKey(formats, { name: "ladder-formats", limits: UNLIMITED })
    const viaFormats = (label: string, name: string, path: string, body: string, headers: Record<string, string> = {}) =>
      rung(label + suffix, name + suffix, {
        pool: poolOf(formats.url),
        path,
        headers: { "content-type": "application/json", authorization: `Bearer ${formatsKey.key}`, ...headers },
        body,
        cpuMs: () => cpuTimeMs(formats.pid)
      })
    const anthropicHeaders = { "anthropic-version": "2023-06-01" }
    if (only !== "stored") {
      viaFormats("fmt:chat-openai", "formats: chat -> OpenAI (passthrough; free model, audit on)", "/v1/chat/completions", BODY("gpt-bench"))
      viaFormats("fmt:chat-anthropic", "formats: chat -> Anthropic (translated)", "/v1/chat/completions", BODY("claude-bench"))
      viaFormats("fmt:messages-anthropic", "formats: messages -> Anthropic (passthrough)", "/v1/messages", MESSAGES_BODY("claude-bench"), anthropicHeaders)
      viaFormats("fmt:messages-openai", "formats: messages -> OpenAI (translated)", "/v1/messages", MESSAGES_BODY("gpt-bench"), anthropicHeaders)
    }
    viaFormats("fmt:responses", "formats: responses -> OpenAI Responses API (passthrough, store: false)", "/v1/responses", RESPONSES_BODY("responses-bench", { store: false }))
    // The conversation's first turn, stored; every measured request continues it (a chain of one) and is stored in turn.
    const first = await fetch(`${formats.url}/v1/responses`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${formatsKey.key}` },
      body: RESPONSES_BODY("responses-bench", { store: true })
    })
    const firstId = ((await first.json()) as { id?: string }).id
    if (first.status !== 200 || typeof firstId !== "string") throw new Error(`ladder: the stored conversation's first turn failed: ${first.status}`)
    viaFormats(
      "fmt:responses-stored",
      "formats: responses continuing a stored conversation (previous_response_id, store: true)",
      "/v1/responses",
      RESPONSES_BODY("responses-bench", { store: true, previous_response_id: firstId })
    )
    if (only !== "stored") {
      viaFormats("fmt:responses-chat", "formats: responses -> Chat Completions provider (translated, store: false)", "/v1/responses", RESPONSES_BODY("gpt-bench", { store: false }))
    }
  }

  // `--formats` compares a few rungs (often two versions of them): longer windows for steadier CPU per request.
  // Five windows a rung at least: its CPU per request is their median (load.ts), which three left to chance.
  const windows = input.quick ? 1 : 5
  const windowMs = input.quick ? 300 : only === "all" ? 1000 : 1500
  log(`ladder: ${targets.length} targets at concurrency ${concurrency}`)
  await warmUp(targets, input.quick ? 50 : WARM_REQUESTS, input.quick ? 4 : concurrency)
  const throughput = await throughputWindows(targets, { windows, windowMs, concurrency })
  log("ladder: latency at concurrency 1")
  const rounds = input.quick ? 3 : 10
  const perRound = input.quick ? 20 : 150
  const latency = await latencyRounds(targets, { rounds, perRound })

  const rows = targets.map((target): LadderRow => {
    const t = throughput.get(target.label)!
    const samples = latency.get(target.label)!.samples.map((s) => s.total)
    const roundP99s = Array.from({ length: rounds }, (_, i) => percentile(samples.slice(i * perRound, (i + 1) * perRound), 99))
    return { name: names.get(target.label)!, rps: mean(t.rates), cpuUs: t.cpuPerRequest * 1000, p50: percentile(samples, 50), p99: median(roundP99s) }
  })
  for (const target of targets) await target.pool.close().catch(() => undefined)
  const cpuOf = new Map(targets.map((target, i) => [target.label, rows[i]!.cpuUs]))
  for (const suffix of suffixes) {
    notes.push(
      `Translated paths${suffix}, server CPU per request against the passthrough of the same gateway (target <= ${TRANSLATED_TARGET}x, issue 38): ` +
        PAIRS.filter(([translated]) => cpuOf.has(translated + suffix)).map(([translated, passthrough, name]) => {
          const r = cpuOf.get(translated + suffix)! / cpuOf.get(passthrough + suffix)!
          return `${name} ${ratio(r)} ${r <= TRANSLATED_TARGET ? "PASS" : "MISS"}`
        }).join("; ") + "."
    )
  }
  return { rows, notes }
}

/** The ladder as a markdown table: each rung against the hop (row 2) of the same run. */
export const ladderTable = (rows: ReadonlyArray<LadderRow>) => {
  const hop = rows[1]!
  return table(
    ["rung", `req/s at c=32`, "vs the hop", "server CPU per request", "p50 at c=1", "p50 beyond the hop", "p99 at c=1", "p99 beyond the hop"],
    rows.map((row, i) => [
      row.name,
      rps(row.rps),
      ratio(row.rps / hop.rps),
      Number.isNaN(row.cpuUs) ? "n/a" : us(row.cpuUs),
      ms(row.p50),
      i < 2 ? "" : signedMs(row.p50 - hop.p50),
      ms(row.p99),
      i < 2 ? "" : signedMs(row.p99 - hop.p99)
    ])
  )
}
