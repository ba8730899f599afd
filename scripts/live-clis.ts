// Live runs of real coding clients (Claude Code, Codex CLI, opencode) against the real gateway,
// with each provider kind behind it, through a recording proxy:
//
//   client --> recording proxy (scripts/capture/proxy.ts) --> `modelgate serve` --> vendor fake
//
// The vendor fakes are those of test/support (OpenAI, Anthropic, Bedrock, Vertex with Claude and
// Gemini, Gemini, Azure), which speak the vendors' exact formats and refuse what the vendors
// refuse; `echo` is the gateway's built-in provider. For each kind one gateway process is
// started from a YAML config whose only model is a `match: "*"` route to that kind's model, so
// every model name a client asks for by itself (its default model, its small model for titles)
// reaches that kind. The fake model calls the scenario's tool (reading hello.txt) once and then
// answers; the client runs the tool and sends the result back, as it would against a vendor.
//
//   npm install --prefix /tmp/clients --no-audit --no-fund @anthropic-ai/claude-code opencode-ai @openai/codex
//   node_modules/.bin/node scripts/live-clis.ts --clients /tmp/clients
//       [--all] [--only claude-code/tool,codex] [--kinds bedrock,vertex-claude] [--fixtures test/fixtures/clients]
//       [--report /tmp/live-clis.json]
//
// The scenarios are those of LIVE below; --all runs every scenario of scripts/capture/capture.ts
// (thinking, effort, structured output, images, MCP tool search, /context, apply_patch...) too.
// A run passes when the client exits 0, printed an answer, and every request it made was answered
// 2xx with a complete body (a stream that ended with its stop frame, never an error frame). The
// matrix is printed; --report writes every exchange (request and answer) for what failed.
// --fixtures writes what each client sent on its own vendor's kind (Anthropic for Claude Code
// and opencode's anthropic provider, OpenAI for the others) as replay fixtures under
// <dir>/<client>-<version>/<scenario>.json, scrubbed like scripts/capture/capture.ts does.
// It needs no network besides the loopback. Not part of `npm test`: installing the clients takes
// minutes. See README, "Testing with real clients".
import { spawn, spawnSync } from "node:child_process"
import { randomBytes } from "node:crypto"
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { createRequire } from "node:module"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { dirname, join, resolve } from "node:path"
import { parseArgs } from "node:util"
import { stringify } from "yaml"
import { startFakeAnthropic } from "../test/support/fake-anthropic.ts"
import { startFakeAzure } from "../test/support/fake-azure.ts"
import { startFakeBedrock } from "../test/support/fake-bedrock.ts"
import type { FakeUpstream, JsonBody, Scenario } from "../test/support/fake-common.ts"
import { startFakeGemini } from "../test/support/fake-gemini.ts"
import { startFakeOpenAI } from "../test/support/fake-openai.ts"
import { startFakeVertex } from "../test/support/fake-vertex.ts"
import {
  BINARIES,
  type ClientName,
  clientVersion,
  codexEnv,
  codexSetupFor,
  type Context,
  FILE_TEXT,
  PIXEL_PNG,
  runClient,
  SCENARIOS,
  type ScenarioSpec,
  TOOL_PROMPT
} from "./capture/capture.ts"
import { type Exchange, startRecordingProxy } from "./capture/proxy.ts"
import { makeScrubber } from "./capture/scrub.ts"

const ROOT = "/tmp/modelgate-capture"
/** More requests than this in one run is a loop (Claude Code's /context sends 27). */
const MAX_REQUESTS = 60
const REPO = resolve(import.meta.dirname, "..")
const EVERYTHING = createRequire(import.meta.url).resolve("@modelcontextprotocol/server-everything/dist/index.js")
const NODE = process.execPath

/** The scenarios run live: a plain prompt and a tool turn, on every surface each client speaks. */
const LIVE = [
  "claude-code/plain",
  "claude-code/tool",
  "codex/plain",
  "codex/tool",
  "codex/default-model-tool",
  "opencode/anthropic-plain",
  "opencode/anthropic-tool",
  "opencode/openai-plain",
  "opencode/openai-tool",
  "opencode/compatible-plain",
  "opencode/compatible-tool",
  "claude-code/gateway-mcp",
  "opencode/gateway-mcp"
]

