/**
 * Helpers for the limits tests: unique key names on the machine's real Redis, a plain client to
 * inspect and clean up what the services wrote, a TCP proxy in front of Redis that can drop or
 * freeze connections to play an outage, and a second gateway process (`fixtures/replica.ts`).
 */
import { spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { createServer, connect, type Server, type Socket } from "node:net"
import { createInterface } from "node:readline"
import { fileURLToPath } from "node:url"
import { assert } from "@effect/vitest"
import { Effect } from "effect"
import { createClient } from "redis"

export const REDIS_URL = process.env.MODELGATE_TEST_REDIS ?? "redis://127.0.0.1:6379"

export const uniqueKey = (prefix = "test") => `${prefix}-${Date.now().toString(36)}-${randomBytes(4).toString("hex")}`

export type Inspector = ReturnType<typeof createClient>

export const inspector = async (): Promise<Inspector> => {
  const client = createClient({ url: REDIS_URL })
  client.on("error", () => undefined)
  await client.connect()
  return client
}

export interface RedisProxy {
  readonly url: string
  /** Closes every connection and refuses new ones, like a stopped Redis. */
  readonly down: () => Promise<void>
  readonly up: () => Promise<void>
  /** Keeps connections open but forwards nothing, like a network partition or a frozen server. */
  readonly freeze: () => void
  /** Delivers what was held while frozen and forwards again. */
  readonly thaw: () => void
  readonly close: () => Promise<void>
}

export const redisProxy = async (): Promise<RedisProxy> => {
  const target = new URL(REDIS_URL)
  const sockets = new Set<Socket>()
  let frozen = false
  let held: Array<() => void> = []

  const forward = (from: Socket, to: Socket) =>
    from.on("data", (chunk) => {
      if (frozen) held.push(() => to.write(chunk))
      else to.write(chunk)
    })

  const onConnection = (client: Socket) => {
    const upstream = connect(Number(target.port || 6379), target.hostname)
    for (const socket of [client, upstream]) {
      sockets.add(socket)
      socket.on("error", () => undefined)
      socket.on("close", () => {
        sockets.delete(socket)
        client.destroy()
        upstream.destroy()
      })
    }
    forward(client, upstream)
    forward(upstream, client)
  }

  let server: Server = createServer(onConnection)
  const listen = (port: number) =>
    new Promise<number>((resolve, reject) => {
      server.once("error", reject)
      server.listen(port, "127.0.0.1", () => {
        const address = server.address()
        resolve(typeof address === "object" && address !== null ? address.port : port)
      })
    })
  const port = await listen(0)

  const down = () =>
    new Promise<void>((resolve) => {
      for (const socket of sockets) socket.destroy()
      server.close(() => resolve())
    })

  return {
    url: `redis://127.0.0.1:${port}`,
    down,
    up: async () => {
      server = createServer(onConnection)
      await listen(port)
    },
    freeze: () => {
      frozen = true
    },
    thaw: () => {
      frozen = false
      const pending = held
      held = []
      for (const write of pending) write()
    },
    close: () => (server.listening ? down() : Promise.resolve())
  }
}

export interface Replica {
  /** The next stdout line that `matches` (the child's log lines share its stdout). */
  readonly line: (matches: (line: string) => boolean) => Effect.Effect<string>
  readonly send: (line: string) => Effect.Effect<void>
  /** Ends the process the way a crash would: no finalizers, no goodbye to Redis. */
  readonly crash: Effect.Effect<void>
}

/** Another process running `fixtures/replica.ts`, killed when the scope closes. */
export const replica = (args: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const fixture = fileURLToPath(new URL("./fixtures/replica.ts", import.meta.url))
    const child = yield* Effect.acquireRelease(
      Effect.sync(() => spawn(process.execPath, [fixture, ...args], { stdio: ["pipe", "pipe", "inherit"] })),
      (child) => Effect.sync(() => child.kill("SIGKILL"))
    )
    const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]()
    const self: Replica = {
      line: (matches) =>
        Effect.promise(async () => {
          for (let next = await lines.next(); !next.done; next = await lines.next()) {
            if (matches(next.value)) return next.value
          }
          return ""
        }),
      send: (line) => Effect.sync(() => void child.stdin.write(`${line}\n`)),
      crash: Effect.callback<void>((resume) => {
        if (child.exitCode !== null || child.signalCode !== null) return resume(Effect.void)
        child.once("exit", () => resume(Effect.void))
        child.kill("SIGKILL")
      })
    }
    assert.strictEqual(yield* self.line((line) => line === "ready"), "ready")
    return self
  })
