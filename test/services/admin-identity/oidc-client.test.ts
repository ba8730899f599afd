/**
 * The admin sign-in's exchanges with the issuer as openid-client makes them through the
 * gateway's bounded fetch (issue 22: answers read up to 256 KiB): an oversized discovery document
 * or token answer is refused as the issuer being unavailable, a refused code names only the
 * endpoint's `error` code, and a 5xx counts as unavailable. A fake issuer on port 0 speaks the
 * discovery and token endpoint formats.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Effect, Exit } from "effect"
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import { makeAdminIdentity } from "../../../src/services/admin-identity/AdminIdentity.ts"
import { boundedFetch, MAX_ISSUER_ANSWER_BYTES } from "../../../src/services/admin-identity/oidc-client.ts"
import { makeIssuerVerifier } from "../../../src/services/identity/issuer.ts"

describe("admin sign-in against the issuer, bounded", () => {
  let server: Server
  let issuer = ""
  let discovery: (response: ServerResponse) => void = () => {}
  let token: (response: ServerResponse, request: IncomingMessage, body: URLSearchParams) => void = () => {}
  beforeAll(async () => {
    server = createServer((request, response) => {
      let text = ""
      request.on("data", (chunk) => (text += chunk))
      request.on("end", () => {
        if (request.url === "/.well-known/openid-configuration") discovery(response)
        else if (request.url === "/token") token(response, request, new URLSearchParams(text))
        else response.writeHead(404).end()
      })
    })
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    issuer = `http://127.0.0.1:${(server.address() as { port: number }).port}`
  })
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())))

  const json = (status: number, body: unknown) => (response: ServerResponse) =>
    response.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body))
  const document = () => ({
    issuer,
    authorization_endpoint: `${issuer}/authorize`,
    token_endpoint: `${issuer}/token`,
    jwks_uri: `${issuer}/jwks`
  })

  const identity = (auth: { client_secret?: string; token_endpoint_auth_method?: "client_secret_post" | "none" } = { client_secret: "the-client-secret-value" }) => {
    const settings = {
      issuer,
      client_id: "modelgate",
      ...auth,
      admin_claim: { claim: "groups", includes: "admins" },
      scopes: ["openid"]
    }
    return makeAdminIdentity(settings, makeIssuerVerifier({ issuer, audience: "modelgate", jwks_url: undefined }))
  }
  const complete = (auth?: Parameters<typeof identity>[0]) =>
    Effect.runPromiseExit(identity(auth).completeSignIn({
      callbackParams: new URLSearchParams({ code: "the-code", state: "s".repeat(43) }),
      redirectUri: "http://127.0.0.1:1/app/oidc/callback",
      state: "s".repeat(43),
      nonce: "n".repeat(43),
      codeVerifier: "v".repeat(43)
    }))

  it("reads an answer up to the bound, and refuses a larger one", async () => {
    token = (response) => response.writeHead(200).end("x".repeat(1000))
    expect(await (await boundedFetch(`${issuer}/token`, { method: "GET", headers: {}, body: undefined, redirect: "manual" })).text()).toHaveLength(1000)
    token = (response) => response.writeHead(200).end("x".repeat(MAX_ISSUER_ANSWER_BYTES + 1))
    await expect(boundedFetch(`${issuer}/token`, { method: "GET", headers: {}, body: undefined, redirect: "manual" })).rejects.toThrow(/more than 262144 bytes/)
  })

  it("refuses an oversized discovery document as the issuer being unavailable", async () => {
    discovery = (response) => response.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ ...document(), pad: "x".repeat(MAX_ISSUER_ANSWER_BYTES) }))
    const exit = await Effect.runPromiseExit(identity().authorizationUrl({ redirectUri: "http://127.0.0.1:1/cb", state: "s", nonce: "n", codeVerifier: "v".repeat(43) }))
    expect(JSON.stringify(exit)).toContain(`"reason":"unavailable"`)
  })

  it("builds the authorization URL with PKCE S256 from discovery", async () => {
    discovery = json(200, document())
    const exit = await Effect.runPromiseExit(identity().authorizationUrl({ redirectUri: "http://127.0.0.1:1/cb", state: "st", nonce: "no", codeVerifier: "v".repeat(43) }))
    expect(Exit.isSuccess(exit)).toBe(true)
    const url = new URL(Exit.isSuccess(exit) ? exit.value : "")
    expect(Object.fromEntries(url.searchParams)).toMatchObject({
      response_type: "code", client_id: "modelgate", redirect_uri: "http://127.0.0.1:1/cb", state: "st", nonce: "no", code_challenge_method: "S256"
    })
    expect(url.searchParams.get("code_challenge")).toMatch(/^[A-Za-z0-9_-]{43}$/)
  })

  it("sends client_secret_basic by default, and names only the endpoint's error code when it refuses", async () => {
    discovery = json(200, document())
    let authorization: string | undefined
    token = (response, request) => {
      authorization = request.headers.authorization
      json(400, { error: "invalid_grant", error_description: "<b>whatever the issuer says</b>" })(response)
    }
    const exit = await complete()
    expect(authorization).toMatch(/^Basic /)
    const text = JSON.stringify(exit)
    expect(text).toContain("HTTP 400, invalid_grant")
    expect(text).toContain(`"reason":"failed"`)
    expect(text).not.toContain("whatever the issuer says")
    expect(text).not.toContain("the-client-secret-value")
  })

  it("treats a 5xx and an oversized token answer as the issuer being unavailable", async () => {
    discovery = json(200, document())
    token = (response) => json(503, {})(response)
    expect(JSON.stringify(await complete())).toContain(`"reason":"unavailable"`)
    token = (response) => response.writeHead(200, { "content-type": "application/json" }).end(`{"id_token":"${"x".repeat(300 * 1024)}"}`)
    expect(JSON.stringify(await complete())).toContain(`"reason":"unavailable"`)
  })

  it("sends client_secret_post's secret and a public client's id in the body, with no Authorization", async () => {
    discovery = json(200, document())
    const seen: Array<{ authorization: string | undefined; body: Record<string, string> }> = []
    token = (response, request, body) => {
      seen.push({ authorization: request.headers.authorization, body: Object.fromEntries(body) })
      json(400, { error: "invalid_grant" })(response)
    }
    await complete({ client_secret: "the-client-secret-value", token_endpoint_auth_method: "client_secret_post" })
    await complete({ token_endpoint_auth_method: "none" })
    expect(seen[0]!.authorization).toBeUndefined()
    expect(seen[0]!.body).toMatchObject({ client_id: "modelgate", client_secret: "the-client-secret-value", code: "the-code", code_verifier: "v".repeat(43) })
    expect(seen[1]!.authorization).toBeUndefined()
    expect(seen[1]!.body).toMatchObject({ client_id: "modelgate", grant_type: "authorization_code" })
    expect(seen[1]!.body.client_secret).toBeUndefined()
  })
})
