/**
 * The Node server under the Effect app: plain HTTP or TLS (docs/decisions.md section 9), with Node's
 * own protocol-level refusals (oversized headers, garbage, requests that do not arrive in time,
 * an unknown Expect, CONNECT) answered in the same envelope and audited, since Node would
 * otherwise write a bare status line or close without a word; timeouts on every connection;
 * and an optional cap of open connections per client address.
 */
import * as NodeHttpServer from "@effect/platform-node/NodeHttpServer"
import { Context, Duration, Effect, Layer, Option } from "effect"
import { readFileSync } from "node:fs"
import type { IncomingMessage, Server, ServerOptions as NodeServerOptions, ServerResponse } from "node:http"
import { createRequire } from "node:module"
import * as Net from "node:net"
import type { Socket } from "node:net"
import type { Duplex } from "node:stream"
import {
  type ApiError,
  HeadersTooLarge,
  MethodNotAllowed,
  RateLimited,
  slugOf,
  statusOf,
  toEnvelope,
  ValidationFailed
} from "../domain/errors.ts"
import { Audit } from "../services/audit/Audit.ts"
import { Drain } from "../pipelines/drain.ts"
import { makeRequestState, type RequestState, toAuditRecord } from "../pipelines/request.ts"
import { errorHeaders } from "./responses.ts"

// node:http and node:https through require, not import: the ES-module view of node:http reads
// every export once, WebSocket and the other lazy ones included, which loads Node's own bundled
// undici (fetch, WebSocket: 745 KB of source the gateway never runs), 10 to 13 MiB of memory for
// the life of the process (README, Memory and start-up).
const requireBuiltin = createRequire(import.meta.url)
const Http = requireBuiltin("node:http") as typeof import("node:http")
const Https = requireBuiltin("node:https") as typeof import("node:https")

export interface ServerOptions {
  readonly host: string
  readonly port: number
  readonly tls?: { readonly cert: string; readonly key: string } | undefined
  /** How long a stop waits for in-flight answers (long streams included) before ending them. */
  readonly shutdownGraceSeconds: number
  /** A request's headers must be in within this time. */
  readonly headersTimeoutMs: number
  /** Its body within this time once the headers are (the body reader enforces it; Node backs it up). */
  readonly bodyTimeoutMs: number
  readonly keepAliveTimeoutMs: number
  /** Open connections per client address; 0 = no cap. */
  readonly maxConnectionsPerClient: number
}

const reasonPhrase = (status: number) => Http.STATUS_CODES[status] ?? "Error"

type Append = (state: RequestState, status: number, slug: string) => void

/**
 * Writes the envelope straight to a socket, for what never reaches the Effect app (Node's own
 * protocol refusals, CONNECT, a connection over the per-client cap), then closes it. Nothing is
 * written when an answer of the app has already started on the socket: a second status line
 * would corrupt it.
 */
const answerOnSocket = (socket: Duplex, failure: ApiError, state: RequestState, append: Append) => {
  const inFlight = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } | null })._httpMessage
  if (!socket.writable || inFlight?.headersSent === true) return socket.destroy()
  const body = JSON.stringify(toEnvelope(failure, state.requestId))
  const status = statusOf(failure)
  const headers = {
    "content-type": "application/json",
    "content-length": String(Buffer.byteLength(body)),
    "x-request-id": state.requestId,
    "request-id": state.requestId,
    ...errorHeaders(failure),
    connection: "close"
  }
  const head = Object.entries(headers).map(([k, v]) => `${k}: ${v}`).join("\r\n")
  socket.end(`HTTP/1.1 ${status} ${reasonPhrase(status)}\r\n${head}\r\n\r\n${body}`)
  append(state, status, slugOf(failure))
}

const clientErrorFailure = (error: NodeJS.ErrnoException): ApiError => {
  switch (error.code) {
    case "HPE_HEADER_OVERFLOW":
      return new HeadersTooLarge({ message: "request headers are too large (limit 16 KiB)" })
    case "ERR_HTTP_REQUEST_TIMEOUT":
      // Node's own deadline for the whole request: headers that trickle in, or a body nobody reads.
      return new ValidationFailed({ status: 408, message: "the request did not arrive in time" })
    default:
      return new ValidationFailed({ message: "malformed HTTP request" })
  }
}

const unparsed = (clientAddr: string | null, method = "UNKNOWN", path = "(unparsed)") =>
  makeRequestState({ method, path, clientAddr })

