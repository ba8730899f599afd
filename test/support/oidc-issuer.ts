/**
 * A real OpenID provider for tests: `oidc-provider` on 127.0.0.1, port 0, with one registered
 * test client (authorization code + PKCE, client credentials) and its development sign-in pages
 * (any login name is accepted; it becomes the subject), so a browser can sign in through it.
 *
 * Tests also mint tokens of their own choosing with the provider's signing keys (`mint`): valid,
 * expired, not yet valid, for another audience, from another issuer, tampered, HS256 keyed with
 * the public key, `alg: none`. `rotateKey()` adds a new signing key (new `kid`) that minted
 * tokens use from then on; both keys stay published unless `retireOldKeys()` is called.
 *
 * The JWKS document (`/jwks`, the discovery document's `jwks_uri`) is served by this helper from
 * its own key list, so a rotation shows up there at once; everything else is oidc-provider's.
 */
import { createHash, createHmac, randomBytes } from "node:crypto"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { exportJWK, generateKeyPair, type JWK, type JWTPayload, SignJWT } from "jose"
import Provider from "oidc-provider"

export interface SigningKey {
  readonly kid: string
  readonly alg: "RS256"
  readonly privateKey: import("jose").CryptoKey
  readonly privateJwk: JWK
  readonly publicJwk: JWK
}

export interface MintOptions {
  /** Default `"alice"`. */
  readonly subject?: string
  /** Default the issuer's `audience`; `null` leaves `aud` out. */
  readonly audience?: string | ReadonlyArray<string> | null
  /** Default this issuer's URL (pass another to mint a token of a foreign issuer). */
  readonly issuer?: string
  /** Extra claims (groups, email, nonce, ...). */
  readonly claims?: Readonly<Record<string, unknown>>
  /** Seconds relative to now; default +300. `null` leaves `exp` out. */
  readonly expiresIn?: number | null
  /** Seconds relative to now; default -5 (`iat` too). */
  readonly notBefore?: number
  /** Sign with this key instead of the current one (e.g. a key the issuer never published). */
  readonly key?: SigningKey
  /** Header `kid`; default the key's. */
  readonly kid?: string | null
}

export interface TestClient {
  readonly client_id: string
  readonly client_secret: string
  /** Settable: redirect URIs the client may use (the provider reads the list at each request). */
  readonly redirect_uris: Array<string>
}

export interface TestIssuer {
  /** `http://127.0.0.1:<port>` (no trailing slash), as `iss` and in the discovery document. */
  readonly issuer: string
  readonly jwksUrl: string
  /** The audience minted tokens carry by default (and the provider's resource indicator). */
  readonly audience: string
  readonly client: TestClient
  readonly provider: Provider
  /** Requests made to `/jwks` so far (to see JWKS caching and refreshes). */
  readonly jwksFetches: () => number
  /** Requests made to the discovery document so far. */
  readonly discoveryFetches: () => number
  readonly currentKey: () => SigningKey
  /** A signed JWT access token with the given claims. */
  readonly mint: (options?: MintOptions) => Promise<string>
  /** A new signing key with a new `kid`: published at once, used by `mint` from now on. */
  readonly rotateKey: () => Promise<SigningKey>
  /** Stops publishing every key but the current one. */
  readonly retireOldKeys: () => void
  /** Makes `/jwks` and the discovery document answer 503 (an issuer outage) until set back. */
  readonly setDown: (down: boolean) => void
  /** Claims the provider puts in ID tokens / userinfo for a subject signed in via the dev pages. */
  readonly setAccountClaims: (subject: string, claims: Readonly<Record<string, unknown>>) => void
  readonly close: () => Promise<void>
}

export const newSigningKey = async (): Promise<SigningKey> => {
  const { privateKey, publicKey } = await generateKeyPair("RS256", { extractable: true })
  const kid = `k-${randomBytes(6).toString("hex")}`
  const privateJwk = { ...(await exportJWK(privateKey)), kid, alg: "RS256", use: "sig" }
  const publicJwk = { ...(await exportJWK(publicKey)), kid, alg: "RS256", use: "sig" }
  return { kid, alg: "RS256", privateKey, privateJwk, publicJwk }
}

const b64url = (value: string | Buffer) => Buffer.from(value).toString("base64url")

/** A token with `alg: none` and no signature. */
export const unsignedToken = (payload: JWTPayload): string =>
  `${b64url(JSON.stringify({ alg: "none", typ: "JWT" }))}.${b64url(JSON.stringify(payload))}.`

/** The classic key-confusion forgery: HS256 with the issuer's public key (as PEM-ish JSON text) as the secret. */
export const hmacWithPublicKey = (payload: JWTPayload, publicJwk: JWK, secretText?: string): string => {
  const header = b64url(JSON.stringify({ alg: "HS256", typ: "JWT", kid: publicJwk.kid }))
  const body = b64url(JSON.stringify(payload))
  const secret = secretText ?? JSON.stringify(publicJwk)
  const signature = createHmac("sha256", secret).update(`${header}.${body}`).digest("base64url")
  return `${header}.${body}.${signature}`
}

