/**
 * Provider streams that fail in the middle (issue 35, cases the third fault round did not cover):
 *
 * - A Bedrock error event inside a Converse stream (`throttlingException` after three frames).
 * - A Gemini model on Vertex AI whose stream is reset after two frames.
 *
 * Either way the client's stream ends with the in-band error, the charge is refunded, the
 * request has one audit record with the slug, and its stream slot is free again (a key allowed
 * one stream opens the next at once).
 */
import { Effect } from "effect"
import { mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { AuditRecord } from "../../src/domain/records.ts"
import { type FakeBedrock, startFakeBedrock } from "../support/fake-bedrock.ts"
import { type FakeVertex, startFakeVertex } from "../support/fake-vertex.ts"
import { auditFor, startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { waitFor } from "../limits/support.ts"
import { sseJson } from "../support/sse.ts"

const REGION = "eu-central-1"
const KEY_ID = "AKIAGATEWAYFAULTS0042"
const SECRET = "gateway/faults+secret/abcdefghijklmnopqrstuv"
const NOVA = "amazon.nova-pro-v1:0"
const PROJECT = "faults-project"
const LOCATION = "europe-west4"
const GEMINI = "gemini-2.5-flash"
const PRICE = 4

let bedrock: FakeBedrock
let vertex: FakeVertex
let gateway: TestGateway

beforeAll(async () => {
  ;[bedrock, vertex] = await Promise.all([
    startFakeBedrock({ region: REGION, accessKeyId: KEY_ID, secretAccessKey: SECRET, models: [NOVA] }),
    startFakeVertex({ project: PROJECT, location: LOCATION, claude: [], gemini: [GEMINI] })
  ])
  const credentials = join(mkdtempSync(join(tmpdir(), "vertex-sa-")), "sa.json")
  writeFileSync(credentials, JSON.stringify(vertex.serviceAccount))
  gateway = await startGateway(testConfig({
    workspace: { credits: 1000 },
    limits: { requests_per_minute: 100_000, concurrent_streams: 1 },
    providers: [
      { name: "up-bedrock", kind: "bedrock", region: REGION, base_url: bedrock.url, access_key_id: KEY_ID, secret_access_key: SECRET },
      { name: "up-vertex", kind: "vertex", base_url: vertex.url, project: PROJECT, location: LOCATION, credentials_file: credentials }
    ],
    models: [
      { alias: "nova", id: NOVA, provider: "up-bedrock", credits: PRICE, max_tokens: 1000 },
      { alias: "gemini-vx", id: GEMINI, provider: "up-vertex", credits: PRICE, max_tokens: 1000 }
    ]
  }))
}, 30_000)

afterAll(async () => {
  await gateway?.close()
  await bedrock?.close()
  await vertex?.close()
})

/** In credits (the store holds micro-credits, issue 33). */
const balance = async () => (await Effect.runPromise(gateway.store.credits.getWorkspace)).credits / 1_000_000

const stream = async (key: string, model: string) => {
  const response = await fetch(`${gateway.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, stream: true, messages: [{ role: "user", content: "Tell me a long story." }] })
  })
  return { status: response.status, requestId: response.headers.get("x-request-id")!, text: await response.text() }
}

const frames = (text: string) => sseJson(text)

/** The in-band error, the refund, one record, and the slot free for the key's next stream. */
const expectFailedStream = async (key: string, model: string, result: Awaited<ReturnType<typeof stream>>, before: number) => {
  expect(result.status).toBe(200)
  const events = frames(result.text)
  expect(events.some((e) => typeof e["choices"] === "object")).toBe(true)
  const failure = events.find((e) => e["error"] !== undefined)
  expect(failure, result.text).toBeDefined()
  await waitFor("the refund", async () => (await balance()) === before)
  const records: Array<AuditRecord> = await auditFor(gateway, result.requestId)
  expect(records).toHaveLength(1)
  expect(records[0]).toMatchObject({ status: 200, credits: 0 })
  expect(records[0]!.error).not.toBeNull()
  expect(records[0]!.error).not.toBe("client_closed_request")
  // The key may hold one stream: the next one opens (and is answered whole).
  const next = await stream(key, model)
  expect(next.status).toBe(200)
  expect(frames(next.text).some((e) => e["error"] !== undefined)).toBe(false)
  expect(next.text).toContain("data: [DONE]")
  return records[0]!
}

describe("a provider stream that fails in the middle", () => {
  it("Bedrock: an error event inside the stream ends it in-band, refunded, recorded once, its slot free", async () => {
    const { key } = await gateway.createKey()
    const before = await balance()
    bedrock.enqueue({ kind: "mid_stream_error", afterChunks: 3, text: "alpha beta gamma delta epsilon", errorType: "throttlingException", message: "Too many tokens, please wait." })
    const result = await stream(key, "nova")
    const record = await expectFailedStream(key, "nova", result, before)
    expect(record.provider).toBe("up-bedrock")
  })

  it("Gemini on Vertex: a stream reset after two frames ends in-band, refunded, recorded once, its slot free", async () => {
    const { key } = await gateway.createKey()
    const before = await balance()
    vertex.gemini.enqueue({ kind: "stall_after", chunks: 2, then: "destroy" })
    const result = await stream(key, "gemini-vx")
    const record = await expectFailedStream(key, "gemini-vx", result, before)
    expect(record.provider).toBe("up-vertex")
    expect(vertex.gemini.requests[0]!.path).toContain(`/publishers/google/models/${GEMINI}:streamGenerateContent`)
  })
})
