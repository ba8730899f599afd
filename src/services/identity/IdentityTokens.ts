/**
 * Identity-provider tokens as credentials (config `auth.oidc`, decisions section 11): a bearer
 * JWT from a configured issuer, verified against that issuer's keys (issuer.ts), acts as the
 * subject it names (`iss` + `sub`) with the permissions of the first policy its claims match.
 *
 * Refusals: a token that is not a JWT, comes from an issuer not configured here, or fails
 * verification (expired, not yet valid, bad signature, wrong audience, ...) is 401 unauthorized
 * with the reason in `details.reason`. An issuer whose keys cannot be fetched is 503
 * dependency_unavailable: the token may well be valid, so the client should retry rather than
 * sign in again, and nothing is let in meanwhile. Tokens are never logged or stored.
 *
 * A verified token is remembered (by its SHA-256, in memory) until it expires or for a minute,
 * whichever comes first, because a signature check is most of what a token costs per request and
 * clients send the same token until it expires. A minute adds little to what the cached key set
 * already implies: a key the issuer withdraws is trusted until that set is refetched anyway.
 *
 * A config reload (issue 26) replaces the issuers and their policies with `prepare`: the next
 * token verified is judged by the new ones, and every remembered token is forgotten in the same
 * step (a principal remembered under the old policy must not outlive it; a verification under
 * way when the swap happens answers its own request but is not remembered). An issuer whose
 * verification settings (audience, JWKS URL, algorithms, clock skew, cooldown) did not change
 * keeps its verifier and cached key set; an added one is verified from its first token, a
 * removed one's tokens are refused as from an issuer not accepted here.
 */
import { Clock, Context, Effect, Layer, Option, Schedule } from "effect"
import { createHash } from "node:crypto"
import { DependencyUnavailable, Unauthorized } from "../../domain/errors.ts"
import type { SubjectPrincipal } from "../../domain/records.ts"
import type { OidcIssuerConfig, OidcPolicyConfig } from "../config/schema.ts"
import { Metrics } from "../metrics/Metrics.ts"
import { type SubjectSighting, SubjectsRepo } from "../store/SubjectsRepo.ts"
import { type IssuerVerifier, loadJose, makeIssuerVerifier, MAX_TOKEN_LENGTH, type TokenRejected } from "./issuer.ts"
import { choosePolicy, subjectPrincipal } from "./policies.ts"

export interface IdentityTokensShape {
  /** False when `auth.oidc` is empty: a bearer value that is not an API key is then just a malformed key. */
  readonly enabled: boolean
  /** The subject a token stands for; `policy` null when none of its issuer's policies matched. */
  readonly authenticate: (token: string) => Effect.Effect<SubjectPrincipal, Unauthorized | DependencyUnavailable>
  /**
   * Builds the verifiers of `next` (throws on settings the loader would have refused); the
   * returned function puts them and their policies in place and forgets every remembered token.
   */
  readonly prepare: (next: ReadonlyArray<OidcIssuerConfig>) => () => void
}

/** Verified tokens remembered at most this long, and at most this many (oldest dropped first). */
const VERIFIED_TTL_MS = 60_000
const VERIFIED_MAX = 10_000

interface Remembered {
  readonly principal: SubjectPrincipal
  /** Epoch ms after which the token must be verified again (its expiry, with the clock skew allowed). */
  readonly until: number
}

const MALFORMED = "the bearer token is neither an API key nor a well-formed identity-provider token (JWT)"

/** The unverified `iss` of a token, only to choose the verifier; the verifier checks it again. */
const claimedIssuer = (jose: typeof import("jose"), token: string): string | undefined => {
  try {
    const iss = jose.decodeJwt(token).iss
    return typeof iss === "string" ? iss : undefined
  } catch {
    return undefined
  }
}

const refusal = (error: TokenRejected): Unauthorized | DependencyUnavailable =>
  error.reason === "unavailable"
    ? new DependencyUnavailable({ message: error.message, details: { dependency: "identity_provider" } })
    : new Unauthorized({ message: `identity-provider token refused: ${error.message}`, details: { reason: error.reason } })

interface ConfiguredIssuer {
  readonly verifier: IssuerVerifier
  /** The verification settings the verifier was made with (see `verifierSettings`). */
  readonly settings: string
  readonly policies: ReadonlyArray<OidcPolicyConfig>
  readonly skewMs: number
}

