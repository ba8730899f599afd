/**
 * One shared Redis connection for the whole process (rate limits, stream slots, and later MCP
 * sessions). Commands are pipelined on it, so the request path pays one round trip per call
 * and never opens a connection.
 *
 * Failure policy: fail closed and fast. Nothing is queued while the connection is down
 * (`disableOfflineQueue`), every call has a deadline, and every failure becomes
 * `DependencyUnavailable` naming the host and port (never the URL, which may hold a password).
 * node-redis reconnects by itself after a refused or closed connection; a connection that stays
 * open but stops answering (a network partition, a frozen server) is detected by a probe after
 * a timed-out call and replaced.
 */
import { createHash } from "node:crypto"
import { Context, Duration, Effect, Layer, Option, Predicate } from "effect"
import type { createClient } from "redis"
import { DependencyUnavailable } from "../../domain/errors.ts"
import { Metrics } from "../metrics/Metrics.ts"

export type NodeRedisClient = ReturnType<typeof createClient>

export interface RedisScript {
  readonly source: string
  readonly sha1: string
}

/** A Lua script run with EVALSHA (the SHA is computed once here), loaded on first use or after a Redis restart. */
export const redisScript = (source: string): RedisScript => ({
  source,
  sha1: createHash("sha1").update(source).digest("hex")
})

export interface RedisClientOptions {
  /** Deadline for one call, from send to reply. Default 1000 ms. */
  readonly commandTimeoutMs?: number
  /** How long building the layer waits for a first connection before starting anyway. Default 1000 ms. */
  readonly connectTimeoutMs?: number
}

export interface RedisClientShape {
  /** `host:port` of the server, safe for messages and logs. */
  readonly target: string
  /** One raw command, e.g. `["ZREM", key, member]`. */
  readonly command: (args: ReadonlyArray<string>) => Effect.Effect<unknown, DependencyUnavailable>
  /** A script by EVALSHA, falling back to EVAL (which also caches it) on NOSCRIPT. */
  readonly evalScript: (
    script: RedisScript,
    keys: ReadonlyArray<string>,
    args: ReadonlyArray<string>
  ) => Effect.Effect<unknown, DependencyUnavailable>
  /**
   * Calls `listener` each time the connection is ready again after it was lost (a restarted Redis
   * may have lost its data: holders of leases put theirs back at once). Returns the unsubscribe.
   */
  readonly onReconnect: (listener: () => void) => () => void
  /** Anything else with the node-redis client, under the same deadline and error mapping. */
  readonly use: <A>(f: (client: NodeRedisClient) => Promise<A>) => Effect.Effect<A, DependencyUnavailable>
}

/** `host:port` from a redis URL; the rest (user, password, database) stays out of messages. */
export const redisTarget = (url: string): string => {
  const parsed = URL.parse(url)
  if (parsed === null) return "an unparsable redis URL"
  return `${parsed.hostname || "localhost"}:${parsed.port || "6379"}`
}

const reasonOf = (cause: unknown): string =>
  Predicate.isError(cause) && cause.message !== "" ? cause.message : String(cause)

export class RedisClient extends Context.Service<RedisClient, RedisClientShape>()("modelgate/limits/RedisClient") {
  static readonly layer = (url: string, options: RedisClientOptions = {}): Layer.Layer<RedisClient> =>
    Layer.effect(RedisClient, make(url, options))
}

