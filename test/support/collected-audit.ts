/**
 * A collecting audit layer for gateways built with test layers, with a wait on a request's
 * record. The record is the request scope's last finalizer (written when the answer was sent or
 * the stream ended, however it ended, after the slot went back and any refund was made), so a
 * test that has its record can assert on the slot and the ledger at once. Waiting is an event
 * on `append`, not a poll.
 */
import { Effect, Layer } from "effect"
import type { AuditRecord } from "../../src/domain/records.ts"
import { Audit } from "../../src/services/audit/Audit.ts"

export const collectedAudit = () => {
  const records: Array<AuditRecord> = []
  const waiters = new Set<() => void>()
  const layer = Layer.succeed(
    Audit,
    Audit.of({
      append: (record) => {
        records.push(record)
        for (const wake of [...waiters]) wake()
      },
      flush: Effect.void,
      dropped: () => 0,
      buffered: () => 0
    })
  )
  /** The records of one request, once there is at least one (within `ms`, else the test fails naming the request). */
  const recordsOf = (requestId: string | null, ms = 2000) =>
    new Promise<Array<AuditRecord>>((resolve, reject) => {
      const found = () => records.filter((r) => r.request_id === requestId)
      const check = () => {
        const now = found()
        if (now.length === 0) return
        clearTimeout(timer)
        waiters.delete(check)
        resolve(now)
      }
      const timer = setTimeout(() => {
        waiters.delete(check)
        reject(new Error(`no audit record of ${requestId} within ${ms} ms`))
      }, ms)
      waiters.add(check)
      check()
    })
  /** The one record of a request (the test fails if there are more). */
  const recordOf = async (requestId: string | null, ms?: number) => {
    const found = await recordsOf(requestId, ms)
    if (found.length !== 1) throw new Error(`${found.length} audit records of ${requestId}, expected one`)
    return found[0]!
  }
  /** The next record appended from now on, whatever its request: for a client that never saw its request id. */
  const next = (ms = 2000) =>
    new Promise<AuditRecord>((resolve, reject) => {
      const from = records.length
      const check = () => {
        if (records.length <= from) return
        clearTimeout(timer)
        waiters.delete(check)
        resolve(records[from]!)
      }
      const timer = setTimeout(() => {
        waiters.delete(check)
        reject(new Error(`no audit record within ${ms} ms`))
      }, ms)
      waiters.add(check)
    })
  return { layer, records, recordsOf, recordOf, next }
}
