// Runs real coding clients against the recording fake upstream (record.ts) and writes what they
// sent as fixtures under test/fixtures/clients/<client>/<scenario>.json.
//
//   node scripts/capture/capture.ts --clients /tmp/clients [--only claude-code/tool,codex] [--out dir]
//
// --clients is a directory where the clients were installed from npm:
//   npm install --prefix /tmp/clients @anthropic-ai/claude-code opencode-ai @openai/codex
// Every scenario runs with a fresh HOME and working directory under /tmp/modelgate-capture (fixed
// paths, so paths inside the captured prompts stay the same from one capture to the next) and a
// minimal environment, so nothing from this machine's user config reaches the client.
import { spawn, spawnSync } from "node:child_process"
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { dirname, join, resolve } from "node:path"
import { parseArgs } from "node:util"
import { startRecorder } from "./record.ts"
import { makeScrubber } from "./scrub.ts"

export type ClientName = "claude-code" | "opencode" | "codex"

export interface Context {
  readonly baseUrl: string
  readonly apiKey: string
  readonly home: string
  readonly work: string
}

export interface ScenarioSpec {
  readonly client: ClientName
  readonly scenario: string
  /** One line for the fixture README: what the scenario exercises. */
  readonly description: string
  readonly args: (ctx: Context) => ReadonlyArray<string>
  readonly env?: (ctx: Context) => Record<string, string>
  /** Writes the client's config into the fresh HOME. */
  readonly setup?: (ctx: Context) => void
  /** Tool calls the fake model makes (see RecorderOptions.toolCalls), given the working directory. */
  readonly toolCalls?: (work: string) => Record<string, unknown>
  /** A chain of tool calls instead (see RecorderOptions.toolSequence). */
  readonly toolSequence?: ReadonlyArray<{ readonly name: string; readonly input: unknown }>
}

// sk-mg- and 32 hex digits: the shape of a gateway key, so clients that inspect keys treat it as one.
const API_KEY = "sk-mg-0123456789abcdef0123456789abcdef"
const ROOT = "/tmp/modelgate-capture"
const PLAIN_PROMPT = "Say hello in five words."
export const TOOL_PROMPT = "Read the file hello.txt in the current directory and tell me the secret word it contains."
export const FILE_TEXT = "The secret word is pineapple.\n"
// A 1x1 PNG, for the scenarios that send an image.
export const PIXEL_PNG = Buffer.from(
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==",
  "base64"
)

export const BINARIES: Record<ClientName, string> = {
  "claude-code": "node_modules/.bin/claude",
  opencode: "node_modules/.bin/opencode",
  codex: "node_modules/.bin/codex"
}

// Claude Code: only the settings a user behind a gateway sets. Telemetry, error reporting and
// the auto-updater are switched off because they would call out to the internet (and fail);
// none of them changes the API requests. No CLAUDE_CODE_DISABLE_* variable is set.
const claudeEnv = (ctx: Context): Record<string, string> => ({
  ANTHROPIC_BASE_URL: ctx.baseUrl,
  ANTHROPIC_API_KEY: ctx.apiKey,
  DISABLE_TELEMETRY: "1",
  DISABLE_ERROR_REPORTING: "1",
  DISABLE_AUTOUPDATER: "1"
})

// opencode: the built-in anthropic and openai providers with their base URL pointed at the
// recorder, and an openai-compatible provider (Chat Completions) named `modelgate`.
const opencodeSetup = (ctx: Context): void => {
  const dir = join(ctx.home, ".config", "opencode")
  mkdirSync(dir, { recursive: true })
  const options = { baseURL: `${ctx.baseUrl}/v1`, apiKey: "{env:MODELGATE_API_KEY}" }
  writeFileSync(
    join(dir, "opencode.json"),
    `${JSON.stringify(
      {
        $schema: "https://opencode.ai/config.json",
        autoupdate: false,
        share: "disabled",
        provider: {
          anthropic: { options },
          openai: { options },
          modelgate: {
            npm: "@ai-sdk/openai-compatible",
            name: "modelgate",
            options,
            models: {
              "gpt-5.5": {
                name: "gpt-5.5",
                tool_call: true,
                attachment: true,
                modalities: { input: ["text", "image"], output: ["text"] }
              }
            }
          }
        }
      },
      null,
      2
    )}\n`
  )
}
const opencodeEnv = (ctx: Context): Record<string, string> => ({
  MODELGATE_API_KEY: ctx.apiKey,
  OPENCODE_DISABLE_AUTOUPDATE: "1",
  // The model catalogue would be fetched from models.dev; the bundled snapshot serves instead.
  OPENCODE_DISABLE_MODELS_FETCH: "1"
})

