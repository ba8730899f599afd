/**
 * Issue 22, findings 7, 9 and 10, through the real server and GET /metrics:
 * - 7: refused, client-chosen model names do not use up the `model` label slots; a route is
 *   counted under its pattern.
 * - 9: an upstream's negative (or absurd) usage is not believed where it enters: the answer is
 *   still a 200 (plain, and streamed to its [DONE]), the record has no token count.
 * - 10: a count_tokens result is not consumption: not in prompt_tokens, not in tokens_total.
 */
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { auditFor, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

let server: Server
let usage: Record<string, unknown> = { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 }
let gw: TestGateway

beforeAll(async () => {
  server = createServer((req, res) => {
    let body = ""
    req.on("data", (chunk) => (body += chunk))
    req.on("end", () => {
      const request = JSON.parse(body) as { stream?: boolean }
      if (request.stream) {
        res.writeHead(200, { "content-type": "text/event-stream" })
        const chunk = (delta: Record<string, unknown>, finish: string | null, extra: Record<string, unknown> = {}) =>
          `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", created: 1, model: "m", choices: finish === "usage" ? [] : [{ index: 0, delta, logprobs: null, finish_reason: finish }], ...extra })}\n\n`
        res.write(chunk({ role: "assistant", content: "hi" }, null))
        res.write(chunk({}, "stop"))
        res.write(chunk({}, "usage", { usage }))
        res.end("data: [DONE]\n\n")
        return
      }
      res.writeHead(200, { "content-type": "application/json" })
      res.end(JSON.stringify({
        id: "c", object: "chat.completion", created: 1, model: "m",
        choices: [{ index: 0, message: { role: "assistant", content: "hi" }, logprobs: null, finish_reason: "stop" }],
        usage
      }))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`
  gw = await startGateway(testConfig({
    limits: { requests_per_minute: 10_000 },
    providers: [{ name: "up", kind: "openai", base_url: url, api_key: "sk-test" }, { name: "echo", kind: "echo" }],
    models: [{ match: "gpt-*", provider: "up" }, { alias: "echo", id: "echo-1", provider: "echo", credits: 0 }]
  }))
})
afterAll(async () => {
  await gw?.close()
  await new Promise((resolve) => server.close(resolve))
})

const metrics = async () => {
  const response = await fetch(`${gw.url}/metrics`)
  expect(response.status).toBe(200)
  return response.text()
}

const chat = (key: string, model: string, extra: Record<string, unknown> = {}) =>
  fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }], ...extra })
  })

describe("metrics label only admitted models, by their configured name", () => {
  it("210 refused names through a wildcard route leave the label slots alone", async () => {
    const narrow = await gw.createKey({ allowed_models: ["echo"] })
    for (let i = 0; i < 210; i++) {
      const refused = await chat(narrow.key, `gpt-made-up-${i}`)
      expect(refused.status).toBe(403)
      await refused.text()
    }
    const wide = await gw.createKey()
    usage = { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 }
    const served = await chat(wide.key, "gpt-real-one")
    expect(served.status).toBe(200)
    const echoed = await chat(wide.key, "echo")
    expect(echoed.status).toBe(200)
    const text = await metrics()
    expect(text).not.toContain("gpt-made-up-")
    expect(text).not.toContain('model="other"')
    expect(text).toMatch(/modelgate_tokens_total\{model="gpt-\*",provider="up",direction="prompt"\} [1-9]/)
    expect(text).toMatch(/modelgate_tokens_total\{model="echo-1",provider="echo",direction="completion"\} [1-9]/)
  })
})

describe("upstream usage is validated where it enters", () => {
  it("a negative count: the plain answer is a 200 and the record has no token count", async () => {
    const { key } = await gw.createKey()
    usage = { prompt_tokens: -5, completion_tokens: 2, total_tokens: -3 }
    const response = await chat(key, "gpt-neg")
    expect(response.status).toBe(200)
    const [record] = await auditFor(gw, response.headers.get("x-request-id")!)
    expect(record).toMatchObject({ status: 200, prompt_tokens: null, completion_tokens: 2 })
    await metrics()
  })

  it("a negative or absurd count in a stream: the stream ends with [DONE], the record is written", async () => {
    const { key } = await gw.createKey()
    usage = { prompt_tokens: 1e300, completion_tokens: -1, total_tokens: 0 }
    const response = await chat(key, "gpt-neg", { stream: true })
    expect(response.status).toBe(200)
    const text = await response.text()
    expect(text.trimEnd().endsWith("data: [DONE]")).toBe(true)
    const requestId = response.headers.get("x-request-id")!
    let record
    for (let i = 0; i < 50 && record === undefined; i++) {
      ;[record] = await auditFor(gw, requestId)
      if (record === undefined) await new Promise((r) => setTimeout(r, 50))
    }
    expect(record).toMatchObject({ status: 200, error: null, prompt_tokens: null, completion_tokens: null })
    await metrics()
  })
})

describe("count_tokens is not consumption", () => {
  it("the estimate is in the record's details, not in prompt_tokens or modelgate_tokens_total", async () => {
    const before = await metrics()
    const { key } = await gw.createKey()
    const response = await fetch(`${gw.url}/v1/messages/count_tokens`, {
      method: "POST",
      headers: { "x-api-key": key, "content-type": "application/json", "anthropic-version": "2023-06-01" },
      body: JSON.stringify({ model: "echo", messages: [{ role: "user", content: "word ".repeat(50_000) }] })
    })
    expect(response.status).toBe(200)
    const { input_tokens } = (await response.json()) as { input_tokens: number }
    expect(input_tokens).toBeGreaterThan(40_000)
    const [record] = await auditFor(gw, response.headers.get("x-request-id")!)
    expect(record).toMatchObject({ prompt_tokens: null, details: { operation: "count_tokens", input_tokens, estimated: true } })
    const promptLine = (text: string) => text.split("\n").find((line) => line.startsWith('modelgate_tokens_total{model="echo-1",provider="echo",direction="prompt"}'))
    expect(promptLine(await metrics())).toBe(promptLine(before))
  })
})