/** The same token with one character of its signature changed. */
export const tamperSignature = (token: string): string => {
  const [header, payload, signature] = token.split(".") as [string, string, string]
  const flipped = signature[5] === "A" ? "B" : "A"
  return `${header}.${payload}.${signature.slice(0, 5)}${flipped}${signature.slice(6)}`
}

/** The same token with a claim changed but the original signature kept. */
export const tamperPayload = (token: string, claims: Readonly<Record<string, unknown>>): string => {
  const [header, payload, signature] = token.split(".") as [string, string, string]
  const decoded = JSON.parse(Buffer.from(payload, "base64url").toString("utf8")) as Record<string, unknown>
  return `${header}.${b64url(JSON.stringify({ ...decoded, ...claims }))}.${signature}`
}

/** A PKCE verifier and its S256 challenge. */
export const pkcePair = () => {
  const verifier = randomBytes(32).toString("base64url")
  return { verifier, challenge: createHash("sha256").update(verifier).digest("base64url") }
}

/**
 * Walks the provider's development sign-in pages without a browser: follows the redirects of
 * `authorizeUrl` (carrying the provider's cookies), signs in as `login`, consents, and returns the
 * URL the provider finally redirects to (the client's redirect URI with `code` and `state`, or
 * with `error`). Stops at the first redirect that leaves the issuer.
 */
export const signInWithDevPages = async (issuer: string, authorizeUrl: string, login: string): Promise<URL> => {
  const cookies = new Map<string, string>()
  const remember = (response: Response) => {
    for (const line of response.headers.getSetCookie()) {
      const [pair] = line.split(";")
      const index = pair!.indexOf("=")
      cookies.set(pair!.slice(0, index), pair!.slice(index + 1))
    }
  }
  const cookieHeader = () => [...cookies].map(([name, value]) => `${name}=${value}`).join("; ")
  let url = new URL(authorizeUrl)
  let body: URLSearchParams | undefined
  for (let step = 0; step < 20; step++) {
    if (url.origin !== new URL(issuer).origin) return url
    const response = await fetch(url, {
      method: body === undefined ? "GET" : "POST",
      redirect: "manual",
      headers: {
        cookie: cookieHeader(),
        ...(body === undefined ? {} : { "content-type": "application/x-www-form-urlencoded" })
      },
      ...(body === undefined ? {} : { body })
    })
    remember(response)
    body = undefined
    const location = response.headers.get("location")
    if (location !== null) {
      await response.body?.cancel()
      url = new URL(location, url)
      continue
    }
    const page = await response.text()
    if (response.status !== 200) throw new Error(`sign-in page ${url.pathname} answered ${response.status}: ${page.slice(0, 300)}`)
    const action = /<form[^>]*action="([^"]+)"/.exec(page)?.[1]
    const prompt = /name="prompt" value="([^"]+)"/.exec(page)?.[1]
    if (action === undefined || prompt === undefined) throw new Error(`no sign-in form on ${url.pathname}`)
    url = new URL(action.replaceAll("&amp;", "&"), url)
    body = prompt === "login"
      ? new URLSearchParams({ prompt, login, password: "any" })
      : new URLSearchParams({ prompt })
  }
  throw new Error("the sign-in did not finish in 20 steps")
}

