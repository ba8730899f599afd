/**
 * The admin sign-in's conversation with the issuer, through `openid-client` (issue 26, item 13):
 * discovery, the authorization URL, and the code exchange with the client authentication the
 * operator configured (client_secret_basic, client_secret_post, private_key_jwt or none), with
 * the library's checks of the authorization response (state, the `iss` parameter against mix-up
 * when the issuer advertises it, RFC 9207) and of the ID token's claims (iss, aud, azp, exp, iat,
 * nonce).
 *
 * Every request goes through `boundedFetch`: bounded in time and in the size of the answer read
 * (a discovery document or token response is another server's text, not held whole first), and
 * no redirect followed. Errors are turned into short messages that name the library's error code
 * or the endpoint's `error` code, never a token or what the issuer wrote.
 */
import * as oidc from "openid-client"
import { createPrivateKey } from "node:crypto"
import type { AdminOidcConfig } from "../config/schema.ts"
import { isAcceptableIssuerUrl, readBoundedText } from "../identity/issuer.ts"

const TIMEOUT_MS = 10_000
/** Issue 22 bounded discovery and token answers at 256 KiB. */
export const MAX_ISSUER_ANSWER_BYTES = 256 * 1024

/** No body for these statuses (the Response constructor refuses one). */
const NULL_BODY_STATUSES = new Set([101, 204, 205, 304])

/** openid-client's fetch: a time limit, and the answer read no further than the bound. */
export const boundedFetch: oidc.CustomFetch = async (url, options) => {
  const timeout = AbortSignal.timeout(TIMEOUT_MS)
  const response = await fetch(url, {
    ...options,
    redirect: "manual",
    signal: options.signal === undefined ? timeout : AbortSignal.any([options.signal, timeout])
  })
  const text = await readBoundedText(response, MAX_ISSUER_ANSWER_BYTES, "identity provider answer")
  return new Response(NULL_BODY_STATUSES.has(response.status) ? null : text, {
    status: response.status,
    statusText: response.statusText,
    headers: response.headers
  })
}

/** The client authentication `admin.oidc` asks for (absent: basic with a secret, none without). */
export const clientAuthOf = (settings: AdminOidcConfig): oidc.ClientAuth => {
  const method = settings.token_endpoint_auth_method ?? (settings.client_secret === undefined ? "none" : "client_secret_basic")
  switch (method) {
    case "client_secret_basic":
      return oidc.ClientSecretBasic(settings.client_secret)
    case "client_secret_post":
      return oidc.ClientSecretPost(settings.client_secret)
    case "none":
      return oidc.None()
    case "private_key_jwt": {
      const key = privateKeyOf(settings.private_key ?? "")
      return oidc.PrivateKeyJwt(settings.private_key_id === undefined ? key : { key, kid: settings.private_key_id })
    }
  }
}

/** A PKCS#8 PEM as the WebCrypto signing key private_key_jwt wants, its algorithm read from the key. */
const privateKeyOf = (pem: string): oidc.CryptoKey => {
  const key = createPrivateKey(pem)
  switch (key.asymmetricKeyType) {
    case "rsa":
      return key.toCryptoKey({ name: "RSASSA-PKCS1-v1_5", hash: "SHA-256" }, false, ["sign"])
    case "rsa-pss":
      return key.toCryptoKey({ name: "RSA-PSS", hash: "SHA-256" }, false, ["sign"])
    case "ec": {
      const curve = key.asymmetricKeyDetails?.namedCurve
      const namedCurve = curve === "prime256v1" ? "P-256" : curve === "secp384r1" ? "P-384" : curve === "secp521r1" ? "P-521" : undefined
      if (namedCurve === undefined) throw new Error(`admin.oidc.private_key: unsupported EC curve ${curve}`)
      return key.toCryptoKey({ name: "ECDSA", namedCurve }, false, ["sign"])
    }
    case "ed25519":
      return key.toCryptoKey({ name: "Ed25519" }, false, ["sign"])
    default:
      throw new Error(`admin.oidc.private_key: unsupported key type ${key.asymmetricKeyType}`)
  }
}

/** The issuer's configuration for this client, from its discovery document. */
export const discover = async (settings: AdminOidcConfig): Promise<oidc.Configuration> => {
  const insecure = new URL(settings.issuer).protocol === "http:"
  const config = await oidc.discovery(
    new URL(settings.issuer),
    settings.client_id,
    undefined,
    clientAuthOf(settings),
    {
      [oidc.customFetch]: boundedFetch,
      // http is only accepted on a loopback issuer (config check): a test or development issuer.
      execute: insecure ? [oidc.allowInsecureRequests] : []
    }
  )
  config[oidc.customFetch] = boundedFetch
  const metadata = config.serverMetadata()
  for (const name of ["authorization_endpoint", "token_endpoint"] as const) {
    const value = metadata[name]
    if (typeof value !== "string" || !isAcceptableIssuerUrl(value)) {
      throw new IssuerAnswerError(`the discovery document of ${settings.issuer} lacks a usable ${name}`, false)
    }
  }
  return config
}

/** What went wrong talking to the issuer, as a message fit for the log. */
export class IssuerAnswerError extends Error {
  readonly unavailable: boolean
  constructor(message: string, unavailable: boolean) {
    super(message)
    this.unavailable = unavailable
  }
}

const printable = (value: unknown) => typeof value === "string" && /^[\x20-\x7e]{1,100}$/.test(value) ? value : undefined

/**
 * An error from openid-client (or the fetch under it) as an IssuerAnswerError: `unavailable`
 * when the issuer could not be reached or answered with a server error, rather than refusing.
 */
export const describeIssuerError = (what: string, error: unknown): IssuerAnswerError => {
  if (error instanceof IssuerAnswerError) return error
  if (error instanceof oidc.ResponseBodyError) {
    const code = printable(error.error)
    return new IssuerAnswerError(`${what}: HTTP ${error.status}${code === undefined ? "" : `, ${code}`}`, error.status >= 500)
  }
  if (error instanceof oidc.AuthorizationResponseError) {
    const code = printable(error.error)
    return new IssuerAnswerError(`${what}: the authorization response carries error=${code ?? "?"}`, false)
  }
  if (error instanceof oidc.ClientError) {
    const cause: unknown = error.cause
    // A non-conforming HTTP answer carries the Response as its cause; a failed check the
    // library's own error (whose message names the check, never the value); anything else
    // (a timeout, an answer over the bound) is wrapped without a code.
    const status = cause instanceof Response ? cause.status : undefined
    const code = printable(error.code)
    const unavailable = status !== undefined
      ? status >= 500
      : code === "OAUTH_TIMEOUT" || code === "OAUTH_ABORT" || code === undefined
    const detail = cause instanceof Error && cause.message !== error.message ? ` (${cause.message})` : ""
    return new IssuerAnswerError(
      `${what}: ${code === undefined ? "" : `${code}: `}${error.message}${detail}${status === undefined ? "" : ` (HTTP ${status})`}`.slice(0, 300),
      unavailable
    )
  }
  return new IssuerAnswerError(`${what}: ${error instanceof Error ? error.message : String(error)}`.slice(0, 300), true)
}
