/**
 * Refunds and settlements survive a store outage (issue 13, decisions section 10): paid requests
 * are in flight when the gateway's own Postgres is killed (or frozen), then end, half of them
 * with a provider failure that owes a refund. Nothing can reach the store at that moment; the
 * movements wait in the outbox and land once Postgres is back. Afterwards the ledger sums to the
 * balance, exactly the successful requests stay charged, no reservation is left open, and there
 * is one audit record per answered request whose credits agree with the ledger.
 */
import { Effect } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { ProviderError } from "../../src/domain/errors.ts"
import type { AuditRecord } from "../../src/domain/records.ts"
import { scriptedProviders } from "../../src/services/providers/scripted.ts"
import type { ChatResponse } from "../../src/wire/openai-chat.ts"
import { startGateway, testConfig, type TestGateway } from "../support/gateway.ts"
import { canRunPostgres, startPostgres, type Throwaway } from "../support/throwaway.ts"
import { chat, waitFor } from "../limits/support.ts"
import { chatCompletion } from "../support/chat-answers.ts"

const POOL = 1000
const PRICE = 5

const completion = chatCompletion("ok", { id: "chatcmpl-f", usage: [1, 1] })
const upstreamDown = new ProviderError({ message: "provider \"up\" answered 500", details: { provider: "up", upstream_status: 500 } })

let pg: Throwaway
let gw: TestGateway
let calls: ReturnType<typeof scriptedProviders>["calls"]

beforeAll(async () => {
  pg = await startPostgres()
  // The script answers after a pause long enough for the test to take the store away meanwhile;
  // a request whose last message says "fail" gets a provider failure (a refund is owed).
  const scripted = scriptedProviders([{ name: "up", kind: "openai" }], {
    openai: (call) => {
      const messages = call.body.messages as Array<{ content: string }>
      const pause = messages[0]!.content.startsWith("slow") ? "1500 millis" : "1 millis"
      return messages.at(-1)!.content.endsWith("fail") ? { fail: upstreamDown, delay: pause } : { respond: completion, delay: pause }
    }
  })
  calls = scripted.calls
  gw = await startGateway(
    testConfig({
      store: pg.url,
      workspace: { credits: POOL },
      providers: [{ name: "up", kind: "openai", base_url: "http://scripted.invalid/v1" }],
      models: [{ alias: "paid", id: "up-model", provider: "up", credits: PRICE, max_tokens: 100 }]
    }),
    { providers: scripted.layer }
  )
}, 60_000)

afterAll(async () => {
  await gw?.close()
  await pg?.destroy()
})

const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromise(effect)

/** The books once the store answers again: ledger = balance, open reservations, audit records of `ids`. */
const books = async (ids: ReadonlyArray<string>) => {
  const ledger = await run(gw.store.credits.ledger({ limit: 100_000 }))
  const balance = (await run(gw.store.credits.getWorkspace)).credits
  await run(gw.audit.flush)
  const audit = (await run(gw.store.audit.queryAudit({ limit: 100_000 }))).items as ReadonlyArray<AuditRecord>
  const ours = audit.filter((r) => ids.includes(r.request_id))
  return { ledgerSum: ledger.reduce((sum, e) => sum + e.amount, 0), balance, ours, ledger }
}

describe.skipIf(!canRunPostgres)("credit movements through a store outage", () => {
  for (const fault of ["killed", "frozen"] as const) {
    it(`settles and refunds every in-flight request once Postgres is back (${fault})`, async () => {
      const { key } = await gw.createKey()
      expect((await chat(gw.url, key, { model: "paid", messages: [{ role: "user", content: "warm" }] })).status).toBe(200)
      const before = (await run(gw.store.credits.getWorkspace)).credits

      const called = calls.length
      const inFlight = Array.from({ length: 20 }, (_, i) =>
        chat(gw.url, key, { model: "paid", messages: [{ role: "user", content: `slow ${i} ${i % 2 === 0 ? "fail" : "ok"}` }] }))
      // All admitted (charged) before the store goes.
      await waitFor("all 20 charged and at the provider", () => calls.length === called + 20)
      if (fault === "killed") await pg.kill()
      else pg.freeze()
      const replies = await Promise.all(inFlight)
      expect(replies.filter((r) => r.status === 502)).toHaveLength(10)
      expect(replies.filter((r) => r.status === 200)).toHaveLength(10)
      // Nothing could be written: every movement waits in the outbox.
      expect(gw.credits.pending()).toBe(20)
      if (fault === "killed") {
        // One store-failure policy: every route that needs the store says so, the admin API included.
        const paid = await chat(gw.url, key, { model: "paid", messages: [{ role: "user", content: "during" }] })
        expect([paid.status, paid.body?.error]).toEqual([503, "dependency_unavailable"])
        for (const [method, path] of [["GET", "/api-keys"], ["GET", "/workspace"], ["GET", "/workspace/ledger"], ["GET", "/audit"], ["GET", "/usage"], ["POST", "/api-keys"]] as const) {
          const reply = await gw.admin(method, path, method === "POST" ? { name: "during the outage" } : undefined)
          const body = await reply.json() as { error: string; details?: { dependency?: string } }
          expect([path, reply.status, body.error, body.details?.dependency]).toEqual([path, 503, "dependency_unavailable", "store"])
        }
      }

      if (fault === "killed") await pg.start()
      else pg.thaw()
      await waitFor("the outbox to drain", () => gw.credits.pending() === 0, 20_000)

      const ids = replies.map((r) => r.requestId)
      const { ledgerSum, balance, ours, ledger } = await books(ids)
      expect(ledgerSum).toBe(balance)
      // The store holds micro-credits (issue 33).
      expect(balance).toBe(before - 10 * PRICE * 1_000_000)
      expect(ledger.filter((e) => e.kind === "refund" && ids.includes(e.request_id!))).toHaveLength(10)
      // One record per answered request, and /usage (the audit's credits) agrees with the ledger.
      expect(ours).toHaveLength(20)
      expect(ours.reduce((sum, r) => sum + r.credits, 0)).toBe(10 * PRICE * 1_000_000)
      expect(await run(gw.store.credits.orphanedReservations("nobody", 100, 3_600_000))).toEqual([])
    }, 45_000)
  }
})
