/**
 * The floor the gateway is compared with: the smallest useful Node proxy, a node:http server that
 * forwards each request to the fake upstream over a keep-alive undici pool and pipes the answer
 * back, with no auth, parsing, limits, credits or audit. The difference between it and the
 * direct baseline is what one extra Node hop costs on this machine, before any pipeline work.
 *
 * Started by bench/run.ts with the upstream's origin as its argument; prints
 * `listening on <url>` and exits when its stdin closes.
 */
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { Pool } from "undici"

const upstream = new Pool(process.argv[2]!, { connections: 64, keepAliveTimeout: 60_000 })

const server = http.createServer({ keepAliveTimeout: 120_000, requestTimeout: 0 }, (req, res) => {
  const chunks: Array<Buffer> = []
  req.on("data", (chunk: Buffer) => chunks.push(chunk))
  req.on("end", () => {
    upstream.request({
      method: "POST",
      path: req.url ?? "/",
      headers: { "content-type": "application/json" },
      body: Buffer.concat(chunks)
    }).then(
      async (answer) => {
        const type = answer.headers["content-type"]
        res.writeHead(answer.statusCode, typeof type === "string" ? { "content-type": type } : {})
        for await (const chunk of answer.body) res.write(chunk)
        res.end()
      },
      (error: Error) => {
        res.writeHead(502, { "content-type": "text/plain" })
        res.end(error.message)
      }
    )
  })
})

server.listen(0, "127.0.0.1", () => {
  const { port } = server.address() as AddressInfo
  process.stdout.write(`listening on http://127.0.0.1:${port}\n`)
})

process.stdin.on("end", () => process.exit(0))
process.stdin.resume()