export class IdentityTokens extends Context.Service<IdentityTokens, IdentityTokensShape>()("modelgate/IdentityTokens") {
  static readonly layer = (issuers: ReadonlyArray<OidcIssuerConfig>) =>
    Layer.effect(
      IdentityTokens,
      Effect.gen(function*() {
        /** What decides whether a token verifies; an issuer whose settings are unchanged keeps its verifier. */
        const verifierSettings = (entry: OidcIssuerConfig) =>
          JSON.stringify([entry.audience, entry.jwks_url, entry.algorithms, entry.clock_skew_seconds, entry.jwks_cooldown_seconds])
        const build = (entries: ReadonlyArray<OidcIssuerConfig>, previous: ReadonlyMap<string, ConfiguredIssuer>) => {
          const made = new Map<string, ConfiguredIssuer>()
          for (const entry of entries) {
            const settings = verifierSettings(entry)
            const kept = previous.get(entry.issuer)
            made.set(entry.issuer, {
              verifier: kept !== undefined && kept.settings === settings ? kept.verifier : makeIssuerVerifier({
                issuer: entry.issuer,
                audience: entry.audience,
                jwks_url: entry.jwks_url,
                algorithms: entry.algorithms,
                clock_skew_seconds: entry.clock_skew_seconds,
                jwks_options: { cooldownDuration: entry.jwks_cooldown_seconds * 1000 }
              }),
              settings,
              policies: entry.policies,
              skewMs: entry.clock_skew_seconds * 1000
            })
          }
          return made
        }
        let byIssuer: ReadonlyMap<string, ConfiguredIssuer> = build(issuers, new Map())

        // Subjects are recorded as seen in batches off the request path (as keys' last use is),
        // so the store learns who they are without a write per request.
        const subjects = Option.getOrUndefined(yield* Effect.serviceOption(SubjectsRepo))
        const metrics = Option.getOrUndefined(yield* Effect.serviceOption(Metrics))
        let seen = new Map<string, SubjectSighting>()
        const flushSeen = Effect.suspend(() => {
          if (seen.size === 0 || subjects === undefined) return Effect.void
          const batch = [...seen.values()]
          seen = new Map()
          return subjects.touchSubjects(batch)
        }).pipe(Effect.catch((error) => Effect.logWarning("could not record identity-provider subjects as seen", error.message)))
        // Always running: a reload may add the first issuer.
        yield* Effect.forkScoped(Effect.repeat(flushSeen, Schedule.spaced("1 second")))
        yield* Effect.addFinalizer(() => flushSeen)

        // Replaced (not cleared) by a reload, so a verification that started before it remembers
        // its principal in the map that was dropped, never in the new one.
        let verified = new Map<string, Remembered>()
        const remember = (
          cache: Map<string, Remembered>,
          digest: string,
          principal: SubjectPrincipal,
          exp: unknown,
          skewMs: number,
          now: number
        ) => {
          if (typeof exp !== "number") return
          if (cache.size >= VERIFIED_MAX) cache.delete(cache.keys().next().value!)
          cache.set(digest, { principal, until: Math.min(now + VERIFIED_TTL_MS, exp * 1000 + skewMs) })
        }
        const sighted = (principal: SubjectPrincipal, now: number) => {
          seen.set(principal.id, { id: principal.id, issuer: principal.issuer, subject: principal.subject, seen_at: new Date(now).toISOString() })
          return principal
        }

        const authenticate = Effect.fnUntraced(function*(token: string) {
          if (token.length > MAX_TOKEN_LENGTH) {
            return yield* new Unauthorized({ message: `identity-provider token refused: longer than ${MAX_TOKEN_LENGTH} characters`, details: { reason: "malformed" } })
          }
          // One set of issuers and policies for the whole verification, whatever a reload does meanwhile.
          const issuersNow = byIssuer
          const cache = verified
          const now = yield* Clock.currentTimeMillis
          const digest = createHash("sha256").update(token).digest("base64url")
          const known = cache.get(digest)
          if (known !== undefined) {
            if (now < known.until) return sighted(known.principal, now)
            cache.delete(digest)
          }
          // jose loads with the first token (issuer.ts): a gateway without identity providers never needs it.
          const jose = yield* Effect.tryPromise({
            try: loadJose,
            catch: () => new DependencyUnavailable({ message: "the identity-provider token verifier could not be loaded", details: { dependency: "identity_provider" } })
          })
          const iss = claimedIssuer(jose, token)
          if (iss === undefined) return yield* new Unauthorized({ message: MALFORMED, details: { reason: "malformed" } })
          const configured = issuersNow.get(iss)
          if (configured === undefined) {
            return yield* new Unauthorized({ message: "identity-provider token refused: its issuer is not accepted here", details: { reason: "issuer" } })
          }
          const checked = yield* configured.verifier.verify(token).pipe(
            Effect.tapError((error) => error.reason === "unavailable" ? Effect.sync(() => metrics?.dependencyError("identity_provider")) : Effect.void),
            Effect.mapError(refusal)
          )
          const principal = subjectPrincipal(checked.issuer, checked.subject, choosePolicy(configured.policies, checked.claims))
          remember(cache, digest, principal, checked.claims["exp"], configured.skewMs, now)
          return sighted(principal, now)
        })

        const prepare = (next: ReadonlyArray<OidcIssuerConfig>) => {
          const made = build(next, byIssuer)
          return () => {
            byIssuer = made
            verified = new Map()
          }
        }

        return IdentityTokens.of({
          get enabled() {
            return byIssuer.size > 0
          },
          authenticate,
          prepare
        })
      })
    )
}
