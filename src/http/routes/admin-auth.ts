/**
 * Who may call the admin API, and how the admin app's browser session works.
 *
 * Three credentials are accepted: `Authorization: Bearer <admin token>` (scripts, the CLI's
 * peers), `Authorization: Bearer <JWT>` from the identity provider of `admin.oidc` whose claims
 * name an admin (services/admin-identity), and the app's session cookie. The cookie is stateless:
 * `v1.<expiry>.<nonce>.<mac>` for a sign-in with the admin token, `v2.<expiry>.<nonce>.<admin>.<mac>`
 * for an identity-provider admin (`<admin>`: issuer, subject and display name, so the audit trail
 * names who acted), MAC'd with a key derived from the admin token. That choice over a session
 * table: any replica verifies it without a store round trip or shared memory, and changing the
 * admin token ends every session at once. What it gives up: signing out clears the browser's
 * cookie but cannot revoke a copy of it before its expiry, which is why sessions are short
 * (8 hours) and the cookie is HttpOnly. An identity-provider session is not ended early when the
 * user is removed at the provider either: the claim is checked at sign-in.
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
import { CsrfRejected, DependencyUnavailable, type RateLimited, ScopeViolation, Unauthorized } from "../../domain/errors.ts"
import type { AdminIdentityShape, AdminPrincipal } from "../../services/admin-identity/AdminIdentity.ts"
import { AdminThrottle } from "../../services/limits/AdminThrottle.ts"
import { CurrentRequest } from "../../pipelines/request.ts"

export const SESSION_COOKIE = "mg_session"
/**
 * The session cookie's name when the gateway is reached over HTTPS (TLS, or trust_proxy, where
 * only HTTPS as a trusted proxy reports it is served): the `__Host-` prefix makes browsers refuse
 * it unless it is Secure, Path=/ and without Domain, so a sibling subdomain or a plain-HTTP page
 * cannot plant or overwrite it (issue 22). Browsers also
 * refuse such a cookie over plain HTTP, so a loopback development gateway keeps the plain name.
 */
export const SECURE_SESSION_COOKIE = "__Host-mg_session"

/**
 * Admin answers (above all `POST /api-keys`, which carries a full key) are never stored by a
 * cache or sniffed into another type (issue 22); set on every answer of a route that asks for
 * the admin, errors included.
 */
export const ADMIN_RESPONSE_HEADERS = { "cache-control": "no-store", "x-content-type-options": "nosniff" } as const
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
  /** The identity-provider admin who signed in; absent for a sign-in with the admin token. */
  readonly admin?: AdminPrincipal | undefined
}

/** The three segments of a JWT (header.payload.signature), the shape identity-provider tokens have and admin tokens do not need. */
const JWT_SHAPE = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/

/** Rejections that mean a forged or garbled token (counted like a wrong admin token), not an expired or misdirected real one. */
const FORGERY_REASONS: ReadonlySet<string> = new Set(["signature", "malformed"])

const encodeAdmin = (admin: AdminPrincipal) =>
  Buffer.from(JSON.stringify({ iss: admin.issuer, sub: admin.subject, name: admin.displayName }), "utf8").toString("base64url")

/** Only ever applied to a segment whose MAC matched, so it is this gateway's own writing. */
const decodeAdmin = (segment: string): AdminPrincipal | undefined => {
  try {
    const value = JSON.parse(Buffer.from(segment, "base64url").toString("utf8")) as Record<string, unknown>
    return typeof value.iss === "string" && typeof value.sub === "string" && typeof value.name === "string"
      ? { issuer: value.iss, subject: value.sub, displayName: value.name }
      : undefined
  } catch {
    return undefined
  }
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
  /** `admin.oidc`: identity-provider admins, by bearer token and by sign-in. */
  readonly identity?: AdminIdentityShape | undefined
}

/**
 * Who acted, in the request's audit record (never a token): `details.actor` names the credential
 * (the admin token, an app session signed in with it, or an identity-provider admin by issuer,
 * subject and display name); `details.admin` is kept for records readers already parse.
 */
export type AdminActor =
  | { readonly kind: "admin_token" }
  | { readonly kind: "app_session" }
  | { readonly kind: "identity_provider"; readonly issuer: string; readonly subject: string; readonly name: string; readonly via: "bearer" | "app_session" }

const recordActor = (actor: AdminActor) =>
  Effect.map(CurrentRequest, (state) => {
    state.audit.details = { ...state.audit.details, actor }
  })