const make = Effect.fnUntraced(function*(url: string, options: RedisClientOptions) {
  // node-redis loads only when a Redis is configured: a single-process deployment never needs it.
  const { createClient, ErrorReply } = yield* Effect.promise(() => import("redis"))
  const target = redisTarget(url)
  const commandTimeoutMs = options.commandTimeoutMs ?? 1000
  const connectTimeoutMs = options.connectTimeoutMs ?? 1000
  const context = yield* Effect.context<never>()
  const scope = yield* Effect.scope
  const runLog = Effect.runForkWith(context)

  const metrics = Option.getOrUndefined(yield* Effect.serviceOption(Metrics))
  // Every failed call comes through here, so this is where Redis errors are counted.
  const unavailable = (reason: string) => {
    metrics?.dependencyError("redis")
    return new DependencyUnavailable({
      message: `redis unavailable at ${target}: ${reason}`,
      details: { dependency: "redis" }
    })
  }

  // Logged on transitions only: a down Redis makes node-redis report every reconnect attempt.
  let connected = false
  let everConnected = false
  const reconnectListeners = new Set<() => void>()
  const open = (): NodeRedisClient => {
    const client = createClient({
      url,
      disableOfflineQueue: true,
      socket: {
        connectTimeout: connectTimeoutMs,
        reconnectStrategy: (retries: number) => Math.min(50 * 2 ** Math.min(retries, 5), 1000)
      }
    })
    client.on("error", (error: unknown) => {
      if (!connected) return
      connected = false
      runLog(Effect.logWarning(`redis connection to ${target} lost: ${reasonOf(error)}`))
    })
    client.on("ready", () => {
      if (connected) return
      connected = true
      runLog(Effect.logInfo(`redis connected at ${target}`))
      if (everConnected) for (const listener of reconnectListeners) listener()
      everConnected = true
    })
    // The promise settles once ready, or when the client is closed while still retrying.
    client.connect().catch(() => undefined)
    return client
  }
  const closeClient = (client: NodeRedisClient) =>
    Effect.sync(() => {
      if (client.isOpen) client.destroy()
    })

  let current = open()
  let probing = false

  // A call that timed out on a connection node-redis still thinks is healthy: if a PING queued
  // behind it gets no answer either, the connection is dead and is replaced.
  const probe = (suspect: NodeRedisClient) =>
    Effect.gen(function*() {
      const answered = yield* Effect.tryPromise(() => suspect.sendCommand(["PING"])).pipe(
        Effect.timeoutOption(Duration.millis(commandTimeoutMs)),
        Effect.map(Option.isSome),
        // An error reply or an offline client is not silence: node-redis handles those itself.
        Effect.orElseSucceed(() => true)
      )
      if (answered || suspect !== current) return
      connected = false
      current = open()
      yield* closeClient(suspect)
      yield* Effect.logWarning(`redis at ${target} stopped answering; reconnecting`)
    }).pipe(Effect.ensuring(Effect.sync(() => (probing = false))))

  const startProbe = (suspect: NodeRedisClient) =>
    Effect.suspend(() => {
      if (probing || suspect !== current) return Effect.void
      probing = true
      return Effect.asVoid(Effect.forkIn(probe(suspect), scope))
    })

  function call<A>(f: (client: NodeRedisClient) => Promise<A>, client: NodeRedisClient): Effect.Effect<A, DependencyUnavailable> {
    return Effect.callback<A, DependencyUnavailable>((resume) => {
      let settled = false
      const timer = setTimeout(() => {
        if (settled) return
        settled = true
        resume(Effect.andThen(startProbe(client), Effect.fail(unavailable(`no reply within ${commandTimeoutMs} ms`))))
      }, commandTimeoutMs)
      new Promise<A>((resolve) => resolve(f(client))).then(
        (value) => {
          if (settled) return
          settled = true
          clearTimeout(timer)
          resume(Effect.succeed(value))
        },
        (error: unknown) => {
          if (settled) return
          settled = true
          clearTimeout(timer)
          resume(Effect.fail(unavailable(reasonOf(error))))
        }
      )
      return Effect.sync(() => {
        settled = true
        clearTimeout(timer)
      })
    })
  }

  const use = <A>(f: (client: NodeRedisClient) => Promise<A>) => Effect.suspend(() => call(f, current))

  const command = (args: ReadonlyArray<string>) => use((client) => client.sendCommand([...args]))

  const evalScript = (script: RedisScript, keys: ReadonlyArray<string>, args: ReadonlyArray<string>) =>
    use(async (client) => {
      const tail = [String(keys.length), ...keys, ...args]
      try {
        return await client.sendCommand(["EVALSHA", script.sha1, ...tail])
      } catch (error) {
        if (!(error instanceof ErrorReply && error.message.startsWith("NOSCRIPT"))) throw error
        return await client.sendCommand(["EVAL", script.source, ...tail])
      }
    })

  yield* Effect.addFinalizer(() =>
    Effect.suspend(() => {
      const client = current
      if (!client.isOpen) return Effect.void
      return Effect.promise(() => client.close()).pipe(
        Effect.timeoutOrElse({ duration: Duration.millis(commandTimeoutMs), orElse: () => closeClient(client) })
      )
    })
  )

  const ready = yield* waitReady(current).pipe(Effect.timeoutOption(Duration.millis(connectTimeoutMs)))
  if (ready._tag === "None") {
    yield* Effect.logWarning(
      `redis at ${target} is not reachable yet; requests that need it fail with 503 dependency_unavailable until it is`
    )
  }

  const onReconnect = (listener: () => void) => {
    reconnectListeners.add(listener)
    return () => void reconnectListeners.delete(listener)
  }
  return RedisClient.of({ target, command, evalScript, onReconnect, use })
})

const waitReady = (client: NodeRedisClient) =>
  Effect.callback<void>((resume) => {
    if (client.isReady) return resume(Effect.void)
    const onReady = () => resume(Effect.void)
    client.once("ready", onReady)
    return Effect.sync(() => void client.off("ready", onReady))
  })