export const startTestIssuer = async (options: {
  readonly audience?: string
  readonly redirectUris?: ReadonlyArray<string>
  /** How the test client authenticates at the token endpoint; default client_secret_basic. */
  readonly tokenEndpointAuthMethod?: "client_secret_basic" | "client_secret_post" | "private_key_jwt" | "none"
  /** The client's public keys, for private_key_jwt. */
  readonly clientJwks?: { readonly keys: ReadonlyArray<JWK> }
} = {}): Promise<TestIssuer> => {
  const audience = options.audience ?? "modelgate-test"
  const server = http.createServer()
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`

  const keys: Array<SigningKey> = [await newSigningKey()]
  const accountClaims = new Map<string, Readonly<Record<string, unknown>>>()
  const client: TestClient = {
    client_id: "modelgate-test-client",
    client_secret: randomBytes(24).toString("hex"),
    redirect_uris: [...(options.redirectUris ?? [])]
  }

  // The provider warns at construction that its in-memory adapter and development pages are for
  // development only: exactly what a test wants, so those two lines are not printed.
  const warn = console.warn
  console.warn = (...args: Array<unknown>) => {
    if (typeof args[0] === "string" && args[0].startsWith("oidc-provider WARNING")) return
    warn(...args)
  }
  const authMethod = options.tokenEndpointAuthMethod ?? "client_secret_basic"
  const usesSecret = authMethod === "client_secret_basic" || authMethod === "client_secret_post"
  const provider = new Provider(issuer, {
    clients: [{
      client_id: client.client_id,
      ...(usesSecret ? { client_secret: client.client_secret } : {}),
      // A placeholder keeps the registration valid; the real list is read per request below.
      redirect_uris: ["http://127.0.0.1/callback"],
      // A public client (none) may not use the client credentials grant.
      grant_types: authMethod === "none" ? ["authorization_code", "refresh_token"] : ["authorization_code", "refresh_token", "client_credentials"],
      response_types: ["code"],
      token_endpoint_auth_method: authMethod,
      ...(options.clientJwks === undefined ? {} : { jwks: options.clientJwks as any })
    }],
    jwks: { keys: [keys[0]!.privateJwk as any] },
    cookies: { keys: [randomBytes(16).toString("hex")] },
    pkce: { required: () => true },
    claims: { openid: ["sub"], email: ["email", "email_verified"], profile: ["name"], groups: ["groups"] },
    scopes: ["openid", "offline_access", "email", "profile", "groups"],
    features: {
      devInteractions: { enabled: true },
      clientCredentials: { enabled: true },
      resourceIndicators: {
        enabled: true,
        // A resource indicator must be an absolute URI; the token's `aud` is the audience below.
        defaultResource: () => "urn:modelgate:gateway",
        useGrantedResource: () => true,
        getResourceServerInfo: () => ({
          scope: "openid email profile groups",
          audience,
          accessTokenFormat: "jwt",
          accessTokenTTL: 300,
          jwt: { sign: { alg: "RS256" } }
        })
      }
    },
    ttl: {
      AccessToken: 300,
      AuthorizationCode: 60,
      ClientCredentials: 300,
      Grant: 3600,
      IdToken: 300,
      Interaction: 600,
      RefreshToken: 3600,
      Session: 3600
    },
    findAccount: (_ctx: unknown, sub: string) => ({
      accountId: sub,
      claims: () => ({ sub, ...accountClaims.get(sub) })
    }),
    extraTokenClaims: (_ctx: unknown, token: { accountId?: string }) =>
      token.accountId === undefined ? undefined : accountClaims.get(token.accountId),
    renderError: (ctx: any, out: Record<string, unknown>) => {
      ctx.type = "json"
      ctx.body = out
    }
  } as any)
  console.warn = warn
  // Redirect URIs settable by the test after start: the registered client reads them live.
  const Client = (provider as any).Client
  const originalFind = Client.find.bind(Client)
  Client.find = async (id: string) => {
    const found = await originalFind(id)
    if (found !== undefined && id === client.client_id) {
      Object.defineProperty(found, "redirectUris", { get: () => client.redirect_uris, configurable: true })
      found.redirectUriAllowed = (uri: string) => client.redirect_uris.includes(uri)
    }
    return found
  }

  let jwksFetches = 0
  let discoveryFetches = 0
  let down = false
  const published = () => ({ keys: keys.map((key) => key.publicJwk) })
  const callback = provider.callback()
  server.on("request", (request: http.IncomingMessage, response: http.ServerResponse) => {
    const path = (request.url ?? "/").split("?")[0]
    if (path === "/jwks" || path === "/.well-known/openid-configuration") {
      if (path === "/jwks") jwksFetches++
      else discoveryFetches++
      if (down) {
        response.writeHead(503, { "content-type": "application/json" }).end(JSON.stringify({ error: "temporarily_unavailable" }))
        return
      }
      if (path === "/jwks") {
        response.writeHead(200, { "content-type": "application/jwk-set+json" }).end(JSON.stringify(published()))
        return
      }
    }
    callback(request, response)
  })

  const mint = async (mintOptions: MintOptions = {}) => {
    const key = mintOptions.key ?? keys[keys.length - 1]!
    const now = Math.floor(Date.now() / 1000)
    const notBefore = mintOptions.notBefore ?? -5
    const payload: JWTPayload = { ...mintOptions.claims }
    const kid = mintOptions.kid === undefined ? key.kid : mintOptions.kid
    let jwt = new SignJWT(payload)
      .setProtectedHeader(kid === null ? { alg: key.alg, typ: "at+jwt" } : { alg: key.alg, typ: "at+jwt", kid })
      .setIssuer(mintOptions.issuer ?? issuer)
      .setSubject(mintOptions.subject ?? "alice")
      .setIssuedAt(now + Math.min(notBefore, 0))
      .setNotBefore(now + notBefore)
      .setJti(randomBytes(8).toString("hex"))
    const aud = mintOptions.audience === undefined ? audience : mintOptions.audience
    if (aud !== null) jwt = jwt.setAudience(typeof aud === "string" ? aud : [...aud])
    const expiresIn = mintOptions.expiresIn === undefined ? 300 : mintOptions.expiresIn
    if (expiresIn !== null) jwt = jwt.setExpirationTime(now + expiresIn)
    return jwt.sign(key.privateKey)
  }

  return {
    issuer,
    jwksUrl: `${issuer}/jwks`,
    audience,
    client,
    provider,
    jwksFetches: () => jwksFetches,
    discoveryFetches: () => discoveryFetches,
    currentKey: () => keys[keys.length - 1]!,
    mint,
    rotateKey: async () => {
      const key = await newSigningKey()
      keys.push(key)
      return key
    },
    retireOldKeys: () => {
      keys.splice(0, keys.length - 1)
    },
    setDown: (value) => {
      down = value
    },
    setAccountClaims: (subject, claims) => {
      accountClaims.set(subject, claims)
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      })
  }
}
