/**
 * MCP sessions owned by the gateway, kept in the store so any replica serves any session (no
 * sticky routing). A session belongs to the key that opened it: presented with another key it
 * is answered exactly like an unknown one. Expiry slides with every use.
 *
 * A session's `notifications/cancelled` may reach another replica than the one running the
 * request it names (a load balancer spreads a session's requests). With Redis configured, a
 * replica that does not run it publishes the cancellation on one channel, and the replica that
 * does interrupts it; without Redis (one replica, or replicas without shared Redis), only the
 * replica that receives it can act.
 */
import { Context, Deferred, Duration, Effect, Layer, Option, Schedule } from "effect"
import { randomBytes } from "node:crypto"
import { type DependencyUnavailable, SessionExpired } from "../../domain/errors.ts"
import type { McpSessionRecord } from "../../domain/records.ts"
import { storeUnavailable } from "../credits/Credits.ts"
import { RedisClient } from "../limits/RedisClient.ts"
import { McpSessionsRepo } from "../store/McpSessionsRepo.ts"

/** The Redis channel cancellations travel on between replicas: `{"s": session id, "r": request id}`. */
export const CANCEL_CHANNEL = "modelgate:mcp:cancelled"

/** A cancellation as published, or undefined when the message is not one. */
const parseCancellation = (message: string): { readonly s: string; readonly r: string | number } | undefined => {
  if (message.length > 1_024) return undefined
  try {
    const value = JSON.parse(message) as { s?: unknown; r?: unknown }
    if (typeof value.s !== "string" || (typeof value.r !== "string" && typeof value.r !== "number")) return undefined
    return { s: value.s, r: value.r }
  } catch {
    return undefined
  }
}

/** What a request interrupted by the client's `notifications/cancelled` answers. */
export const CANCELLED = Symbol.for("modelgate/McpSessions/cancelled")

const expired = () =>
  new SessionExpired({ message: "unknown or expired MCP session: start a new one with initialize" })

