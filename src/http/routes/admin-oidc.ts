/**
 * The admin app's identity-provider sign-in: the authorization code flow with PKCE (S256),
 * `state` and `nonce`, run by the gateway so the browser never holds a token (a backend for the
 * frontend). Two routes:
 *
 * - `GET /app/oidc/start`: a fresh flow. Its id goes into a short-lived signed cookie; state,
 *   nonce and PKCE verifier are MACs of that id under a key derived from the admin token, so the
 *   cookie holds nothing secret and nothing needs to be stored on any replica. The browser is
 *   sent to the issuer's authorization endpoint (from discovery).
 * - `GET /app/oidc/callback`: the issuer's redirect back. The `state` must be the one the flow
 *   cookie's id yields (a callback started elsewhere, replayed after the flow ended or tampered
 *   with is refused before the issuer is asked anything); the code is redeemed at the token
 *   endpoint and the ID token checked by AdminIdentity (signature, iss, aud = client id, exp,
 *   nonce, the admin claim). An admin gets the same session cookie as a sign-in with the admin
 *   token, naming who they are.
 *
 * The flow cookie is `SameSite=Lax` where the session cookie is Strict: the callback is a
 * top-level navigation coming from the issuer's site, and a Strict cookie would not be sent on
 * it. It is confined to `/app/oidc`, used once (cleared by the callback whatever happens) and
 * expires in 10 minutes.
 *
 * The redirect URI is `<admin.oidc.public_url>/app/oidc/callback` (on loopback without one, the
 * bound address), never built from the request's Host header, which the client chooses: a Host
 * of the attacker's choosing would otherwise become where the issuer sends a victim's code.
 *
 * Every outcome is a redirect to `/app`; a refusal carries a fixed code (`?sign_in_error=`) that
 * the app turns into its own sentence, so no text from the issuer or the URL reaches the page.
 */
import { Effect } from "effect"
import { HttpServerResponse } from "effect/http"
import { HttpServerRequest } from "effect/http/HttpServerRequest"
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto"
import type { AdminIdentityShape, SignInRefused } from "../../services/admin-identity/AdminIdentity.ts"
import { AdminThrottle } from "../../services/limits/AdminThrottle.ts"
import { CurrentRequest } from "../../pipelines/request.ts"
import { route } from "../router.ts"
import { readCookie, type AdminAuth } from "./admin-auth.ts"

export const FLOW_COOKIE = "mg_oidc_flow"
export const FLOW_PATH = "/app/oidc"
export const START_PATH = "/app/oidc/start"
export const CALLBACK_PATH = "/app/oidc/callback"
const FLOW_SECONDS = 10 * 60

/** What the app may be told, and nothing else. */
export type SignInErrorCode = "not_admin" | "denied" | "invalid_state" | "failed" | "unavailable" | "throttled" | "disabled"

export interface AdminOidcRoutesOptions {
  readonly auth: AdminAuth
  readonly identity: AdminIdentityShape
  /** The admin token: the flow cookie's key is derived from it, like the session cookie's. */
  readonly token: string | undefined
  /** The gateway's origin as browsers reach it (admin.oidc.public_url, or the bound loopback address). */
  readonly publicUrl: string
  readonly secure: boolean
}

const mac = (key: Buffer, value: string) => createHmac("sha256", key).update(value, "utf8").digest("base64url")

const equalStrings = (a: string, b: string) => {
  const left = Buffer.from(a)
  const right = Buffer.from(b)
  return left.length === right.length && timingSafeEqual(left, right)
}

/** Longest code or state taken from the callback's query; real ones are far shorter. */
const MAX_PARAM = 2048

