// Requests captured from real coding clients (Claude Code, opencode, Codex CLI), kept under
// test/fixtures/clients/<set>/<scenario>.json so tests can replay exactly what those clients send
// through the gateway. A set is a client's name (captured by scripts/capture/capture.ts against
// the recording fake upstream) or `<client>-<version>` (captured by scripts/live-clis.ts through
// the recording proxy in front of the gateway, one directory per client version). See
// test/fixtures/clients/README.md for how each was captured.
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"

export const FIXTURES_DIR = fileURLToPath(new URL("../fixtures/clients/", import.meta.url))

/** Stands for the client's API key in headers (and anywhere else it appeared). */
export const API_KEY_PLACEHOLDER = "{{API_KEY}}"
/** Stands for the recorder's `host:port` in the `host` header. */
export const HOST_PLACEHOLDER = "{{HOST}}"

export type ClientName = "claude-code" | "opencode" | "codex"
const CLIENTS: ReadonlyArray<ClientName> = ["claude-code", "opencode", "codex"]

export interface FixtureRequest {
  readonly method: string
  /** Path without the query string, e.g. `/v1/messages`. */
  readonly path: string
  /** Raw query string without `?`, e.g. `beta=true`; "" when none. */
  readonly query: string
  /** Lowercased header names as the client sent them (credentials replaced by placeholders). */
  readonly headers: Readonly<Record<string, string>>
  /** The decoded JSON body; null for bodiless requests (the client's `HEAD /` probe). */
  // Bodies are arbitrary client JSON; tests dig into them freely.
  readonly body: Record<string, any> | null
}

export interface ClientFixture {
  readonly client: ClientName
  /** Version of the client that sent these requests. */
  readonly version: string
  readonly scenario: string
  /** ISO 8601 time of the capture. */
  readonly captured_at: string
  /** Every request the client made, in order. */
  readonly requests: ReadonlyArray<FixtureRequest>
}

/** A directory of fixtures: the client's name, or `<client>-<version>` for a versioned capture. */
export type FixtureSet = ClientName | `${ClientName}-${string}`

export interface FixtureId {
  readonly client: ClientName
  /** The directory it is in (the client's name, or `<client>-<version>`). */
  readonly set: FixtureSet
  readonly scenario: string
}

/** The client a set's fixtures come from; undefined for a directory that is not a set. */
export const clientOfSet = (set: string): ClientName | undefined =>
  CLIENTS.find((client) => set === client || new RegExp(`^${client}-\\d+\\.\\d+\\.\\d+[\\w.-]*$`).test(set))

export interface LoadOptions {
  /** Replaces `{{API_KEY}}` everywhere (headers and bodies). */
  readonly apiKey?: string
  /**
   * Replaces the top-level `model` of every body: a fixed name, or a function of the id the
   * client asked for (clients ask for side-call models of their own, e.g. a small model for
   * titles, so a test may map each to a configured alias).
   */
  readonly model?: string | ((requested: string, request: FixtureRequest) => string)
}

/** Every fixture on disk, sorted by set (unversioned sets first: `claude-code` < `claude-code-2...`) then scenario. */
export const listFixtures = (): Array<FixtureId> =>
  readdirSync(FIXTURES_DIR, { withFileTypes: true })
    .filter((entry) => entry.isDirectory() && clientOfSet(entry.name) !== undefined)
    .map((entry) => entry.name as FixtureSet)
    .sort()
    .flatMap((set) =>
      readdirSync(join(FIXTURES_DIR, set))
        .filter((file) => file.endsWith(".json"))
        .sort()
        .map((file) => ({ client: clientOfSet(set)!, set, scenario: file.slice(0, -".json".length) }))
    )

/**
 * Reads and checks one fixture of a set (a client's name, or `<client>-<version>`); throws naming
 * the file and the first thing that is wrong.
 */
export const loadFixture = (set: FixtureSet, scenario: string, options: LoadOptions = {}): ClientFixture => {
  const file = join(FIXTURES_DIR, set, `${scenario}.json`)
  const fixture = parseFixture(JSON.parse(readFileSync(file, "utf8")), file)
  if (fixture.client !== clientOfSet(set) || fixture.scenario !== scenario) {
    throw new Error(`${file}: says it is ${fixture.client}/${fixture.scenario}`)
  }
  if (set !== fixture.client && set !== `${fixture.client}-${fixture.version}`) {
    throw new Error(`${file}: is version ${fixture.version}, its directory says otherwise`)
  }
  return substitute(fixture, options)
}