/**
 * Codex with no `model` line: its own default model (gpt-6.2-sol from 0.171), for which it sends
 * no `tools` but an `additional_tools` input item with namespaces, whose `functions.exec` is a
 * free-form (`custom`) tool taking JavaScript that calls nested tools. The fake model calls it
 * (as `functions__exec` where the gateway translates, see README "Codex CLI").
 */
const EXEC_SOURCE = `const out = await tools.exec_command({ cmd: "cat hello.txt" });\ntext(out);`
const CODEX_DEFAULT_MODEL_TOOL: ScenarioSpec = {
  client: "codex",
  scenario: "default-model-tool",
  description: "`codex exec` with Codex's own default model; the fake model calls its `exec` tool (JavaScript calling `exec_command`).",
  args: () => ["exec", "--skip-git-repo-check", TOOL_PROMPT],
  setup: codexSetupFor(undefined),
  env: codexEnv,
  toolCalls: () => ({ functions__exec: { input: EXEC_SOURCE }, exec: { input: EXEC_SOURCE } })
}

export const KINDS = ["openai", "anthropic", "bedrock", "vertex-claude", "vertex-gemini", "gemini", "azure", "echo"] as const
export type Kind = (typeof KINDS)[number]

/** The kind whose vendor format the scenario's client speaks (where its fixtures are taken). */
const ownKind = (spec: ScenarioSpec): Kind =>
  spec.client === "claude-code" || spec.scenario.startsWith("anthropic-") ? "anthropic" : "openai"

// ---------------------------------------------------------------------------------------------
// The vendor fakes and what their model says

const OPENAI_KEY = "sk-fake-openai-live-0123456789abcdef"
const ANTHROPIC_KEY = "sk-ant-fake-live-0123456789abcdef"
const GEMINI_KEY = "AIzaSyFAKE-live-gemini-0123456789abcdef"
const AZURE_KEY = "5e1c0a9b7d3f4e2a8c6b0d1f3e5a7c9b"
const REGION = "us-east-1"
const KEY_ID = "AKIALIVECLIS00000001"
const SECRET = "live/clis+0123456789abcdefghijklmnopqr"
const PROJECT = "live-clis-1"
const LOCATION = "us-east5"

interface Fakes {
  readonly providers: Record<Exclude<Kind, "echo">, { provider: Record<string, unknown>; model: string }>
  /** Every fake model endpoint (Vertex's and Azure's inner ones included). */
  readonly upstreams: ReadonlyArray<FakeUpstream>
  close(): Promise<void>
}

