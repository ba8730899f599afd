/**
 * Protocol-level mistakes a request can make that Node lets through to the app (with
 * `requireHostHeader` off, so that they get the envelope instead of Node's bare 400).
 */
import * as NodeHttpServerRequest from "@effect/platform-node/NodeHttpServerRequest"
import type { HttpServerRequest } from "effect/http/HttpServerRequest"
import { ValidationFailed } from "../domain/errors.ts"

/** The refusal a request's framing earns before routing, if any. */
export const protocolRefusal = (request: HttpServerRequest): ValidationFailed | undefined => {
  const incoming = NodeHttpServerRequest.toIncomingMessage(request)
  // HTTP/1.1 requires Host (RFC 9112 section 3.2); HTTP/1.0 predates it.
  if (incoming.httpVersion === "1.1" && (request.headers.host === undefined || request.headers.host === "")) {
    return new ValidationFailed({ message: "missing Host header (required by HTTP/1.1)", details: { field: "Host" } })
  }
  return undefined
}
