/**
 * Verification of the tokens of one OpenID Connect issuer (decisions section 11), on `jose`.
 *
 * - Keys come from the issuer's JWKS: `jwks_url` when configured, else the `jwks_uri` of its
 *   discovery document (`<issuer>/.well-known/openid-configuration`), fetched on first use and
 *   kept for the life of the process. jose caches the key set, refetches it when a token names
 *   a `kid` it does not hold (at most once per cooldown, so a flood of made-up kids cannot turn
 *   into a flood of fetches) and when it is older than its max age.
 * - Only asymmetric algorithms: a JWKS publishes public keys, and a verifier that accepted HS*
 *   would accept a token "signed" with one of those public keys as an HMAC secret; `none` is never
 *   accepted. The allow-list is checked before any key is looked up.
 * - `iss`, `aud`, `exp` (required) and `nbf` are checked with a small clock tolerance, against
 *   Effect's Clock so tests can move time.
 * - An issuer that cannot be reached is `unavailable`, never a pass: the caller answers 503 and
 *   the token is not let in.
 */
import * as Clock from "effect/Clock"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import type { JWTPayload, RemoteJWKSetOptions } from "jose"
import { ASYMMETRIC_ALGORITHMS, isAcceptableIssuerUrl } from "./issuer-rules.ts"

export { ASYMMETRIC_ALGORITHMS, isAcceptableIssuerUrl } from "./issuer-rules.ts"

export const DEFAULT_CLOCK_SKEW_SECONDS = 30

/** Longer bearer values are refused before any parsing (a JWT with a few hundred groups fits). */
export const MAX_TOKEN_LENGTH = 16_384

/** How long a discovery or JWKS fetch may take before the issuer counts as unreachable. */
const FETCH_TIMEOUT_MS = 5_000
/** A failed discovery is not retried before this, so an issuer outage is not hammered per request. */
const DISCOVERY_RETRY_MS = 1_000
/** Largest discovery document read. */
const MAX_DISCOVERY_BYTES = 256 * 1024
/** Largest key set read, like discovery (issue 22, finding 8: a 300 MB key set took the process to 2 GB). */
export const MAX_JWKS_BYTES = 256 * 1024

/**
 * jose's key-set fetch, with the body read no further than MAX_JWKS_BYTES: a larger key set is
 * refused (the issuer counts as unavailable) instead of being held whole and parsed.
 */
const boundedJwksFetch = async (url: string, options: RequestInit): Promise<Response> => {
  const response = await fetch(url, options)
  if (response.status !== 200) {
    await response.body?.cancel()
    return new Response(null, { status: response.status })
  }
  const text = await readBoundedText(response, MAX_JWKS_BYTES, "key set")
  return new Response(text, { status: 200, headers: { "content-type": "application/json" } })
}

type Jose = typeof import("jose")
let joseLoading: Promise<Jose> | undefined

/**
 * jose, loaded when the first token is verified: a gateway with no identity provider (the
 * default) never runs it, and it is about 50 modules. One load per process, shared by every issuer.
 */
export const loadJose = (): Promise<Jose> => (joseLoading ??= import("jose"))

export interface IssuerSettings {
  readonly issuer: string
  readonly audience: string | ReadonlyArray<string>
  /** Absent: discovery at issuer/.well-known/openid-configuration. */
  readonly jwks_url?: string | undefined
  /** Allow-list; default asymmetric only (RS*, PS*, ES*, EdDSA). */
  readonly algorithms?: ReadonlyArray<string> | undefined
  /** Default 30. */
  readonly clock_skew_seconds?: number | undefined
  /** jose's JWKS options (cooldown after a fetch, max age); tests shorten them. */
  readonly jwks_options?: Pick<RemoteJWKSetOptions, "cooldownDuration" | "cacheMaxAge"> | undefined
}

export interface VerifiedToken {
  readonly issuer: string
  readonly subject: string
  readonly claims: Readonly<Record<string, unknown>>
}

export type RejectionReason =
  | "expired"
  | "not_yet_valid"
  | "audience"
  | "issuer"
  | "signature"
  | "malformed"
  | "unavailable"

/** Why a token was not accepted. `message` is safe to show a client: it never quotes the token. */
export class TokenRejected extends Data.TaggedError("TokenRejected")<{
  readonly reason: RejectionReason
  readonly message: string
}> {}

export interface IssuerVerifier {
  readonly issuer: string
  /** The discovery document (authorization_endpoint, token_endpoint, jwks_uri, ...) when fetched. */
  readonly metadata: Effect.Effect<Readonly<Record<string, unknown>>, TokenRejected>
  readonly verify: (
    token: string,
    options?: { readonly audience?: string; readonly nonce?: string }
  ) => Effect.Effect<VerifiedToken, TokenRejected>
}

