/**
 * The parts of undici the gateway uses (the keep-alive Agent, `request` and the error classes),
 * loaded file by file. undici's index loads all of the library (fetch, WebSocket, EventSource,
 * the HTTP cache, the mock and proxy agents): about 110 modules and 5 MiB of heap, of which the
 * gateway runs a third. These are undici's own modules, so behaviour is the index's.
 *
 * Types come from the index (`import type` loads nothing); the values from the files the index
 * itself re-exports them from (lib/dispatcher/agent.js, lib/core/errors.js, lib/api/api-request.js).
 */
import { createRequire } from "node:module"
import type * as Undici from "undici"

const require = createRequire(import.meta.url)

export type Agent = Undici.Agent
export const Agent: typeof Undici.Agent = require("undici/lib/dispatcher/agent.js")

export const errors: typeof Undici.errors = require("undici/lib/core/errors.js")

const dispatchRequest: (this: Undici.Dispatcher, options: Undici.Dispatcher.RequestOptions) => Promise<Undici.Dispatcher.ResponseData> = require(
  "undici/lib/api/api-request.js"
)

type RequestOptions = Omit<Undici.Dispatcher.RequestOptions, "origin" | "path" | "method"> & {
  readonly dispatcher: Undici.Dispatcher
  readonly method: Undici.Dispatcher.HttpMethod
}

/**
 * undici's `request(url, options)` for a given dispatcher (the gateway always names one): the
 * URL split into origin and path as undici's index does, then the dispatcher's request.
 */
export const request = (url: string | URL, options: RequestOptions): Promise<Undici.Dispatcher.ResponseData> => {
  const { origin, path } = typeof url === "string" ? splitUrl(url) : split(url)
  const { dispatcher, ...rest } = options
  return dispatchRequest.call(dispatcher, { ...rest, origin, path })
}

/**
 * The dispatcher's own `dispatch` with the URL split as `request` splits it: the caller's handler
 * gets the answer's events directly, with no response stream in between.
 */
export const dispatch = (url: string, options: RequestOptions, handler: Undici.Dispatcher.DispatchHandler): void => {
  const { origin, path } = splitUrl(url)
  const { dispatcher, ...rest } = options
  dispatcher.dispatch({ ...rest, origin, path }, handler)
}

interface Split {
  readonly origin: string
  readonly path: string
}

const split = (parsed: URL): Split => ({ origin: parsed.origin, path: parsed.search ? `${parsed.pathname}${parsed.search}` : parsed.pathname })

/**
 * Upstream URLs split once: a deployment calls the same few URLs request after request, and
 * parsing one is a WHATWG URL parse each time. Bounded, since a route may put a client-chosen
 * model name in the path: past the bound, a new URL is parsed every time.
 */
const SPLIT_URLS = 512
const splitUrls = new Map<string, Split>()
const splitUrl = (url: string): Split => {
  let found = splitUrls.get(url)
  if (found === undefined) {
    found = split(new URL(url))
    if (splitUrls.size < SPLIT_URLS) splitUrls.set(url, found)
  }
  return found
}
