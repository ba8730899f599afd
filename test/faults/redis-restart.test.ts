/**
 * Stream slots survive a Redis restart without persistence (issue 13, decisions section 10): the
 * gateway's own Redis is killed and started again empty while a key holds its cap of open
 * streams. The holders put their slots back as soon as the connection is ready again (and at the
 * latest at their next heartbeat, lease/3), so the cap holds: further streams are refused with
 * 429 concurrent_streams. The lease here is long (a 10 s renewal), so only the re-add on
 * reconnect can pass the test.
 */
import { Effect } from "effect"
import { createClient } from "redis"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { scriptedProviders } from "../../src/services/providers/scripted.ts"
import { STREAM_KEY_PREFIX } from "../../src/services/limits/StreamSlots.ts"
import type { ChatChunk, ChatResponse } from "../../src/wire/openai-chat.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { canRunRedis, startRedis, type Throwaway } from "../support/throwaway.ts"
import { chat, expectOpen, type OpenStream, openStream, waitFor } from "../limits/support.ts"
import { chatCompletion } from "../support/chat-answers.ts"

const CAP = 3
const LEASE_SECONDS = 30

const chunk = (content: string): ChatChunk =>
  ({ id: "chatcmpl-r", object: "chat.completion.chunk", created: 1, model: "up", choices: [{ index: 0, delta: { content }, logprobs: null, finish_reason: null }] }) as ChatChunk

const completion = chatCompletion("ok", { id: "chatcmpl-r", usage: [1, 1] })

let redis: Throwaway
let gw: TestGateway

beforeAll(async () => {
  redis = await startRedis()
  const scripted = scriptedProviders([{ name: "up", kind: "openai" }], {
    openai: (call) => call.stream ? { events: [{ event: chunk("hello") }, { delay: "60 seconds" }] } : { respond: completion }
  })
  gw = await startGateway(
    testConfig({
      redis: redis.url,
      workspace: { credits: 1000 },
      limits: { concurrent_streams: CAP, stream_lease_seconds: LEASE_SECONDS, requests_per_minute: 1000 },
      providers: [{ name: "up", kind: "openai", base_url: "http://scripted.invalid/v1" }],
      models: [{ alias: "paid", id: "up-model", provider: "up", credits: 1, max_tokens: 100 }]
    }),
    { providers: scripted.layer }
  )
}, 30_000)

afterAll(async () => {
  await gw?.close()
  await redis?.destroy()
})

describe.skipIf(!canRunRedis)("a Redis restart without persistence", () => {
  it("keeps the stream cap: the holders' heartbeats repopulate the slots within one renewal", async () => {
    const { key, id } = await gw.createKey()
    const held: Array<OpenStream> = []
    for (let i = 0; i < CAP; i++) held.push(expectOpen(await openStream(gw.url, key, { model: "paid" })))
    const refusedBefore = await chat(gw.url, key, { model: "paid", stream: true })
    expect(refusedBefore.status).toBe(429)
    expect(refusedBefore.body.details).toMatchObject({ limit: "concurrent_streams" })

    await redis.kill()
    await redis.start()
    // The client reconnects, and each holder re-adds its slot at once.
    await waitFor("Redis serving the gateway again", async () => (await chat(gw.url, key, { model: "paid" })).status === 200)
    // Every holder put its slot back: read in the restarted Redis (a state), not given a fixed time.
    const inspector = createClient({ url: redis.url })
    await inspector.connect()
    try {
      await waitFor("the held slots back in Redis", async () => (await inspector.zCard(`${STREAM_KEY_PREFIX}${id}`)) === CAP, 10_000)
    } finally {
      await inspector.quit()
    }

    const answered: Array<string> = [refusedBefore.requestId]
    for (let i = 0; i < 3; i++) {
      const reply = await chat(gw.url, key, { model: "paid", stream: true })
      expect(reply.status, reply.text).toBe(429)
      expect(reply.body.details).toMatchObject({ limit: "concurrent_streams" })
      answered.push(reply.requestId)
    }

    // A slot frees when its stream ends, as before the restart.
    held.pop()!.abandon()
    await waitFor("a slot to free", async () => {
      const reply = await openStream(gw.url, key, { model: "paid" })
      if (reply.status !== 200) return false
      expectOpen(reply).abandon()
      return true
    }, 3000)
    for (const stream of held) stream.abandon()

    // The books: the ledger sums to the balance, and every refusal was recorded once.
    await Effect.runPromise(gw.audit.flush)
    const ledger = await Effect.runPromise(gw.store.credits.ledger({ limit: 10_000 }))
    const balance = (await Effect.runPromise(gw.store.credits.getWorkspace)).credits
    expect(ledger.reduce((sum, e) => sum + e.amount, 0)).toBe(balance)
    const records = (await Effect.runPromise(gw.store.audit.queryAudit({ limit: 10_000 }))).items
    for (const id of answered) expect(records.filter((r) => r.request_id === id && r.status === 429)).toHaveLength(1)
  }, 30_000)
})