// Codex CLI: a custom model provider speaking the Responses API at the recorder, with the model
// given (none: Codex picks its own default model, which changes the tools it sends).
export const codexSetupFor = (model: string | undefined) => (ctx: Context): void => {
  const dir = join(ctx.home, ".codex")
  mkdirSync(dir, { recursive: true })
  writeFileSync(
    join(dir, "config.toml"),
    [
      ...(model === undefined ? [] : [`model = "${model}"`]),
      `model_provider = "modelgate"`,
      `check_for_update_on_startup = false`,
      ``,
      `[model_providers.modelgate]`,
      `name = "modelgate"`,
      `base_url = "${ctx.baseUrl}/v1"`,
      `env_key = "MODELGATE_API_KEY"`,
      `wire_api = "responses"`,
      ``,
      `[analytics]`,
      `enabled = false`,
      ``,
      `[feedback]`,
      `enabled = false`,
      ``
    ].join("\n")
  )
}
// A one-tool stdio MCP server for Claude Code's tool-search scenario, run with this Node and the
// repository's MCP SDK.
const MCP_SERVER = `
import { McpServer } from ${JSON.stringify(import.meta.resolve("@modelcontextprotocol/sdk/server/mcp.js"))}
import { StdioServerTransport } from ${JSON.stringify(import.meta.resolve("@modelcontextprotocol/sdk/server/stdio.js"))}
import { z } from ${JSON.stringify(import.meta.resolve("zod"))}
const server = new McpServer({ name: "notes", version: "1.0.0" })
server.tool("lookup_note", "Looks up a note by title.", { title: z.string() }, async ({ title }) => ({
  content: [{ type: "text", text: "Note " + title + ": buy pineapples." }]
}))
await server.connect(new StdioServerTransport())
`
const mcpSetup = (ctx: Context): void => {
  writeFileSync(join(ctx.home, "notes-mcp.mjs"), MCP_SERVER)
  writeFileSync(
    join(ctx.home, "mcp.json"),
    JSON.stringify({ mcpServers: { notes: { type: "stdio", command: process.execPath, args: [join(ctx.home, "notes-mcp.mjs")] } } })
  )
}

/** What the gateway-mcp scenarios ask: the fake model answers by calling the upstream echo tool with the secret word. */
const GATEWAY_MCP_PROMPT = "Use the echo tool of the gateway to echo the secret word, then tell me what it said."

const codexSetup = codexSetupFor("gpt-5.5")
export const codexEnv = (ctx: Context): Record<string, string> => ({ MODELGATE_API_KEY: ctx.apiKey })

