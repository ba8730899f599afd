/**
 * Deprecations a client can read by machine (issue 40; spec section 9: deprecations are
 * announced at least 90 days ahead, with a migration window). A route or a request field that
 * is deprecated declares it here, once, and every answer that used it carries:
 *
 * - `Deprecation: @<unix seconds>` (RFC 9745): when it was, or will be, deprecated;
 * - `Sunset: <HTTP-date>` (RFC 8594) once a removal date is set;
 * - `Link: </changelog#anchor>; rel="deprecation"` (RFC 9745 section 3): the changelog entry
 *   that says what to use instead. The gateway serves its CHANGELOG.md at `GET /changelog`, so
 *   the link resolves on whichever host the client called, self-hosted or not.
 *
 * The table is the one list: the surface check (scripts/surface.ts) snapshots it, and
 * CHANGELOG.md names each entry under "Deprecated" by its anchor.
 */

export interface Deprecation {
  /** ISO date (YYYY-MM-DD, UTC) the deprecation took or takes effect. */
  readonly since: string
  /** ISO date after which it may be removed; absent until one is announced (90 days ahead at least). */
  readonly sunset?: string | undefined
  /** Anchor of its entry in CHANGELOG.md (the `Link` target is `/changelog#<anchor>`). */
  readonly link: string
}

/** Where the gateway serves its changelog (src/http/routes/changelog.ts). */
export const CHANGELOG_PATH = "/changelog"

const secondsOf = (date: string): number => {
  const ms = Date.parse(`${date}T00:00:00Z`)
  if (!/^\d{4}-\d{2}-\d{2}$/.test(date) || Number.isNaN(ms)) throw new Error(`deprecation date ${date}: expected YYYY-MM-DD`)
  return ms / 1000
}

/** The headers of one deprecation, computed once per declaration (no work per request). */
export const deprecationHeaders = (deprecation: Deprecation): Readonly<Record<string, string>> => {
  const headers: Record<string, string> = {
    deprecation: `@${secondsOf(deprecation.since)}`,
    link: `<${CHANGELOG_PATH}#${deprecation.link}>; rel="deprecation"`
  }
  if (deprecation.sunset !== undefined) {
    if (secondsOf(deprecation.sunset) <= secondsOf(deprecation.since)) throw new Error(`deprecation ${deprecation.link}: sunset before since`)
    headers.sunset = new Date(secondsOf(deprecation.sunset) * 1000).toUTCString()
  }
  return headers
}

/**
 * Several deprecations on one answer (a body using two deprecated fields): one `Deprecation`
 * (the earliest date, RFC 9745 allows one), one `Sunset` (the earliest), every `Link`.
 */
export const mergedDeprecationHeaders = (all: ReadonlyArray<Deprecation>): Readonly<Record<string, string>> => {
  if (all.length === 1) return deprecationHeaders(all[0]!)
  const each = all.map(deprecationHeaders)
  const earliest = (name: string) => {
    const values = each.map((h) => h[name]).filter((v): v is string => v !== undefined)
    if (values.length === 0) return undefined
    return name === "deprecation"
      ? values.sort((a, b) => Number(a.slice(1)) - Number(b.slice(1)))[0]
      : values.sort((a, b) => Date.parse(a) - Date.parse(b))[0]
  }
  const headers: Record<string, string> = { deprecation: earliest("deprecation")!, link: [...new Set(each.map((h) => h.link!))].join(", ") }
  const sunset = earliest("sunset")
  if (sunset !== undefined) headers.sunset = sunset
  return headers
}

/**
 * What is deprecated today, by the vendor whose format the gateway speaks or by the gateway.
 * Keys are stable names (`<METHOD> <path>` for a route, `<METHOD> <path> <field>` for a field);
 * removing one without a "Removed" entry in CHANGELOG.md fails the surface check.
 */
export const DEPRECATIONS = {
  // OpenAI deprecated the function-calling fields for `tools` / `tool_choice` when it added
  // tools (2023-11-06). The gateway still translates them; clients should move.
  "POST /v1/chat/completions functions": { since: "2023-11-06", link: "deprecated-chat-functions" },
  "POST /v1/chat/completions function_call": { since: "2023-11-06", link: "deprecated-chat-functions" }
  // Not `max_tokens`, though OpenAI prefers `max_completion_tokens` since 2024-09-12: the
  // specification (section 4.1) names `max_tokens` as this endpoint's field, and it stays one.
} as const satisfies Record<string, Deprecation>

/** Per route key, its deprecated fields: worked out once, since the check runs on every request. */
const fieldsByRoute = new Map<string, ReadonlyArray<readonly [string, Deprecation]>>()
const NONE: ReadonlyArray<Deprecation> = []

/** The declared deprecations among a body's top-level fields, for a route (`<METHOD> <path>`). */
export const deprecatedFields = (routeKey: string, body: Readonly<Record<string, unknown>>): ReadonlyArray<Deprecation> => {
  let fields = fieldsByRoute.get(routeKey)
  if (fields === undefined) {
    fields = Object.entries(DEPRECATIONS)
      .filter(([key]) => key.startsWith(`${routeKey} `))
      .map(([key, deprecation]) => [key.slice(routeKey.length + 1), deprecation] as const)
    fieldsByRoute.set(routeKey, fields)
  }
  if (fields.length === 0) return NONE
  const found: Array<Deprecation> = []
  for (const [field, deprecation] of fields) {
    if (body[field] !== undefined && body[field] !== null) found.push(deprecation)
  }
  return found
}
