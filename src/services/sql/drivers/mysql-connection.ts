/**
 * A small Effect adapter over mysql2's callback API (docs/decisions.md section 1: the published
 * @effect/sql-mysql2 does not load with effect 4.1 GA). It only offers what the driver needs:
 * connect, run a control statement, execute one user statement with a row cap, reset, and
 * kill a busy session from a side connection.
 */
import { Effect, Predicate } from "effect"
import {
  type Connection,
  type ConnectionOptions,
  createConnection,
  type ExecuteValues,
  type FieldPacket,
  type QueryError,
  type ResultSetHeader
} from "mysql2"
import { valueBytes } from "./result-size.ts"

export interface MysqlSession {
  readonly raw: Connection
  readonly threadId: number
  /** Set by the connection's own listeners: the socket ended or failed while pooled. */
  dead: boolean
  /** A capped read stopped consuming mid-result; only destroying the session can end it. */
  abandoned: boolean
}

/** A mysql2 error (server errors carry `errno`/`sqlState`, transport errors a Node `code`) or a client-side refusal. */
export type MysqlFailure = QueryError | Error

export const connect = (options: ConnectionOptions): Effect.Effect<MysqlSession, MysqlFailure> =>
  Effect.callback<MysqlSession, MysqlFailure>((resume) => {
    const raw = createConnection(options)
    // Always listened to: mysql2 emits "error" on the connection when no command can take it (an
    // idle pooled socket dying, a late failure after a refused handshake), and an unhandled
    // "error" event would take the whole process down.
    raw.on("error", () => {})
    const onConnect = () => {
      raw.off("error", onError)
      const session: MysqlSession = { raw, threadId: raw.threadId, dead: false, abandoned: false }
      const markDead = () => {
        session.dead = true
      }
      raw.on("error", markDead)
      raw.on("end", markDead)
      resume(Effect.succeed(session))
    }
    const onError = (error: MysqlFailure) => {
      raw.off("connect", onConnect)
      raw.destroy()
      resume(Effect.fail(error))
    }
    raw.once("connect", onConnect)
    raw.once("error", onError)
    return Effect.sync(() => raw.destroy())
  })

/** Graceful close (COM_QUIT), for sessions retired in a clean state. */
export const close = (session: MysqlSession) =>
  Effect.sync(() => (session.dead ? session.raw.destroy() : session.raw.end()))

/**
 * Hard close of the socket. mysql2's own `destroy` only half-closes it, and a server thread
 * blocked writing rows the client stopped reading would then sit holding its locks until
 * `net_write_timeout`.
 */
export const abort = (session: MysqlSession) =>
  Effect.sync(() => {
    const socket: unknown = (session.raw as unknown as { readonly stream?: unknown }).stream
    if (Predicate.hasProperty(socket, "destroy") && Predicate.isFunction(socket.destroy)) socket.destroy()
    session.dead = true
  })

/** A control statement of ours (text protocol, no parameters, no user input). */
export const command = (session: MysqlSession, sql: string): Effect.Effect<void, MysqlFailure> =>
  Effect.callback<void, MysqlFailure>((resume) => {
    session.raw.query(sql, (error: QueryError | null) => resume(error ? Effect.fail(error) : Effect.void))
  })

/** COM_RESET_CONNECTION: session variables, temporary tables, user variables and prepared statements all go. */
export const reset = (session: MysqlSession): Effect.Effect<void, MysqlFailure> =>
  Effect.callback<void, MysqlFailure>((resume) => {
    session.raw.reset((error: QueryError | null) => resume(error ? Effect.fail(error) : Effect.void))
  })

export interface Capped {
  /** Column metadata of the first result set; undefined when it was an OK packet (DML, DDL). */
  readonly fields: ReadonlyArray<FieldPacket> | undefined
  /** At most `limit + 1` rows. */
  readonly rows: ReadonlyArray<Record<string, unknown>>
  readonly header: ResultSetHeader | undefined
  /** More than `limit` rows existed. */
  readonly truncated: boolean
}