const discoveryUrl = (issuer: string) => `${issuer.replace(/\/+$/, "")}/.well-known/openid-configuration`

const unavailable = (issuer: string, what: string) =>
  new TokenRejected({ reason: "unavailable", message: `the identity provider ${issuer} could not be reached (${what})` })

/**
 * A response body as text, read no further than `max` bytes (an answer without Content-Length,
 * or one that lies, is cut off there): an identity provider's answers are not held whole first.
 */
export const readBoundedText = async (response: Response, max: number, what: string): Promise<string> => {
  const reader = response.body?.getReader()
  if (reader === undefined) return ""
  const chunks: Array<Uint8Array> = []
  let size = 0
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    size += value.byteLength
    if (size > max) {
      await reader.cancel()
      throw new Error(`${what} of more than ${max} bytes`)
    }
    chunks.push(value)
  }
  return Buffer.concat(chunks).toString("utf8")
}

const fetchDiscovery = async (issuer: string): Promise<Readonly<Record<string, unknown>>> => {
  const response = await fetch(discoveryUrl(issuer), {
    headers: { accept: "application/json" },
    redirect: "manual",
    signal: AbortSignal.timeout(FETCH_TIMEOUT_MS)
  })
  if (response.status !== 200) {
    await response.body?.cancel()
    throw new Error(`discovery answered ${response.status}`)
  }
  const text = await readBoundedText(response, MAX_DISCOVERY_BYTES, "discovery document")
  const document: unknown = JSON.parse(text)
  if (typeof document !== "object" || document === null || Array.isArray(document)) {
    throw new Error("discovery document is not a JSON object")
  }
  const metadata = document as Record<string, unknown>
  // OpenID Connect Discovery 1.0 section 4.3: the document must name the issuer it was fetched for.
  if (metadata["issuer"] !== issuer) throw new Error(`discovery document names issuer ${JSON.stringify(metadata["issuer"])}`)
  const jwksUri = metadata["jwks_uri"]
  if (typeof jwksUri !== "string" || !isAcceptableIssuerUrl(jwksUri)) throw new Error("discovery document has no usable jwks_uri")
  return metadata
}

const rejectionOf = (issuer: string, error: unknown): TokenRejected => {
  const code = (error as { code?: unknown })?.code
  const claim = (error as { claim?: unknown })?.claim
  switch (code) {
    case "ERR_JWT_EXPIRED":
      return new TokenRejected({ reason: "expired", message: "the token has expired" })
    case "ERR_JWT_CLAIM_VALIDATION_FAILED":
      if (claim === "nbf") return new TokenRejected({ reason: "not_yet_valid", message: "the token is not valid yet" })
      if (claim === "aud") return new TokenRejected({ reason: "audience", message: "the token is not meant for this gateway (audience)" })
      if (claim === "iss") return new TokenRejected({ reason: "issuer", message: "the token's issuer is not accepted" })
      return new TokenRejected({ reason: "malformed", message: `the token's "${String(claim)}" claim is missing or invalid` })
    case "ERR_JOSE_ALG_NOT_ALLOWED":
      return new TokenRejected({ reason: "signature", message: "the token's signing algorithm is not accepted" })
    case "ERR_JWS_SIGNATURE_VERIFICATION_FAILED":
      return new TokenRejected({ reason: "signature", message: "the token's signature is invalid" })
    case "ERR_JWKS_NO_MATCHING_KEY":
    case "ERR_JWKS_MULTIPLE_MATCHING_KEYS":
      return new TokenRejected({ reason: "signature", message: "the token is not signed with a key of its issuer" })
    case "ERR_JWS_INVALID":
    case "ERR_JWT_INVALID":
    case "ERR_JOSE_NOT_SUPPORTED":
    case "ERR_JWK_INVALID":
      return new TokenRejected({ reason: "malformed", message: "the token is not a well-formed signed JWT" })
    case "ERR_JWKS_TIMEOUT":
      return unavailable(issuer, "its key set did not answer in time")
    default:
      // A key set that cannot be fetched or parsed (ERR_JWKS_INVALID, a network error, a non-200).
      return unavailable(issuer, "its key set could not be fetched")
  }
}

const checkAlgorithms = (algorithms: ReadonlyArray<string>) => {
  if (algorithms.length === 0) throw new Error("algorithms: at least one algorithm is needed")
  for (const alg of algorithms) {
    if (!ASYMMETRIC_ALGORITHMS.includes(alg)) {
      throw new Error(`algorithms: ${alg} is not accepted (only asymmetric algorithms: ${ASYMMETRIC_ALGORITHMS.join(", ")})`)
    }
  }
}

