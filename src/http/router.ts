/**
 * Routes as data: method + path pattern + handler. One table serves the whole gateway so that
 * an unknown path (404) and a known path with the wrong method (405, with `Allow`) are told
 * apart, which a per-method router cannot do.
 */
import type { Effect } from "effect"
import * as FindMyWay from "effect/http/FindMyWay"
import type { HttpServerRequest } from "effect/http/HttpServerRequest"
import type { HttpServerResponse } from "effect/http/HttpServerResponse"
import type { ApiError } from "../domain/errors.ts"
import type { AuthenticatedKey } from "../pipelines/authenticate.ts"
import type { CurrentRequest, RequestBody } from "../pipelines/request.ts"

export type Method = "GET" | "HEAD" | "POST" | "PUT" | "PATCH" | "DELETE"

export type Handler<R> = Effect.Effect<HttpServerResponse, ApiError, R | CurrentRequest | RequestBody | HttpServerRequest>

export interface Route<R> {
  readonly method: Method
  readonly path: `/${string}`
  readonly handler: Handler<R>
}

/**
 * A handler that still needs `AuthenticatedKey` did not go through `authenticated(...)`: the
 * extra parameter then demands an argument no caller can give, so the route does not compile.
 */
type ForgotAuthentication<R> = [AuthenticatedKey] extends [Extract<R, AuthenticatedKey>] ? [wrap_the_handler_in_authenticated: never] : []

export const route = <R>(
  method: Method,
  path: `/${string}`,
  handler: Handler<R>,
  ..._authenticated: ForgotAuthentication<R>
): Route<R> => ({ method, path, handler })

export type Match<R> =
  | { readonly _tag: "Found"; readonly handler: Handler<R>; readonly pattern: string; readonly params: Record<string, string | undefined> }
  | { readonly _tag: "MethodNotAllowed"; readonly pattern: string; readonly allow: ReadonlyArray<string> }
  | { readonly _tag: "NotFound" }

interface PathEntry<R> {
  readonly pattern: string
  readonly methods: Map<string, Handler<R>>
}

/**
 * The one method every path is filed under in the tree: which path matches does not depend on
 * the method (the entry holds the methods), and `router.all` filed each path under every method
 * Node knows (34), which made building the table about 8 ms of every start.
 */
const TREE_METHOD = "GET"

export const makeRouteTable = <R>(routes: ReadonlyArray<Route<R>>) => {
  const router = FindMyWay.make<PathEntry<R>>({ ignoreTrailingSlash: true, maxParamLength: 200 })
  const byPattern = new Map<string, PathEntry<R>>()
  for (const r of routes) {
    let entry = byPattern.get(r.path)
    if (!entry) {
      entry = { pattern: r.path, methods: new Map() }
      byPattern.set(r.path, entry)
      router.on(TREE_METHOD, r.path, entry)
    }
    if (entry.methods.has(r.method)) throw new Error(`duplicate route ${r.method} ${r.path}`)
    entry.methods.set(r.method, r.handler)
  }
  return (method: string, url: string): Match<R> => {
    const found = router.find(TREE_METHOD, url)
    if (!found) return { _tag: "NotFound" }
    const handler = found.handler.methods.get(method)
    if (handler === undefined) {
      return { _tag: "MethodNotAllowed", pattern: found.handler.pattern, allow: [...found.handler.methods.keys()] }
    }
    return { _tag: "Found", handler, pattern: found.handler.pattern, params: found.params }
  }
}
