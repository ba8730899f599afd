/**
 * Identity-provider admins (issue 16, item 2): who may use the admin API and the admin app
 * besides the holder of the admin token. One OpenID Connect issuer (`admin.oidc`), verified by
 * the shared issuer verifier (services/identity/issuer.ts); a user is an admin when the claim
 * rule `admin_claim` holds for their token.
 *
 * - `verifyBearer`: an admin API call's `Authorization: Bearer <JWT>` (audience
 *   `admin.oidc.audience`, default the client id).
 * - `authorizationUrl` / `completeSignIn`: the two halves of the app's authorization code flow
 *   with PKCE. The browser-facing half (cookies, state, redirects) is the HTTP layer's
 *   (http/routes/admin-oidc.ts); this service talks to the issuer: discovery, the code exchange
 *   and the ID token's checks (signature, `iss`, `aud` = client id, `azp`, `exp`, `nonce`).
 */
import { Context, Data, Effect, Layer, Option } from "effect"
import { createHash } from "node:crypto"
import type { AdminOidcConfig } from "../config/schema.ts"
import { isAcceptableIssuerUrl, type IssuerVerifier, makeIssuerVerifier, TokenRejected, type VerifiedToken } from "../identity/issuer.ts"
import { Metrics } from "../metrics/Metrics.ts"
import { describeRule, namesAdmin } from "./admin-claim.ts"
import { exchangeCode } from "./token-endpoint.ts"

/** An identity-provider user the admin rule accepted. */
export interface AdminPrincipal {
  readonly issuer: string
  readonly subject: string
  /** What the app shows: `preferred_username`, `email` or `name` when the token has one, else the subject. */
  readonly displayName: string
}

/** A valid token whose claims do not name an admin. */
export class NotAnAdmin extends Data.TaggedError("NotAnAdmin")<{ readonly message: string }> {}

/**
 * The sign-in could not be completed. `reason` is what the app tells the user (a fixed set, so
 * nothing the issuer or an attacker wrote reaches the page); `message` is for the log.
 */
export class SignInRefused extends Data.TaggedError("SignInRefused")<{
  readonly reason: "not_admin" | "failed" | "unavailable"
  readonly message: string
}> {}

export interface AuthorizationRequest {
  readonly redirectUri: string
  readonly state: string
  readonly nonce: string
  readonly codeVerifier: string
}

export interface CodeRedemption {
  readonly code: string
  readonly redirectUri: string
  readonly nonce: string
  readonly codeVerifier: string
}

export interface AdminIdentityShape {
  /** The name on the app's sign-in button. */
  readonly name: string
  readonly issuer: string
  readonly verifyBearer: (token: string) => Effect.Effect<AdminPrincipal, TokenRejected | NotAnAdmin>
  /** Where to send the browser to sign in (the issuer's authorization endpoint, from discovery). */
  readonly authorizationUrl: (request: AuthorizationRequest) => Effect.Effect<string, SignInRefused>
  /** The code the issuer sent back, redeemed and its ID token checked: the admin it names. */
  readonly completeSignIn: (redemption: CodeRedemption) => Effect.Effect<AdminPrincipal, SignInRefused>
}

/** PKCE S256 (RFC 7636 section 4.2). */
export const codeChallengeOf = (verifier: string) => createHash("sha256").update(verifier, "ascii").digest("base64url")

const MAX_SUBJECT_LENGTH = 255
const DISPLAY_CLAIMS = ["preferred_username", "email", "name"] as const
const printable = /^[^\p{Cc}\p{Cf}]{1,100}$/u

const principalOf = (token: VerifiedToken): AdminPrincipal => {
  const shown = DISPLAY_CLAIMS.map((claim) => token.claims[claim]).find((v): v is string => typeof v === "string" && printable.test(v))
  return { issuer: token.issuer, subject: token.subject, displayName: shown ?? token.subject.slice(0, 100) }
}

const endpointOf = (metadata: Readonly<Record<string, unknown>>, name: string): string | undefined => {
  const value = metadata[name]
  return typeof value === "string" && isAcceptableIssuerUrl(value) ? value : undefined
}

/**
 * `onUnavailable`: called each time the issuer could not be reached (discovery, keys, token
 * endpoint), so the operator's dependency-error metric counts it.
 */