const recordAdmin = (admin: AdminPrincipal, via: "bearer" | "app_session") =>
  Effect.map(CurrentRequest, (state) => {
    state.audit.details = {
      ...state.audit.details,
      admin: { issuer: admin.issuer, subject: admin.subject },
      actor: { kind: "identity_provider", issuer: admin.issuer, subject: admin.subject, name: admin.displayName, via }
    }
    return admin
  })

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
    const shaped = (parts[0] === "v1" && parts.length === 4) || (parts[0] === "v2" && parts.length === 5)
    if (sessionKey === undefined || !shaped) return { session: undefined, forged: true }
    const signature = parts.pop()!
    if (!macMatches(sessionKey, parts.join("."), signature)) return { session: undefined, forged: true }
    const [version, expiry, nonce, adminSegment] = parts as [string, string, string, string | undefined]
    const admin = version === "v2" ? decodeAdmin(adminSegment ?? "") : undefined
    if (version === "v2" && admin === undefined) return { session: undefined, forged: true }
    const expiresAt = Number(expiry)
    if (!Number.isSafeInteger(expiresAt) || expiresAt <= Date.now()) return { session: undefined, forged: false }
    return { session: { nonce, expiresAt, csrfToken: csrfFor(sessionKey, nonce), admin }, forged: false }
  }

  const cookieName = options.secure ? SECURE_SESSION_COOKIE : SESSION_COOKIE

  /** Marks the current answer as an admin answer (ADMIN_RESPONSE_HEADERS). */
  const adminAnswer = Effect.map(CurrentRequest, (state) => {
    Object.assign(state.headers, ADMIN_RESPONSE_HEADERS)
  })

  const cookieAttributes = (maxAge: number) =>
    `Path=/; HttpOnly; SameSite=Strict; Max-Age=${maxAge}${options.secure ? "; Secure" : ""}`

  /** A fresh session (for `admin` when an identity-provider admin signed in) and the `Set-Cookie` value that carries it. */
  const issueSession = (admin?: AdminPrincipal): { readonly session: AdminSession; readonly setCookie: string } => {
    const key = sessionKey!
    const nonce = randomBytes(18).toString("base64url")
    const expiresAt = Date.now() + SESSION_SECONDS * 1000
    const payload = admin === undefined ? `v1.${expiresAt}.${nonce}` : `v2.${expiresAt}.${nonce}.${encodeAdmin(admin)}`
    return {
      session: { nonce, expiresAt, csrfToken: csrfFor(key, nonce), admin },
      setCookie: `${cookieName}=${payload}.${mac(key, payload)}; ${cookieAttributes(SESSION_SECONDS)}`
    }
  }

  const clearCookie = `${cookieName}=; ${cookieAttributes(0)}`

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
    const cookie = readCookie(request.headers["cookie"], cookieName)
    if (cookie === undefined || cookie === "") return undefined
    yield* throttled
    const { session, forged } = verifySession(cookie)
    if (forged) return yield* failed("invalid session: sign in again")
    return session
  })

  /**
   * An identity-provider token: an admin acts; a valid token of someone else is 403; an expired,
   * misdirected or forged one is 401 (forged ones also count as failed guesses). An issuer that
   * cannot be reached is 503: the token is neither accepted nor blamed.
   */
  const identityAdmin = (identity: AdminIdentityShape, token: string) =>
    identity.verifyBearer(token).pipe(
      Effect.catchTags({
        NotAnAdmin: (error) => Effect.fail(new ScopeViolation({ message: error.message })),
        TokenRejected: (error) =>
          error.reason === "unavailable"
            ? Effect.fail(new DependencyUnavailable({ message: error.message, details: { dependency: "identity_provider" } }))
            : FORGERY_REASONS.has(error.reason)
            ? failed(`invalid identity-provider token: ${error.message}`)
            : Effect.fail(new Unauthorized({ message: `invalid identity-provider token: ${error.message}` }))
      }),
      Effect.flatMap((admin) => recordAdmin(admin, "bearer"))
    )

  /**
   * Guards every admin API route: bearer token (the admin token or an admin's JWT), or session
   * cookie plus CSRF proof for writes. Succeeds with the identity-provider admin acting, if one is.
   */
  const requireAdmin: Effect.Effect<
    AdminPrincipal | undefined,
    Unauthorized | ScopeViolation | CsrfRejected | DependencyUnavailable | RateLimited,
    HttpServerRequest | CurrentRequest | AdminThrottle
  > = Effect.gen(function*() {
    yield* adminAnswer
    const request = yield* HttpServerRequest
    if (options.token === undefined) return yield* disabled()
    const header = request.headers["authorization"]
    if (header !== undefined) {
      const match = /^Bearer\s+(.+)$/i.exec(header.trim())
      if (!match) return yield* new Unauthorized({ message: "missing admin token: send `Authorization: Bearer <admin token>`" })
      yield* throttled
      const presented = match[1]!.trim()
      if (sameSecret(presented, options.token)) return yield* Effect.as(recordActor({ kind: "admin_token" }), undefined)
      if (options.identity !== undefined && JWT_SHAPE.test(presented)) return yield* identityAdmin(options.identity, presented)
      return yield* failed("invalid admin token")
    }
    const session = yield* currentSession
    if (session === undefined) {
      return yield* new Unauthorized({
        message: "missing admin token: send `Authorization: Bearer <admin token>` or sign in at /app",
        missing: true
      })
    }
    if (!isSafeMethod(request.method)) yield* checkCsrf(session)
    return session.admin === undefined
      ? yield* Effect.as(recordActor({ kind: "app_session" }), undefined)
      : yield* recordAdmin(session.admin, "app_session")
  })

  /** Sign-in: the admin token in exchange for a session; throttled like the admin API. */
  const signIn = (token: string) =>
    Effect.gen(function*() {
      yield* adminAnswer
      if (options.token === undefined) return yield* disabled()
      yield* checkOrigin
      yield* throttled
      if (!sameSecret(token, options.token)) return yield* failed("invalid admin token")
      return issueSession()
    })

  /**
   * A session for an identity-provider admin whose sign-in completed (the callback checked state,
   * nonce and claims); `undefined` while the admin API is disabled (no admin token, no session key).
   */
  const signInAdmin = (admin: AdminPrincipal) => sessionKey === undefined ? undefined : issueSession(admin)

  return { requireAdmin, signIn, signInAdmin, currentSession, checkCsrf, clearCookie }
}

export type AdminAuth = ReturnType<typeof makeAdminAuth>
