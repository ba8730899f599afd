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
 *   (http/routes/admin-oidc.ts); this service talks to the issuer through openid-client
 *   (oidc-client.ts): discovery, the authorization response's checks (state, `iss`), the code
 *   exchange with the configured client authentication and the ID token's claims (`iss`,
 *   `aud` = client id, `azp`, `exp`, `nonce`). The ID token's signature is then checked by the
 *   shared issuer verifier against the issuer's keys (openid-client trusts the TLS channel for
 *   it), and the admin rule applied to its claims.
 */
import { Context, Data, Effect, Layer, Option } from "effect"
import * as oidc from "openid-client"
import type { AdminOidcConfig } from "../config/schema.ts"
import { type IssuerVerifier, makeIssuerVerifier, TokenRejected, type VerifiedToken } from "../identity/issuer.ts"
import { Metrics } from "../metrics/Metrics.ts"
import { describeRule, namesAdmin } from "./admin-claim.ts"
import { describeIssuerError, discover, IssuerAnswerError } from "./oidc-client.ts"

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
  /** The callback's query as the issuer sent it (code, state, iss): openid-client checks it whole. */
  readonly callbackParams: URLSearchParams
  readonly redirectUri: string
  readonly state: string
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

/** How long a discovered configuration is used before the issuer is asked again. */
const DISCOVERY_TTL_MS = 60 * 60 * 1000

const MAX_SUBJECT_LENGTH = 255
const DISPLAY_CLAIMS = ["preferred_username", "email", "name"] as const
const printable = /^[^\p{Cc}\p{Cf}]{1,100}$/u

const principalOf = (token: VerifiedToken): AdminPrincipal => {
  const shown = DISPLAY_CLAIMS.map((claim) => token.claims[claim]).find((v): v is string => typeof v === "string" && printable.test(v))
  return { issuer: token.issuer, subject: token.subject, displayName: shown ?? token.subject.slice(0, 100) }
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

  const refusal = (error: IssuerAnswerError) => new SignInRefused({ reason: error.unavailable ? "unavailable" : "failed", message: error.message })

  // The discovered configuration, kept for an hour once it succeeds; a failure is not kept, so
  // the next sign-in asks again.
  let discovered: { readonly config: oidc.Configuration; readonly at: number } | undefined
  const configuration = Effect.suspend(() =>
    discovered !== undefined && performance.now() - discovered.at < DISCOVERY_TTL_MS
      ? Effect.succeed(discovered.config)
      : Effect.tryPromise({
        try: () => discover(settings),
        catch: (error) => refusal(describeIssuerError(`discovery of ${settings.issuer}`, error))
      }).pipe(Effect.tap((config) => Effect.sync(() => (discovered = { config, at: performance.now() }))))
  )

  return {
    name,
    issuer: settings.issuer,
    verifyBearer: Effect.fn("AdminIdentity.verifyBearer")(function*(token: string) {
      return yield* requireAdmin(yield* verifier.verify(token).pipe(Effect.tapError(countUnavailable)))
    }),
    authorizationUrl: Effect.fn("AdminIdentity.authorizationUrl")(function*(request: AuthorizationRequest) {
      const config = yield* configuration
      return yield* Effect.tryPromise({
        try: async () =>
          oidc.buildAuthorizationUrl(config, {
            redirect_uri: request.redirectUri,
            scope: settings.scopes.join(" "),
            state: request.state,
            nonce: request.nonce,
            code_challenge: await oidc.calculatePKCECodeChallenge(request.codeVerifier),
            code_challenge_method: "S256"
          }).toString(),
        catch: (error) => refusal(describeIssuerError("authorization URL", error))
      })
    }, Effect.tapError(countUnavailable)),
    completeSignIn: Effect.fn("AdminIdentity.completeSignIn")(function*(redemption: CodeRedemption) {
      const config = yield* configuration
      const callbackUrl = new URL(redemption.redirectUri)
      callbackUrl.search = redemption.callbackParams.toString()
      const tokens = yield* Effect.tryPromise({
        try: () =>
          oidc.authorizationCodeGrant(config, callbackUrl, {
            pkceCodeVerifier: redemption.codeVerifier,
            expectedState: redemption.state,
            expectedNonce: redemption.nonce,
            idTokenExpected: true
          }),
        catch: (error) => refusal(describeIssuerError("code exchange", error))
      })
      const idToken = tokens.id_token
      if (idToken === undefined) {
        return yield* new SignInRefused({ reason: "failed", message: "token endpoint answered without an id_token (is the openid scope granted?)" })
      }
      const verified = yield* verifier.verify(idToken, { audience: settings.client_id, nonce: redemption.nonce }).pipe(
        Effect.mapError((error) =>
          new SignInRefused({ reason: error.reason === "unavailable" ? "unavailable" : "failed", message: `ID token refused: ${error.message}` })
        )
      )
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
