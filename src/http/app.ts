/**
 * The root HTTP app: every request, on every path, passes through here. It assigns the request
 * id, refuses oversized bodies before reading them, routes, turns every failure into the spec's
 * envelope (defects into a 500 without a stack trace), stamps the id headers on every response
 * and appends the request's audit record unless a stream will write it when it ends.
 */
import { Cause, Effect, Option } from "effect"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import type { HttpServerResponse } from "effect/http/HttpServerResponse"
import {
  type ApiError,
  HttpsRequired,
  InternalError,
  isApiError,
  MethodNotAllowed,
  NotFound,
  slugOf,
  statusOf
} from "../domain/errors.ts"
import { Audit } from "../services/audit/Audit.ts"
import { declaredLengthExceeds, tooLarge } from "./body.ts"
import { CurrentRequest, makeRequestState, type RequestState, toAuditRecord } from "./request-context.ts"
import { errorResponse, withRequestHeaders } from "./responses.ts"
import { makeRouteTable, type Route } from "./router.ts"
import { settleRequest } from "../pipelines/admission.ts"

export interface AppOptions {
  readonly maxBodyBytes: number
  /** Behind a proxy named by trust_proxy: take the client address and scheme from X-Forwarded-*. */
  readonly trustProxy: boolean
}

const pathOf = (url: string) => {
  const q = url.indexOf("?")
  return q === -1 ? url : url.slice(0, q)
}

const clientAddress = (request: HttpServerRequest, trustProxy: boolean): string | null => {
  if (trustProxy) {
    const forwarded = request.headers["x-forwarded-for"]
    if (forwarded) return forwarded.split(",")[0]!.trim()
  }
  return Option.getOrNull(request.remoteAddress)
}

type RoutesContext<Routes extends ReadonlyArray<Route<any>>> = Routes[number] extends Route<infer R> ? R : never

export const makeHttpApp = <const Routes extends ReadonlyArray<Route<any>>>(routes: Routes, options: AppOptions) =>
  Effect.gen(function*() {
    const audit = yield* Audit
    const match = makeRouteTable<RoutesContext<Routes>>(routes)

    const dispatch = (request: HttpServerRequest, state: RequestState) => {
      if (options.trustProxy && request.headers["x-forwarded-proto"] !== "https") {
        return Effect.fail(new HttpsRequired({ message: "plain HTTP is refused: connect over HTTPS" }))
      }
      if (declaredLengthExceeds(request, options.maxBodyBytes)) return Effect.fail(tooLarge(options.maxBodyBytes))
      const found = match(request.method, request.url)
      switch (found._tag) {
        case "NotFound":
          return Effect.fail(new NotFound({ message: `no route for ${request.method} ${state.endpoint}` }))
        case "MethodNotAllowed":
          state.endpoint = found.pattern
          return Effect.fail(
            new MethodNotAllowed({ message: `${request.method} is not allowed on ${found.pattern}`, allow: found.allow })
          )
        case "Found":
          state.endpoint = found.pattern
          state.params = found.params
          return found.handler
      }
    }

    const finish = (state: RequestState, response: HttpServerResponse, error: ApiError | undefined) =>
      Effect.suspend(() => {
        // A streamed response owns its settlement and its audit record until the stream ends.
        if (state.auditDeferred) return Effect.succeed(withRequestHeaders(response, state))
        const status = error ? statusOf(error) : response.status
        return Effect.as(
          settleRequest(state, status).pipe(
            Effect.andThen(Effect.sync(() => audit.append(toAuditRecord(state, status, error ? slugOf(error) : null))))
          ),
          withRequestHeaders(response, state)
        )
      })

    return Effect.gen(function*() {
      const request = yield* HttpServerRequest
      const state = makeRequestState({
        method: request.method,
        path: pathOf(request.url),
        clientAddr: clientAddress(request, options.trustProxy)
      })
      return yield* dispatch(request, state).pipe(
        Effect.provideService(CurrentRequest, state),
        Effect.flatMap((response) => finish(state, response, undefined)),
        Effect.catchCause((cause) => {
          // The client left while an interruptible stage (the upstream call) was waiting: no
          // answer can reach it, so the interruption goes on to onInterrupt, which records it.
          if (Cause.hasInterruptsOnly(cause)) return Effect.failCause(cause)
          const failure = Cause.findErrorOption(cause)
          const error: ApiError = Option.isSome(failure) && isApiError(failure.value)
            ? failure.value
            : new InternalError({ message: "internal error; quote the request id when reporting it" })
          const log = error._tag === "InternalError" ? Effect.logError("unhandled failure", cause) : Effect.void
          return Effect.andThen(log, finish(state, errorResponse(error, state), error))
        }),
        Effect.onInterrupt(() =>
          Effect.suspend(() => {
            if (state.auditDeferred) return Effect.void
            // The client went away before an answer: still one record, with nginx's 499 convention.
            audit.append(toAuditRecord(state, 499, "client_closed_request"))
            return settleRequest(state, 499)
          })
        )
      )
    })
  })