/** A verifier for one issuer. Nothing is fetched until the first token (or `metadata`) asks. */
export const makeIssuerVerifier = (settings: IssuerSettings): IssuerVerifier => {
  const issuer = settings.issuer
  const algorithms = [...(settings.algorithms ?? ASYMMETRIC_ALGORITHMS)]
  checkAlgorithms(algorithms)
  const audience = typeof settings.audience === "string" ? [settings.audience] : [...settings.audience]
  if (audience.length === 0) throw new Error("audience: at least one audience is needed")
  const clockTolerance = settings.clock_skew_seconds ?? DEFAULT_CLOCK_SKEW_SECONDS
  const jwksOptions = (jose: Jose): RemoteJWKSetOptions => ({
    timeoutDuration: FETCH_TIMEOUT_MS,
    cooldownDuration: 30_000,
    cacheMaxAge: 600_000,
    ...settings.jwks_options,
    [jose.customFetch]: boundedJwksFetch
  })

  let discovered: Readonly<Record<string, unknown>> | undefined
  let discovering: Promise<Readonly<Record<string, unknown>>> | undefined
  let failedAt = -Infinity
  /** One fetch at a time; after a failure, callers within DISCOVERY_RETRY_MS share that failure. */
  const discover = (): Promise<Readonly<Record<string, unknown>>> => {
    if (discovered !== undefined) return Promise.resolve(discovered)
    if (discovering !== undefined) return discovering
    if (performance.now() - failedAt < DISCOVERY_RETRY_MS) return Promise.reject(new Error("discovery failed moments ago"))
    discovering = fetchDiscovery(issuer).then(
      (metadata) => {
        discovered = metadata
        discovering = undefined
        return metadata
      },
      (error: unknown) => {
        failedAt = performance.now()
        discovering = undefined
        throw error
      }
    )
    return discovering
  }

  const metadata = Effect.tryPromise({
    try: discover,
    catch: (error) => unavailable(issuer, `discovery: ${(error as Error)?.message ?? "failed"}`)
  })

  let keySet: ReturnType<Jose["createRemoteJWKSet"]> | undefined
  const keys = (jose: Jose) =>
    Effect.suspend(() => {
      if (keySet !== undefined) return Effect.succeed(keySet)
      if (settings.jwks_url !== undefined) {
        keySet = jose.createRemoteJWKSet(new URL(settings.jwks_url), jwksOptions(jose))
        return Effect.succeed(keySet)
      }
      return Effect.map(metadata, (document) => {
        keySet ??= jose.createRemoteJWKSet(new URL(document["jwks_uri"] as string), jwksOptions(jose))
        return keySet
      })
    })

  const verify = Effect.fnUntraced(function*(
    token: string,
    options?: { readonly audience?: string; readonly nonce?: string }
  ) {
    if (token.length > MAX_TOKEN_LENGTH) {
      return yield* new TokenRejected({ reason: "malformed", message: `the token is longer than ${MAX_TOKEN_LENGTH} characters` })
    }
    const jose = yield* Effect.tryPromise({ try: loadJose, catch: () => unavailable(issuer, "its token verifier could not be loaded") })
    // Refuse what is not a signed JWT before the key set is fetched for it.
    const header = yield* Effect.try({
      try: () => jose.decodeProtectedHeader(token),
      catch: () => new TokenRejected({ reason: "malformed", message: "the token is not a well-formed signed JWT" })
    })
    if (typeof header.alg !== "string" || !algorithms.includes(header.alg)) {
      return yield* new TokenRejected({ reason: "signature", message: "the token's signing algorithm is not accepted" })
    }
    const jwks = yield* keys(jose)
    const now = yield* Clock.currentTimeMillis
    const { payload } = yield* Effect.tryPromise({
      try: () =>
        jose.jwtVerify(token, jwks, {
          issuer,
          audience: options?.audience ?? audience,
          algorithms,
          clockTolerance,
          currentDate: new Date(now),
          requiredClaims: ["exp", "sub"]
        }),
      catch: (error) => rejectionOf(issuer, error)
    })
    const subject = (payload as JWTPayload).sub
    if (typeof subject !== "string" || subject === "") {
      return yield* new TokenRejected({ reason: "malformed", message: "the token has no subject" })
    }
    if (options?.nonce !== undefined && payload["nonce"] !== options.nonce) {
      return yield* new TokenRejected({ reason: "malformed", message: "the token's nonce does not match" })
    }
    return { issuer, subject, claims: payload as Readonly<Record<string, unknown>> } satisfies VerifiedToken
  })

  return { issuer, metadata, verify }
}
