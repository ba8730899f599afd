/**
 * The Dockerfile, performed without a container engine (none runs on the CI machines), so the
 * recipe cannot rot: this reads the Dockerfile itself and does what it says in a clean directory.
 *
 *   npm run smoke:container
 *
 * - The build context is the repository's files (tracked and not ignored), copied into a fresh
 *   temporary directory; the image's filesystem is another one (`/x` in the Dockerfile is
 *   `<rootfs>/x` here).
 * - WORKDIR, COPY, ENV, RUN, VOLUME, HEALTHCHECK and CMD are performed in order; RUN through
 *   `sh -c` in the working directory with the image's environment and this machine's Node 24
 *   first on PATH (the base image's Node). The image's users do not exist here, so `chown` in a
 *   RUN is a no-op and USER is only checked to be a non-root user.
 * - Then CMD is started (on a free port), HEALTHCHECK's command must pass within the start
 *   period, `/readyz` must be ready and `/app/` must serve the built app; the install must hold no
 *   development package; SIGTERM must stop it with exit code 0.
 */
import { execFileSync, spawn, spawnSync } from "node:child_process"
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { delimiter, dirname, isAbsolute, join, resolve } from "node:path"
import { serverEntryFile } from "../bin/server-bundle.ts"

const REPO = resolve(import.meta.dirname, "..")
const fail = (message: string): never => {
  console.error(`container-smoke: ${message}`)
  process.exit(1)
}
const step = (message: string) => console.log(`container-smoke: ${message}`)

interface Instruction {
  readonly name: string
  readonly args: string
}

/** Instructions with their continuation lines joined, comments and blank lines dropped. */
const parseDockerfile = (text: string): ReadonlyArray<Instruction> => {
  const out: Array<Instruction> = []
  let pending = ""
  for (const raw of text.split("\n")) {
    const line = raw.trimEnd()
    if (pending === "" && (line.trim() === "" || line.trimStart().startsWith("#"))) continue
    if (pending !== "" && line.trimStart().startsWith("#")) continue
    if (line.endsWith("\\")) {
      pending += line.slice(0, -1) + " "
      continue
    }
    const full = (pending + line).trim()
    pending = ""
    const space = full.search(/\s/)
    out.push({ name: full.slice(0, space).toUpperCase(), args: full.slice(space + 1).trim() })
  }
  return out
}

/** `A=1 B="two words"` (ENV's form). */
const parseEnv = (args: string): Record<string, string> => {
  const env: Record<string, string> = {}
  for (const match of args.matchAll(/([A-Za-z_][A-Za-z0-9_]*)=("([^"]*)"|'([^']*)'|(\S*))/g)) {
    env[match[1]!] = match[3] ?? match[4] ?? match[5] ?? ""
  }
  return env
}

/** The exec form (`["node", "x"]`), the only form this script accepts for CMD and HEALTHCHECK. */
const execForm = (args: string, what: string): ReadonlyArray<string> => {
  try {
    const parsed = JSON.parse(args)
    if (Array.isArray(parsed) && parsed.every((part) => typeof part === "string")) return parsed
  } catch {
    // reported below
  }
  return fail(`${what} must use the exec form (a JSON array): ${args}`)
}

const freePort = () =>
  new Promise<number>((resolvePort) => {
    const server = createServer()
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as { port: number }).port
      server.close(() => resolvePort(port))
    })
  })