export const makeAdminIdentity = (
  settings: AdminOidcConfig,
  verifier: IssuerVerifier,
  onUnavailable: () => void = () => {}
): AdminIdentityShape => {
  const rule = settings.admin_claim
  const name = settings.name ?? new URL(settings.issuer).host
  const countUnavailable = <E extends { readonly reason: string }>(error: E) =>
    error.reason === "unavailable" ? Effect.sync(onUnavailable) : Effect.void

  const requireAdmin = (token: VerifiedToken): Effect.Effect<AdminPrincipal, NotAnAdmin> =>
    // The subject rides in the session cookie and the ledger; OpenID Connect Core 2 bounds it at 255.
    token.subject.length > MAX_SUBJECT_LENGTH
      ? Effect.fail(new NotAnAdmin({ message: `the token's subject is longer than ${MAX_SUBJECT_LENGTH} characters` }))
      : namesAdmin(token.claims, rule)
      ? Effect.succeed(principalOf(token))
      : Effect.fail(new NotAnAdmin({ message: `the identity-provider user is not an admin (the admin rule wants the ${describeRule(rule)})` }))

  const endpoints = Effect.gen(function*() {
    const metadata = yield* verifier.metadata.pipe(
      Effect.mapError((error) => new SignInRefused({ reason: "unavailable", message: error.message }))
    )
    const authorization = endpointOf(metadata, "authorization_endpoint")
    const token = endpointOf(metadata, "token_endpoint")
    if (authorization === undefined || token === undefined) {
      return yield* new SignInRefused({
        reason: "failed",
        message: `the discovery document of ${settings.issuer} lacks a usable authorization_endpoint or token_endpoint`
      })
    }
    return { authorization, token }
  })

  return {
    name,
    issuer: settings.issuer,
    verifyBearer: Effect.fn("AdminIdentity.verifyBearer")(function*(token: string) {
      return yield* requireAdmin(yield* verifier.verify(token).pipe(Effect.tapError(countUnavailable)))
    }),
    authorizationUrl: Effect.fn("AdminIdentity.authorizationUrl")(function*(request: AuthorizationRequest) {
      const url = new URL((yield* endpoints.pipe(Effect.tapError(countUnavailable))).authorization)
      url.searchParams.set("response_type", "code")
      url.searchParams.set("client_id", settings.client_id)
      url.searchParams.set("redirect_uri", request.redirectUri)
      url.searchParams.set("scope", settings.scopes.join(" "))
      url.searchParams.set("state", request.state)
      url.searchParams.set("nonce", request.nonce)
      url.searchParams.set("code_challenge", codeChallengeOf(request.codeVerifier))
      url.searchParams.set("code_challenge_method", "S256")
      return url.toString()
    }),
    completeSignIn: Effect.fn("AdminIdentity.completeSignIn")(function*(redemption: CodeRedemption) {
      const { token: tokenEndpoint } = yield* endpoints
      const { idToken } = yield* exchangeCode({
        tokenEndpoint,
        clientId: settings.client_id,
        clientSecret: settings.client_secret,
        code: redemption.code,
        redirectUri: redemption.redirectUri,
        codeVerifier: redemption.codeVerifier
      }).pipe(Effect.mapError((error) => new SignInRefused({ reason: error.unavailable ? "unavailable" : "failed", message: error.message })))
      const verified = yield* verifier.verify(idToken, { audience: settings.client_id, nonce: redemption.nonce }).pipe(
        Effect.mapError((error) =>
          new SignInRefused({ reason: error.reason === "unavailable" ? "unavailable" : "failed", message: `ID token refused: ${error.message}` })
        )
      )
      // OpenID Connect Core 3.1.3.7: an ID token for several audiences names the client it was issued to.
      const azp = verified.claims["azp"]
      if (azp !== undefined && azp !== settings.client_id) {
        return yield* new SignInRefused({ reason: "failed", message: "ID token refused: issued to another client (azp)" })
      }
      return yield* requireAdmin(verified).pipe(
        Effect.mapError((error) => new SignInRefused({ reason: "not_admin", message: error.message }))
      )
    }, Effect.tapError(countUnavailable))
  }
}

export class AdminIdentity extends Context.Service<AdminIdentity, AdminIdentityShape>()("modelgate/admin-identity/AdminIdentity") {
  /** From `admin.oidc`; nothing is fetched from the issuer until the first token or sign-in. */
  static readonly layer = (settings: AdminOidcConfig): Layer.Layer<AdminIdentity> =>
    Layer.effect(
      AdminIdentity,
      Effect.gen(function*() {
        const metrics = Option.getOrUndefined(yield* Effect.serviceOption(Metrics))
        return makeAdminIdentity(
          settings,
          makeIssuerVerifier({ issuer: settings.issuer, audience: settings.audience ?? settings.client_id, jwks_url: settings.jwks_url }),
          () => metrics?.dependencyError("identity_provider")
        )
      })
    )
}
