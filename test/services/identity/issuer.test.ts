// One issuer's verification against a real OpenID provider (oidc-provider on port 0): what is
// accepted, why each bad token is refused, key rotation through the JWKS, discovery, and an
// issuer that cannot be reached.
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import { Effect, Exit } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makeIssuerVerifier, type TokenRejected, type VerifiedToken } from "../../../src/services/identity/issuer.ts"
import {
  hmacWithPublicKey,
  newSigningKey,
  startTestIssuer,
  tamperPayload,
  tamperSignature,
  type TestIssuer,
  unsignedToken
} from "../../support/oidc-issuer.ts"

let idp: TestIssuer
beforeAll(async () => {
  idp = await startTestIssuer()
})
afterAll(() => idp?.close())

const outcome = async (effect: Effect.Effect<VerifiedToken, TokenRejected>) => {
  const exit = await Effect.runPromiseExit(effect)
  if (Exit.isSuccess(exit)) return { ok: true as const, token: exit.value }
  const failure = exit.cause.reasons.find((reason) => reason._tag === "Fail") as { error: TokenRejected } | undefined
  if (failure === undefined) throw new Error(`not a TokenRejected failure: ${String(exit.cause)}`)
  return { ok: false as const, reason: failure.error.reason, message: failure.error.message }
}