const startFakes = async (work: string): Promise<Fakes> => {
  const [openai, anthropic, bedrock, vertex, gemini, azure] = await Promise.all([
    startFakeOpenAI({ apiKey: OPENAI_KEY }),
    startFakeAnthropic({ apiKey: ANTHROPIC_KEY }),
    startFakeBedrock({ region: REGION, accessKeyId: KEY_ID, secretAccessKey: SECRET }),
    startFakeVertex({ project: PROJECT, location: LOCATION, claude: ["claude-sonnet-4-5@20250929"], gemini: ["gemini-2.5-pro"] }),
    startFakeGemini({ apiKey: GEMINI_KEY, models: ["gemini-2.5-flash"] }),
    startFakeAzure({ apiKey: AZURE_KEY, deployments: ["gpt-5.5-prod"] })
  ])
  const credentials = join(work, "vertex-sa.json")
  writeFileSync(credentials, JSON.stringify(vertex.serviceAccount))
  return {
    providers: {
      openai: { provider: { name: "openai", kind: "openai", base_url: openai.url, api_key: OPENAI_KEY }, model: "gpt-5.5" },
      anthropic: { provider: { name: "anthropic", kind: "anthropic", base_url: anthropic.url, api_key: ANTHROPIC_KEY }, model: "claude-sonnet-4-5-20250929" },
      bedrock: {
        provider: { name: "bedrock", kind: "bedrock", region: REGION, base_url: bedrock.url, access_key_id: KEY_ID, secret_access_key: SECRET },
        model: "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
      },
      "vertex-claude": {
        provider: { name: "vertex", kind: "vertex", base_url: vertex.url, project: PROJECT, location: LOCATION, credentials_file: credentials },
        model: "claude-sonnet-4-5@20250929"
      },
      "vertex-gemini": {
        provider: { name: "vertex", kind: "vertex", base_url: vertex.url, project: PROJECT, location: LOCATION, credentials_file: credentials },
        model: "gemini-2.5-pro"
      },
      gemini: { provider: { name: "gemini", kind: "gemini", base_url: gemini.url, api_key: GEMINI_KEY }, model: "gemini-2.5-flash" },
      azure: { provider: { name: "azure", kind: "azure", base_url: azure.url, api_key: AZURE_KEY, api_version: "2025-04-01-preview" }, model: "gpt-5.5-prod" }
    },
    upstreams: [openai, anthropic, bedrock, vertex.anthropic, vertex.gemini, gemini, azure.chat, azure.openai],
    close: async () => {
      await Promise.all([openai.close(), anthropic.close(), bedrock.close(), vertex.close(), gemini.close(), azure.close()])
    }
  }
}

/** Tool names a request offers, in any vendor's format (what the gateway sent the fake). */
const offeredTools = (body: JsonBody): Array<string> => {
  const names: Array<string> = []
  const tools: Array<any> = [...(Array.isArray(body.tools) ? body.tools : []), ...(Array.isArray(body.toolConfig?.tools) ? body.toolConfig.tools : [])]
  // Passthrough Responses: Codex's `additional_tools` input item, tools grouped in namespaces.
  for (const item of Array.isArray(body.input) ? body.input : []) if (item?.type === "additional_tools" && Array.isArray(item.tools)) tools.push(...item.tools)
  for (let i = 0; i < tools.length; i++) if (tools[i]?.type === "namespace" && Array.isArray(tools[i].tools)) tools.push(...tools[i].tools)
  for (const tool of tools) {
    for (const name of [tool?.name, tool?.function?.name, tool?.toolSpec?.name]) if (typeof name === "string") names.push(name)
    if (Array.isArray(tool?.functionDeclarations)) for (const fn of tool.functionDeclarations) if (typeof fn?.name === "string") names.push(fn.name)
  }
  return names
}

/**
 * Whether a tool's result came after the model's last turn, in any vendor's format. (Not only the
 * last turn: where tool messages carry text only, the gateway sends a tool's images in a user
 * message after it.)
 */
const afterToolResult = (body: JsonBody): boolean => {
  const turns: Array<any> = [body.messages, body.contents, body.input].find(Array.isArray) ?? []
  const isModel = (turn: any) => turn?.role === "assistant" || turn?.role === "model" || /^(function|custom_tool)_call$/.test(String(turn?.type))
  const since = turns.slice(turns.findLastIndex(isModel) + 1)
  return since.some((turn) => {
    if (typeof turn !== "object" || turn === null) return false
    if (turn.role === "tool" || (typeof turn.type === "string" && turn.type.endsWith("_call_output"))) return true
    const parts: Array<any> = Array.isArray(turn.content) ? turn.content : Array.isArray(turn.parts) ? turn.parts : []
    return parts.some((part) => part?.type === "tool_result" || part?.toolResult !== undefined || part?.functionResponse !== undefined)
  })
}

/**
 * What the fake model answers: once the file's text is in the conversation (the tool ran), the
 * secret word; right after any other tool result, a short answer (a tool is called once per user
 * turn, so a client never loops); before that, in a tool scenario that offers the tool, a call to
 * it; else a greeting.
 */
