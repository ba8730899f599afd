import { Effect, Layer, Logger } from "effect"
import { classifySqliteError, SqlError } from "effect/sql/SqlError"
import { describe, expect, it } from "vitest"
import type { AuditRecord } from "../../../src/domain/records.ts"
import { Audit } from "../../../src/services/audit/Audit.ts"
import { Store } from "../../../src/services/store/Store.ts"

const record = (n: number): AuditRecord => ({
  request_id: `req_${n}`, ts: new Date().toISOString(), method: "POST", endpoint: "/v1/chat/completions", status: 200, error: null,
  duration_ms: 1, client_addr: null, key_id: null, model: null, provider: null, tool: null, connection_id: null, credits: 0,
  prompt_tokens: null, completion_tokens: null, stream: false, details: null
})

/** A store that refuses audit writes, as one does during an outage. */
const refusingStore = Layer.effect(
  Store,
  Effect.map(Store, (store) =>
    Store.of({
      ...store,
      appendAudit: () => Effect.fail(new SqlError({ reason: classifySqliteError(new Error("down"), { message: "down", operation: "appendAudit" }) }))
    }))
).pipe(Layer.provide(Store.layerMemory))

describe("Audit", () => {
  it("counts and logs the records it drops when the buffer is full, at most once per interval", async () => {
    const logs: Array<string> = []
    const logger = Logger.layer([Logger.make(({ message }) => void logs.push(String(message)))])
    const dropped = await Effect.runPromise(
      Effect.gen(function*() {
        const audit = yield* Audit
        for (let n = 0; n < 8; n++) audit.append(record(n))
        yield* Effect.sleep("20 millis")
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
})