describe("issuer verifier", () => {
  it("accepts a valid token found through discovery and returns its subject and claims", async () => {
    const verifier = makeIssuerVerifier({ issuer: idp.issuer, audience: idp.audience })
    const token = await idp.mint({ subject: "alice", claims: { groups: ["ml-team"] } })
    const result = await outcome(verifier.verify(token))
    expect(result).toMatchObject({ ok: true, token: { issuer: idp.issuer, subject: "alice", claims: { groups: ["ml-team"] } } })
    const metadata = await Effect.runPromise(verifier.metadata)
    expect(metadata["jwks_uri"]).toBe(idp.jwksUrl)
    expect(metadata["authorization_endpoint"]).toBe(`${idp.issuer}/auth`)
  })

  it("refuses each kind of bad token with its reason", async () => {
    const verifier = makeIssuerVerifier({ issuer: idp.issuer, audience: idp.audience, jwks_url: idp.jwksUrl, clock_skew_seconds: 5 })
    const valid = await idp.mint()
    const cases: Array<[string, string, string]> = [
      ["expired", await idp.mint({ expiresIn: -60 }), "expired"],
      ["not yet valid", await idp.mint({ notBefore: 600, expiresIn: 900 }), "not_yet_valid"],
      ["wrong audience", await idp.mint({ audience: "someone-else" }), "audience"],
      ["no audience", await idp.mint({ audience: null }), "audience"],
      ["other issuer", await idp.mint({ issuer: "https://evil.example" }), "issuer"],
      ["tampered signature", tamperSignature(valid), "signature"],
      ["tampered payload", tamperPayload(valid, { sub: "mallory" }), "signature"],
      ["unpublished key", await idp.mint({ key: await newSigningKey() }), "signature"],
      ["HS256 with the public key", hmacWithPublicKey({ iss: idp.issuer, sub: "alice", aud: idp.audience, exp: 9999999999 }, idp.currentKey().publicJwk), "signature"],
      ["alg none", unsignedToken({ iss: idp.issuer, sub: "alice", aud: idp.audience, exp: 9999999999 }), "signature"],
      ["no exp", await idp.mint({ expiresIn: null }), "malformed"],
      ["not a JWT", "abc.def", "malformed"],
      ["oversized", "a".repeat(20_000), "malformed"]
    ]
    for (const [name, token, reason] of cases) {
      const result = await outcome(verifier.verify(token))
      expect({ name, result }).toMatchObject({ name, result: { ok: false, reason } })
      // The message is for a client: it never quotes the token.
      if (!result.ok) expect(result.message).not.toContain(token.slice(0, 20))
    }
  })

  it("accepts a small clock skew and honours a per-call audience and nonce", async () => {
    const verifier = makeIssuerVerifier({ issuer: idp.issuer, audience: idp.audience, jwks_url: idp.jwksUrl, clock_skew_seconds: 30 })
    expect((await outcome(verifier.verify(await idp.mint({ expiresIn: -10 })))).ok).toBe(true)
    expect((await outcome(verifier.verify(await idp.mint({ notBefore: 10 })))).ok).toBe(true)
    const idToken = await idp.mint({ audience: idp.client.client_id, claims: { nonce: "n-1" } })
    expect((await outcome(verifier.verify(idToken, { audience: idp.client.client_id, nonce: "n-1" }))).ok).toBe(true)
    expect(await outcome(verifier.verify(idToken, { audience: idp.client.client_id, nonce: "n-2" }))).toMatchObject({ ok: false, reason: "malformed" })
    expect(await outcome(verifier.verify(idToken))).toMatchObject({ ok: false, reason: "audience" })
  })

  it("picks up a rotated signing key (new kid) by refetching the JWKS, and stops trusting a retired one", async () => {
    const rotating = await startTestIssuer()
    try {
      const verifier = makeIssuerVerifier({
        issuer: rotating.issuer,
        audience: rotating.audience,
        jwks_options: { cooldownDuration: 0 }
      })
      const before = await rotating.mint()
      expect((await outcome(verifier.verify(before))).ok).toBe(true)
      const fetchesBefore = rotating.jwksFetches()
      expect((await outcome(verifier.verify(await rotating.mint()))).ok).toBe(true)
      expect(rotating.jwksFetches()).toBe(fetchesBefore) // cached

      await rotating.rotateKey()
      const after = await rotating.mint()
      expect((await outcome(verifier.verify(after))).ok).toBe(true)
      expect(rotating.jwksFetches()).toBe(fetchesBefore + 1)

      rotating.retireOldKeys()
      // The cached set still holds the old key until a refresh; a token under an unknown kid forces one.
      await outcome(verifier.verify(await rotating.mint({ key: await newSigningKey() })))
      expect(await outcome(verifier.verify(before))).toMatchObject({ ok: false, reason: "signature" })
      expect((await outcome(verifier.verify(after))).ok).toBe(true)
    } finally {
      await rotating.close()
    }
  })

  it("bounds JWKS refetches for unknown kids by the cooldown", async () => {
    const verifier = makeIssuerVerifier({ issuer: idp.issuer, audience: idp.audience, jwks_url: idp.jwksUrl })
    expect((await outcome(verifier.verify(await idp.mint()))).ok).toBe(true)
    const fetches = idp.jwksFetches()
    // Twenty kids the issuer never published, signed by a key it never published (one RSA key
    // pair, not twenty: generating them was most of this test's time).
    const unpublished = await newSigningKey()
    for (let i = 0; i < 20; i++) {
      const forged = await idp.mint({ key: unpublished, kid: `forged-${i}` })
      expect(await outcome(verifier.verify(forged))).toMatchObject({ ok: false, reason: "signature" })
    }
    expect(idp.jwksFetches() - fetches).toBeLessThanOrEqual(1)
  })

  it("an unreachable issuer is unavailable, never a pass, and a later request recovers", async () => {
    const flaky = await startTestIssuer()
    try {
      const verifier = makeIssuerVerifier({ issuer: flaky.issuer, audience: flaky.audience })
      const token = await flaky.mint()
      flaky.setDown(true)
      expect(await outcome(verifier.verify(token))).toMatchObject({ ok: false, reason: "unavailable" })
      flaky.setDown(false)
      // After the discovery retry pause (a second): polled, never a fixed sleep.
      let recovered = false
      for (const deadline = Date.now() + 10_000; !recovered && Date.now() < deadline;) {
        await new Promise((resolve) => setTimeout(resolve, 100))
        recovered = (await outcome(verifier.verify(token))).ok
      }
      expect(recovered).toBe(true)
    } finally {
      await flaky.close()
    }
    const gone = makeIssuerVerifier({ issuer: "http://127.0.0.1:9", audience: "x", jwks_url: "http://127.0.0.1:9/jwks" })
    expect(await outcome(gone.verify(await idp.mint()))).toMatchObject({ ok: false, reason: "unavailable" })
  })

  it("reads no more of a discovery document than its bound, even one sent without a Content-Length", async () => {
    let written = 0
    const flood = createServer((_, response) => {
      response.writeHead(200, { "content-type": "application/json" })
      // Chunked, no Content-Length: 1 MiB a write until the client hangs up.
      const chunk = Buffer.alloc(1024 * 1024, 0x20)
      const more = () => {
        while (!response.destroyed && written < 64 * 1024 * 1024) {
          written += chunk.length
          if (!response.write(chunk)) return void response.once("drain", more)
        }
        response.end()
      }
      more()
    })
    await new Promise<void>((resolve) => flood.listen(0, "127.0.0.1", resolve))
    const issuer = `http://127.0.0.1:${(flood.address() as AddressInfo).port}`
    try {
      const verifier = makeIssuerVerifier({ issuer, audience: "x" })
      expect(await outcome(verifier.verify(await idp.mint()))).toMatchObject({ ok: false })
      expect(await outcome(verifier.metadata as never)).toMatchObject({ ok: false, reason: "unavailable" })
      // It stopped reading long before the server ran out of things to send.
      expect(written).toBeLessThan(16 * 1024 * 1024)
    } finally {
      flood.closeAllConnections()
      await new Promise((resolve) => flood.close(resolve))
    }
  })

  it("refuses symmetric or none algorithms in its settings", () => {
    expect(() => makeIssuerVerifier({ issuer: idp.issuer, audience: "x", algorithms: ["HS256"] })).toThrow(/HS256 is not accepted/)
    expect(() => makeIssuerVerifier({ issuer: idp.issuer, audience: "x", algorithms: ["none"] })).toThrow(/none is not accepted/)
    expect(() => makeIssuerVerifier({ issuer: idp.issuer, audience: [] })).toThrow(/audience/)
  })
})

