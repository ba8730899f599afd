/**
 * Unauthenticated noise in the audit trail (issue 22): probes (`/healthz`, `/readyz`,
 * `/metrics`) and requests refused before any credential was accepted (401, 404, 405) write
 * at most NOISE_PER_WINDOW records per minute per replica; beyond that they are counted, and the
 * first such record written in a later window says how many were left out
 * (`details.unrecorded_before`). Metrics and the request log still see every request. Without
 * this, anyone could make the store write one row per request, as fast as they can send them.
 */
import type { AuditRecord } from "../domain/records.ts"

export const NOISE_PER_WINDOW = 600
const WINDOW_MS = 60_000
const PROBES = new Set(["/healthz", "/readyz", "/metrics"])
const REFUSALS = new Set([401, 404, 405])

export const isNoise = (record: AuditRecord) =>
  record.key_id === null && (PROBES.has(record.endpoint) || REFUSALS.has(record.status))

/** Decides, record by record, what reaches the audit trail. */
export const makeNoiseSampler = (perWindow = NOISE_PER_WINDOW, windowMs = WINDOW_MS) => {
  let windowStart = -Infinity
  let written = 0
  let unrecorded = 0
  return (record: AuditRecord, now: number): AuditRecord | undefined => {
    if (!isNoise(record)) return record
    if (now - windowStart >= windowMs) {
      windowStart = now
      written = 0
    }
    if (written >= perWindow) {
      unrecorded++
      return undefined
    }
    written++
    if (unrecorded === 0) return record
    const noted = { ...record, details: { ...record.details, unrecorded_before: unrecorded } }
    unrecorded = 0
    return noted
  }
}