export class McpSessions extends Context.Service<McpSessions, {
  readonly open: (keyId: string, protocolVersion: string) => Effect.Effect<McpSessionRecord, DependencyUnavailable>
  /** The session if it is live and this key's, its expiry pushed forward; otherwise 404 session_expired. */
  readonly use: (id: string, keyId: string) => Effect.Effect<McpSessionRecord, SessionExpired | DependencyUnavailable>
  readonly close: (id: string, keyId: string) => Effect.Effect<void, SessionExpired | DependencyUnavailable>
  /**
   * Runs a request of a session so that the session's `notifications/cancelled` naming its id
   * interrupts it (on this replica, the one serving it): the answer is then `cancelled`. What
   * the request was doing upstream (an SQL statement, an upstream MCP call) is cancelled with it.
   */
  readonly cancellable: <A, E, R>(
    sessionId: string,
    requestId: string | number,
    effect: Effect.Effect<A, E, R>
  ) => Effect.Effect<A | typeof CANCELLED, E, R>
  /**
   * A session's `notifications/cancelled`: interrupts the request it names if this replica runs
   * it, else tells the other replicas (through Redis, when there is one).
   */
  readonly cancel: (sessionId: string, requestId: unknown) => Effect.Effect<void>
}>()("modelgate/McpSessions") {
  static readonly layer = (ttlSeconds: number) =>
    Layer.effect(
      McpSessions,
      Effect.gen(function*() {
        const store = yield* McpSessionsRepo
        const ttlMs = ttlSeconds * 1000
        const use = Effect.fnUntraced(function*(id: string, keyId: string) {
          // The key is part of the match: another key's request never touches the session. Its
          // expiry is the store's clock (any replica may serve the next request).
          const session = yield* store.touchSession(id, keyId, ttlMs).pipe(
            Effect.mapError(storeUnavailable)
          )
          if (session === undefined) return yield* expired()
          return session
        })
        // Expired sessions are answered as unknown already; this only keeps the table small.
        const prune = store.deleteExpiredSessions.pipe(
          Effect.catch((error) => Effect.logWarning("could not prune expired MCP sessions", error))
        )
        yield* Effect.forkScoped(Effect.repeat(prune, Schedule.spaced(Duration.minutes(5))))
        // Requests in flight on this replica, by session and JSON-RPC id (a string id and a
        // numeric one are different ids).
        const inFlight = new Map<string, Deferred.Deferred<void>>()
        const slot = (sessionId: string, requestId: unknown) => `${sessionId} ${typeof requestId} ${String(requestId)}`
        const cancelHere = (sessionId: string, requestId: string | number): boolean => {
          const cancelled = inFlight.get(slot(sessionId, requestId))
          if (cancelled === undefined) return false
          Deferred.doneUnsafe(cancelled, Effect.void)
          return true
        }
        const redis = Option.getOrUndefined(yield* Effect.serviceOption(RedisClient))
        if (redis !== undefined) yield* subscribeToCancellations(redis, (message) => {
          const cancellation = parseCancellation(message)
          if (cancellation !== undefined) cancelHere(cancellation.s, cancellation.r)
        })
        return McpSessions.of({
          cancellable: Effect.fnUntraced(function*(sessionId, requestId, effect) {
            const key = slot(sessionId, requestId)
            const cancelled = yield* Deferred.make<void>()
            inFlight.set(key, cancelled)
            // The request keeps its own interruptibility (uninterruptible but for the regions it
            // marks, such as its upstream call): only the wait around it can be interrupted, so
            // an interruption of the request (a client that leaves) still reaches those regions.
            return yield* Effect.interruptible(Effect.raceFirst(Effect.uninterruptible(effect), Effect.as(Deferred.await(cancelled), CANCELLED))).pipe(
              Effect.ensuring(Effect.sync(() => {
                if (inFlight.get(key) === cancelled) inFlight.delete(key)
              }))
            )
          }),
          cancel: (sessionId, requestId) =>
            Effect.suspend(() => {
              if (typeof requestId !== "string" && typeof requestId !== "number") return Effect.void
              if (cancelHere(sessionId, requestId) || redis === undefined) return Effect.void
              // Not running here: the replica that runs it hears it. A cancellation is advisory (the
              // spec lets a server ignore one), so a Redis failure is logged, not answered.
              return redis.command(["PUBLISH", CANCEL_CHANNEL, JSON.stringify({ s: sessionId, r: requestId })]).pipe(
                Effect.asVoid,
                Effect.catch((error) => Effect.logDebug(`MCP cancellation not published: ${error.message}`))
              )
            }),
          open: (keyId, protocolVersion) =>
            store.insertSession({ id: `mcp_${randomBytes(24).toString("hex")}`, key_id: keyId, protocol_version: protocolVersion }, ttlMs).pipe(
              Effect.mapError(storeUnavailable)
            ),
          use,
          close: (id, keyId) =>
            Effect.flatMap(use(id, keyId), () => store.deleteSession(id, keyId).pipe(Effect.mapError(storeUnavailable)))
        })
      })
    )
}

/**
 * Listens on CANCEL_CHANNEL on a connection of its own (a subscribed Redis connection serves
 * nothing else), for the layer's lifetime. Redis down at start: tried again with backoff in the
 * background, never holding the start up; node-redis resubscribes after a reconnect by itself.
 */
const subscribeToCancellations = (redis: RedisClient["Service"], onMessage: (message: string) => void) =>
  Effect.gen(function*() {
    let subscriber: { destroy: () => void } | undefined
    const attempt = Effect.suspend(() => {
      const started = redis.use(async (client) => {
        const connection = client.duplicate()
        subscriber = connection
        // Errors surface through reconnects; an unhandled "error" event would end the process.
        connection.on("error", () => undefined)
        await connection.connect()
        await connection.subscribe(CANCEL_CHANNEL, onMessage)
      })
      return started.pipe(Effect.tapError(() =>
        Effect.sync(() => {
          subscriber?.destroy()
          subscriber = undefined
        })
      ))
    })
    yield* Effect.forkScoped(
      attempt.pipe(
        // Forever, at most 5 s apart: cancellations between replicas start working once Redis answers.
        Effect.retry(Schedule.min([Schedule.exponential(Duration.millis(200)), Schedule.spaced(Duration.seconds(5))]))
      )
    )
    // Closed at once, never waited for: a QUIT needs an answer that a partitioned or unreachable
    // Redis never gives, and a subscriber has nothing pending to flush.
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        const connection = subscriber
        subscriber = undefined
        try {
          connection?.destroy()
        } catch {
          // Already closed.
        }
      })
    )
  })