export const SCENARIOS: ReadonlyArray<ScenarioSpec> = [
  {
    client: "claude-code",
    scenario: "plain",
    description: "`claude -p` with its defaults: a text answer, no tool call.",
    args: () => ["-p", PLAIN_PROMPT],
    env: claudeEnv
  },
  {
    client: "claude-code",
    scenario: "tool",
    description: "`claude -p` where the fake model calls `Read`; the client runs it and sends the `tool_result` turn.",
    args: () => ["-p", TOOL_PROMPT],
    env: claudeEnv,
    toolCalls: (work) => ({ Read: { file_path: join(work, "hello.txt") } })
  },
  {
    client: "claude-code",
    scenario: "thinking-budget",
    description:
      "`claude -p --model claude-sonnet-4-5`: a model without adaptive thinking, so thinking is `enabled` with `budget_tokens`.",
    args: () => ["-p", "--model", "claude-sonnet-4-5", PLAIN_PROMPT],
    env: claudeEnv
  },
  {
    client: "claude-code",
    scenario: "effort-max",
    description: "`claude -p --effort max`: adaptive thinking with `output_config.effort` at its top value.",
    args: () => ["-p", "--effort", "max", PLAIN_PROMPT],
    env: claudeEnv
  },
  {
    client: "claude-code",
    scenario: "structured-output",
    description:
      "`claude -p --json-schema ...`: structured output; the fake model answers through the `StructuredOutput` tool Claude Code adds.",
    args: () => [
      "-p",
      "--json-schema",
      JSON.stringify({ type: "object", properties: { greeting: { type: "string" } }, required: ["greeting"] }),
      PLAIN_PROMPT
    ],
    env: claudeEnv,
    toolCalls: () => ({ StructuredOutput: { greeting: "Hello there, nice to meet you." } })
  },
  {
    client: "claude-code",
    scenario: "tool-image",
    description: "`claude -p` where the fake model calls `Read` on a PNG; the `tool_result` carries an image block.",
    args: () => ["-p", "Read the image pixel.png in the current directory and tell me its colour."],
    env: claudeEnv,
    toolCalls: (work) => ({ Read: { file_path: join(work, "pixel.png") } })
  },
  {
    client: "claude-code",
    scenario: "tool-search-mcp",
    description:
      "`claude -p --mcp-config` with `ENABLE_TOOL_SEARCH=true`: the fake model calls `ToolSearch`, then the MCP tool it loaded (sent with `defer_loading`).",
    args: (ctx) => [
      "-p",
      "Look up my note titled groceries.",
      "--mcp-config",
      join(ctx.home, "mcp.json"),
      "--allowedTools=mcp__notes__lookup_note"
    ],
    setup: mcpSetup,
    env: (ctx) => ({ ...claudeEnv(ctx), ENABLE_TOOL_SEARCH: "true" }),
    toolSequence: [
      { name: "ToolSearch", input: { query: "select:mcp__notes__lookup_note", max_results: 5 } },
      { name: "mcp__notes__lookup_note", input: { title: "groceries" } }
    ]
  },
  {
    client: "claude-code",
    scenario: "gateway-mcp",
    description:
      "`claude -p --mcp-config` with the gateway's own `/v1/mcp` (HTTP, the key as bearer): the fake model calls the upstream server's tool `local__echo` through it (issue 37).",
    args: (ctx) => ["-p", GATEWAY_MCP_PROMPT, "--mcp-config", join(ctx.home, "gateway-mcp.json"), "--allowedTools=mcp__gateway__local__echo"],
    setup: (ctx) =>
      writeFileSync(
        join(ctx.home, "gateway-mcp.json"),
        JSON.stringify({ mcpServers: { gateway: { type: "http", url: `${ctx.baseUrl}/v1/mcp`, headers: { Authorization: `Bearer ${ctx.apiKey}` } } } })
      ),
    // MCP tools offered to the model directly, not behind ToolSearch (tool-search-mcp covers that).
    env: (ctx) => ({ ...claudeEnv(ctx), ENABLE_TOOL_SEARCH: "false" }),
    toolCalls: () => ({ mcp__gateway__local__echo: { message: "pineapple" } })
  },
  {
    client: "claude-code",
    scenario: "context",
    description: "`claude -p /context`: the context report, built from `POST /v1/messages/count_tokens` calls.",
    args: () => ["-p", "/context"],
    env: claudeEnv
  },
  {
    client: "opencode",
    scenario: "anthropic-plain",
    description: "`opencode run -m anthropic/claude-sonnet-4-6`: built-in anthropic provider, text answer.",
    args: () => ["run", "-m", "anthropic/claude-sonnet-4-6", PLAIN_PROMPT],
    setup: opencodeSetup,
    env: opencodeEnv
  },
  {
    client: "opencode",
    scenario: "anthropic-tool",
    description: "Built-in anthropic provider; the fake model calls `read` and opencode sends the `tool_result` turn.",
    args: () => ["run", "-m", "anthropic/claude-sonnet-4-6", TOOL_PROMPT],
    setup: opencodeSetup,
    env: opencodeEnv,
    toolCalls: (work) => ({ read: { filePath: join(work, "hello.txt") } })
  },
  {
    client: "opencode",
    scenario: "gateway-mcp",
    description:
      "`opencode run` with the gateway's own `/v1/mcp` as a remote MCP server (the key as bearer): the fake model calls the upstream server's tool `local__echo` through it (issue 37).",
    args: () => ["run", "-m", "anthropic/claude-sonnet-4-6", GATEWAY_MCP_PROMPT],
    setup: (ctx) => {
      opencodeSetup(ctx)
      const file = join(ctx.home, ".config", "opencode", "opencode.json")
      const config = JSON.parse(readFileSync(file, "utf8"))
      config.mcp = { gateway: { type: "remote", url: `${ctx.baseUrl}/v1/mcp`, headers: { Authorization: `Bearer ${ctx.apiKey}` }, enabled: true } }
      writeFileSync(file, `${JSON.stringify(config, null, 2)}\n`)
    },
    env: opencodeEnv,
    // opencode names an MCP tool `<server>_<tool>`.
    toolCalls: () => ({ gateway_local__echo: { message: "pineapple" } })
  },
  {
    client: "opencode",
    scenario: "anthropic-thinking",
    description: "Built-in anthropic provider with `--variant high` (thinking on).",
    args: () => ["run", "-m", "anthropic/claude-sonnet-4-6", "--variant", "high", PLAIN_PROMPT],
    setup: opencodeSetup,
    env: opencodeEnv
  },
  {
    client: "opencode",
    scenario: "openai-plain",
    description: "`opencode run -m openai/gpt-5.5`: built-in openai provider, which speaks `/v1/responses`.",
    args: () => ["run", "-m", "openai/gpt-5.5", PLAIN_PROMPT],
    setup: opencodeSetup,
    env: opencodeEnv
  },
  {
    client: "opencode",
    scenario: "openai-tool",
    description: "Built-in openai provider (`/v1/responses`); the fake model calls `read`, opencode sends `function_call_output`.",
    args: () => ["run", "-m", "openai/gpt-5.5", TOOL_PROMPT],
    setup: opencodeSetup,
    env: opencodeEnv,
    toolCalls: (work) => ({ read: { filePath: join(work, "hello.txt") } })
  },
  {
    client: "opencode",
    scenario: "compatible-plain",
    description: "`opencode run -m modelgate/gpt-5.5`: an `@ai-sdk/openai-compatible` provider (`/v1/chat/completions`).",
    args: () => ["run", "-m", "modelgate/gpt-5.5", PLAIN_PROMPT],
    setup: opencodeSetup,
    env: opencodeEnv
  },
  {
    client: "opencode",
    scenario: "compatible-tool",
    description: "openai-compatible provider; the fake model calls `read`, opencode sends the `tool` message.",
    args: () => ["run", "-m", "modelgate/gpt-5.5", TOOL_PROMPT],
    setup: opencodeSetup,
    env: opencodeEnv,
    toolCalls: (work) => ({ read: { filePath: join(work, "hello.txt") } })
  },
  {
    client: "opencode",
    scenario: "anthropic-image",
    description: "Built-in anthropic provider with an image attached (`-f pixel.png`).",
    args: () => ["run", "-m", "anthropic/claude-sonnet-4-6", "-f", "pixel.png", "--", "What colour is this image?"],
    setup: opencodeSetup,
    env: opencodeEnv
  },
  {
    client: "opencode",
    scenario: "openai-image",
    description: "Built-in openai provider (`/v1/responses`) with an image attached (`-f pixel.png`).",
    args: () => ["run", "-m", "openai/gpt-5.5", "-f", "pixel.png", "--", "What colour is this image?"],
    setup: opencodeSetup,
    env: opencodeEnv
  },
  {
    client: "opencode",
    scenario: "compatible-image",
    description: "openai-compatible provider (`/v1/chat/completions`) with an image attached (`-f pixel.png`).",
    args: () => ["run", "-m", "modelgate/gpt-5.5", "-f", "pixel.png", "--", "What colour is this image?"],
    setup: opencodeSetup,
    env: opencodeEnv
  },
  {
    client: "codex",
    scenario: "plain",
    description: "`codex exec` with a custom `wire_api = \"responses\"` provider: text answer.",
    args: () => ["exec", "--skip-git-repo-check", PLAIN_PROMPT],
    setup: codexSetup,
    env: codexEnv
  },
  {
    client: "codex",
    scenario: "tool",
    description: "`codex exec` where the fake model calls `exec_command` (`cat hello.txt`); Codex sends `function_call_output`.",
    args: () => ["exec", "--skip-git-repo-check", TOOL_PROMPT],
    setup: codexSetup,
    env: codexEnv,
    toolCalls: () => ({ exec_command: { cmd: "cat hello.txt" } })
  },
  {
    client: "codex",
    scenario: "reasoning-high",
    description: "`codex exec -c model_reasoning_effort=high -c model_reasoning_summary=detailed`.",
    args: () => [
      "exec",
      "--skip-git-repo-check",
      "-c",
      `model_reasoning_effort="high"`,
      "-c",
      `model_reasoning_summary="detailed"`,
      PLAIN_PROMPT
    ],
    setup: codexSetup,
    env: codexEnv
  },
  {
    client: "codex",
    scenario: "apply-patch",
    description:
      "`codex exec -s workspace-write` where the fake model calls the `custom` tool `apply_patch`; Codex sends `custom_tool_call_output`.",
    args: () => ["exec", "--skip-git-repo-check", "-s", "workspace-write", "Create a file greeting.txt that says hello."],
    setup: codexSetup,
    env: codexEnv,
    toolCalls: () => ({ apply_patch: "*** Begin Patch\n*** Add File: greeting.txt\n+hello\n*** End Patch\n" })
  },
  {
    client: "codex",
    scenario: "image",
    description: "`codex exec -i pixel.png`: an image attached to the prompt.",
    args: () => ["exec", "--skip-git-repo-check", "-i", "pixel.png", "--", "What colour is this image?"],
    setup: codexSetup,
    env: codexEnv
  }
]

