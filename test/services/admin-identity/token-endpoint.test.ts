/**
 * The code exchange's request as a token endpoint sees it (client_secret_basic with the RFC 6749
 * form encoding, or a public client's client_id in the body) and how its answers are read.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Effect, Exit } from "effect"
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import { exchangeCode } from "../../../src/services/admin-identity/token-endpoint.ts"

describe("token endpoint exchange", () => {
  let server: Server
  let url = ""
  let seen: { headers: IncomingMessage["headers"]; body: URLSearchParams } | undefined
  let answer: (response: ServerResponse) => void = () => {}
  beforeAll(async () => {
    server = createServer((request, response) => {
      let text = ""
      request.on("data", (chunk) => (text += chunk))
      request.on("end", () => {
        seen = { headers: request.headers, body: new URLSearchParams(text) }
        answer(response)
      })
    })
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    url = `http://127.0.0.1:${(server.address() as { port: number }).port}/token`
  })
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())))

  const exchange = (clientSecret: string | undefined) =>
    Effect.runPromiseExit(exchangeCode({
      tokenEndpoint: url,
      clientId: "gateway admin:app",
      clientSecret,
      code: "the-code",
      redirectUri: "https://gw.example.com/app/oidc/callback",
      codeVerifier: "v".repeat(43)
    }))

  const json = (status: number, body: unknown) => (response: ServerResponse) =>
    response.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body))

  it("authenticates with client_secret_basic, both parts form-encoded, and sends the PKCE verifier", async () => {
    answer = json(200, { access_token: "at", id_token: "a.b.c", token_type: "Bearer" })
    const exit = await exchange("s3cret/with+odd chars")
    expect(exit).toEqual(Exit.succeed({ idToken: "a.b.c" }))
    const basic = Buffer.from(seen!.headers.authorization!.replace(/^Basic /, ""), "base64").toString()
    expect(basic).toBe("gateway+admin%3Aapp:s3cret%2Fwith%2Bodd+chars")
    expect(Object.fromEntries(seen!.body)).toEqual({
      grant_type: "authorization_code",
      code: "the-code",
      redirect_uri: "https://gw.example.com/app/oidc/callback",
      code_verifier: "v".repeat(43)
    })
  })

  it("sends a public client's client_id in the body and no Authorization", async () => {
    answer = json(200, { id_token: "a.b.c" })
    await exchange(undefined)
    expect(seen!.headers.authorization).toBeUndefined()
    expect(seen!.body.get("client_id")).toBe("gateway admin:app")
  })

  it("names the endpoint's error code (only a printable one) when it refuses the code", async () => {
    answer = json(400, { error: "invalid_grant", error_description: "<b>whatever the issuer says</b>" })
    const exit = await exchange("secret")
    expect(Exit.isFailure(exit) && JSON.stringify(exit.cause)).toContain("HTTP 400, invalid_grant")
    expect(JSON.stringify(exit)).not.toContain("whatever the issuer says")
  })

  it("treats a 5xx as the issuer being unavailable, and an answer without id_token as a failure", async () => {
    answer = json(503, {})
    const down = await exchange("secret")
    expect(JSON.stringify(down)).toContain(`"unavailable":true`)
    answer = json(200, { access_token: "at" })
    const noIdToken = await exchange("secret")
    expect(JSON.stringify(noIdToken)).toContain("without an id_token")
  })

  it("refuses an answer larger than it reads", async () => {
    answer = (response) => response.writeHead(200, { "content-type": "application/json" }).end(`{"id_token":"${"x".repeat(300 * 1024)}"}`)
    const exit = await exchange("secret")
    expect(JSON.stringify(exit)).toContain("more than")
  })
})