const modelTurn = (calls: Record<string, unknown> | undefined) => (body: JsonBody): Scenario => {
  const conversation = JSON.stringify(body)
  if (conversation.includes("pineapple")) return { kind: "text", text: "The secret word is pineapple." }
  if (afterToolResult(body)) return { kind: "text", text: "Done, thank you." }
  const name = calls === undefined ? undefined : Object.keys(calls).find((candidate) => offeredTools(body).includes(candidate))
  if (name !== undefined) {
    // A free-form tool (Codex's apply_patch) is given its raw text, which a call carries as `input`.
    const input = calls![name]
    const args = typeof input === "string" ? { input } : (input as Record<string, unknown>)
    return { kind: "tool_calls", text: "Let me read it.", calls: [{ name, arguments: args }] }
  }
  return { kind: "text", text: "Hello there, friend, how are you?" }
}

// ---------------------------------------------------------------------------------------------
// The gateway, as an operator runs it

const freePort = () =>
  new Promise<number>((done, fail) => {
    const server = createServer()
    server.on("error", fail)
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number }
      server.close(() => done(port))
    })
  })

interface Gateway {
  readonly url: string
  readonly key: string
  readonly log: () => string
  close(): Promise<void>
}

const startGateway = async (dir: string, provider: Record<string, unknown> | undefined, model: string): Promise<Gateway> => {
  mkdirSync(dir, { recursive: true })
  const port = await freePort()
  const config = join(dir, "modelgate.yaml")
  writeFileSync(
    config,
    stringify({
      server: { host: "127.0.0.1", port },
      store: "sqlite:./modelgate.db",
      admin: { token: randomBytes(24).toString("hex") },
      workspace: { credits: 1_000_000 },
      limits: { requests_per_minute: 10_000, concurrent_streams: 50, max_body_bytes: 8 * 1024 * 1024 },
      log: { level: "warn" },
      providers: provider === undefined ? [] : [provider],
      models: [{ match: "*", id: model, provider: provider === undefined ? "echo" : provider.name, max_tokens: 64_000 }],
      // An upstream MCP server behind /v1/mcp for the gateway-mcp scenarios (issue 37): the
      // reference server from npm, over stdio, kept by the gateway.
      mcp: { servers: [{ name: "local", command: NODE, args: [EVERYTHING, "stdio"], timeout_ms: 20_000 }] }
    })
  )
  const cli = [join(REPO, "bin", "modelgate.js"), "--config", config]
  const created = spawnSync(NODE, [...cli, "keys", "create", "--name", "live-clis", "--tools", "--mcp-servers", "local"], { cwd: dir, encoding: "utf8" })
  // It prints the new key's record as JSON; `key` is the full key (shown only here).
  const key = /"key":\s*"(sk-mg-[0-9a-f]+)"/.exec(created.stdout)?.[1]
  if (key === undefined) throw new Error(`keys create failed: ${created.stdout}${created.stderr}`)
  let log = ""
  const child = spawn(NODE, [...cli, "serve"], { cwd: dir, stdio: ["ignore", "pipe", "pipe"] })
  child.stdout.on("data", (chunk: Buffer) => (log += chunk.toString()))
  child.stderr.on("data", (chunk: Buffer) => (log += chunk.toString()))
  const exited = new Promise<void>((done) => child.on("exit", () => done()))
  const url = `http://127.0.0.1:${port}`
  // Wait for the state (healthy), not for a time; give up if the process ends.
  for (;;) {
    if (child.exitCode !== null) throw new Error(`modelgate serve exited: ${log}`)
    const ok = await fetch(`${url}/healthz`).then((r) => r.ok, () => false)
    if (ok) break
    await new Promise((done) => setTimeout(done, 100))
  }
  return {
    url,
    key,
    log: () => log,
    close: async () => {
      child.kill("SIGTERM")
      await exited
    }
  }
}

// ---------------------------------------------------------------------------------------------
// One client run

