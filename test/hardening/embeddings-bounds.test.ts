/**
 * Issue 22, findings 4 and 5: embeddings answers are bounded and streamed.
 * - echo: at most its own 256 dimensions and 2,048 inputs; the answer is streamed, computed a
 *   few vectors per turn of the event loop (2,048 x 4,096 made 171 MiB and stalled the loop).
 * - OpenAI-kind: the upstream answer is relayed as it arrives (not read whole), its usage still
 *   reaches the audit record; any answer read whole is bounded by `max_response_bytes`, a
 *   relayed one by `max_relayed_bytes`.
 */
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { auditFor, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { watchLoopCpu } from "../support/loop-cpu.ts"

/** A raw upstream: a chat answer of `chatBytes`, an embeddings answer of `vectors` x 1,536 floats sent in pieces. */
const startUpstream = async () => {
  const state = { chatBytes: 10, vectors: 4, sentEmbeddingBytes: 0 }
  const server: Server = createServer((req, res) => {
    req.resume()
    req.on("end", () => {
      if (req.url === "/v1/chat/completions") {
        const content = "x".repeat(state.chatBytes)
        res.writeHead(200, { "content-type": "application/json" })
        res.end(JSON.stringify({
          id: "chatcmpl-1", object: "chat.completion", created: 1, model: "m",
          choices: [{ index: 0, message: { role: "assistant", content }, logprobs: null, finish_reason: "stop" }],
          usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 }
        }))
        return
      }
      res.writeHead(200, { "content-type": "application/json" })
      const vector = JSON.stringify(Array.from({ length: 1536 }, (_, i) => (i % 7) / 7 - 0.5))
      res.write(`{"object":"list","data":[`)
      for (let i = 0; i < state.vectors; i++) {
        const piece = `${i === 0 ? "" : ","}{"object":"embedding","index":${i},"embedding":${vector}}`
        state.sentEmbeddingBytes += piece.length
        res.write(piece)
      }
      res.end(`],"model":"text-embedding-3-small","usage":{"prompt_tokens":${state.vectors * 3},"total_tokens":${state.vectors * 3}}}`)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, state, close: () => new Promise((r) => server.close(r)) }
}

describe("echo embeddings are bounded and streamed", () => {
  let gw: TestGateway
  let key: string
  beforeAll(async () => {
    gw = await startGateway(testConfig({ limits: { requests_per_minute: 1000 } }))
    key = (await gw.createKey()).key
  })
  afterAll(() => gw?.close())

  const embed = (body: unknown) =>
    fetch(`${gw.url}/v1/embeddings`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify(body)
    })

  it("refuses more dimensions than the model's own (256) and more than 2,048 inputs, naming the field", async () => {
    const wide = await embed({ model: "echo", input: "x", dimensions: 4096 })
    expect(wide.status).toBe(400)
    expect(await wide.json()).toMatchObject({ error: "validation_failed", details: { field: "dimensions" } })
    const many = await embed({ model: "echo", input: Array.from({ length: 2049 }, () => "a") })
    expect(many.status).toBe(400)
    expect(((await many.json()) as { message: string }).message).toContain("input")
  })

  it("2,048 inputs at full width: streamed (no Content-Length), the loop keeps turning, the JSON is whole", async () => {
    // The loop measured in CPU time of its thread (a loaded machine stretches wall-clock gaps with
    // time spent waiting for a core, not this).
    const loop = watchLoopCpu()
    let worstTurnMs = 0
    try {
      const response = await embed({ model: "echo", input: Array.from({ length: 2048 }, (_, i) => `input ${i}`), encoding_format: "float" })
      expect(response.status).toBe(200)
      expect(response.headers.get("content-length")).toBeNull()
      const body = (await response.json()) as { data: Array<{ index: number; embedding: Array<number> }>; usage: { prompt_tokens: number } }
      expect(body.data).toHaveLength(2048)
      expect(body.data[2047]!.index).toBe(2047)
      expect(body.data[0]!.embedding).toHaveLength(256)
      expect(body.usage.prompt_tokens).toBe(4096)
      const [record] = await auditFor(gw, response.headers.get("x-request-id")!)
      expect(record).toMatchObject({ status: 200, prompt_tokens: 4096, completion_tokens: 0 })
    } finally {
      worstTurnMs = loop.stop()
    }
    // Computed in slices between which the loop turns.
    expect(worstTurnMs, "the longest turn of the event loop, in CPU ms of its thread").toBeLessThan(500)
  })
})

describe("provider answers: bounded when read whole, relayed otherwise", () => {
  let upstream: Awaited<ReturnType<typeof startUpstream>>
  let gw: TestGateway
  let key: string
  beforeAll(async () => {
    upstream = await startUpstream()
    gw = await startGateway(testConfig({
      limits: { requests_per_minute: 1000 },
      providers: [{ name: "up", kind: "openai", base_url: upstream.url, api_key: "sk-test", max_response_bytes: 200_000, max_relayed_bytes: 3_000_000 }],
      models: [
        { alias: "chat", id: "m", provider: "up" },
        { alias: "embed", id: "text-embedding-3-small", provider: "up", endpoints: ["embeddings"] }
      ]
    }))
    key = (await gw.createKey()).key
  })
  afterAll(async () => {
    await gw?.close()
    await upstream?.close()
  })

  const post = (path: string, body: unknown) =>
    fetch(`${gw.url}${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify(body)
    })

  it("a chat answer over max_response_bytes is a 502 provider_error, not held", async () => {
    upstream.state.chatBytes = 100
    expect((await post("/v1/chat/completions", { model: "chat", messages: [{ role: "user", content: "hi" }] })).status).toBe(200)
    upstream.state.chatBytes = 500_000
    const big = await post("/v1/chat/completions", { model: "chat", messages: [{ role: "user", content: "hi" }] })
    expect(big.status).toBe(502)
    expect(await big.json()).toMatchObject({ error: "provider_error", details: { provider: "up" } })
  })

  it("an embeddings answer larger than max_response_bytes is relayed as it arrives, usage audited", async () => {
    upstream.state.vectors = 60 // ~1.2 MB, six times max_response_bytes
    const response = await post("/v1/embeddings", { model: "embed", input: "hello", encoding_format: "float" })
    expect(response.status).toBe(200)
    expect(response.headers.get("content-length")).toBeNull()
    const text = await response.text()
    expect(text.length).toBeGreaterThan(1_000_000)
    const body = JSON.parse(text) as { data: Array<unknown>; usage: { prompt_tokens: number } }
    expect(body.data).toHaveLength(60)
    const [record] = await auditFor(gw, response.headers.get("x-request-id")!)
    expect(record).toMatchObject({ status: 200, prompt_tokens: 180, completion_tokens: 0 })
  })

  it("an answer over max_relayed_bytes is cut, not passed on whole, and audited as the provider's failure", async () => {
    upstream.state.vectors = 200 // ~4 MB
    const response = await post("/v1/embeddings", { model: "embed", input: "hello", encoding_format: "float" })
    expect(response.status).toBe(200)
    await expect(response.text()).rejects.toThrow()
    const requestId = response.headers.get("x-request-id")!
    let record
    for (let i = 0; i < 50 && record === undefined; i++) {
      ;[record] = await auditFor(gw, requestId)
      if (record === undefined) await new Promise((r) => setTimeout(r, 50))
    }
    expect(record).toMatchObject({ error: "provider_error" })
  })
})
