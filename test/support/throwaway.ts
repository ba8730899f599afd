/**
 * Throwaway Postgres clusters and Redis servers of the test's own, on random ports, for fault
 * tests that kill, freeze or restart them (never the machine's shared ones). Postgres comes from
 * the machine's binaries (/usr/lib/postgresql/<version>/bin); as root, initdb and postgres run
 * as the `postgres` user, since Postgres refuses to run as root. fsync is off (speed; safe for a
 * killed server, only an OS crash loses data) but commits stay synchronous: a SIGKILL must not
 * lose a commit the gateway was told about.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import { chownSync, existsSync, mkdtempSync, readdirSync, renameSync, rmSync } from "node:fs"
import { connect, createServer } from "node:net"
import { tmpdir } from "node:os"
import { basename, dirname, join } from "node:path"

export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as { port: number }).port
      server.close(() => resolve(port))
    })
  })

const postgresBin = (): string | undefined => {
  const root = "/usr/lib/postgresql"
  if (!existsSync(root)) return undefined
  const versions = readdirSync(root).filter((v) => existsSync(join(root, v, "bin", "initdb"))).sort((a, b) => Number(b) - Number(a))
  return versions[0] === undefined ? undefined : join(root, versions[0], "bin")
}

const postgresUser = (): { uid: number; gid: number } | undefined => {
  if (process.getuid?.() !== 0) return undefined
  const line = execFileSync("getent", ["passwd", "postgres"], { encoding: "utf8" }).trim().split(":")
  return { uid: Number(line[2]), gid: Number(line[3]) }
}

export const canRunPostgres = postgresBin() !== undefined
export const canRunRedis = (() => {
  try {
    execFileSync("redis-server", ["--version"], { stdio: "ignore" })
    return true
  } catch {
    return false
  }
})()

const waitUntil = async (what: string, check: () => Promise<boolean>, timeoutMs: number) => {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (await check()) return
    await new Promise((r) => setTimeout(r, 50))
  }
  throw new Error(`timed out waiting for ${what}`)
}

const accepts = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = connect(port, "127.0.0.1")
    socket.once("connect", () => {
      socket.destroy()
      resolve(true)
    })
    socket.once("error", () => resolve(false))
  })

export interface Throwaway {
  readonly url: string
  readonly port: number
  /** Starts the server again (after kill or stop), on the same port with the same data. */
  readonly start: () => Promise<void>
  /** SIGKILL: gone at once, connections reset. */
  readonly kill: () => Promise<void>
  /** SIGSTOP / SIGCONT: a partition (connections stay open, nothing answers). */
  readonly freeze: () => void
  readonly thaw: () => void
  /** Stops it for good and removes its files. */
  readonly destroy: () => Promise<void>
}

const exited = (child: ChildProcess | undefined) =>
  child === undefined || child.exitCode !== null || child.signalCode !== null
    ? Promise.resolve()
    : new Promise<void>((resolve) => child.once("exit", () => resolve()))

/** The postmaster and its children: each connection is served by a backend process of its own (each in its own session, so no group signal reaches them all). */
const signalGroup = (child: ChildProcess | undefined, signal: NodeJS.Signals) => {
  if (child?.pid === undefined || child.exitCode !== null) return
  let pids = [child.pid]
  try {
    pids = [child.pid, ...execFileSync("pgrep", ["-P", String(child.pid)], { encoding: "utf8" }).split("\n").filter(Boolean).map(Number)]
  } catch {
    // no children
  }
  for (const pid of pids) {
    try {
      process.kill(pid, signal)
    } catch {
      // already gone
    }
  }
}

/**
 * A cluster fresh from initdb, made once per machine and Postgres version and copied for each
 * throwaway (initdb is about 0.5 s of CPU and 2 s on a loaded machine, a copy of its 40 MB a
 * tenth of that). Workers racing to make it each initdb into a folder of their own and rename
 * it into place; the first rename wins and the others' are removed.
 */
const initializedCluster = (bin: string, user: { uid: number; gid: number } | undefined): string => {
  const template = join(tmpdir(), `modelgate-pg-template-${basename(dirname(bin))}-${process.getuid?.() ?? 0}`)
  if (existsSync(join(template, "PG_VERSION"))) return template
  const scratch = mkdtempSync(join(tmpdir(), "modelgate-pg-initdb-"))
  if (user !== undefined) chownSync(scratch, user.uid, user.gid)
  const data = join(scratch, "data")
  execFileSync(join(bin, "initdb"), ["-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"], {
    stdio: "ignore",
    ...(user ?? {})
  })
  try {
    renameSync(data, template)
  } catch {
    // Another worker's is in place.
  }
  rmSync(scratch, { recursive: true, force: true })
  return template
}

export const startPostgres = async (): Promise<Throwaway> => {
  const bin = postgresBin()
  if (bin === undefined) throw new Error("no PostgreSQL binaries under /usr/lib/postgresql")
  const user = postgresUser()
  const dir = mkdtempSync(join(tmpdir(), "modelgate-pg-"))
  if (user !== undefined) chownSync(dir, user.uid, user.gid)
  const data = join(dir, "data")
  execFileSync("cp", ["-a", initializedCluster(bin, user), data])
  const port = await freePort()
  let child: ChildProcess | undefined
  let log = ""
  const start = async () => {
    child = spawn(join(bin, "postgres"), [
      "-D", data, "-p", String(port), "-k", dir, "-c", "listen_addresses=127.0.0.1",
      "-c", "fsync=off", "-c", "full_page_writes=off", "-c", "max_connections=100"
    ], { stdio: ["ignore", "ignore", "pipe"], ...(user ?? {}) })
    child.stderr!.on("data", (chunk) => (log = (log + chunk).slice(-4000)))
    await waitUntil(`postgres on ${port}: ${log}`, () => accepts(port), 20_000)
    // Accepting TCP is not yet accepting queries (recovery after a kill): wait for a real answer.
    await waitUntil(`postgres ready on ${port}: ${log}`, async () => {
      try {
        execFileSync(join(bin, "pg_isready"), ["-h", "127.0.0.1", "-p", String(port)], { stdio: "ignore" })
        return true
      } catch {
        return false
      }
    }, 20_000)
  }
  await start()
  const kill = async () => {
    const c = child
    c?.kill("SIGKILL")
    await exited(c)
    // Postgres's own children die with the postmaster; wait until the port is free again.
    await waitUntil("postgres to be gone", async () => !(await accepts(port)), 10_000)
  }
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    start,
    kill,
    freeze: () => signalGroup(child, "SIGSTOP"),
    thaw: () => signalGroup(child, "SIGCONT"),
    destroy: async () => {
      signalGroup(child, "SIGCONT")
      await kill().catch(() => {})
      rmSync(dir, { recursive: true, force: true })
    }
  }
}

/** A Redis without persistence (the default that a restart empties), like the shared one in CI. */
export const startRedis = async (): Promise<Throwaway> => {
  const port = await freePort()
  const dir = mkdtempSync(join(tmpdir(), "modelgate-redis-"))
  let child: ChildProcess | undefined
  const start = async () => {
    child = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir], {
      stdio: "ignore"
    })
    await waitUntil(`redis on ${port}`, () => accepts(port), 10_000)
  }
  await start()
  const kill = async () => {
    const c = child
    c?.kill("SIGKILL")
    await exited(c)
  }
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    start,
    kill,
    freeze: () => child?.kill("SIGSTOP"),
    thaw: () => child?.kill("SIGCONT"),
    destroy: async () => {
      child?.kill("SIGCONT")
      await kill()
      rmSync(dir, { recursive: true, force: true })
    }
  }
}