export const clientVersion = (clients: string, client: ClientName, home: string): string => {
  const out = spawnSync(join(clients, BINARIES[client]), ["--version"], {
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: home },
    encoding: "utf8",
    timeout: 60_000
  })
  const match = /\d+\.\d+\.\d+[\w.-]*/.exec(`${out.stdout}`)
  if (match === null) throw new Error(`cannot read the version of ${client}: ${out.stdout}${out.stderr}`)
  return match[0]
}

// Runs the client in its own process group so a timeout can end it and everything it started.
// `stop`, when it aborts, ends the client the same way (its reason is added to the output).
export const runClient = (
  command: string,
  args: ReadonlyArray<string>,
  env: Record<string, string>,
  cwd: string,
  timeoutMs: number,
  stop?: AbortSignal
) =>
  new Promise<{ code: number | null; output: string }>((done) => {
    const child = spawn(command, args, { cwd, env, detached: true, stdio: ["ignore", "pipe", "pipe"] })
    let output = ""
    child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()))
    child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()))
    const end = (why: string) => {
      output += `\n[capture: ${why}]`
      if (child.pid !== undefined && child.exitCode === null) process.kill(-child.pid, "SIGKILL")
    }
    const timer = setTimeout(() => end(`timed out after ${timeoutMs} ms`), timeoutMs)
    const onStop = () => end(String(stop?.reason ?? "stopped"))
    stop?.addEventListener("abort", onStop, { once: true })
    child.on("close", (code) => {
      clearTimeout(timer)
      stop?.removeEventListener("abort", onStop)
      done({ code, output })
    })
  })

