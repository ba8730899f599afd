/**
 * An upstream whose stream ends cleanly but early: the HTTP response completes, yet the vendor's
 * own end marker never came (no `data: [DONE]` and no finish_reason from an OpenAI-compatible
 * server, no `message_stop` from an Anthropic one). Proxies that end responses on their own
 * timeout do this. The answer is truncated, so every client format must get the in-band error
 * envelope, never a stream that looks complete. The fakes only break streams by resetting the
 * socket, so this file has its own small upstream that ends the body politely.
 */
import Anthropic from "@anthropic-ai/sdk"
import OpenAI from "openai"
import { Effect } from "effect"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { JsonBody } from "../support/fake-common.ts"
import { awaitAuditOf, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { anthropicFor, openaiFor } from "../support/sdk-clients.ts"

const chunk = (delta: JsonBody) => {
  const choices = [{ index: 0, delta, logprobs: null, finish_reason: null }]
  return `data: ${JSON.stringify({ id: "chatcmpl-cut", object: "chat.completion.chunk", created: 1, model: "cut-gpt", choices })}\n\n`
}

const event = (type: string, data: JsonBody) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`

/** The first words of an answer in each vendor's framing, then the end of the body. */
const TRUNCATED: Record<string, string> = {
  "/v1/chat/completions": chunk({ role: "assistant", content: "" }) + chunk({ content: "The answer" }) + chunk({ content: " is" }),
  "/v1/messages": event("message_start", {
    message: {
      id: "msg_cut",
      type: "message",
      role: "assistant",
      model: "cut-claude",
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: { input_tokens: 5, output_tokens: 1 }
    }
  }) +
    event("content_block_start", { index: 0, content_block: { type: "text", text: "" } }) +
    event("content_block_delta", { index: 0, delta: { type: "text_delta", text: "The answer" } }) +
    event("content_block_delta", { index: 0, delta: { type: "text_delta", text: " is" } })
}

let upstream: Server
let gw: TestGateway
let key: string
let keyId: string

beforeAll(async () => {
  upstream = createServer((req, res) => {
    req.resume()
    req.on("end", () => {
      res.writeHead(200, { "content-type": "text/event-stream" })
      res.end(TRUNCATED[req.url ?? ""] ?? "")
    })
  })
  await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve))
  const origin = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`
  gw = await startGateway(testConfig({
    workspace: { credits: 1_000_000 },
    limits: { requests_per_minute: 100_000, concurrent_streams: 100 },
    providers: [
      { name: "cut-openai", kind: "openai", base_url: `${origin}/v1`, api_key: "sk-cut" },
      { name: "cut-anthropic", kind: "anthropic", base_url: origin, api_key: "sk-cut" }
    ],
    models: [
      { alias: "gpt", id: "cut-gpt", provider: "cut-openai" },
      { alias: "claude", id: "cut-claude", provider: "cut-anthropic" }
    ]
  }))
  ;({ key, id: keyId } = await gw.createKey())
})

afterAll(async () => {
  await gw?.close()
  await new Promise((resolve) => upstream?.close(resolve))
})

/** A stream's audit record is written as it ends, which may be just after the client read the last byte. */
const auditOf = async (requestId: string) => (await awaitAuditOf(gw, requestId, keyId))[0]

const PAIRS = [
  { client: "openai", path: "/v1/chat/completions", label: "openai SDK on /v1/chat/completions" },
  { client: "anthropic", path: "/v1/messages", label: "@anthropic-ai/sdk on /v1/messages" }
].flatMap((c) => [
  { ...c, provider: "cut-openai", alias: "gpt" },
  { ...c, provider: "cut-anthropic", alias: "claude" }
])

describe("a stream the upstream ended early", () => {
  it.each(PAIRS)("$label <- $provider: the in-band envelope instead of a complete-looking answer", async ({ client, path, provider, alias }) => {
    const body = client === "openai"
      ? { model: alias, stream: true, messages: [{ role: "user", content: "What is the answer?" }] }
      : { model: alias, stream: true, max_tokens: 50, messages: [{ role: "user", content: "What is the answer?" }] }
    const response = await fetch(gw.url + path, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
      body: JSON.stringify(body)
    })
    expect(response.status).toBe(200)
    const frames = (await response.text()).split("\n\n").filter((frame) => frame !== "")
    const requestId = response.headers.get("x-request-id")
    const envelope = {
      status: 502,
      error: "provider_error",
      message: expect.stringContaining("ended the stream"),
      request_id: requestId,
      details: expect.objectContaining({ provider })
    }
    if (client === "openai") {
      expect(frames.at(-1)).toBe("data: [DONE]")
      expect(JSON.parse(frames.at(-2)!.slice("data: ".length))).toEqual(envelope)
      // No chunk pretends the answer finished.
      expect(frames.join("\n")).not.toMatch(/"finish_reason":"[a-z_]+"/)
    } else {
      const last = frames.at(-1)!
      expect(last.startsWith("event: error\ndata: ")).toBe(true)
      expect(JSON.parse(last.slice("event: error\ndata: ".length))).toEqual({ type: "error", ...envelope })
      expect(frames.some((frame) => frame.startsWith("event: message_delta") || frame.startsWith("event: message_stop"))).toBe(false)
    }

    expect(await auditOf(requestId!)).toMatchObject({ status: 200, error: "provider_error", stream: true })
  })

  it.each(PAIRS)("$label <- $provider: the SDK's stream helper rejects", async ({ client, alias }) => {
    if (client === "openai") {
      const sdk = openaiFor(gw.url, key)
      const outcome = await sdk.chat.completions.stream({ model: alias, messages: [{ role: "user", content: "What is the answer?" }] })
        .finalChatCompletion().then(() => "completed", (e: unknown) => e)
      expect(outcome).toBeInstanceOf(OpenAI.APIError)
    } else {
      const sdk = anthropicFor(gw.url, key)
      const outcome = await sdk.messages.stream({ model: alias, max_tokens: 50, messages: [{ role: "user", content: "What is the answer?" }] })
        .finalMessage().then(() => "completed", (e: unknown) => e)
      expect(outcome).toBeInstanceOf(Anthropic.APIError)
    }
  })
})
