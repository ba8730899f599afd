/**
 * Issue 22, finding 3: behind `trust_proxy`, the client address is the X-Forwarded-For entry the
 * trusted proxy appended (the rightmost, or the Nth from the right with `trusted_hops`), and only
 * if it is an IP address. The leftmost entry is the client's own text.
 *
 * Issue 31, item 4: only a peer in `server.trusted_proxies` (loopback when the list is empty) is
 * a proxy; any other peer is the client, whatever X-Forwarded-For or X-Forwarded-Proto it sends.
 * Non-loopback peers come from other 127/8 addresses (Linux routes all of them to lo).
 */
import { execFileSync } from "node:child_process"
import { request as httpRequest } from "node:http"
import { request as httpsRequest } from "node:https"
import { connect } from "node:net"
import { join } from "node:path"
import { Result } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { stringify } from "yaml"
import { LOOPBACK_PROXIES } from "../../src/domain/trusted-proxies.ts"
import { forwardedClient, makeForwarding } from "../../src/http/forwarded.ts"
import { resolveConfig } from "../../src/services/config/load.ts"
import { ADMIN_TOKEN, auditFor, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { tempDir } from "../support/process.ts"

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

interface Answer {
  readonly status: number
  readonly body: string
  readonly requestId: string
}

/** One request from a chosen local address (`from`), over HTTP or HTTPS (self-signed accepted). */
const callFrom = (from: string, url: string, headers: Record<string, string> = {}): Promise<Answer> =>
  new Promise((resolve, reject) => {
    const target = new URL(url)
    const send = target.protocol === "https:" ? httpsRequest : httpRequest
    const req = send(target, { localAddress: from, headers, agent: false, rejectUnauthorized: false }, (res) => {
      let body = ""
      res.setEncoding("utf8")
      res.on("data", (chunk) => (body += chunk))
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body, requestId: String(res.headers["x-request-id"]) }))
    })
    req.on("error", reject)
    req.end()
  })

const clientAddrOf = async (gw: TestGateway, answer: Answer) => (await auditFor(gw, answer.requestId))[0]?.client_addr

const loadServer = (server: Record<string, unknown>, env: Record<string, string> = {}) => {
  const result = resolveConfig({ fileText: stringify({ store: "sqlite::memory:", server }), fileName: "modelgate.yaml", env })
  return Result.isFailure(result) ? result.failure.message : result.success.server
}

describe("server.trusted_proxies at load", () => {
  it("takes IPv4 and IPv6 addresses and CIDR ranges, from the file or MODELGATE_SERVER_TRUSTED_PROXIES (comma-separated)", () => {
    const list = ["10.0.0.0/8", "192.0.2.7", "fd00::/8", "::1", "::ffff:10.0.0.0/104"]
    expect(loadServer({ trust_proxy: true, trusted_proxies: list })).toMatchObject({ trusted_proxies: list })
    expect(loadServer({ trust_proxy: true }, { MODELGATE_SERVER_TRUSTED_PROXIES: " 10.0.0.0/8, fd00::/8 ,," }))
      .toMatchObject({ trusted_proxies: ["10.0.0.0/8", "fd00::/8"] })
    expect(loadServer({ trust_proxy: true, trusted_proxies: ["10.0.0.1"] }, { MODELGATE_SERVER_TRUSTED_PROXIES: "" }))
      .toMatchObject({ trusted_proxies: [] })
    expect(loadServer({ trust_proxy: true }, { MODELGATE_SERVER_TRUSTED_PROXIES_0: "10.0.0.0/8" }))
      .toMatchObject({ trusted_proxies: ["10.0.0.0/8"] })
  })

  it.each([
    [["10.0.0.0/8", "10.0.0.300"], `server.trusted_proxies.1: "10.0.0.300" is not an IP address or CIDR range`],
    [["gateway-proxy"], `server.trusted_proxies.0: "gateway-proxy" is not an IP address or CIDR range`],
    [["10.0.0.0/33"], `server.trusted_proxies.0: "10.0.0.0/33" has a prefix length outside 0-32`],
    [["fd00::/129"], `server.trusted_proxies.0: "fd00::/129" has a prefix length outside 0-128`],
    [["10.0.0.0/"], `server.trusted_proxies.0: "10.0.0.0/" has a prefix length outside 0-32`],
    [["0.0.0.0/0"], `server.trusted_proxies.0: "0.0.0.0/0" trusts every address`],
    [["::/0"], `server.trusted_proxies.0: "::/0" trusts every address`],
    [["fe80::1%eth0"], `server.trusted_proxies.0: "fe80::1%eth0" is not an IP address or CIDR range`]
  ])("refuses %j, naming the field and the entry", (list, message) => {
    expect(loadServer({ trust_proxy: true, trusted_proxies: list })).toContain(`modelgate.yaml: ${message}`)
  })

  it("refuses a list without trust_proxy (no peer's headers would be read), and bounds its length", () => {
    expect(loadServer({ trusted_proxies: ["10.0.0.0/8"] })).toContain("server.trusted_proxies: only used with server.trust_proxy: true")
    expect(loadServer({ trust_proxy: true }, { MODELGATE_SERVER_TRUSTED_PROXIES: Array.from({ length: 65 }, (_, i) => `10.0.0.${i}`).join(",") }))
      .toContain("server.trusted_proxies")
  })
})

