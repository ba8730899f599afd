/** Raw HTTP helpers for what `fetch` cannot send (oversized headers, chunked bodies, bad framing). */
import { request } from "node:http"
import { connect } from "node:net"

export interface RawResponse {
  readonly status: number
  readonly headers: Record<string, string | string[] | undefined>
  readonly body: string
}

/** Sends bytes exactly as given and reads the reply until the server closes or answers fully. */
export const rawExchange = (port: number, bytes: string | Buffer): Promise<string> =>
  new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1")
    const chunks: Array<Buffer> = []
    socket.on("data", (chunk) => chunks.push(chunk))
    socket.on("error", (error) => (chunks.length > 0 ? resolve(Buffer.concat(chunks).toString()) : reject(error)))
    socket.on("close", () => resolve(Buffer.concat(chunks).toString()))
    socket.write(bytes)
    setTimeout(() => socket.destroy(), 3000).unref()
  })

/** A chunked upload (no Content-Length) that keeps writing until the server answers. */
export const chunkedUpload = (url: string, totalBytes: number, headers: Record<string, string>): Promise<RawResponse> =>
  new Promise((resolve, reject) => {
    const req = request(url, { method: "POST", headers: { ...headers, "transfer-encoding": "chunked" } }, (res) => {
      let body = ""
      res.setEncoding("utf8")
      res.on("data", (c) => (body += c))
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }))
    })
    req.on("error", reject)
    const chunk = Buffer.alloc(64 * 1024, 0x20)
    let sent = 0
    const pump = () => {
      while (sent < totalBytes) {
        sent += chunk.length
        if (!req.write(chunk)) return req.once("drain", pump)
      }
      req.end()
    }
    pump()
  })