/** Counts open connections per client address and refuses those over the cap. */
const capConnections = (server: Server, max: number, tls: boolean, append: Append) => {
  const open = new Map<string, number>()
  server.on("connection", (socket: Socket) => {
    const address = socket.remoteAddress ?? "unknown"
    const count = (open.get(address) ?? 0) + 1
    if (count > max) {
      // Over TLS nothing can be said before the handshake: the connection is just closed.
      if (tls) return socket.destroy()
      const failure = new RateLimited({
        message: `too many open connections from ${address} (limit ${max})`,
        retryAfterSeconds: 1,
        limit: max,
        remaining: 0,
        resetAt: Math.ceil(Date.now() / 1000) + 1
      })
      return answerOnSocket(socket, failure, unparsed(address), append)
    }
    open.set(address, count)
    socket.once("close", () => {
      const left = (open.get(address) ?? 1) - 1
      if (left <= 0) open.delete(address)
      else open.set(address, left)
    })
  })
}

export const layerNodeServer = (options: ServerOptions) =>
  Layer.unwrap(Effect.gen(function*() {
    const audit = yield* Audit
    const append: Append = (state, status, slug) => audit.append(toAuditRecord(state, status, slug))
    const drain = Option.getOrUndefined(yield* Effect.serviceOption(Drain))
    let current: Server | undefined
    // Answers whose headers are not written yet: a drain that starts meanwhile still closes them.
    const unanswered = new Set<ServerResponse>()
    const create = () => {
      const serverOptions: NodeServerOptions = {
        keepAliveTimeout: options.keepAliveTimeoutMs,
        headersTimeout: options.headersTimeoutMs,
        // Node's whole-request deadline only backs up the body reader's, which answers first
        // with the request's own id and audit record.
        requestTimeout: options.headersTimeoutMs + options.bodyTimeoutMs + 1_000,
        connectionsCheckingInterval: Math.min(1_000, options.headersTimeoutMs),
        // A missing Host is answered by the app with the envelope, not by Node with a bare 400.
        requireHostHeader: false
      }
      const server = options.tls
        ? Https.createServer({ ...serverOptions, cert: readFileSync(options.tls.cert), key: readFileSync(options.tls.key) })
        : Http.createServer(serverOptions)
      current = server
      // Registered before Effect's own request listener, so it runs first.
      server.on("request", (_request: IncomingMessage, response: ServerResponse) => {
        if (drain?.draining()) response.setHeader("connection", "close")
        unanswered.add(response)
        const answered = () => unanswered.delete(response)
        response.once("finish", answered)
        response.once("close", answered)
      })
      // The last exchange on each socket, to tell a request that timed out from the unread rest
      // of a body whose request was already answered (401 before reading, say).
      const lastExchange = new WeakMap<Duplex, { readonly request: IncomingMessage; readonly response: ServerResponse }>()
      server.on("request", (request: IncomingMessage, response: ServerResponse) =>
        lastExchange.set(request.socket, { request, response }))
      server.on("clientError", (error: NodeJS.ErrnoException, socket: Duplex) => {
        const last = lastExchange.get(socket)
        if (error.code === "ERR_HTTP_REQUEST_TIMEOUT" && last !== undefined && !last.request.complete && last.response.writableEnded) {
          // The client had its answer and never sent the body it promised: nothing more to say.
          return socket.destroy()
        }
        answerOnSocket(socket, clientErrorFailure(error), unparsed((socket as Socket).remoteAddress ?? null), append)
      })
      // Without these listeners Node answers an unknown Expect with a bare 417 and closes a
      // CONNECT without a word.
      server.on("checkExpectation", (request: IncomingMessage, response: ServerResponse) => {
        const state = makeRequestState({
          method: request.method ?? "UNKNOWN",
          path: (request.url ?? "/").split("?")[0]!,
          clientAddr: request.socket.remoteAddress ?? null
        })
        const failure = new ValidationFailed({
          status: 417,
          message: `Expect: ${request.headers.expect ?? ""} is not supported; only 100-continue is`,
          details: { field: "Expect" }
        })
        const body = JSON.stringify(toEnvelope(failure, state.requestId))
        response.writeHead(417, {
          "content-type": "application/json",
          "content-length": String(Buffer.byteLength(body)),
          "x-request-id": state.requestId,
          "request-id": state.requestId,
          ...errorHeaders(failure)
        })
        response.end(body)
        append(state, 417, slugOf(failure))
      })
      server.on("connect", (request: IncomingMessage, socket: Duplex) => {
        const failure = new MethodNotAllowed({
          message: "CONNECT is not supported: this is not a proxy",
          allow: ["GET", "POST", "PUT", "PATCH", "DELETE"]
        })
        answerOnSocket(socket, failure, unparsed(request.socket.remoteAddress ?? null, "CONNECT", "(connect)"), append)
      })
      if (options.maxConnectionsPerClient > 0) {
        capConnections(server, options.maxConnectionsPerClient, options.tls !== undefined, append)
      }
      return server
    }
    const closeAnswers = () => {
      for (const response of unanswered) if (!response.headersSent) response.setHeader("connection", "close")
    }
    return Layer.succeed(NodeServerHandle, { server: () => current, closeAnswers }).pipe(
      Layer.provideMerge(NodeHttpServer.layer(create, { host: options.host, port: options.port, gracefulShutdownTimeout: `${options.shutdownGraceSeconds} seconds` }))
    )
  }))