describe("the test issuer's sign-in (authorization code + PKCE through the development pages)", () => {
  it("signs a user in and issues an ID token the verifier accepts with the client id as audience", async () => {
    const redirectUri = "http://127.0.0.1:1/callback"
    idp.client.redirect_uris.push(redirectUri)
    idp.setAccountClaims("bob", { email: "bob@example.com", groups: ["admins"] })
    const { verifier, challenge } = (await import("../../support/oidc-issuer.ts")).pkcePair()
    const metadata = await Effect.runPromise(makeIssuerVerifier({ issuer: idp.issuer, audience: idp.audience }).metadata)
    const authorize = new URL(metadata["authorization_endpoint"] as string)
    authorize.search = new URLSearchParams({
      client_id: idp.client.client_id,
      redirect_uri: redirectUri,
      response_type: "code",
      scope: "openid email groups",
      state: "s-1",
      nonce: "n-1",
      code_challenge: challenge,
      code_challenge_method: "S256"
    }).toString()
    const { signInWithDevPages } = await import("../../support/oidc-issuer.ts")
    const back = await signInWithDevPages(idp.issuer, authorize.toString(), "bob")
    expect(back.origin + back.pathname).toBe(redirectUri)
    expect(back.searchParams.get("state")).toBe("s-1")
    const code = back.searchParams.get("code")
    expect(code, back.search).toBeTruthy()
    const tokenResponse = await fetch(metadata["token_endpoint"] as string, {
      method: "POST",
      headers: {
        authorization: `Basic ${Buffer.from(`${idp.client.client_id}:${idp.client.client_secret}`).toString("base64")}`,
        "content-type": "application/x-www-form-urlencoded"
      },
      body: new URLSearchParams({ grant_type: "authorization_code", code: code!, redirect_uri: redirectUri, code_verifier: verifier })
    })
    const tokens = await tokenResponse.json() as Record<string, string>
    expect(tokenResponse.status, JSON.stringify(tokens)).toBe(200)
    const idVerifier = makeIssuerVerifier({ issuer: idp.issuer, audience: idp.audience })
    const id = await outcome(idVerifier.verify(tokens["id_token"]!, { audience: idp.client.client_id, nonce: "n-1" }))
    expect(id).toMatchObject({ ok: true, token: { subject: "bob", claims: { email: "bob@example.com", groups: ["admins"] } } })
    // The access token is a JWT for the resource (the gateway's audience).
    const access = await outcome(idVerifier.verify(tokens["access_token"]!))
    expect(access).toMatchObject({ ok: true, token: { subject: "bob" } })
  })
})