export interface RunResult {
  readonly client: ClientName
  readonly scenario: string
  readonly kind: Kind
  readonly version: string
  readonly pass: boolean
  /** Why not, in one line. */
  readonly problem?: string
  /** The recording proxy's `host:port` the client was given (scrubbed from fixtures). */
  readonly proxyHost: string
  readonly exitCode: number | null
  readonly output: string
  readonly exchanges: ReadonlyArray<Exchange>
}

const STREAM_END: Record<string, RegExp> = {
  "/v1/messages": /event: message_stop/,
  "/v1/responses": /event: response\.completed/,
  "/v1/chat/completions": /data: \[DONE\]/
}

/** What is wrong with one exchange, if anything. */
const problemOf = (exchange: Exchange): string | undefined => {
  const { request, response } = exchange
  const where = `${request.method} ${request.path}`
  if (response.status < 200 || response.status >= 300) return `${where}: ${response.status} ${response.body.slice(0, 400)}`
  if (!response.complete) return `${where}: the answer was cut`
  const streamed = typeof request.body === "object" && request.body !== null && (request.body as JsonBody).stream === true
  if (streamed) {
    if (/event: error|"type":"error"/.test(response.body)) return `${where}: error frame ${response.body.slice(-400)}`
    const end = STREAM_END[request.path]
    if (end !== undefined && !end.test(response.body)) return `${where}: the stream has no end frame`
  }
  return undefined
}

const runLive = async (spec: ScenarioSpec, kind: Kind, gateway: Gateway, fakes: Fakes, clients: string): Promise<RunResult> => {
  const home = join(ROOT, "home")
  const work = join(ROOT, "work")
  rmSync(ROOT, { recursive: true, force: true })
  mkdirSync(home, { recursive: true })
  mkdirSync(work, { recursive: true })
  writeFileSync(join(work, "hello.txt"), FILE_TEXT)
  writeFileSync(join(work, "pixel.png"), PIXEL_PNG)
  const version = clientVersion(clients, spec.client, home)
  for (const upstream of fakes.upstreams) {
    upstream.reset()
    upstream.setDefault(modelTurn(spec.toolCalls?.(work)))
  }
  // A client that keeps asking (a tool loop) is stopped: no scenario takes more than a few dozen.
  const stop = new AbortController()
  const proxy = await startRecordingProxy({
    target: gateway.url,
    onRequest: (count) => {
      if (count > MAX_REQUESTS) stop.abort(`stopped after ${MAX_REQUESTS} requests`)
    }
  })
  const ctx: Context = { baseUrl: proxy.url, apiKey: gateway.key, home, work }
  spec.setup?.(ctx)
  const env = { PATH: "/usr/local/bin:/usr/bin:/bin", HOME: home, TERM: "dumb", LANG: "C.UTF-8", ...spec.env?.(ctx) }
  const result = await runClient(join(clients, BINARIES[spec.client]), spec.args(ctx), env, work, 300_000, stop.signal)
  await proxy.close()
  const exchanges = [...proxy.exchanges]
  const problems = exchanges.filter((e) => e.request.method === "POST").flatMap((e) => problemOf(e) ?? [])
  // A scenario whose tool reads hello.txt must see the file's text come back (echo calls no tool).
  const readsFile = JSON.stringify(spec.toolCalls?.(work) ?? {}).includes("hello.txt") || spec.scenario === "default-model-tool"
  const toolTurn = !readsFile || kind === "echo" || exchanges.some((e) => JSON.stringify(e.request.body).includes("pineapple"))
  const problem =
    problems[0] ??
    (result.code !== 0 ? `exit ${result.code}: ${result.output.slice(-400)}` : undefined) ??
    (exchanges.length === 0 ? "no request reached the gateway" : undefined) ??
    (!toolTurn ? "the tool result never came back" : undefined) ??
    // Through the gateway's own MCP endpoint: the upstream server's answer reached the client.
    (spec.scenario === "gateway-mcp" && kind !== "echo" &&
        !exchanges.some((e) => e.request.path === "/v1/mcp" && e.response.body.includes("Echo: pineapple"))
      ? "no tools/call of local__echo through /v1/mcp came back"
      : undefined)
  return {
    client: spec.client,
    scenario: spec.scenario,
    kind,
    version,
    pass: problem === undefined,
    ...(problem !== undefined ? { problem } : {}),
    proxyHost: new URL(proxy.url).host,
    exitCode: result.code,
    output: result.output.slice(-2000),
    exchanges
  }
}

