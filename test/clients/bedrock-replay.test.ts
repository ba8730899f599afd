/**
 * What Claude Code (on /v1/messages, count_tokens included) and Codex CLI (on /v1/responses)
 * were captured sending (test/fixtures/clients), replayed through the gateway to a Bedrock-kind
 * model on the fake Bedrock, which verifies each request's SigV4 signature and refuses what
 * Converse refuses (turns that do not alternate, tool results without their tool use, a tool
 * history without toolConfig, more than 4 cache points...). Every request must be answered 200
 * with a complete answer in the client's format; the tool scenarios carry a tool call and its
 * result turn in their history.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { listFixtures, loadFixture, modelRequests, replayInit, replayUrl } from "../support/client-fixtures.ts"
import { type FakeBedrock, startFakeBedrock } from "../support/fake-bedrock.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

const REGION = "us-east-1"
const KEY_ID = "AKIAREPLAYBEDROCK001"
const SECRET = "replay/secret+0123456789abcdefghijklmnop"

let fake: FakeBedrock
let gateway: TestGateway
let key: string

beforeAll(async () => {
  fake = await startFakeBedrock({ region: REGION, accessKeyId: KEY_ID, secretAccessKey: SECRET })
  gateway = await startGateway(testConfig({
    workspace: { credits: 1_000_000 },
    limits: { requests_per_minute: 100_000, concurrent_streams: 100 },
    providers: [{ name: "bedrock", kind: "bedrock", region: REGION, base_url: fake.url, access_key_id: KEY_ID, secret_access_key: SECRET }],
    models: [{ alias: "claude-bedrock", id: "us.anthropic.claude-sonnet-4-5-20250929-v1:0", provider: "bedrock", max_tokens: 64_000 }]
  }))
  key = (await gateway.createKey()).key
})

afterAll(async () => {
  await gateway?.close()
  await fake?.close()
})

describe.each(listFixtures().filter((f) => f.client === "claude-code" || f.client === "codex"))("$set $scenario", ({ client, set, scenario }) => {
  it("is answered 200 through a Bedrock-kind provider, every request signed and accepted", async () => {
    fake.reset()
    const requests = modelRequests(loadFixture(set, scenario, { apiKey: key, model: "claude-bedrock" }))
    expect(requests.length).toBeGreaterThan(0)
    for (const request of requests) {
      const response = await fetch(replayUrl(gateway.url, request), replayInit(request))
      const text = await response.text()
      expect(response.status, `${request.path}: ${text.slice(0, 600)}`).toBe(200)
      if (request.path.endsWith("/count_tokens")) {
        expect(JSON.parse(text).input_tokens).toBeGreaterThan(0)
      } else if (request.body.stream === true) {
        expect(text).not.toMatch(/event: error|"error":"/)
        expect(text).toMatch(client === "codex" ? /event: response\.completed\ndata: / : /event: message_stop/)
      }
    }
    // Every call reached Bedrock (a refusal by the fake would have been a 4xx above).
    expect(fake.requests.length).toBeGreaterThan(0)
  })
})
