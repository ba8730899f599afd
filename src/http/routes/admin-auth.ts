/**
 * Who may call the admin API, and how the admin app's browser session works.
 *
 * Two credentials are accepted: `Authorization: Bearer <admin token>` (scripts, the CLI's peers)
 * and the app's session cookie. The cookie is stateless: `v1.<expiry>.<nonce>.<mac>`, MAC'd with
 * a key derived from the admin token. That choice over a session table: any replica verifies it
 * without a store round trip or shared memory, and changing the admin token ends every session at
 * once. What it gives up: signing out clears the browser's cookie but cannot revoke a copy of it
 * before its expiry, which is why sessions are short (8 hours) and the cookie is HttpOnly.
 *
 * CSRF: a cookie rides along with any request the browser makes, so a cookie alone never
 * authorizes a state-changing call. Those must carry `X-CSRF-Token`, a second MAC over the
 * session's nonce that only a same-origin script can obtain (from `GET /app/session`), and an
 * `Origin` (when the browser sends one) equal to the gateway's own. SameSite=Strict is a third
 * layer, not the only one: sites on other ports of the same host count as same-site.
 *
 * Guessing: every failed attempt (wrong bearer token, wrong token at sign-in, forged cookie)
 * counts against the client address in AdminThrottle, checked before the token is compared.
 * Tokens are compared as SHA-256 digests with `timingSafeEqual`, so neither the content nor the
 * length of the configured token leaks through timing.
 */
import { Effect } from "effect"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import { createHash, createHmac, randomBytes, timingSafeEqual } from "node:crypto"
import { CsrfRejected, Unauthorized } from "../../domain/errors.ts"
import { AdminThrottle } from "../../services/limits/AdminThrottle.ts"
import { CurrentRequest } from "../../pipelines/request.ts"

export const SESSION_COOKIE = "mg_session"
export const CSRF_HEADER = "x-csrf-token"
export const SESSION_SECONDS = 8 * 60 * 60

const digest = (value: string) => createHash("sha256").update(value, "utf8").digest()

/** Constant time in both content and length: equal-length digests are compared, never the strings. */
export const sameSecret = (given: string, expected: string): boolean => timingSafeEqual(digest(given), digest(expected))

const mac = (key: Buffer, value: string) => createHmac("sha256", key).update(value, "utf8").digest("base64url")

const macMatches = (key: Buffer, value: string, given: string) => {
  const expected = Buffer.from(mac(key, value))
  const actual = Buffer.from(given)
  return expected.length === actual.length && timingSafeEqual(expected, actual)
}

export interface AdminSession {
  readonly nonce: string
  readonly expiresAt: number
  readonly csrfToken: string
}

