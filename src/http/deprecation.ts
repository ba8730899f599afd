/**
 * Routes declared deprecated in DEPRECATIONS (src/domain/deprecation.ts, keyed `<METHOD> <path>`)
 * answer with the Deprecation, Sunset and Link headers, errors included: the headers go into
 * the request's own headers before the handler runs, and every answer of the request carries
 * those (responses.ts). The headers are computed once, when the route table is built.
 * Deprecated request fields are declared in the same table and announced by their pipeline.
 */
import { Effect } from "effect"
import { type Deprecation, DEPRECATIONS, deprecationHeaders } from "../domain/deprecation.ts"
import { CurrentRequest } from "../pipelines/request.ts"
import type { Route } from "./router.ts"

export const deprecatedRoute = <R>(route: Route<R>, deprecation: Deprecation): Route<R> => {
  const headers = deprecationHeaders(deprecation)
  return {
    ...route,
    handler: Effect.flatMap(CurrentRequest, (state) => {
      Object.assign(state.headers, headers)
      return route.handler
    })
  }
}

/** Every route with its declaration applied, when it has one. */
export const withDeprecations = <T extends Route<any>>(
  routes: ReadonlyArray<T>,
  table: Readonly<Record<string, Deprecation>> = DEPRECATIONS
): Array<T> =>
  routes.map((r) => {
    const deprecation = table[`${r.method} ${r.path}`]
    return deprecation === undefined ? r : deprecatedRoute(r, deprecation) as T
  })
