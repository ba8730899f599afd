/**
 * The floor the gateway is compared with: the smallest useful Node proxy, a node:http server that
 * forwards each request to the fake upstream over a keep-alive `http.Agent` and pipes the bytes
 * both ways, with no auth, parsing, limits, credits or audit. The difference between it and the
 * direct baseline is what one extra Node hop costs on this machine, before any pipeline work.
 *
 * Started by bench/run.ts with the upstream's origin as its argument; prints
 * `listening on <url>` and exits when its stdin closes.
 */
import * as http from "node:http"
import type { AddressInfo } from "node:net"

const upstream = new URL(process.argv[2]!)
// As many sockets as the load generator opens (32), kept open between requests.
const agent = new http.Agent({ keepAlive: true, maxSockets: 64, maxFreeSockets: 64, keepAliveMsecs: 60_000 })

const server = http.createServer({ keepAliveTimeout: 120_000, requestTimeout: 0 }, (req, res) => {
  const forward = http.request({
    agent,
    host: upstream.hostname,
    port: upstream.port,
    method: req.method,
    path: req.url,
    headers: { "content-type": req.headers["content-type"] ?? "application/json", ...lengthOf(req) }
  }, (answer) => {
    const type = answer.headers["content-type"]
    res.writeHead(answer.statusCode ?? 502, typeof type === "string" ? { "content-type": type } : {})
    answer.pipe(res)
  })
  forward.on("error", (error) => {
    if (res.headersSent) return res.destroy()
    res.writeHead(502, { "content-type": "text/plain" })
    res.end(error.message)
  })
  req.pipe(forward)
})

/** The client's content-length when it sent one, so the upstream sees the same framing. */
const lengthOf = (req: http.IncomingMessage) => {
  const length = req.headers["content-length"]
  return length === undefined ? {} : { "content-length": length }
}

server.listen(0, "127.0.0.1", () => {
  const { port } = server.address() as AddressInfo
  process.stdout.write(`listening on http://127.0.0.1:${port}\n`)
})

process.stdin.on("end", () => process.exit(0))
process.stdin.resume()