const writeFixture = (run: RunResult, apiKey: string, dir: string): string => {
  const scrubber = makeScrubber({ apiKey, host: run.proxyHost })
  const requests = run.exchanges.map((e) => scrubber.scrub(e.request))
  const file = join(dir, `${run.client}-${run.version}`, `${run.scenario}.json`)
  mkdirSync(dirname(file), { recursive: true })
  const fixture = { client: run.client, version: run.version, scenario: run.scenario, captured_at: new Date().toISOString(), requests }
  writeFileSync(file, `${JSON.stringify(fixture, null, 2)}\n`)
  return file
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      clients: { type: "string", default: "/tmp/clients" },
      only: { type: "string" },
      all: { type: "boolean", default: false },
      kinds: { type: "string" },
      fixtures: { type: "string" },
      report: { type: "string" }
    }
  })
  const clients = resolve(values.clients)
  const only = values.only?.split(",").map((s) => s.trim())
  const kinds = (values.kinds?.split(",").map((s) => s.trim()) ?? [...KINDS]) as Array<Kind>
  for (const kind of kinds) if (!KINDS.includes(kind)) throw new Error(`unknown kind ${kind}; one of ${KINDS.join(", ")}`)
  const specs = [...SCENARIOS, CODEX_DEFAULT_MODEL_TOOL].filter((spec) => {
    const id = `${spec.client}/${spec.scenario}`
    return (values.all || LIVE.includes(id)) && (only === undefined || only.includes(spec.client) || only.includes(id))
  })
  const dir = mkdtempSync(join(tmpdir(), "live-clis-"))
  const fakes = await startFakes(dir)
  const results: Array<RunResult> = []
  try {
    for (const kind of kinds) {
      const target = kind === "echo" ? { provider: undefined, model: "echo" } : fakes.providers[kind]
      const gateway = await startGateway(join(dir, kind), target.provider, target.model)
      try {
        for (const spec of specs) {
          const run = await runLive(spec, kind, gateway, fakes, clients)
          results.push(run)
          process.stdout.write(`${run.pass ? "pass" : "FAIL"}  ${kind.padEnd(13)} ${run.client}/${run.scenario} (v${run.version}), ${run.exchanges.length} requests${run.problem !== undefined ? `\n      ${run.problem.replace(/\s+/g, " ").slice(0, 600)}` : ""}\n`)
          if (values.fixtures !== undefined && kind === ownKind(spec) && run.pass) {
            process.stdout.write(`      fixture ${writeFixture(run, gateway.key, resolve(values.fixtures))}\n`)
          }
        }
      } finally {
        if (results.some((r) => r.kind === kind && !r.pass)) writeFileSync(join(dir, kind, "gateway.log"), gateway.log())
        await gateway.close()
      }
    }
  } finally {
    await fakes.close()
    rmSync(ROOT, { recursive: true, force: true })
  }
  const ids = [...new Set(results.map((r) => `${r.client}/${r.scenario}`))]
  process.stdout.write(`\n${"".padEnd(32)}${kinds.map((k) => k.padEnd(14)).join("")}\n`)
  for (const id of ids) {
    const row = kinds.map((kind) => {
      const run = results.find((r) => `${r.client}/${r.scenario}` === id && r.kind === kind)
      return (run === undefined ? "-" : run.pass ? "pass" : "FAIL").padEnd(14)
    })
    process.stdout.write(`${id.padEnd(32)}${row.join("")}\n`)
  }
  if (values.report !== undefined) writeFileSync(values.report, `${JSON.stringify(results, null, 2)}\n`)
  process.stdout.write(`\nscratch (configs, gateway logs of failing kinds): ${dir}\n`)
  process.exitCode = results.every((r) => r.pass) ? 0 : 1
}