/** The Node server under the Effect one, for the shutdown behaviour Effect's layer does not cover. */
export class NodeServerHandle extends Context.Service<NodeServerHandle, {
  readonly server: () => Server | undefined
  /** Marks every answer not yet started `Connection: close`. */
  readonly closeAnswers: () => void
}>()("modelgate/NodeServerHandle") {}

/**
 * The graceful stop (decisions section 10). Must be released before the HTTP app stops serving
 * (so: built on top of it). It stops accepting connections; from then on every answer, including
 * those of requests already in flight, says `Connection: close`, so no client sends another
 * request on a connection that is about to close. Idle keep-alive connections are not closed
 * under a client that may be sending on them; they are closed once the requests in flight are
 * done, so a stop never waits out their keep-alive timeout either. It waits for the requests in
 * flight at most `graceSeconds`; what is
 * still open then is cut (src/pipelines/drain.ts): streams end with an in-band 503
 * `dependency_unavailable` error, and everything cut is refunded and audited with that slug.
 */
export const drainOnShutdown = (graceSeconds: number) =>
  Layer.effectDiscard(
    Effect.gen(function*() {
      const handle = yield* NodeServerHandle
      const drain = yield* Drain
      const waitForRequests = (until: number) =>
        Effect.gen(function*() {
          while (drain.inFlight() > 0 && performance.now() < until) yield* Effect.sleep(Duration.millis(20))
        })
      yield* Effect.addFinalizer(() =>
        Effect.gen(function*() {
          // What a stop does is logged (issue 26.8): an operator watching a rollout sees the
          // drain begin, what it waits for, and how it ended.
          const started = performance.now()
          drain.begin()
          handle.closeAnswers()
          const server = handle.server()
          // No new connections; idle keep-alive sockets are left open while requests finish: a
          // client may be sending on one this very moment, and closing it under that request
          // would reset it. Whatever arrives on them is answered with Connection: close.
          // Only the listening socket is closed: Node's http `close()` also closes every idle
          // keep-alive socket at once (since Node 19), which reset (ECONNRESET) the requests
          // clients were sending on them as the drain began (test/faults/drain.test.ts).
          if (server?.listening) Net.Server.prototype.close.call(server)
          // Logged once the drain has begun: nothing may yield between the signal and the above.
          yield* Effect.logInfo(
            `shutting down: no new connections; waiting up to ${graceSeconds} s for ${drain.inFlight()} requests in flight`
          )
          yield* waitForRequests(performance.now() + graceSeconds * 1000)
          if (drain.inFlight() > 0) {
            yield* Effect.logWarning(
              `shutdown grace of ${graceSeconds} s ran out with ${drain.inFlight()} requests in flight: ending them (503 dependency_unavailable, refunded)`
            )
            yield* drain.cutNow
            // Long enough for a cut stream to send its error frame and end its request.
            yield* waitForRequests(performance.now() + 2000)
          } else {
            yield* Effect.logInfo(`drained: every request finished (${Math.round(performance.now() - started)} ms); writing what is buffered, then exiting`)
          }
          // Sockets still idle now sent nothing during the drain: close them, so the stop does
          // not wait out their keep-alive timeout.
          server?.closeIdleConnections()
        })
      )
    })
  )
