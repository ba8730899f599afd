/**
 * Issue 40: the running version is visible (`modelgate --version`, /readyz, the
 * modelgate_build_info gauge, the admin app's session), deprecations answer with their headers
 * (RFC 9745 Deprecation, RFC 8594 Sunset, Link rel="deprecation"), and the changelog those
 * links point to is served.
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { readFileSync } from "node:fs"
import { type Deprecation, DEPRECATIONS, deprecationHeaders, mergedDeprecationHeaders } from "../../src/domain/deprecation.ts"
import { VERSION } from "../../src/domain/version.ts"
import { ADMIN_TOKEN, startGateway, type TestGateway } from "../support/gateway.ts"
import { runCli } from "../support/process.ts"

const packageVersion = (JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string }).version

describe("the running version", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway()
  })
  afterAll(() => gw.close())

  it("is package.json's version", () => {
    expect(VERSION).toBe(packageVersion)
    expect(VERSION).toMatch(/^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$/)
  })

  it("modelgate --version prints it", async () => {
    const result = await runCli(["--version"])
    expect(result.code).toBe(0)
    expect(result.stdout.trim()).toBe(`modelgate v${packageVersion}`)
  })

  it("/readyz names it", async () => {
    const response = await fetch(`${gw.url}/readyz`)
    expect(response.status).toBe(200)
    expect(await response.json()).toEqual({ status: "ready", version: packageVersion })
  })

  it("/metrics has modelgate_build_info{version,node_version} 1", async () => {
    const text = await (await fetch(`${gw.url}/metrics`)).text()
    expect(text).toContain("# TYPE modelgate_build_info gauge")
    expect(text).toContain(`modelgate_build_info{version="${packageVersion}",node_version="${process.versions.node}"} 1`)
  })

  it("the admin app's session carries it for the footer, and only a signed-in admin sees it", async () => {
    const signIn = await fetch(`${gw.url}/app/session`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ token: ADMIN_TOKEN })
    })
    expect(signIn.status).toBe(201)
    expect(await signIn.json()).toMatchObject({ signed_in: true, version: packageVersion })
    expect(await (await fetch(`${gw.url}/app/session`)).json()).toEqual({ signed_in: false })
  })

  it("GET /changelog serves CHANGELOG.md, whose newest release is this version", async () => {
    const response = await fetch(`${gw.url}/changelog`)
    expect(response.status).toBe(200)
    expect(response.headers.get("content-type")).toBe("text/markdown; charset=utf-8")
    const text = await response.text()
    expect(text).toBe(readFileSync(new URL("../../CHANGELOG.md", import.meta.url), "utf8"))
    // The first release heading after Unreleased is the version package.json says was released.
    expect(text.match(/^## \[(\d[^\]]*)\]/m)?.[1]).toBe(packageVersion)
  })
})

describe("deprecation headers", () => {
  let gw: TestGateway
  let key: string
  beforeAll(async () => {
    gw = await startGateway()
    key = (await gw.createKey()).key
  })
  afterAll(() => gw.close())

  const chat = (body: Record<string, unknown>) =>
    fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "echo", messages: [{ role: "user", content: "hi" }], ...body })
    })

  it("a chat request using OpenAI's deprecated functions field is answered with Deprecation and Link", async () => {
    const response = await chat({
      functions: [{ name: "lookup", parameters: { type: "object", properties: {} } }],
      function_call: "auto"
    })
    await response.arrayBuffer()
    // 2023-11-06T00:00:00Z, when OpenAI deprecated the function-calling fields for tools.
    expect(response.headers.get("deprecation")).toBe("@1699228800")
    expect(response.headers.get("link")).toBe('</changelog#deprecated-chat-functions>; rel="deprecation"')
    expect(response.headers.get("sunset")).toBeNull()
  })

  it("a streamed answer carries them too; max_tokens, which the specification names, is not deprecated", async () => {
    const streamed = await chat({ functions: [{ name: "f", parameters: { type: "object", properties: {} } }], stream: true })
    expect(streamed.status).toBe(200)
    await streamed.text()
    expect(streamed.headers.get("deprecation")).toBe("@1699228800")
    expect(streamed.headers.get("link")).toBe('</changelog#deprecated-chat-functions>; rel="deprecation"')
    const capped = await chat({ max_tokens: 20 })
    await capped.arrayBuffer()
    expect(capped.headers.get("deprecation")).toBeNull()
  })

  it("a request without deprecated fields gets none of the headers", async () => {
    const response = await chat({ max_completion_tokens: 20 })
    expect(response.status).toBe(200)
    await response.arrayBuffer()
    expect(response.headers.get("deprecation")).toBeNull()
    expect(response.headers.get("link")).toBeNull()
  })

  it("a deprecated route with a sunset date answers with all three, its errors included", async () => {
    // Declared the way a real deprecation is, in the one table the gateway's routes are built
    // against (removed again below, so no other test sees it).
    const table = DEPRECATIONS as unknown as Record<string, Deprecation>
    table["GET /v1/models"] = { since: "2026-12-01", sunset: "2027-03-01", link: "deprecated-old" }
    const deprecatedGw = await startGateway().finally(() => delete table["GET /v1/models"])
    try {
      const { key: own } = await deprecatedGw.createKey()
      const listed = await fetch(`${deprecatedGw.url}/v1/models`, { headers: { authorization: `Bearer ${own}` } })
      expect(listed.status).toBe(200)
      const refused = await fetch(`${deprecatedGw.url}/v1/models`)
      expect(refused.status).toBe(401)
      for (const response of [listed, refused]) {
        expect(response.headers.get("deprecation")).toBe("@1796083200")
        expect(response.headers.get("sunset")).toBe("Mon, 01 Mar 2027 00:00:00 GMT")
        expect(response.headers.get("link")).toBe('</changelog#deprecated-old>; rel="deprecation"')
      }
      // The other routes are not touched.
      expect((await fetch(`${deprecatedGw.url}/healthz`)).headers.get("deprecation")).toBeNull()
    } finally {
      await deprecatedGw.close()
    }
  })

  it("the headers' formats: seconds since the epoch, an HTTP-date, the earliest of several", () => {
    const headers = deprecationHeaders({ since: "2026-12-01", sunset: "2027-03-01", link: "deprecated-old" })
    expect(headers).toEqual({
      deprecation: "@1796083200",
      sunset: "Mon, 01 Mar 2027 00:00:00 GMT",
      link: '</changelog#deprecated-old>; rel="deprecation"'
    })
    expect(() => deprecationHeaders({ since: "2026-12-01", sunset: "2026-11-01", link: "x" })).toThrow(/sunset before since/)
    expect(() => deprecationHeaders({ since: "December", link: "x" })).toThrow(/YYYY-MM-DD/)
    expect(mergedDeprecationHeaders([
      { since: "2027-01-01", sunset: "2027-06-01", link: "b" },
      { since: "2026-12-01", sunset: "2027-04-01", link: "a" }
    ])).toEqual({
      deprecation: "@1796083200",
      sunset: "Thu, 01 Apr 2027 00:00:00 GMT",
      link: '</changelog#b>; rel="deprecation", </changelog#a>; rel="deprecation"'
    })
  })
})