export const readCookie = (header: string | undefined, name: string): string | undefined => {
  if (header === undefined) return undefined
  for (const part of header.split(";")) {
    const eq = part.indexOf("=")
    if (eq !== -1 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim()
  }
  return undefined
}

/** The request's own origin, as a browser would spell it in `Origin`. */
const ownOrigin = (request: HttpServerRequest, secure: boolean) => {
  const host = request.headers["host"]
  return host === undefined ? undefined : `${secure ? "https" : "http"}://${host}`
}

export interface AdminAuthOptions {
  readonly token: string | undefined
  /** HTTPS toward the browser (server.tls, or trust_proxy behind a TLS proxy): the cookie gets `Secure`. */
  readonly secure: boolean
}

export const makeAdminAuth = (options: AdminAuthOptions) => {
  const sessionKey = options.token === undefined
    ? undefined
    : createHmac("sha256", options.token).update("modelgate/app-session/v1").digest()

  const csrfFor = (key: Buffer, nonce: string) => mac(key, `csrf.${nonce}`)

  const disabled = () => new Unauthorized({ message: "the admin API is disabled: set admin.token (or MODELGATE_ADMIN_TOKEN)" })

  const clientAddress = Effect.map(CurrentRequest, (state) => state.clientAddr ?? "unknown")

  /** A failed guess: counted, then refused with the given message. */
  const failed = (message: string) =>
    Effect.gen(function*() {
      yield* (yield* AdminThrottle).fail(yield* clientAddress)
      return yield* new Unauthorized({ message })
    })

  const throttled = Effect.gen(function*() {
    yield* (yield* AdminThrottle).check(yield* clientAddress)
  })

  /** Parses and verifies a session cookie value; `undefined` when forged, malformed or expired. */
  const verifySession = (value: string): { readonly session: AdminSession | undefined; readonly forged: boolean } => {
    const parts = value.split(".")
    if (sessionKey === undefined || parts.length !== 4 || parts[0] !== "v1") return { session: undefined, forged: true }
    const [version, expiry, nonce, signature] = parts as [string, string, string, string]
    if (!macMatches(sessionKey, `${version}.${expiry}.${nonce}`, signature)) return { session: undefined, forged: true }
    const expiresAt = Number(expiry)
    if (!Number.isSafeInteger(expiresAt) || expiresAt <= Date.now()) return { session: undefined, forged: false }
    return { session: { nonce, expiresAt, csrfToken: csrfFor(sessionKey, nonce) }, forged: false }
  }

  const cookieAttributes = (maxAge: number) =>
    `Path=/; HttpOnly; SameSite=Strict; Max-Age=${maxAge}${options.secure ? "; Secure" : ""}`

  /** A fresh session and the `Set-Cookie` value that carries it. */
  const issueSession = (): { readonly session: AdminSession; readonly setCookie: string } => {
    const key = sessionKey!
    const nonce = randomBytes(18).toString("base64url")
    const expiresAt = Date.now() + SESSION_SECONDS * 1000
    const payload = `v1.${expiresAt}.${nonce}`
    return {
      session: { nonce, expiresAt, csrfToken: csrfFor(key, nonce) },
      setCookie: `${SESSION_COOKIE}=${payload}.${mac(key, payload)}; ${cookieAttributes(SESSION_SECONDS)}`
    }
  }

  const clearCookie = `${SESSION_COOKIE}=; ${cookieAttributes(0)}`

  /**
   * Same-origin proof for a cookie-authenticated call that changes something (and for sign-in,
   * where a forged form would sign the victim into the attacker's session).
   */
  const checkOrigin = Effect.gen(function*() {
    const request = yield* HttpServerRequest
    const origin = request.headers["origin"]
    if (origin !== undefined && origin !== ownOrigin(request, options.secure)) {
      return yield* new CsrfRejected({ message: `cross-origin request refused (Origin ${origin.slice(0, 200)})` })
    }
    const fetchSite = request.headers["sec-fetch-site"]
    if (fetchSite !== undefined && fetchSite !== "same-origin" && fetchSite !== "none") {
      return yield* new CsrfRejected({ message: `cross-site request refused (Sec-Fetch-Site: ${fetchSite.slice(0, 50)})` })
    }
  })

  const checkCsrf = (session: AdminSession) =>
    Effect.gen(function*() {
      yield* checkOrigin
      const given = (yield* HttpServerRequest).headers[CSRF_HEADER]
      const expected = Buffer.from(session.csrfToken)
      if (given === undefined || Buffer.byteLength(given) !== expected.length || !timingSafeEqual(Buffer.from(given), expected)) {
        return yield* new CsrfRejected({ message: `missing or wrong ${CSRF_HEADER} header: reload the app and try again` })
      }
    })

  const isSafeMethod = (method: string) => method === "GET" || method === "HEAD"

  /** The session the request's cookie carries, if valid; a forged one counts as a failed guess. */
  const currentSession = Effect.gen(function*() {
    const request = yield* HttpServerRequest
    const cookie = readCookie(request.headers["cookie"], SESSION_COOKIE)
    if (cookie === undefined || cookie === "") return undefined
    yield* throttled
    const { session, forged } = verifySession(cookie)
    if (forged) return yield* failed("invalid session: sign in again")
    return session
  })

  /** Guards every admin API route: bearer token, or session cookie plus CSRF proof for writes. */
  const requireAdmin = Effect.gen(function*() {
    const request = yield* HttpServerRequest
    if (options.token === undefined) return yield* disabled()
    const header = request.headers["authorization"]
    if (header !== undefined) {
      const match = /^Bearer\s+(.+)$/i.exec(header.trim())
      if (!match) return yield* new Unauthorized({ message: "missing admin token: send `Authorization: Bearer <admin token>`" })
      yield* throttled
      if (!sameSecret(match[1]!.trim(), options.token)) return yield* failed("invalid admin token")
      return
    }
    const session = yield* currentSession
    if (session === undefined) {
      return yield* new Unauthorized({
        message: "missing admin token: send `Authorization: Bearer <admin token>` or sign in at /app"
      })
    }
    if (!isSafeMethod(request.method)) yield* checkCsrf(session)
  })

  /** Sign-in: the admin token in exchange for a session; throttled like the admin API. */
  const signIn = (token: string) =>
    Effect.gen(function*() {
      if (options.token === undefined) return yield* disabled()
      yield* checkOrigin
      yield* throttled
      if (!sameSecret(token, options.token)) return yield* failed("invalid admin token")
      return issueSession()
    })

  return { requireAdmin, signIn, currentSession, checkCsrf, clearCookie }
}

export type AdminAuth = ReturnType<typeof makeAdminAuth>
