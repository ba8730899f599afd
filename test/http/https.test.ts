/** Decisions section 9: HTTPS only with TLS configured; plain HTTP only on loopback or from a trusted TLS proxy. */
import { describe, expect, it } from "@effect/vitest"
import { execFileSync } from "node:child_process"
import { join } from "node:path"
import { Agent, fetch as undiciFetch } from "undici"
import { startGateway, testConfig } from "../support/gateway.ts"
import { tempDir } from "../support/process.ts"
import { VERSION } from "../../src/domain/version.ts"

const selfSignedCertificate = () => {
  const dir = tempDir("modelgate-tls-")
  const cert = join(dir, "cert.pem")
  const key = join(dir, "key.pem")
  execFileSync("openssl", [
    "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"
  ], { stdio: "ignore" })
  return { cert, key }
}

describe("HTTPS", () => {
  it("serves HTTPS only when server.tls is set", async () => {
    const tls = selfSignedCertificate()
    const gw = await startGateway(testConfig({ server: { host: "127.0.0.1", port: 0, tls } }))
    try {
      const port = new URL(gw.url).port
      const dispatcher = new Agent({ connect: { rejectUnauthorized: false } })
      const response = await undiciFetch(`https://127.0.0.1:${port}/healthz`, { dispatcher })
      expect(response.status).toBe(200)
      expect(response.headers.get("x-request-id")).toMatch(/^req_/)
      await expect(fetch(`http://127.0.0.1:${port}/healthz`)).rejects.toThrow()
      await dispatcher.close()
    } finally {
      await gw.close()
    }
  })

  it("behind a trusted proxy, refuses requests that did not arrive over HTTPS with 403 https_required", async () => {
    const gw = await startGateway(testConfig({ server: { host: "127.0.0.1", port: 0, trust_proxy: true } }))
    try {
      const plain = await fetch(`${gw.url}/v1/models`)
      expect(plain.status).toBe(403)
      expect(await plain.json()).toMatchObject({ error: "https_required", status: 403 })
      const viaProxy = await fetch(`${gw.url}/healthz`, { headers: { "x-forwarded-proto": "https", "x-forwarded-for": "203.0.113.7" } })
      expect(viaProxy.status).toBe(200)
      const records = await (await gw.admin("GET", "/audit?limit=5", undefined, { "x-forwarded-proto": "https" })).json() as any
      expect(records.data.some((r: { client_addr: string }) => r.client_addr === "203.0.113.7")).toBe(true)
    } finally {
      await gw.close()
    }
  })
  it("behind a trusted proxy, still answers the health probes over plain HTTP (a Kubernetes probe talks to the pod directly)", async () => {
    const gw = await startGateway(testConfig({ server: { host: "127.0.0.1", port: 0, trust_proxy: true } }))
    try {
      const live = await fetch(`${gw.url}/healthz`)
      expect(live.status).toBe(200)
      expect(await live.json()).toEqual({ status: "ok" })
      const ready = await fetch(`${gw.url}/readyz`)
      expect(ready.status).toBe(200)
      expect(await ready.json()).toEqual({ status: "ready", version: VERSION })
      // Everything else stays HTTPS-only, the admin API included.
      const admin = await fetch(`${gw.url}/api-keys`)
      expect(admin.status).toBe(403)
      expect(await admin.json()).toMatchObject({ error: "https_required" })
    } finally {
      await gw.close()
    }
  })
})
