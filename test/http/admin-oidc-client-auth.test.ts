/**
 * The admin sign-in's client authentication at the token endpoint (issue 26, item 13), each
 * method against a real OpenID provider registered for it (test/support/oidc-issuer.ts):
 * client_secret_post, private_key_jwt and none sign an admin in; a client assertion signed with
 * a key the issuer does not hold gets no session. Also the mix-up protection (RFC 9207): a
 * callback whose `iss` is not the issuer's is refused, and the rules of
 * `admin.oidc.token_endpoint_auth_method` in the config.
 */
import { afterEach, describe, expect, it } from "vitest"
import { Result } from "effect"
import { exportJWK, exportPKCS8, generateKeyPair } from "jose"
import { stringify } from "yaml"
import { resolveConfig } from "../../src/services/config/load.ts"
import { ADMIN_TOKEN, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { signInWithDevPages, startTestIssuer, type TestIssuer } from "../support/oidc-issuer.ts"

type Method = "client_secret_basic" | "client_secret_post" | "private_key_jwt" | "none"

const running: Array<{ close: () => Promise<void> }> = []
afterEach(async () => {
  for (const item of running.splice(0).reverse()) await item.close()
})

const cookieFrom = (response: Response, name: string) =>
  response.headers.getSetCookie().find((line) => line.startsWith(`${name}=`))

/** An issuer whose client uses `issuerMethod`, and a gateway configured with `oidcExtra`. */
const setUp = async (
  issuerMethod: Method,
  oidcExtra: (issuer: TestIssuer) => Record<string, unknown>,
  clientJwks?: { keys: Array<Record<string, unknown>> }
): Promise<{ issuer: TestIssuer; gw: TestGateway }> => {
  const issuer = await startTestIssuer({ tokenEndpointAuthMethod: issuerMethod, ...(clientJwks ? { clientJwks } : {}) })
  running.push(issuer)
  const gw = await startGateway(testConfig({
    admin: {
      token: ADMIN_TOKEN,
      oidc: {
        issuer: issuer.issuer,
        client_id: issuer.client.client_id,
        scopes: ["openid", "email", "groups"],
        admin_claim: { claim: "groups", includes: "gateway-admins" },
        ...oidcExtra(issuer)
      }
    }
  }))
  running.push(gw)
  issuer.client.redirect_uris.push(`${gw.url}/app/oidc/callback`)
  issuer.setAccountClaims("alice", { groups: ["gateway-admins"], email: "alice@example.com" })
  return { issuer, gw }
}

/** Walks the sign-in as a browser would; `edit` may change the issuer's redirect before it is followed. */
const signIn = async ({ issuer, gw }: { issuer: TestIssuer; gw: TestGateway }, edit: (redirect: URL) => void = () => {}) => {
  const started = await fetch(`${gw.url}/app/oidc/start`, { redirect: "manual" })
  expect(started.status).toBe(303)
  const flowCookie = cookieFrom(started, "mg_oidc_flow")!.split(";")[0]!
  const redirect = await signInWithDevPages(issuer.issuer, started.headers.get("location")!, "alice")
  edit(redirect)
  return fetch(`${gw.url}${redirect.pathname}${redirect.search}`, { redirect: "manual", headers: { cookie: flowCookie } })
}

describe("admin sign-in client authentication", () => {
  it("client_secret_post: the secret in the body signs an admin in", async () => {
    const response = await signIn(await setUp("client_secret_post", (issuer) => ({
      client_secret: issuer.client.client_secret,
      token_endpoint_auth_method: "client_secret_post"
    })))
    expect(response.headers.get("location")).toBe("/app")
    expect(cookieFrom(response, "mg_session")).toBeDefined()
  })

  it("private_key_jwt: a signed client assertion signs an admin in", async () => {
    const { privateKey, publicKey } = await generateKeyPair("ES256", { extractable: true })
    const jwk = { ...(await exportJWK(publicKey)), kid: "gw-1", alg: "ES256", use: "sig" }
    const pem = await exportPKCS8(privateKey)
    const response = await signIn(await setUp("private_key_jwt", () => ({
      token_endpoint_auth_method: "private_key_jwt",
      private_key: pem,
      private_key_id: "gw-1"
    }), { keys: [jwk] }))
    expect(response.headers.get("location")).toBe("/app")
    expect(cookieFrom(response, "mg_session")).toBeDefined()
  })

  it("none: a public client (PKCE only) signs an admin in", async () => {
    const response = await signIn(await setUp("none", () => ({ token_endpoint_auth_method: "none" })))
    expect(response.headers.get("location")).toBe("/app")
    expect(cookieFrom(response, "mg_session")).toBeDefined()
  })

  it("a client assertion signed with a key the issuer does not hold gets no session", async () => {
    const registered = await generateKeyPair("ES256", { extractable: true })
    const other = await generateKeyPair("ES256", { extractable: true })
    const jwk = { ...(await exportJWK(registered.publicKey)), kid: "gw-1", alg: "ES256", use: "sig" }
    const pem = await exportPKCS8(other.privateKey)
    const response = await signIn(await setUp("private_key_jwt", () => ({
      token_endpoint_auth_method: "private_key_jwt",
      private_key: pem,
      private_key_id: "gw-1"
    }), { keys: [jwk] }))
    expect(response.headers.get("location")).toBe("/app?sign_in_error=failed")
    expect(cookieFrom(response, "mg_session")).toBeUndefined()
  })

  it("refuses a callback whose iss is another issuer's (mix-up), with no session", async () => {
    const setup = await setUp("client_secret_basic", (issuer) => ({ client_secret: issuer.client.client_secret }))
    const response = await signIn(setup, (redirect) => {
      expect(redirect.searchParams.get("iss")).toBe(setup.issuer.issuer)
      redirect.searchParams.set("iss", "https://evil.example.com")
    })
    expect(response.headers.get("location")).toBe("/app?sign_in_error=failed")
    expect(cookieFrom(response, "mg_session")).toBeUndefined()
  })
})

describe("admin.oidc.token_endpoint_auth_method in the config", () => {
  const oidc = { issuer: "https://idp.example.com", client_id: "modelgate", admin_claim: { claim: "groups", includes: "admins" } }
  const problem = (value: Record<string, unknown>) => {
    const result = resolveConfig({ fileText: stringify({ store: "sqlite::memory:", admin: { token: ADMIN_TOKEN, oidc: { ...oidc, ...value } } }), env: {} })
    return Result.isFailure(result) ? result.failure.message : undefined
  }

  it.each([
    [{ token_endpoint_auth_method: "client_secret_post" }, "admin.oidc.client_secret: required with token_endpoint_auth_method client_secret_post"],
    [{ token_endpoint_auth_method: "private_key_jwt" }, "admin.oidc.private_key: required with token_endpoint_auth_method private_key_jwt"],
    [{ token_endpoint_auth_method: "private_key_jwt", private_key: "not a key" }, "admin.oidc.private_key: not a PKCS#8 PEM"],
    [{ token_endpoint_auth_method: "none", client_secret: "a-real-secret-value" }, "admin.oidc.client_secret: a client with token_endpoint_auth_method none has no secret"],
    [{ token_endpoint_auth_method: "tls_client_auth" }, "token_endpoint_auth_method"]
  ])("refuses %j", (value, message) => {
    expect(problem(value)).toContain(message)
  })

  it("accepts client_secret_basic (the default) with a secret, and none without", () => {
    expect(problem({ client_secret: "a-real-secret-value" })).toBeUndefined()
    expect(problem({ token_endpoint_auth_method: "client_secret_basic", client_secret: "a-real-secret-value" })).toBeUndefined()
    expect(problem({ token_endpoint_auth_method: "none" })).toBeUndefined()
  })
})