const main = async () => {
  if (Number(process.versions.node.split(".")[0]) !== 24) fail(`run with Node 24 (npm run smoke:container), not ${process.version}`)
  const instructions = parseDockerfile(readFileSync(join(REPO, "Dockerfile"), "utf8"))
  const base = mkdtempSync(join(tmpdir(), "modelgate-container-"))
  const context = join(base, "context")
  const rootfs = join(base, "rootfs")
  mkdirSync(context)
  mkdirSync(rootfs)

  // The build context: what a clean clone has (plus uncommitted work, so it can be tried before a commit).
  const files = execFileSync("git", ["ls-files", "-z", "--cached", "--others", "--exclude-standard"], { cwd: REPO, encoding: "utf8" })
    .split("\0").filter((file) => file !== "" && existsSync(join(REPO, file)))
  for (const file of files) {
    mkdirSync(dirname(join(context, file)), { recursive: true })
    cpSync(join(REPO, file), join(context, file))
  }
  step(`build context: ${files.length} files in ${context}`)

  const inImage = (path: string, workdir: string) => join(rootfs, isAbsolute(path) ? path : join(workdir, path))
  // The base image's Node: this machine's Node 24, ahead of anything else (the repository's
  // node_modules/.bin is not the image's).
  const basePath = [dirname(process.execPath), ...(process.env.PATH ?? "").split(delimiter).filter((dir) => !dir.includes("node_modules"))].join(delimiter)
  let workdir = "/"
  let env: Record<string, string> = {}
  let user: string | undefined
  let healthcheck: { command: ReadonlyArray<string>; startSeconds: number } | undefined
  let cmd: ReadonlyArray<string> | undefined
  const volumes: Array<string> = []

  for (const { name, args } of instructions) {
    switch (name) {
      case "FROM":
        if (!/^node:24(-|\b)/.test(args)) fail(`the base image must be Node 24 (node:24-slim), not ${args}`)
        break
      case "WORKDIR":
        workdir = isAbsolute(args) ? args : join(workdir, args)
        mkdirSync(join(rootfs, workdir), { recursive: true })
        break
      case "ENV":
        env = { ...env, ...parseEnv(args) }
        break
      case "COPY": {
        const parts = args.split(/\s+/).filter((part) => !part.startsWith("--"))
        const target = parts.pop()!
        for (const source of parts) {
          const from = join(context, source)
          if (!existsSync(from)) fail(`COPY ${source}: not in the build context (is it committed?)`)
          const to = target.endsWith("/") || parts.length > 1 ? join(inImage(target, workdir), source.split("/").pop()!) : inImage(target, workdir)
          mkdirSync(dirname(to), { recursive: true })
          cpSync(from, to, { recursive: true })
        }
        break
      }
      case "RUN": {
        // RUN's own options (`--mount=type=cache,...`) are BuildKit's business; the command follows them.
        const command = args.replace(/^(--\S+\s+)+/, "")
        step(`RUN ${command}`)
        // Ownership is the image's (its `node` user); this machine may not have that user, or be root.
        const prelude = "chown() { :; }; "
        if (/npm cache clean|rm -rf[^&;]*\.npm/.test(command)) fail("a RUN would clear npm's cache, which this script shares with the machine; use a cache mount")
        const result = spawnSync("sh", ["-ec", prelude + command], {
          cwd: join(rootfs, workdir),
          env: { ...process.env, PATH: basePath, ...env, HOME: process.env.HOME ?? base },
          stdio: "inherit"
        })
        if (result.status !== 0) fail(`RUN failed (exit ${result.status}): ${command}`)
        break
      }
      case "VOLUME":
        for (const volume of args.replace(/[[\]",]/g, " ").split(/\s+/).filter(Boolean)) {
          volumes.push(volume)
          mkdirSync(join(rootfs, volume), { recursive: true })
        }
        break
      case "USER":
        user = args
        break
      case "HEALTHCHECK": {
        const at = args.indexOf("CMD ")
        if (at === -1) fail("HEALTHCHECK needs a CMD")
        const start = /--start-period=(\d+)s/.exec(args)
        healthcheck = { command: execForm(args.slice(at + 4).trim(), "HEALTHCHECK"), startSeconds: start ? Number(start[1]) : 30 }
        break
      }
      case "CMD":
        cmd = execForm(args, "CMD")
        break
      case "EXPOSE":
      case "LABEL":
      case "ARG":
        break
      default:
        fail(`instruction ${name} is not performed by this script; teach it, or keep the Dockerfile simple`)
    }
  }
  if (user === undefined || user === "root" || user === "0") fail("the image must run as a non-root USER")
  if (healthcheck === undefined) fail("the image needs a HEALTHCHECK")
  if (cmd === undefined) fail("the image needs a CMD")
  if (volumes.length === 0) fail("the image needs a VOLUME for its data")

  const app = join(rootfs, workdir)
  for (const dev of ["vitest", "playwright-core", "@langchain/core", "ai", "typescript", "openai"]) {
    if (existsSync(join(app, "node_modules", dev))) fail(`the runtime install holds the development package ${dev}`)
  }
  if (!existsSync(join(app, "app", "dist", "index.html"))) fail("the install did not build the admin app into app/dist")
  // The image runs the server bundle it built, not its sources (bin/server-bundle.ts decides).
  const entry = serverEntryFile({}, app)
  if (!entry.startsWith(join(app, "dist", "server") + "/")) fail(`the image would run ${entry}, not a server bundle built from its sources`)
  step(`runs the server bundle ${entry.slice(app.length + 1)}`)
  const du = spawnSync("du", ["-sm", join(app, "node_modules")], { encoding: "utf8" })
  step(`runtime install: ${du.stdout.split("\t")[0]} MB in node_modules, ${readdirSync(join(app, "node_modules")).length} top-level entries`)

  const port = await freePort()
  const runEnv = { ...process.env, PATH: basePath, ...env, MODELGATE_SERVER_PORT: String(port), HOME: base }
  step(`CMD ${cmd!.join(" ")} (port ${port})`)
  const gateway = spawn(cmd![0]!, cmd!.slice(1), { cwd: app, env: runEnv, stdio: ["ignore", "pipe", "pipe"] })
  let output = ""
  gateway.stdout.on("data", (chunk) => (output += chunk))
  gateway.stderr.on("data", (chunk) => (output += chunk))
  const exited = new Promise<number | null>((r) => gateway.once("exit", (code) => r(code)))
  try {
    // The start period, with room for a loaded CI machine (a first start compiles every module).
    const deadline = Date.now() + Math.max(healthcheck!.startSeconds, 120) * 1000
    let healthy = false
    while (!healthy && Date.now() < deadline && gateway.exitCode === null) {
      healthy = spawnSync(healthcheck!.command[0]!, healthcheck!.command.slice(1), { cwd: app, env: runEnv, timeout: 15_000 }).status === 0
      if (!healthy) await new Promise((r) => setTimeout(r, 500))
    }
    if (!healthy) fail(`HEALTHCHECK did not pass:\n${output}`)
    step("HEALTHCHECK passed")
    const ready = await fetch(`http://127.0.0.1:${port}/readyz`)
    if (ready.status !== 200) fail(`/readyz answered ${ready.status}: ${await ready.text()}`)
    // Behind the TLS proxy the image expects (trust_proxy; a loopback peer is the proxy while
    // server.trusted_proxies is unset): the admin app is served over what the proxy says is HTTPS.
    const page = await fetch(`http://127.0.0.1:${port}/app/`, { headers: { "x-forwarded-proto": "https" } })
    if (page.status !== 200 || !(await page.text()).includes("<html")) fail(`/app/ answered ${page.status}`)
    // Plain HTTP the proxy does not vouch for is refused (only the probes are exempt).
    const plain = await fetch(`http://127.0.0.1:${port}/app/`)
    if (plain.status !== 403) fail(`/app/ over plain HTTP answered ${plain.status}, not 403 https_required`)
    step("/readyz ready, /app/ served through the proxy, refused over plain HTTP")
    for (const volume of volumes) {
      if (readdirSync(join(rootfs, volume)).length === 0 && volume.endsWith("data")) fail(`nothing was written to the volume ${volume}`)
    }
  } finally {
    if (gateway.exitCode === null) gateway.kill("SIGTERM")
  }
  const code = await exited
  if (code !== 0) fail(`SIGTERM ended the gateway with exit code ${code}:\n${output}`)
  step("SIGTERM: drained and exited 0")
  rmSync(base, { recursive: true, force: true })
}

await main()
