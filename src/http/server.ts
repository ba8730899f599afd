/**
 * The Node server under the Effect app: plain HTTP or TLS (docs/decisions.md section 9), with Node's
 * own protocol-level refusals (oversized headers, garbage) answered in the same envelope and
 * audited, since Node would otherwise write a bare status line.
 */
import { NodeHttpServer } from "@effect/platform-node"
import { Context, Effect, Layer } from "effect"
import { readFileSync } from "node:fs"
import * as Http from "node:http"
import * as Https from "node:https"
import type { Duplex } from "node:stream"
import { type ApiError, HeadersTooLarge, slugOf, statusOf, toEnvelope, ValidationFailed } from "../domain/errors.ts"
import { Audit } from "../services/audit/Audit.ts"
import { makeRequestState, toAuditRecord } from "../pipelines/request.ts"
import { errorHeaders } from "./responses.ts"

export interface ServerOptions {
  readonly host: string
  readonly port: number
  readonly tls?: { readonly cert: string; readonly key: string } | undefined
  /** How long a stop waits for in-flight answers (long streams included) before ending them. */
  readonly shutdownGraceSeconds: number
}

const reasonPhrase = (status: number) => Http.STATUS_CODES[status] ?? "Error"

const answerClientError = (error: NodeJS.ErrnoException, socket: Duplex, append: (status: number, slug: string, id: string) => void) => {
  if (!socket.writable) return socket.destroy()
  const failure: ApiError = error.code === "HPE_HEADER_OVERFLOW"
    ? new HeadersTooLarge({ message: "request headers are too large (limit 16 KiB)" })
    : new ValidationFailed({ message: "malformed HTTP request" })
  const state = makeRequestState({ method: "UNKNOWN", path: "(unparsed)", clientAddr: null })
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
  append(status, slugOf(failure), state.requestId)
}

export const layerNodeServer = (options: ServerOptions) =>
  Layer.unwrap(Effect.gen(function*() {
    const audit = yield* Audit
    let current: Http.Server | undefined
    const create = () => {
      const serverOptions: Http.ServerOptions = { keepAliveTimeout: 65_000, requestTimeout: 0, headersTimeout: 60_000 }
      const server = options.tls
        ? Https.createServer({ ...serverOptions, cert: readFileSync(options.tls.cert), key: readFileSync(options.tls.key) })
        : Http.createServer(serverOptions)
      current = server
      server.on("clientError", (error: NodeJS.ErrnoException, socket: Duplex) =>
        answerClientError(error, socket, (status, slug, id) => {
          const state = makeRequestState({ method: "UNKNOWN", path: "(unparsed)", clientAddr: null, requestId: id })
          audit.append(toAuditRecord(state, status, slug))
        }))
      return server
    }
    return Layer.succeed(NodeServerHandle, { server: () => current }).pipe(
      Layer.provideMerge(NodeHttpServer.layer(create, { host: options.host, port: options.port, gracefulShutdownTimeout: `${options.shutdownGraceSeconds} seconds` }))
    )
  }))

/** The Node server under the Effect one, for the shutdown behaviour Effect's layer does not cover. */
export class NodeServerHandle extends Context.Service<NodeServerHandle, { readonly server: () => Http.Server | undefined }>()(
  "modelgate/NodeServerHandle"
) {}

/**
 * Must be released before the HTTP app stops serving (so: built on top of it). While the server
 * waits for in-flight answers, keep-alive connections that fall idle are closed as they do, so a
 * stop does not wait out the grace period for clients that merely kept their sockets open.
 */
export const closeIdleConnectionsOnShutdown = Layer.effectDiscard(
  Effect.gen(function*() {
    const handle = yield* NodeServerHandle
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        const server = handle.server()
        if (!server) return
        server.closeIdleConnections()
        const timer = setInterval(() => server.closeIdleConnections(), 50)
        timer.unref()
        server.once("close", () => clearInterval(timer))
      })
    )
  })
)
