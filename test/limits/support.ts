/**
 * Client-side helpers for the limits-and-money suite: everything goes over HTTP, the way a
 * client and an operator see the gateway, whether it runs in this process or as a child process.
 */
import { randomBytes } from "node:crypto"
import { expect } from "vitest"
import type { LedgerEntry } from "../../src/domain/records.ts"
import { ADMIN_TOKEN } from "../support/gateway.ts"

export { ADMIN_TOKEN }

export const REDIS_URL = process.env.MODELGATE_TEST_REDIS ?? "redis://127.0.0.1:6379"

export const uniqueName = (prefix: string) => `${prefix}-${Date.now().toString(36)}-${randomBytes(3).toString("hex")}`

export { sleep, waitFor, waitForValue } from "../support/wait.ts"

export interface Reply {
  readonly status: number
  readonly headers: Headers
  readonly text: string
  /** The parsed JSON body, or undefined when the body is not JSON (an SSE stream). */
  readonly body: any
  readonly requestId: string
}

const toReply = async (response: Response): Promise<Reply> => {
  const text = await response.text()
  let body: unknown
  try {
    body = JSON.parse(text)
  } catch {
    body = undefined
  }
  return { status: response.status, headers: response.headers, text, body, requestId: response.headers.get("x-request-id") ?? "" }
}

export const adminCall = async (base: string, method: string, path: string, body?: unknown): Promise<Reply> =>
  toReply(
    await fetch(base + path, {
      method,
      headers: {
        authorization: `Bearer ${ADMIN_TOKEN}`,
        ...(body === undefined ? {} : { "content-type": "application/json" })
      },
      body: body === undefined ? undefined : JSON.stringify(body)
    })
  )

/** A fresh key through the admin API; `input` adds record fields (budget, limits, allowed_models...). */
export const newKey = async (base: string, input: Record<string, unknown> = {}) => {
  const reply = await adminCall(base, "POST", "/api-keys", { name: uniqueName("limits"), ...input })
  expect(reply.status, reply.text).toBe(201)
  return { key: reply.body.key as string, id: reply.body.id as string }
}

export const keyView = async (base: string, id: string) => {
  const reply = await adminCall(base, "GET", `/api-keys/${id}`)
  expect(reply.status, reply.text).toBe(200)
  return reply.body
}

export const userMessage = (text = "hello there") => [{ role: "user", content: text }]