/** The POST requests that carry a model call (skips probes such as Claude Code's `HEAD /`). */
export const modelRequests = (fixture: ClientFixture): Array<FixtureRequest & { body: Record<string, any> }> =>
  fixture.requests.filter(
    (request): request is FixtureRequest & { body: Record<string, any> } =>
      request.method === "POST" && request.body !== null && typeof request.body.model === "string"
  )

// Headers that belong to the original connection or to the body's original encoding: the
// replaying HTTP client sets its own (bodies are stored decoded, so a stored content-encoding or
// content-length would be false).
const CONNECTION_HEADERS = new Set([
  "host",
  "content-length",
  "connection",
  "keep-alive",
  "transfer-encoding",
  "content-encoding",
  "accept-encoding"
])

/** The headers to send when replaying `request`. */
export const replayHeaders = (request: FixtureRequest): Record<string, string> =>
  Object.fromEntries(Object.entries(request.headers).filter(([name]) => !CONNECTION_HEADERS.has(name)))

/** The URL to replay `request` against, given the gateway's origin (e.g. `http://127.0.0.1:4000`). */
export const replayUrl = (origin: string, request: FixtureRequest): string =>
  `${origin.replace(/\/+$/, "")}${request.path}${request.query === "" ? "" : `?${request.query}`}`

/** `fetch` options replaying `request` as the client sent it. */
export const replayInit = (request: FixtureRequest): RequestInit => ({
  method: request.method,
  headers: replayHeaders(request),
  ...(request.body !== null ? { body: JSON.stringify(request.body) } : {})
})

// ---------------------------------------------------------------------------------------------

const substitute = (fixture: ClientFixture, options: LoadOptions): ClientFixture => {
  const key = options.apiKey
  const swap = (value: unknown): unknown => {
    if (typeof value === "string") return key === undefined ? value : value.split(API_KEY_PLACEHOLDER).join(key)
    if (Array.isArray(value)) return value.map(swap)
    if (typeof value === "object" && value !== null) {
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, swap(v)]))
    }
    return value
  }
  return {
    ...fixture,
    requests: fixture.requests.map((request) => {
      const swapped = swap(request) as FixtureRequest
      const model = options.model
      if (model === undefined || swapped.body === null || typeof swapped.body.model !== "string") return swapped
      const name = typeof model === "string" ? model : model(swapped.body.model, request)
      return { ...swapped, body: { ...swapped.body, model: name } }
    })
  }
}

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value)

/** Checks the shape of a parsed fixture file. */
export const parseFixture = (value: unknown, where = "fixture"): ClientFixture => {
  const fail = (message: string): never => {
    throw new Error(`${where}: ${message}`)
  }
  if (!isRecord(value)) return fail("not a JSON object")
  const { client, version, scenario, captured_at, requests } = value
  if (typeof client !== "string" || !CLIENTS.includes(client as ClientName)) fail(`unknown client ${JSON.stringify(client)}`)
  if (typeof version !== "string" || !/^\d+\.\d+\.\d+/.test(version)) fail(`version ${JSON.stringify(version)} is not a version`)
  if (typeof scenario !== "string" || !/^[a-z0-9-]+$/.test(scenario)) fail(`scenario ${JSON.stringify(scenario)}`)
  if (typeof captured_at !== "string" || Number.isNaN(Date.parse(captured_at))) fail("captured_at is not a date")
  if (!Array.isArray(requests) || requests.length === 0) return fail("requests is not a non-empty array")
  requests.forEach((request: unknown, i) => {
    const at = `requests[${i}]`
    if (!isRecord(request)) return fail(`${at} is not an object`)
    const keys = Object.keys(request).sort().join(",")
    if (keys !== "body,headers,method,path,query") fail(`${at} has keys ${keys}`)
    if (typeof request.method !== "string" || !/^[A-Z]+$/.test(request.method)) fail(`${at}.method`)
    if (typeof request.path !== "string" || !request.path.startsWith("/") || request.path.includes("?")) fail(`${at}.path`)
    if (typeof request.query !== "string" || request.query.startsWith("?")) fail(`${at}.query`)
    if (!isRecord(request.headers)) return fail(`${at}.headers is not an object`)
    for (const [name, v] of Object.entries(request.headers)) {
      if (name !== name.toLowerCase() || typeof v !== "string") fail(`${at}.headers.${name}`)
    }
    if (request.body !== null && !isRecord(request.body)) fail(`${at}.body is neither a JSON object nor null`)
  })
  return value as unknown as ClientFixture
}