describe("which peers are proxies", () => {
  it("trust_proxy alone trusts loopback peers only; IPv4-mapped IPv6 peers match IPv4 ranges", () => {
    const loopback = makeForwarding(LOOPBACK_PROXIES, 1)
    expect(["127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1"].map(loopback.trusts)).toEqual([true, true, true, true])
    expect(["10.0.0.1", "172.17.0.1", "2001:db8::1", "::ffff:10.0.0.1", "unknown"].map(loopback.trusts)).toEqual([false, false, false, false, false])
    const listed = makeForwarding(["10.0.0.0/8", "fd00::/8", "192.0.2.7"], 1)
    expect(["10.1.2.3", "::ffff:10.1.2.3", "fd12::1", "192.0.2.7", "::ffff:192.0.2.7"].map(listed.trusts)).toEqual([true, true, true, true, true])
    expect(["11.0.0.1", "192.0.2.8", "fe80::1", "127.0.0.1", "::1"].map(listed.trusts)).toEqual([false, false, false, false, false])
    // Answers are remembered by address text; a flood of distinct peers does not change them.
    for (let i = 0; i < 3_000; i++) listed.trusts(`203.0.${i >> 8}.${i & 255}`)
    expect(["10.1.2.3", "11.0.0.1", "::ffff:10.1.2.3"].map(listed.trusts)).toEqual([true, false, true])
  })

  it("walks X-Forwarded-For from the right past entries that are themselves trusted proxies", () => {
    const chain = makeForwarding(["10.0.0.0/8"], 1)
    // An inner proxy at 10.0.0.5 wrote the load balancer's 10.0.0.9; the one before is the client.
    expect(chain.client("1.1.1.1, 203.0.113.7, 10.0.0.9, 10.0.0.5")).toBe("203.0.113.7")
    // A client-written entry left of the first untrusted one is never reached.
    expect(chain.client("10.0.0.1, 203.0.113.7")).toBe("203.0.113.7")
    // Text left of a trusted entry ends the walk at that proxy.
    expect(chain.client("<b>, 10.0.0.9")).toBe("10.0.0.9")
    // trusted_hops still counts unconditionally from the right.
    expect(makeForwarding(["10.0.0.0/8"], 2).client("6.6.6.6, 203.0.113.60, 198.51.100.1")).toBe("203.0.113.60")
  })
})

describe("a peer outside trusted_proxies (plain HTTP)", () => {
  let gw: TestGateway
  beforeAll(async () => {
    gw = await startGateway(testConfig({ server: { host: "127.0.0.1", port: 0, trust_proxy: true, trusted_proxies: ["127.0.0.1"] } }))
  })
  afterAll(() => gw?.close())

  it("cannot claim HTTPS with X-Forwarded-Proto: 403 https_required; the listed proxy can", async () => {
    const spoofed = await callFrom("127.0.0.2", `${gw.url}/api-keys`, {
      authorization: `Bearer ${ADMIN_TOKEN}`,
      "x-forwarded-proto": "https",
      "x-forwarded-for": "203.0.113.9"
    })
    expect(spoofed.status).toBe(403)
    expect(JSON.parse(spoofed.body)).toMatchObject({ error: "https_required" })
    // Audited under the peer's own address, not the header's.
    expect(await clientAddrOf(gw, spoofed)).toBe("127.0.0.2")
    const proxied = await callFrom("127.0.0.1", `${gw.url}/api-keys`, {
      authorization: `Bearer ${ADMIN_TOKEN}`,
      "x-forwarded-proto": "https",
      "x-forwarded-for": "203.0.113.9"
    })
    expect(proxied.status).toBe(200)
    expect(await clientAddrOf(gw, proxied)).toBe("203.0.113.9")
  })

  it("still gets the health probes, audited under its own address", async () => {
    const probe = await callFrom("127.0.0.2", `${gw.url}/healthz`, { "x-forwarded-for": "203.0.113.10" })
    expect(probe.status).toBe(200)
    expect(await clientAddrOf(gw, probe)).toBe("127.0.0.2")
  })
})

