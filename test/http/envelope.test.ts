/** Every error, on every path, is the spec's envelope with both request-id headers. */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { CreditsRepo } from "../../src/services/store/CreditsRepo.ts"
import { StoreLayer } from "../../src/services/store/StoreLayer.ts"
import { ADMIN_TOKEN, auditFor, startGateway, type TestGateway } from "../support/gateway.ts"
import { chunkedUpload, rawExchange } from "../support/http.ts"

const expectEnvelope = async (response: Response, status: number, slug: string) => {
  expect(response.status).toBe(status)
  expect(response.headers.get("content-type")).toContain("application/json")
  const id = response.headers.get("x-request-id")
  expect(id).toMatch(/^req_[0-9a-f]{32}$/)
  expect(response.headers.get("request-id")).toBe(id)
  const body: any = await response.json()
  expect(body).toMatchObject({ status, error: slug, request_id: id })
  expect(typeof body.message).toBe("string")
  expect(JSON.stringify(body)).not.toMatch(/at .*\.ts:\d+/)
  return body
}

describe("error envelope", () => {
  let gw: TestGateway
  let key: string
  beforeAll(async () => {
    gw = await startGateway()
    key = (await gw.createKey()).key
  })
  afterAll(() => gw.close())

  it("answers an unknown route with 404 not_found", async () => {
    await expectEnvelope(await fetch(`${gw.url}/v1/nothing-here`), 404, "not_found")
  })

  it("answers a wrong method with 405 and Allow", async () => {
    const response = await fetch(`${gw.url}/healthz`, { method: "POST" })
    expect(response.headers.get("allow")).toBe("GET")
    await expectEnvelope(response, 405, "method_not_allowed")
  })

  it("answers malformed JSON, non-object JSON and an empty body with 400 validation_failed", async () => {
    for (const body of ["{not json", "[1,2,3]", "42", "\"text\"", "null", ""]) {
      const response = await gw.admin("POST", "/api-keys", body)
      const envelope = await expectEnvelope(response, 400, "validation_failed")
      expect(envelope.message.length).toBeGreaterThan(5)
    }
  })

  it("answers a wrong content type with 415", async () => {
    const response = await gw.admin("POST", "/api-keys", JSON.stringify({ name: "x" }), { "content-type": "text/plain" })
    await expectEnvelope(response, 415, "unsupported_media_type")
  })

  it("refuses a body of 1 MiB + 1 byte with 413 before reading it", async () => {
    const big = JSON.stringify({ name: "x".repeat(1_048_576 - 10) })
    expect(Buffer.byteLength(big)).toBeGreaterThan(1_048_576)
    const padded = big.slice(0, 1_048_577)
    const response = await gw.admin("POST", "/api-keys", padded)
    await expectEnvelope(response, 413, "request_too_large")
  })

  it("accepts a body of exactly 1 MiB (the limit is inclusive)", async () => {
    const name = "n"
    const filler = " ".repeat(1_048_576 - JSON.stringify({ name }).length)
    const body = JSON.stringify({ name }) + filler
    expect(Buffer.byteLength(body)).toBe(1_048_576)
    const response = await gw.admin("POST", "/api-keys", body)
    expect(response.status).toBe(201)
  })

  it("stops reading a chunked body that grows past the limit and answers 413", async () => {
    const response = await chunkedUpload(`${gw.url}/api-keys`, 8 * 1024 * 1024, {
      authorization: `Bearer ${ADMIN_TOKEN}`,
      "content-type": "application/json"
    })
    expect(response.status).toBe(413)
    expect(JSON.parse(response.body)).toMatchObject({ error: "request_too_large" })
    expect(response.headers["x-request-id"]).toMatch(/^req_/)
    // The gateway keeps serving.
    expect((await fetch(`${gw.url}/healthz`)).status).toBe(200)
  })

  it("answers oversized headers with 431 in the envelope and keeps serving", async () => {
    const port = Number(new URL(gw.url).port)
    const reply = await rawExchange(port, `GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(20_000)}\r\n\r\n`)
    expect(reply).toMatch(/^HTTP\/1.1 431 /)
    expect(reply).toMatch(/x-request-id: req_/)
    const body = JSON.parse(reply.slice(reply.indexOf("\r\n\r\n") + 4))
    expect(body).toMatchObject({ status: 431, error: "headers_too_large" })
    expect((await fetch(`${gw.url}/healthz`)).status).toBe(200)
  })

  it("answers garbage on the wire with 400 in the envelope", async () => {
    const port = Number(new URL(gw.url).port)
    const reply = await rawExchange(port, "NOT-HTTP\r\n\r\n")
    expect(reply).toMatch(/^HTTP\/1.1 400 /)
    expect(reply).toContain("\"error\":\"validation_failed\"")
  })

  it("gives every response, success included, a unique request id in both headers", async () => {
    const ids = new Set<string>()
    for (let i = 0; i < 20; i++) {
      const response = await fetch(`${gw.url}/healthz`)
      const id = response.headers.get("x-request-id")!
      expect(response.headers.get("request-id")).toBe(id)
      ids.add(id)
    }
    expect(ids.size).toBe(20)
  })

  it("answers a key-authenticated route without a key with 401 and still lists models with one", async () => {
    await expectEnvelope(await fetch(`${gw.url}/v1/models`), 401, "unauthorized")
    const ok = await fetch(`${gw.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } })
    expect(ok.status).toBe(200)
    expect(((await ok.json()) as any).data.map((m: { id: string }) => m.id)).toEqual(["echo", "echo-1"])
  })
})

describe("unexpected failures", () => {
  it("answer 500 internal_error without a stack trace, audited, and the process keeps serving", async () => {
    // A store whose workspace read dies: the kind of failure no client caused.
    const gw = await startGateway(undefined, {
      store: Layer.effect(
        CreditsRepo,
        Effect.map(CreditsRepo, (credits) => ({ ...credits, getWorkspace: Effect.die(new Error("disk on fire")) }))
      ).pipe(Layer.provideMerge(StoreLayer.memory))
    })
    try {
      const response = await gw.admin("GET", "/workspace")
      const body = await expectEnvelope(response, 500, "internal_error")
      expect(body.message).not.toContain("disk on fire")
      const records = await auditFor(gw, body.request_id)
      expect(records).toHaveLength(1)
      expect(records[0]).toMatchObject({ status: 500, error: "internal_error", endpoint: "/workspace" })
      expect((await fetch(`${gw.url}/healthz`)).status).toBe(200)
    } finally {
      await gw.close()
    }
  })
})
