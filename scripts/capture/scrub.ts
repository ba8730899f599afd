// Makes captured requests safe and stable to commit: the API key becomes a placeholder the
// fixture loader substitutes, the recorder's address becomes `{{HOST}}`, and per-run
// identifiers (session, device, installation ids) become fixed values of the same shape, the
// same original always mapping to the same replacement within one fixture so that requests
// still agree with each other (a session id in a header equals the one in the body).
import type { CapturedRequest } from "./record.ts"

export const API_KEY_PLACEHOLDER = "{{API_KEY}}"
export const HOST_PLACEHOLDER = "{{HOST}}"

// Hex runs are delimited by lookarounds rather than \b so that prefixed ids (`msg_<uuid>`) match too.
const UUID = /(?<![0-9a-f])[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(?![0-9a-f])/gi
// Claude Code's device id (a random 32-byte hex kept in ~/.claude.json).
const HEX64 = /(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])/gi
// opencode's session ids: `ses_` and 26 base62 characters.
const OPENCODE_SESSION = /\bses_[0-9A-Za-z]{20,40}\b/g

export interface Scrubber {
  readonly scrub: (request: CapturedRequest) => CapturedRequest
}

export const makeScrubber = (options: { readonly apiKey: string; readonly host: string }): Scrubber => {
  const seen = new Map<string, string>()
  const stable = (original: string, make: (n: number) => string): string => {
    let replacement = seen.get(original)
    if (replacement === undefined) {
      replacement = make(seen.size + 1)
      seen.set(original, replacement)
    }
    return replacement
  }
  const scrubString = (text: string): string =>
    text
      .split(options.apiKey)
      .join(API_KEY_PLACEHOLDER)
      .split(options.host)
      .join(HOST_PLACEHOLDER)
      .replace(UUID, (m) => stable(m.toLowerCase(), (n) => `00000000-0000-4000-8000-${n.toString(16).padStart(12, "0")}`))
      .replace(HEX64, (m) => stable(m.toLowerCase(), (n) => n.toString(16).padStart(64, "0")))
      .replace(OPENCODE_SESSION, (m) => stable(m, (n) => `ses_${n.toString().padStart(m.length - 4, "0")}`))
  const scrubValue = (value: unknown): unknown => {
    if (typeof value === "string") return scrubString(value)
    if (Array.isArray(value)) return value.map(scrubValue)
    if (typeof value === "object" && value !== null) {
      return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, scrubValue(v)]))
    }
    return value
  }
  return {
    scrub: (request) => ({
      method: request.method,
      path: request.path,
      query: scrubString(request.query),
      headers: Object.fromEntries(Object.entries(request.headers).map(([name, value]) => [name, scrubString(value)])),
      body: scrubValue(request.body)
    })
  }
}