const selfSignedCertificate = () => {
  const dir = tempDir("modelgate-proxy-tls-")
  const cert = join(dir, "cert.pem")
  const key = join(dir, "key.pem")
  execFileSync("openssl", [
    "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", cert,
    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"
  ], { stdio: "ignore" })
  return { cert, key }
}

describe("a peer outside trusted_proxies (over the gateway's own TLS)", () => {
  let gw: TestGateway
  let base: string
  beforeAll(async () => {
    gw = await startGateway(testConfig({
      server: { host: "127.0.0.1", port: 0, tls: selfSignedCertificate(), trust_proxy: true, trusted_proxies: ["127.0.0.1"] }
    }))
    base = gw.url.replace("http://", "https://")
  })
  afterAll(() => gw?.close())

  it("cannot dodge the admin-token throttle by changing X-Forwarded-For: 429 after 10 wrong tokens", async () => {
    for (let i = 0; i < 10; i++) {
      const wrong = await callFrom("127.0.0.3", `${base}/workspace`, {
        authorization: `Bearer wrong-${i}`,
        "x-forwarded-proto": "https",
        "x-forwarded-for": `198.51.100.${i + 1}`
      })
      expect(wrong.status).toBe(401)
      expect(await clientAddrOf(gw, wrong)).toBe("127.0.0.3")
    }
    const eleventh = await callFrom("127.0.0.3", `${base}/workspace`, {
      authorization: `Bearer ${ADMIN_TOKEN}`,
      "x-forwarded-for": "198.51.100.99"
    })
    expect(eleventh.status).toBe(429)
    // The listed proxy's clients are counted apart: one of them is not locked out.
    const proxied = await callFrom("127.0.0.1", `${base}/workspace`, {
      authorization: `Bearer ${ADMIN_TOKEN}`,
      "x-forwarded-proto": "https",
      "x-forwarded-for": "198.51.100.1"
    })
    expect(proxied.status).toBe(200)
  })
})

/** Whether this machine can connect over IPv6 loopback (a CI container may have none). */
const ipv6Loopback = () =>
  new Promise<boolean>((resolve) => {
    const socket = connect({ host: "::1", port: 9, localAddress: "::1" })
    socket.once("connect", () => (socket.destroy(), resolve(true)))
    socket.once("error", (error: NodeJS.ErrnoException) => resolve(error.code === "ECONNREFUSED"))
  })

describe("IPv6 and IPv4-mapped peers (gateway on ::)", () => {
  let gw: TestGateway
  let port: string
  beforeAll(async () => {
    // Dual stack: IPv4 peers arrive as ::ffff:a.b.c.d and must match the IPv4 range.
    gw = await startGateway(testConfig({ server: { host: "::", port: 0, trust_proxy: true, trusted_proxies: ["127.0.0.0/30", "::1"] } }))
    port = new URL(gw.url).port
  })
  afterAll(() => gw?.close())

  const viaProxy = { authorization: `Bearer ${ADMIN_TOKEN}`, "x-forwarded-proto": "https", "x-forwarded-for": "2001:db8::7" }

  it("an IPv4-mapped peer inside an IPv4 range is a proxy; one outside is the client", async () => {
    const inside = await callFrom("127.0.0.2", `http://127.0.0.1:${port}/api-keys`, viaProxy)
    expect(inside.status).toBe(200)
    expect(await clientAddrOf(gw, inside)).toBe("2001:db8::7")
    const outside = await callFrom("127.0.0.5", `http://127.0.0.1:${port}/api-keys`, viaProxy)
    expect(outside.status).toBe(403)
    expect(await clientAddrOf(gw, outside)).toBe("::ffff:127.0.0.5")
  })

  it("an IPv6 peer in the list is a proxy", async (context) => {
    if (!(await ipv6Loopback())) return context.skip()
    const answer = await callFrom("::1", `http://[::1]:${port}/api-keys`, viaProxy)
    expect(answer.status).toBe(200)
    expect(await clientAddrOf(gw, answer)).toBe("2001:db8::7")
  })
})