export const chatRequest = (base: string, key: string, body: Record<string, unknown>, signal?: AbortSignal) =>
  fetch(`${base}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
    body: JSON.stringify({ messages: userMessage(), ...body }),
    ...(signal === undefined ? {} : { signal })
  })

/** One chat completion, read to the end (streams included). */
export const chat = async (base: string, key: string, body: Record<string, unknown>) =>
  toReply(await chatRequest(base, key, body))

/** `n` chat completions sent at once; `baseFor(i)` picks the gateway of the i-th request. */
export const burst = (n: number, baseFor: (i: number) => string, key: string, body: Record<string, unknown>) =>
  Promise.all(Array.from({ length: n }, (_, i) => chat(baseFor(i), key, body)))

/**
 * Opens `n` idle keep-alive connections to each gateway, so that a burst measures the gateway
 * rather than TCP handshakes: the rate tests need their burst to land within one refill interval.
 */
export const warmConnections = async (bases: ReadonlyArray<string>, n: number) => {
  await Promise.all(bases.flatMap((base) => Array.from({ length: n }, () => fetch(`${base}/healthz`).then((r) => r.text()))))
}

/**
 * A burst against a rate limit of `perMinute`, all sent at once: exactly `perMinute` are
 * admitted and the rest refused, provided the burst ended within one refill interval (60 s /
 * limit); a bucket refills meanwhile otherwise, and the count could not tell a refill from a
 * limiter that admits one too many. So the check is never relaxed: a burst slower than that
 * fails as a test that cannot tell, and a test picks a limit whose interval (several seconds)
 * a machine at load 10 stays well within.
 */
export const rateBurst = async (n: number, baseFor: (i: number) => string, key: string, perMinute: number) => {
  const started = performance.now()
  const replies = await burst(n, baseFor, key, { model: "free" })
  const spanMs = performance.now() - started
  const admitted = count(replies, 200)
  const intervalMs = 60_000 / perMinute
  const why = `burst of ${n} took ${Math.round(spanMs)} ms:\n${summary(replies)}`
  if (spanMs >= intervalMs) {
    throw new Error(`the burst took ${Math.round(spanMs)} ms, longer than one refill interval (${intervalMs} ms) at ${perMinute}/min: it cannot tell an exact limit from a refill; use a lower limit`)
  }
  expect(admitted, why).toBe(perMinute)
  expect(count(replies, 429), why).toBe(n - admitted)
  return { replies, admitted }
}

export const count = (replies: ReadonlyArray<Reply>, status: number) => replies.filter((r) => r.status === status).length

/** How many of each status, with one body per status: the message of a failed count assertion. */
export const summary = (replies: ReadonlyArray<Reply>) => {
  const byStatus = new Map<number, { n: number; example: string }>()
  for (const reply of replies) {
    const entry = byStatus.get(reply.status) ?? { n: 0, example: reply.text.slice(0, 300) }
    entry.n++
    byStatus.set(reply.status, entry)
  }
  return [...byStatus].map(([status, { n, example }]) => `${n} x ${status}: ${example}`).join("\n")
}

/** A streaming request whose first bytes arrived, kept open until read to the end or abandoned. */
export interface OpenStream {
  readonly status: number
  readonly headers: Headers
  readonly requestId: string
  /** Reads the rest of the stream. */
  readonly finish: () => Promise<string>
  /** The client goes away. */
  readonly abandon: () => void
}

export const openStream = async (base: string, key: string, body: Record<string, unknown>): Promise<OpenStream | Reply> => {
  const controller = new AbortController()
  const response = await chatRequest(base, key, { ...body, stream: true }, controller.signal)
  if (response.status !== 200) return toReply(response)
  const reader = response.body!.getReader()
  const decoder = new TextDecoder()
  // The 200 alone could be headers flushed early; the first frame proves the stream is live.
  const first = await reader.read()
  let text = first.value === undefined ? "" : decoder.decode(first.value, { stream: true })
  return {
    status: response.status,
    headers: response.headers,
    requestId: response.headers.get("x-request-id") ?? "",
    finish: async () => {
      for (let next = await reader.read(); !next.done; next = await reader.read()) text += decoder.decode(next.value, { stream: true })
      return text
    },
    abandon: () => controller.abort()
  }
}

export const isOpen = (value: OpenStream | Reply): value is OpenStream => "finish" in value

export const expectOpen = (value: OpenStream | Reply): OpenStream => {
  if (!isOpen(value)) expect.fail(`expected an open stream, got ${value.status}: ${value.text}`)
  return value
}

/** The X-RateLimit-* trio every admitted request carries (spec 8): integers, Reset in Unix seconds. */
export const expectRateHeaders = (headers: Headers, limit: number) => {
  // The moment the gateway answered, by its own Date header (whole seconds), not when this test
  // got to read the headers: on a loaded machine that was seconds later, and a bucket a request
  // had just drawn from was full again before "now".
  const date = headers.get("date")
  const now = date === null ? Date.now() / 1000 : Date.parse(date) / 1000
  expect(headers.get("x-ratelimit-limit")).toBe(String(limit))
  const remaining = headers.get("x-ratelimit-remaining") ?? ""
  const reset = headers.get("x-ratelimit-reset") ?? ""
  expect(remaining).toMatch(/^\d+$/)
  expect(Number(remaining)).toBeLessThan(limit)
  expect(reset).toMatch(/^\d+$/)
  // A full bucket is at most one minute away; a little slack for clocks (Redis's vs ours).
  expect(Number(reset)).toBeGreaterThanOrEqual(Math.floor(now) - 1)
  expect(Number(reset)).toBeLessThanOrEqual(Math.ceil(now) + 63)
  return { remaining: Number(remaining), reset: Number(reset) }
}

/** The 429 of the per-minute limit: envelope, Retry-After >= 1, the three headers, the limit named. */
export const expectRateLimited = (reply: Reply, limit: number) => {
  expect(reply.status, reply.text).toBe(429)
  expect(reply.body.error).toBe("rate_limited")
  expect(reply.body.status).toBe(429)
  expect(reply.body.request_id).toBe(reply.requestId)
  expect(reply.body.details.limit).toBe("requests_per_minute")
  expect(reply.body.message).toContain(`${limit} requests per minute`)
  const retryAfter = reply.headers.get("retry-after") ?? ""
  expect(retryAfter).toMatch(/^\d+$/)
  expect(Number(retryAfter)).toBeGreaterThanOrEqual(1)
  expect(Number(retryAfter)).toBeLessThanOrEqual(60)
  expect(reply.headers.get("x-ratelimit-limit")).toBe(String(limit))
  expect(reply.headers.get("x-ratelimit-remaining")).toBe("0")
  expect(reply.headers.get("x-ratelimit-reset") ?? "").toMatch(/^\d+$/)
  return Number(retryAfter)
}

export const expectError = (reply: Reply, status: number, slug: string) => {
  expect({ status: reply.status, slug: reply.body?.error }, reply.text).toEqual({ status, slug })
  expect(reply.body.status).toBe(status)
}

export const balance = async (base: string): Promise<number> => {
  const reply = await adminCall(base, "GET", "/workspace")
  expect(reply.status, reply.text).toBe(200)
  return reply.body.credits as number
}

/** The whole ledger, oldest first, by following the cursor. */
export const ledger = async (base: string): Promise<Array<LedgerEntry>> => {
  const rows: Array<LedgerEntry> = []
  let cursor: string | null = null
  do {
    const reply: Reply = await adminCall(base, "GET", `/workspace/ledger?limit=1000${cursor === null ? "" : `&cursor=${cursor}`}`)
    expect(reply.status, reply.text).toBe(200)
    rows.push(...(reply.body.data as Array<LedgerEntry>))
    cursor = reply.body.next_cursor
  } while (cursor !== null)
  return rows.sort((a, b) => a.seq - b.seq)
}

export const ledgerOf = async (base: string, requestId: string): Promise<Array<LedgerEntry>> => {
  const reply = await adminCall(base, "GET", `/workspace/ledger?request_id=${requestId}`)
  expect(reply.status, reply.text).toBe(200)
  return (reply.body.data as Array<LedgerEntry>).sort((a, b) => a.seq - b.seq)
}

/**
 * The ledger explains the balance: it opens with the initial pool, each row's balance_after is
 * the previous one plus its amount, the last one is the balance, and every row says who, what,
 * when and (for charges and refunds) which request. A refund gives back exactly one earlier
 * charge of the same request.
 */
export const expectLedgerExplains = (rows: ReadonlyArray<LedgerEntry>, finalBalance: number) => {
  expect(rows[0]?.kind).toBe("initial")
  let running = 0
  const charged = new Map<string, LedgerEntry>()
  const refunded = new Set<string>()
  for (const row of rows) {
    running += row.amount
    expect(row.balance_after, `ledger row ${row.seq}`).toBe(running)
    expect(row.balance_after).toBeGreaterThanOrEqual(0)
    expect(Number.isNaN(Date.parse(row.ts))).toBe(false)
    expect(row.actor.length).toBeGreaterThan(0)
    if (row.kind === "charge" || row.kind === "refund") {
      expect(row.key_id).toMatch(/^key_/)
      expect(row.actor).toBe(row.key_id)
      expect(row.request_id).toMatch(/^req_/)
      expect(row.model).not.toBeNull()
    }
    if (row.kind === "charge") {
      expect(row.amount).toBeLessThan(0)
      expect(charged.has(row.request_id!), `one charge per request (${row.request_id})`).toBe(false)
      charged.set(row.request_id!, row)
    }
    if (row.kind === "refund") {
      const charge = charged.get(row.request_id!)
      expect(charge, `refund of ${row.request_id} follows its charge`).toBeDefined()
      expect(row.amount).toBe(-charge!.amount)
      expect(row.key_id).toBe(charge!.key_id)
      expect(refunded.has(row.request_id!), `one refund per request (${row.request_id})`).toBe(false)
      refunded.add(row.request_id!)
    }
    if (row.kind === "topup" || row.kind === "initial") expect(row.amount).toBeGreaterThanOrEqual(0)
  }
  expect(running).toBe(finalBalance)
}

/** The SSE data payloads of a chat completions stream. */
export { sseData as dataPayloads } from "../support/sse.ts"
