/**
 * The authorization code exchange (RFC 6749 section 4.1.3 with PKCE, RFC 7636): one form POST to
 * the issuer's token endpoint. Written out rather than taken from a client library because it is
 * one request; the ID token it returns is verified by the shared issuer verifier, not here.
 *
 * Client authentication is `client_secret_basic` when a secret is configured (the method every
 * provider supports and the discovery default), otherwise none (a public client, `client_id` in
 * the body, protected by PKCE alone). What the endpoint answers is bounded in time and size and
 * only its `error` code is repeated in messages: its body is another server's text.
 */
import { Data, Effect } from "effect"
import { readBoundedText } from "../identity/issuer.ts"

export interface CodeExchange {
  readonly tokenEndpoint: string
  readonly clientId: string
  readonly clientSecret: string | undefined
  readonly code: string
  readonly redirectUri: string
  readonly codeVerifier: string
}

export class CodeExchangeFailed extends Data.TaggedError("CodeExchangeFailed")<{
  readonly message: string
  /** The issuer could not be reached or answered with a server error (as opposed to refusing the code). */
  readonly unavailable: boolean
}> {}

const TIMEOUT_MS = 10_000
const MAX_RESPONSE_BYTES = 256 * 1024

/** `application/x-www-form-urlencoded` encoding of a client id or secret inside Basic (RFC 6749 section 2.3.1). */
const formEncode = (value: string) => encodeURIComponent(value).replace(/%20/g, "+")

const printable = (value: unknown) =>
  typeof value === "string" && /^[\x20-\x7e]{1,100}$/.test(value) ? value : undefined

/** Exchanges the code for the token response; succeeds with the ID token. */
export const exchangeCode = (input: CodeExchange): Effect.Effect<{ readonly idToken: string }, CodeExchangeFailed> =>
  Effect.gen(function*() {
    const body = new URLSearchParams({
      grant_type: "authorization_code",
      code: input.code,
      redirect_uri: input.redirectUri,
      code_verifier: input.codeVerifier
    })
    const headers: Record<string, string> = {
      "content-type": "application/x-www-form-urlencoded",
      accept: "application/json"
    }
    if (input.clientSecret === undefined) body.set("client_id", input.clientId)
    else {
      const credentials = `${formEncode(input.clientId)}:${formEncode(input.clientSecret)}`
      headers["authorization"] = `Basic ${Buffer.from(credentials, "utf8").toString("base64")}`
    }
    const { status, text } = yield* Effect.tryPromise({
      try: async (signal) => {
        const response = await fetch(input.tokenEndpoint, {
          method: "POST",
          headers,
          body,
          redirect: "error",
          signal: AbortSignal.any([signal, AbortSignal.timeout(TIMEOUT_MS)])
        })
        return { status: response.status, text: await readBoundedText(response, MAX_RESPONSE_BYTES, "token endpoint answer") }
      },
      catch: (error) =>
        new CodeExchangeFailed({
          message: `token endpoint request failed: ${error instanceof Error ? error.message : String(error)}`.slice(0, 300),
          unavailable: true
        })
    })
    let parsed: unknown
    try {
      parsed = JSON.parse(text)
    } catch {
      parsed = undefined
    }
    const fields = typeof parsed === "object" && parsed !== null ? parsed as Record<string, unknown> : {}
    if (status !== 200) {
      const code = printable(fields.error)
      return yield* new CodeExchangeFailed({
        message: `token endpoint refused the code exchange (HTTP ${status}${code === undefined ? "" : `, ${code}`})`,
        unavailable: status >= 500
      })
    }
    if (typeof fields.id_token !== "string" || fields.id_token === "") {
      return yield* new CodeExchangeFailed({
        message: "token endpoint answered without an id_token (is the openid scope granted?)",
        unavailable: false
      })
    }
    return { idToken: fields.id_token }
  })