const captureOne = async (spec: ScenarioSpec, clients: string, outDir: string): Promise<void> => {
  const home = join(ROOT, "home")
  const work = join(ROOT, "work")
  rmSync(ROOT, { recursive: true, force: true })
  mkdirSync(home, { recursive: true })
  mkdirSync(work, { recursive: true })
  writeFileSync(join(work, "hello.txt"), FILE_TEXT)
  writeFileSync(join(work, "pixel.png"), PIXEL_PNG)
  const version = clientVersion(clients, spec.client, home)

  const recorder = await startRecorder({
    ...(spec.toolCalls !== undefined ? { toolCalls: spec.toolCalls(work) } : {}),
    ...(spec.toolSequence !== undefined ? { toolSequence: spec.toolSequence } : {})
  })
  const ctx: Context = { baseUrl: recorder.url, apiKey: API_KEY, home, work }
  spec.setup?.(ctx)
  const env = {
    PATH: "/usr/local/bin:/usr/bin:/bin",
    HOME: home,
    TERM: "dumb",
    LANG: "C.UTF-8",
    ...spec.env?.(ctx)
  }
  const started = new Date()
  const result = await runClient(join(clients, BINARIES[spec.client]), spec.args(ctx), env, work, 180_000)
  await recorder.close()

  const scrubber = makeScrubber({ apiKey: API_KEY, host: new URL(recorder.url).host })
  const fixture = {
    client: spec.client,
    version,
    scenario: spec.scenario,
    captured_at: started.toISOString(),
    requests: recorder.requests.map(scrubber.scrub)
  }
  const file = join(outDir, spec.client, `${spec.scenario}.json`)
  mkdirSync(dirname(file), { recursive: true })
  writeFileSync(file, `${JSON.stringify(fixture, null, 2)}\n`)
  const summary = recorder.requests.map((r) => `${r.method} ${r.path}`).join(", ")
  process.stdout.write(`${spec.client}/${spec.scenario} (v${version}): exit ${result.code}, ${recorder.requests.length} requests [${summary}]\n`)
  if (result.code !== 0) process.stdout.write(`${result.output.slice(-2000)}\n`)
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: {
      clients: { type: "string", default: "/tmp/clients" },
      only: { type: "string" },
      out: { type: "string", default: "test/fixtures/clients" }
    }
  })
  const only = values.only?.split(",").map((s) => s.trim())
  const selected = SCENARIOS.filter(
    (spec) => only === undefined || only.includes(spec.client) || only.includes(`${spec.client}/${spec.scenario}`)
  )
  for (const spec of selected) await captureOne(spec, resolve(values.clients), resolve(values.out))
  rmSync(ROOT, { recursive: true, force: true })
}