const isHeader = (value: unknown): value is ResultSetHeader =>
  typeof value === "object" && value !== null && value.constructor?.name === "ResultSetHeader"

const connectionLost = () => Object.assign(new Error("Connection lost: the server closed the connection."), { fatal: true })

/**
 * Runs one statement, keeping at most `limit + 1` rows of its first result set. With
 * `stopEarly` the socket is paused at the cap and the session marked abandoned: the caller must
 * kill the query and destroy the session, which is what keeps a huge table from being read
 * whole. Without it the rest is read and dropped, for statements whose completion matters
 * (a write with RETURNING must still commit).
 */
export const executeCapped = (
  session: MysqlSession,
  statement: { readonly sql: string; readonly params: ReadonlyArray<unknown>; readonly prepared: boolean },
  limit: number,
  stopEarly: boolean,
  maxBytes: number = Number.POSITIVE_INFINITY
): Effect.Effect<Capped, MysqlFailure> =>
  Effect.callback<Capped, MysqlFailure>((resume) => {
    const raw = session.raw
    const rows: Array<Record<string, unknown>> = []
    let fields: ReadonlyArray<FieldPacket> | undefined
    let header: ResultSetHeader | undefined
    let resultSets = 0
    let truncated = false
    let finished = false
    let bytes = 0
    /** The byte budget ran out: later rows are not kept (and, with stopEarly, not read). */
    let full = false
    const finish = (effect: Effect.Effect<Capped, MysqlFailure>) => {
      if (finished) return
      finished = true
      raw.off("error", onConnectionError)
      raw.off("end", onConnectionEnd)
      resume(effect)
    }
    const succeed = () => finish(Effect.succeed({ fields, rows, header, truncated }))
    // Without a callback mysql2 reports a lost socket to the connection, not to the command.
    const onConnectionError = (error: MysqlFailure) => finish(Effect.fail(error))
    const onConnectionEnd = () => finish(Effect.fail(connectionLost()))
    raw.on("error", onConnectionError)
    raw.on("end", onConnectionEnd)

    let running
    try {
      running = statement.prepared
        ? raw.execute(statement.sql, statement.params as ExecuteValues)
        : raw.query(statement.sql)
    } catch (error) {
      return finish(Effect.fail(error instanceof Error ? error : new Error(String(error))))
    }
    running.on("fields", (received: Array<FieldPacket> | undefined) => {
      resultSets++
      if (resultSets === 1) fields = received
    })
    running.on("result", (row: unknown) => {
      if (resultSets > 1 || finished) return
      if (isHeader(row)) {
        header ??= row
        return
      }
      if (rows.length <= limit && !full) {
        bytes += valueBytes(row)
        if (bytes <= maxBytes) {
          rows.push(row as Record<string, unknown>)
          return
        }
        full = true
      } else if (full && !stopEarly) {
        return
      }
      truncated = true
      if (stopEarly) {
        raw.pause()
        session.abandoned = true
        succeed()
      }
    })
    running.on("error", (error: QueryError) => finish(Effect.fail(error)))
    running.on("end", () => {
      if (rows.length > limit || full) truncated = true
      succeed()
    })
  })

/**
 * Kills a session's server thread from a side connection: the only way to stop a statement
 * mid-flight, since the session's own socket is busy with it. `KILL CONNECTION` rather than
 * `KILL QUERY` because the session is being discarded anyway, and only the connection form also
 * interrupts a thread blocked writing a result nobody reads. Failures are ignored: the caller
 * aborts the socket as well.
 */
export const killConnection = (options: ConnectionOptions, threadId: number) =>
  Effect.acquireUseRelease(
    connect(options),
    (side) => command(side, `KILL CONNECTION ${Math.trunc(threadId)}`),
    close
  ).pipe(Effect.timeout("5 seconds"), Effect.ignore)
