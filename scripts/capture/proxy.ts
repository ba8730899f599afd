// A recording proxy: sits between a real client and a running gateway, forwards every request
// unchanged (headers, compressed bodies, streams as they arrive) and records each exchange: the
// request in the fixture shape of record.ts (method, path, query, lowercased headers, decoded
// body) and what the gateway answered (status, headers, the body's text up to a cap). Used by
// scripts/live-clis.ts to see, per client and provider kind, which request failed and why.
//
// Run alone: node scripts/capture/proxy.ts --target http://127.0.0.1:8080 --port 4556 --out /tmp/exchanges.json
import { writeFileSync } from "node:fs"
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { parseArgs } from "node:util"
import { type CapturedRequest, parseBody } from "./record.ts"

export interface Exchange {
  readonly request: CapturedRequest
  readonly response: {
    readonly status: number
    readonly headers: Record<string, string>
    /** The answer's text (decoded as UTF-8), cut at `maxBodyChars`. */
    readonly body: string
    /** Whether the answer ended cleanly (false: the gateway or the client broke the connection). */
    readonly complete: boolean
  }
}

export interface ProxyOptions {
  /** The gateway's origin, e.g. `http://127.0.0.1:8080`. */
  readonly target: string
  readonly port?: number
  /** Characters of each answer kept (default 64 KiB: the ends of streams matter most, see below). */
  readonly maxBodyChars?: number
  /** Called as each request arrives, with how many arrived so far. */
  readonly onRequest?: (count: number) => void
}

export interface RecordingProxy {
  readonly url: string
  readonly exchanges: ReadonlyArray<Exchange>
  close(): Promise<void>
}

const flatten = (headers: http.IncomingHttpHeaders): Record<string, string> => {
  const out: Record<string, string> = {}
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined) out[name] = Array.isArray(value) ? value.join(", ") : value
  }
  return out
}

// Keeps the first and the last half of a long answer: a stream's end (its error or stop frame)
// is what tells whether it completed.
const clip = (text: string, max: number): string =>
  text.length <= max ? text : `${text.slice(0, max / 2)}\n[... ${text.length - max} characters ...]\n${text.slice(-max / 2)}`

export const startRecordingProxy = async (options: ProxyOptions): Promise<RecordingProxy> => {
  const target = new URL(options.target)
  const max = options.maxBodyChars ?? 65_536
  // In the order the requests arrived; each filled in once its answer ended (close waits for that:
  // a client may exit as soon as it has read a stream's last event, before the gateway's end).
  const slots: Array<Exchange | undefined> = []
  const pending = new Set<Promise<void>>()
  let count = 0
  const server = http.createServer((req, res) => {
    options.onRequest?.(++count)
    const slot = slots.push(undefined) - 1
    let settle!: () => void
    const settled = new Promise<void>((done) => (settle = done))
    pending.add(settled)
    void settled.then(() => pending.delete(settled))
    const chunks: Array<Buffer> = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    // A request body cut off by the client is never forwarded: nothing to wait for.
    req.on("close", () => {
      if (!req.complete) settle()
    })
    req.on("end", () => {
      const raw = Buffer.concat(chunks)
      const headers = flatten(req.headers)
      const url = new URL(req.url ?? "/", "http://proxy")
      const request: CapturedRequest = {
        method: req.method ?? "GET",
        path: url.pathname,
        query: url.search.replace(/^\?/, ""),
        headers,
        body: parseBody(raw, headers["content-encoding"])
      }
      const record = (response: Exchange["response"]) => {
        if (slots[slot] === undefined) slots[slot] = { request, response }
        settle()
      }
      const forwarded = { ...req.headers, host: target.host }
      const upstream = http.request(
        { host: target.hostname, port: target.port, method: req.method, path: req.url, headers: forwarded },
        (answer) => {
          res.writeHead(answer.statusCode ?? 502, answer.rawHeaders)
          const received: Array<Buffer> = []
          answer.on("data", (chunk: Buffer) => {
            received.push(chunk)
            res.write(chunk)
          })
          const finish = (complete: boolean) =>
            record({
              status: answer.statusCode ?? 0,
              headers: flatten(answer.headers),
              body: clip(Buffer.concat(received).toString("utf8"), max),
              complete
            })
          answer.on("end", () => {
            finish(true)
            res.end()
          })
          answer.on("aborted", () => {
            finish(false)
            res.destroy()
          })
        }
      )
      // The client went away first (it may exit once it has read a stream's last event): the
      // gateway's answer is read to its end all the same, unless it never ends.
      res.on("close", () => {
        if (slots[slot] === undefined) setTimeout(() => upstream.destroy(), 10_000).unref()
      })
      upstream.on("error", (error) => {
        record({ status: 0, headers: {}, body: `proxy: ${String(error)}`, complete: false })
        if (!res.headersSent) res.writeHead(502, { "content-type": "text/plain" })
        res.end(`proxy: ${String(error)}`)
      })
      upstream.end(raw)
    })
  })
  await new Promise<void>((resolve) => server.listen(options.port ?? 0, "127.0.0.1", resolve))
  const { port } = server.address() as AddressInfo
  const exchanges: Array<Exchange> = []
  return {
    url: `http://127.0.0.1:${port}`,
    get exchanges() {
      exchanges.splice(0, exchanges.length, ...slots.filter((e): e is Exchange => e !== undefined))
      return exchanges
    },
    close: async () => {
      await Promise.all([...pending])
      await new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      })
    }
  }
}

if (import.meta.main) {
  const { values } = parseArgs({
    options: { target: { type: "string" }, port: { type: "string", default: "4556" }, out: { type: "string", default: "/tmp/exchanges.json" } }
  })
  if (values.target === undefined) throw new Error("--target http://host:port is required")
  const proxy = await startRecordingProxy({ target: values.target, port: Number(values.port) })
  process.stdout.write(`recording proxy on ${proxy.url} -> ${values.target}; Ctrl-C writes ${values.out}\n`)
  process.on("SIGINT", () => {
    writeFileSync(values.out, `${JSON.stringify(proxy.exchanges, null, 2)}\n`)
    void proxy.close().then(() => process.exit(0))
  })
}
