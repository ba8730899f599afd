/**
 * Issue 22, finding 3: behind `trust_proxy`, the client address is the X-Forwarded-For entry the
 * trusted proxy appended (the rightmost, or the Nth from the right with `trusted_hops`), and only
 * if it is an IP address. The leftmost entry is the client's own text.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { forwardedClient } from "../../src/http/forwarded.ts"
import { ADMIN_TOKEN, auditFor, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

describe("forwardedClient", () => {
  it("takes the entry `hops` places from the right, validated as an IP address", () => {
    expect(forwardedClient("1.1.1.1, 203.0.113.7", 1)).toBe("203.0.113.7")
    expect(forwardedClient("1.1.1.1, 203.0.113.7, 10.0.0.2", 2)).toBe("203.0.113.7")
    expect(forwardedClient("203.0.113.7", 2)).toBeUndefined()
    expect(forwardedClient("1.1.1.1, 2001:DB8::1", 1)).toBe("2001:db8::1")
    expect(forwardedClient("[2001:db8::1]:443", 1)).toBe("2001:db8::1")
    expect(forwardedClient("203.0.113.7:5555", 1)).toBe("203.0.113.7")
    expect(forwardedClient("1.1.1.1, <script>alert(1)</script>", 1)).toBeUndefined()
    expect(forwardedClient("1.1.1.1, 203.0.113.7\u0000", 1)).toBeUndefined()
    expect(forwardedClient("", 1)).toBeUndefined()
    expect(forwardedClient(undefined, 1)).toBeUndefined()
    // A huge header is read from its tail only, and still yields the appended entry.
    expect(forwardedClient(`${"9.9.9.9, ".repeat(100_000)}203.0.113.7`, 1)).toBe("203.0.113.7")
  })
})

const via = (forwardedFor: string, headers: Record<string, string> = {}) => ({
  "x-forwarded-proto": "https",
  "x-forwarded-for": forwardedFor,
  ...headers
})

describe("behind trust_proxy (one hop)", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway(testConfig({ server: { host: "127.0.0.1", port: 0, trust_proxy: true } }))
  })
  afterAll(() => gw?.close())

  it("a guesser rotating the leftmost X-Forwarded-For is still throttled on the proxy-appended address", async () => {
    for (let i = 0; i < 10; i++) {
      const response = await fetch(`${gw.url}/workspace`, {
        headers: via(`10.0.${i}.1, 198.51.100.20`, { authorization: `Bearer wrong-${i}` })
      })
      expect(response.status).toBe(401)
    }
    const eleventh = await fetch(`${gw.url}/workspace`, {
      headers: via("10.9.9.9, 198.51.100.20", { authorization: `Bearer ${ADMIN_TOKEN}` })
    })
    expect(eleventh.status).toBe(429)
    // Failing "in the name" of another address (written on the left) locks nobody else out.
    const victim = await fetch(`${gw.url}/workspace`, { headers: via("198.51.100.21", { authorization: `Bearer ${ADMIN_TOKEN}` }) })
    expect(victim.status).toBe(200)
  })

  it("the audit's client_addr is the appended IP; markup or control bytes never reach it", async () => {
    const first = await fetch(`${gw.url}/healthz`, { headers: via("<b>x</b>, 203.0.113.50") })
    expect(first.status).toBe(200)
    const [record] = await auditFor(gw, first.headers.get("x-request-id")!)
    expect(record!.client_addr).toBe("203.0.113.50")

    const forged = await fetch(`${gw.url}/healthz`, { headers: via("203.0.113.50, <img src=x>") })
    expect(forged.status).toBe(200)
    const [other] = await auditFor(gw, forged.headers.get("x-request-id")!)
    // Not an IP: the socket's address (the proxy's) stands in.
    expect(other!.client_addr).toBe("127.0.0.1")
  })
})

describe("behind trust_proxy with trusted_hops: 2", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway(testConfig({ server: { host: "127.0.0.1", port: 0, trust_proxy: true, trusted_hops: 2 } }))
  })
  afterAll(() => gw?.close())

  it("takes the second entry from the right", async () => {
    const response = await fetch(`${gw.url}/healthz`, { headers: via("6.6.6.6, 203.0.113.60, 10.1.2.3") })
    const [record] = await auditFor(gw, response.headers.get("x-request-id")!)
    expect(record!.client_addr).toBe("203.0.113.60")
  })
})