export const adminOidcRoutes = (options: AdminOidcRoutesOptions) => {
  const flowKey = options.token === undefined
    ? undefined
    : createHmac("sha256", options.token).update("modelgate/app-oidc-flow/v1").digest()
  const redirectUri = `${options.publicUrl}${CALLBACK_PATH}`

  /** State, nonce and PKCE verifier of a flow, all derived from its id (43 base64url characters each). */
  const secretsOf = (key: Buffer, flowId: string) => ({
    state: mac(key, `state.${flowId}`),
    nonce: mac(key, `nonce.${flowId}`),
    codeVerifier: mac(key, `pkce.${flowId}`)
  })

  /** Set through the response's cookie jar, so it can go out next to a session cookie. */
  const withFlowCookie = (response: HttpServerResponse.HttpServerResponse, value: string, maxAgeSeconds: number) =>
    HttpServerResponse.setCookieUnsafe(response, FLOW_COOKIE, value, {
      path: FLOW_PATH,
      httpOnly: true,
      sameSite: "lax",
      secure: options.secure,
      maxAge: `${maxAgeSeconds} seconds`
    })

  /** The flow id the request's cookie carries, if its MAC holds and it has not expired. */
  const flowOf = (key: Buffer, cookie: string | undefined): string | undefined => {
    const parts = cookie?.split(".") ?? []
    if (parts.length !== 4 || parts[0] !== "f1") return undefined
    const [version, expiry, flowId, signature] = parts as [string, string, string, string]
    if (!equalStrings(mac(key, `${version}.${expiry}.${flowId}`), signature)) return undefined
    const expiresAt = Number(expiry)
    return Number.isSafeInteger(expiresAt) && expiresAt > Date.now() ? flowId : undefined
  }

  const noStore = { "cache-control": "no-store", "referrer-policy": "no-referrer" }

  /** Back to the app, the flow over (its cookie cleared), with the session cookie when one was issued. */
  const toApp = (error: SignInErrorCode | undefined, sessionCookie?: string) => {
    const response = HttpServerResponse.redirect(error === undefined ? "/app" : `/app?sign_in_error=${error}`, {
      status: 303,
      headers: sessionCookie === undefined ? noStore : { ...noStore, "set-cookie": sessionCookie }
    })
    return withFlowCookie(response, "", 0)
  }

  /** A refused sign-in: noted in the request's audit record and the log, answered with the app's code. */
  const refuse = (code: SignInErrorCode, message: string) =>
    Effect.gen(function*() {
      const state = yield* CurrentRequest
      state.audit.details = { ...state.audit.details, sign_in: { refused: code } }
      yield* Effect.logWarning("admin sign-in refused").pipe(Effect.annotateLogs({ request_id: state.requestId, reason: code, detail: message }))
      return toApp(code)
    })

  const clientAddress = Effect.map(CurrentRequest, (state) => state.clientAddr ?? "unknown")

  const start = Effect.gen(function*() {
    if (flowKey === undefined) return yield* refuse("disabled", "the admin API is disabled (no admin token)")
    const flowId = randomBytes(18).toString("base64url")
    const expiresAt = Date.now() + FLOW_SECONDS * 1000
    const payload = `f1.${expiresAt}.${flowId}`
    const secrets = secretsOf(flowKey, flowId)
    return yield* options.identity.authorizationUrl({ redirectUri, ...secrets }).pipe(
      Effect.map((location) =>
        withFlowCookie(HttpServerResponse.redirect(location, { status: 303, headers: noStore }), `${payload}.${mac(flowKey, payload)}`, FLOW_SECONDS)
      ),
      Effect.catchTag("SignInRefused", (error: SignInRefused) => refuse(error.reason === "unavailable" ? "unavailable" : "failed", error.message))
    )
  })

  const callback = Effect.gen(function*() {
    if (flowKey === undefined) return yield* refuse("disabled", "the admin API is disabled (no admin token)")
    const request = yield* HttpServerRequest
    const address = yield* clientAddress
    const throttle = yield* AdminThrottle
    const throttledOut = yield* throttle.check(address).pipe(Effect.as(false), Effect.catchTag("RateLimited", () => Effect.succeed(true)))
    if (throttledOut) return yield* refuse("throttled", "too many failed admin sign-in attempts from this address")
    const query = new URL(request.url, "http://local").searchParams
    const param = (name: string) => {
      const value = query.get(name)
      return value === null || value === "" || value.length > MAX_PARAM ? undefined : value
    }
    const flowId = flowOf(flowKey, readCookie(request.headers["cookie"], FLOW_COOKIE))
    const state = param("state")
    if (flowId === undefined || state === undefined || !equalStrings(state, secretsOf(flowKey, flowId).state)) {
      yield* throttle.fail(address)
      return yield* refuse("invalid_state", flowId === undefined ? "no sign-in in progress in this browser (flow cookie missing or expired)" : "state does not match this browser's sign-in")
    }
    const issuerError = param("error")
    if (issuerError !== undefined) {
      return yield* refuse(issuerError === "access_denied" ? "denied" : "failed", `the identity provider answered error=${issuerError.slice(0, 100)}`)
    }
    const code = param("code")
    if (code === undefined) return yield* refuse("failed", "the identity provider's redirect carries no code")
    const { nonce, codeVerifier } = secretsOf(flowKey, flowId)
    // The whole query goes on: openid-client checks state again and the issuer's `iss` (mix-up).
    return yield* options.identity.completeSignIn({ callbackParams: query, redirectUri, state, nonce, codeVerifier }).pipe(
      Effect.flatMap((admin) =>
        Effect.gen(function*() {
          const issued = options.auth.signInAdmin(admin)
          if (issued === undefined) return yield* refuse("disabled", "the admin API is disabled (no admin token)")
          const current = yield* CurrentRequest
          current.audit.details = { ...current.audit.details, admin: { issuer: admin.issuer, subject: admin.subject } }
          return toApp(undefined, issued.setCookie)
        })
      ),
      Effect.catchTag("SignInRefused", (error: SignInRefused) =>
        Effect.andThen(
          error.reason === "failed" ? throttle.fail(address) : Effect.void,
          refuse(error.reason, error.message)
        ))
    )
  })

  return [
    route("GET", START_PATH, start),
    route("GET", CALLBACK_PATH, callback)
  ]
}
