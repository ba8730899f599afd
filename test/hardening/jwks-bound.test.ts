/**
 * Issue 22, finding 8: the JWKS is read no further than 256 KiB, like discovery and token
 * answers (a 300 MB key set took the process to 2 GB). A key set over the bound makes the issuer
 * unavailable; one under it still verifies.
 */
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { Effect, Exit } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { makeIssuerVerifier, MAX_JWKS_BYTES } from "../../src/services/identity/issuer.ts"
import { startTestIssuer, type TestIssuer } from "../support/oidc-issuer.ts"

let idp: TestIssuer
let server: Server
let padding = 0
let url: string

beforeAll(async () => {
  idp = await startTestIssuer()
  server = createServer((_req, res) => {
    const body = JSON.stringify({ keys: [idp.currentKey().publicJwk], padding: "x".repeat(padding) })
    res.writeHead(200, { "content-type": "application/json" })
    // Written in pieces, without Content-Length: the bound must hold on what arrives.
    for (let at = 0; at < body.length; at += 65_536) {
      if (!res.write(body.slice(at, at + 65_536))) break
    }
    res.end()
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/jwks`
})
afterAll(async () => {
  await idp?.close()
  server?.closeAllConnections()
  await new Promise((resolve) => server.close(resolve))
})

const verifyWith = async () => {
  const verifier = makeIssuerVerifier({ issuer: idp.issuer, audience: idp.audience, jwks_url: url })
  return Effect.runPromiseExit(verifier.verify(await idp.mint()))
}

describe("the key set is bounded", () => {
  it("a key set under the bound verifies", async () => {
    padding = 1_000
    expect(Exit.isSuccess(await verifyWith())).toBe(true)
  })

  it("a key set over 256 KiB is refused: the issuer is unavailable, the token not accepted", async () => {
    padding = MAX_JWKS_BYTES * 4
    const exit = await verifyWith()
    expect(Exit.isFailure(exit)).toBe(true)
    if (Exit.isFailure(exit)) expect(String(exit.cause)).toContain("could not be reached")
  })
})
