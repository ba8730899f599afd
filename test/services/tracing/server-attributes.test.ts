/** A provider span's server.address is the host, its port in server.port (OpenTelemetry's HTTP conventions; issue 26, item 11). */
import { describe, expect, it } from "@effect/vitest"
import { serverAttributes } from "../../../src/services/providers/upstream-span.ts"

describe("upstream span server attributes", () => {
  it("splits host and port, IPv6 included", () => {
    expect(serverAttributes("api.openai.com:443")).toEqual({ "server.address": "api.openai.com", "server.port": 443 })
    expect(serverAttributes("127.0.0.1:8080")).toEqual({ "server.address": "127.0.0.1", "server.port": 8080 })
    expect(serverAttributes("[::1]:9000")).toEqual({ "server.address": "::1", "server.port": 9000 })
    expect(serverAttributes("example.com")).toEqual({ "server.address": "example.com" })
  })
})
