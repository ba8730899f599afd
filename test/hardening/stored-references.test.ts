/**
 * Stored text a Responses request brings in is bounded as one budget (issue 32 item 1):
 * `item_reference`s count every time they appear, and the `previous_response_id` chain gets what
 * they left, both under `responses.max_conversation_bytes`. Before, one 42 KB request with 1,000
 * references to one stored 900 KB item stalled the event loop for seconds and took RSS to 1 GB.
 * Here the budget is 1 MB and an item about 100 KB, so the arithmetic is the subject, not the size.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"

const BUDGET = 1_000_000
let gateway: TestGateway
let key: string

beforeAll(async () => {
  gateway = await startGateway(testConfig({
    limits: { requests_per_minute: 100_000 },
    responses: { max_conversation_bytes: BUDGET }
  }))
  key = (await gateway.createKey()).key
})

afterAll(() => gateway.close())

const respond = async (body: Record<string, unknown>) => {
  const response = await fetch(`${gateway.url}/v1/responses`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "echo", ...body })
  })
  return { status: response.status, body: await response.json() as Record<string, any> }
}

/** A stored response whose input item holds about `bytes` of text; answers the response and the item's id. */
const storeLarge = async (bytes: number) => {
  const { status, body } = await respond({ input: [{ type: "message", role: "user", content: [{ type: "input_text", text: "x".repeat(bytes) }] }] })
  expect(status).toBe(200)
  const items = await (await fetch(`${gateway.url}/v1/responses/${body.id}/input_items`, { headers: { authorization: `Bearer ${key}` } })).json() as { data: Array<{ id: string }> }
  return { response: body.id as string, item: items.data[0]!.id }
}

describe("item references and conversations share one byte budget", () => {
  it("refuses a request whose references repeat one stored item past the budget, by name, and serves one within it", async () => {
    const { item } = await storeLarge(100_000)
    const refs = (n: number) => [...Array.from({ length: n }, () => ({ type: "item_reference", id: item })), { role: "user", content: "and?" }]

    const refused = await respond({ input: refs(12) })
    expect(refused.status).toBe(400)
    expect(refused.body).toMatchObject({ error: "validation_failed", details: { field: "input.9", max_bytes: BUDGET } })
    expect(refused.body.message).toContain("responses.max_conversation_bytes")

    // A thousand of them are refused as quickly (counted from the stored lengths, nothing parsed).
    const many = await respond({ input: refs(1000) })
    expect(many.status).toBe(400)

    const served = await respond({ input: refs(8) })
    expect(served.status).toBe(200)
  })

  it("gives the previous_response_id chain what the references left", async () => {
    // The echo model answers with the input: ~200 KB in, ~200 KB out, ~400 KB of stored chain.
    const first = await storeLarge(200_000)
    const second = await respond({ input: "more", previous_response_id: first.response })
    expect(second.status).toBe(200)
    const { item } = await storeLarge(100_000)
    const refs = (n: number) => [...Array.from({ length: n }, () => ({ type: "item_reference", id: item })), { role: "user", content: "and?" }]

    // ~400 KB of chain + 8 x ~100 KB of references: over the budget together, each under it alone.
    const refused = await respond({ input: refs(8), previous_response_id: second.body.id })
    expect(refused.status).toBe(400)
    expect(refused.body).toMatchObject({ error: "validation_failed", details: { field: "previous_response_id", max_bytes: BUDGET } })

    expect((await respond({ input: refs(4), previous_response_id: second.body.id })).status).toBe(200)
  })
})
