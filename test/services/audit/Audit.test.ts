import { Effect, Layer, Logger } from "effect"
import { classifySqliteError, SqlError } from "effect/sql/SqlError"
import { describe, expect, it } from "@effect/vitest"
import { TestClock } from "effect/testing"
import type { AuditRecord } from "../../../src/domain/records.ts"
import { Audit } from "../../../src/services/audit/Audit.ts"
import { AuditRepo } from "../../../src/services/store/AuditRepo.ts"
import { StoreError } from "../../../src/services/store/StoreError.ts"
import { StoreLayer } from "../../../src/services/store/StoreLayer.ts"

const record = (n: number): AuditRecord => ({
  request_id: `req_${n}`, ts: new Date().toISOString(), method: "POST", endpoint: "/v1/chat/completions", status: 200, error: null,
  duration_ms: 1, client_addr: null, key_id: null, model: null, provider: null, tool: null, connection_id: null, credits: 0,
  prompt_tokens: null, completion_tokens: null, stream: false, details: null
})

/** A store that refuses audit writes, as one does during an outage. */
const refusingStore = Layer.effect(
  AuditRepo,
  Effect.map(AuditRepo, (store) =>
    AuditRepo.of({
      ...store,
      appendAudit: () => Effect.fail(StoreError.from("AuditRepo.appendAudit", new SqlError({ reason: classifySqliteError(new Error("down"), { message: "down", operation: "appendAudit" }) })))
    }))
).pipe(Layer.provide(StoreLayer.memory))

describe("Audit", () => {
  it("counts and logs the records it drops when the buffer is full, at most once per interval", async () => {
    const logs: Array<string> = []
    const logger = Logger.layer([Logger.make(({ message }) => void logs.push(String(message)))])
    const dropped = await Effect.runPromise(
      Effect.gen(function*() {
        const audit = yield* Audit
        for (let n = 0; n < 8; n++) audit.append(record(n))
        // The drop is logged by a fiber of its own: wait for its line (a state), not for a clock.
        while (!logs.some((line) => line.includes("audit buffer full"))) yield* Effect.sleep("5 millis")
        return audit.dropped()
      }).pipe(
        Effect.provide(Audit.makeLayer({ flushInterval: "1 hour", batchSize: 1000, maxBuffered: 3 }).pipe(Layer.provide(refusingStore))),
        Effect.provide(logger),
        Effect.scoped
      )
    )
    expect(dropped).toBe(5)
    const dropLines = logs.filter((line) => line.includes("audit buffer full"))
    expect(dropLines).toHaveLength(1)
    expect(dropLines[0]).toContain("dropped 1 oldest records")
  })

  // On the TestClock: an outage of exactly 1.5 s and the flush timer of exactly 10 ms, however
  // loaded the machine (a real sleep counted fewer attempts the slower the machine ran).
  it.effect("retries a refused batch with backoff, logging once when the outage starts and once when it ends", () => {
    const logs: Array<string> = []
    const logger = Logger.layer([Logger.make(({ message }) => void logs.push(String(message)))])
    let attempts = 0
    let down = true
    const flakyStore = Layer.effect(
      AuditRepo,
      Effect.map(AuditRepo, (store) =>
        AuditRepo.of({
          ...store,
          appendAudit: (records) =>
            Effect.suspend(() => {
              attempts++
              return down
                ? Effect.fail(StoreError.from("AuditRepo.appendAudit", new SqlError({ reason: classifySqliteError(new Error("down"), { message: "down", operation: "appendAudit" }) })))
                : store.appendAudit(records)
            })
        }))
    ).pipe(Layer.provideMerge(StoreLayer.memory))
    return Effect.gen(function*() {
      const audit = yield* Audit
      for (let n = 0; n < 5; n++) audit.append(record(n))
      yield* TestClock.adjust("1500 millis")
      const attemptsWhileDown = attempts
      // Without backoff a 10 ms flush interval makes ~150 attempts in 1.5 s; with it (delays of
      // 50-100, 100-200, 200-400, 400-800 ms...), at most 6.
      expect(attemptsWhileDown).toBeGreaterThan(2)
      expect(attemptsWhileDown).toBeLessThan(15)
      expect(audit.buffered()).toBe(5)
      down = false
      // The next retry is at most one capped backoff away (10 s).
      yield* TestClock.adjust("10 seconds")
      const store = yield* AuditRepo
      expect((yield* store.queryAudit({ limit: 100 })).items.map((r) => r.request_id).sort()).toEqual(["req_0", "req_1", "req_2", "req_3", "req_4"])
      expect(audit.buffered()).toBe(0)
      expect(logs.filter((line) => line.includes("cannot be written"))).toHaveLength(1)
      expect(logs.filter((line) => line.includes("written again"))).toHaveLength(1)
    }).pipe(
      Effect.provide(Audit.makeLayer({ flushInterval: "10 millis", batchSize: 1000 }).pipe(Layer.provideMerge(flakyStore))),
      Effect.provide(logger)
    )
  })
})
