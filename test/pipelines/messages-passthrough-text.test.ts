/**
 * A Messages stream to an Anthropic-kind provider is relayed as the provider wrote each event
 * (issue 38): the gateway parses an event to read it (usage, errors, message_stop) but forwards
 * its text, not the parsed object serialised again. The upstream here writes JSON the way no
 * `JSON.stringify` would (spaces, a key order of its own, a number past 2^53, a float with a
 * trailing zero); the client gets those bytes. Merged `message_delta` events are the exception:
 * two deltas become one new event, serialised by the gateway.
 */
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

const KEY = "sk-ant-fake-0123456789abcdef"

const START = `{"type": "message_start", "message": {"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-x", "content": [], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 3, "output_tokens": 1}}}`
const DELTA_TEXT = `{"type":"content_block_delta","index":0,"delta":{"text":"hi","type":"text_delta"},"trace":9007199254740993,"score":1.50}`
const frames = (deltas: ReadonlyArray<string>) => [
  `event: message_start\ndata: ${START}\n\n`,
  `event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n`,
  `event: content_block_delta\ndata: ${DELTA_TEXT}\n\n`,
  `event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n`,
  ...deltas.map((delta) => `event: message_delta\ndata: ${delta}\n\n`),
  `event: message_stop\ndata: {"type": "message_stop"}\n\n`
]
const ONE_DELTA = `{"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 2}}`
const SECOND_DELTA = `{"type": "message_delta", "delta": {"stop_reason": null}, "usage": {"output_tokens": 5}}`

let upstream: Server
let gateway: TestGateway
let key: string

beforeAll(async () => {
  upstream = createServer((req, res) => {
    req.resume()
    req.on("end", () => {
      res.writeHead(200, { "content-type": "text/event-stream" })
      for (const frame of frames(req.url?.includes("two") ? [ONE_DELTA, SECOND_DELTA] : [ONE_DELTA])) res.write(frame)
      res.end()
    })
  })
  await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve))
  const base = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`
  gateway = await startGateway(testConfig({
    providers: [
      { name: "one", kind: "anthropic", base_url: base, api_key: KEY },
      { name: "two", kind: "anthropic", base_url: `${base}/two`, api_key: KEY }
    ],
    models: [{ alias: "claude", id: "claude-x", provider: "one" }, { alias: "claude-two", id: "claude-y", provider: "two" }]
  }))
  key = (await gateway.createKey()).key
})

afterAll(async () => {
  await gateway?.close()
  await new Promise((resolve) => upstream?.close(resolve))
})

const streamed = async (model: string) => {
  const response = await fetch(`${gateway.url}/v1/messages`, {
    method: "POST",
    headers: { "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json" },
    body: JSON.stringify({ model, max_tokens: 64, stream: true, messages: [{ role: "user", content: "hi" }] })
  })
  expect(response.status).toBe(200)
  const text = await response.text()
  return [...text.matchAll(/^data: (.*)$/gm)].map((m) => m[1]!)
}

describe("Messages passthrough stream", () => {
  it("relays each event's text as the provider wrote it", async () => {
    const data = await streamed("claude")
    expect(data).toContain(START)
    expect(data).toContain(DELTA_TEXT)
    expect(data).toContain(ONE_DELTA)
    expect(data.at(-1)).toBe(`{"type": "message_stop"}`)
  })

  it("sends merged message_delta events once, as one event of its own", async () => {
    const data = await streamed("claude-two")
    const deltas = data.filter((d) => d.includes("message_delta"))
    expect(deltas).toHaveLength(1)
    expect(JSON.parse(deltas[0]!)).toMatchObject({ type: "message_delta", delta: { stop_reason: "end_turn" }, usage: { output_tokens: 5 } })
    expect(data).toContain(DELTA_TEXT)
  })
})
