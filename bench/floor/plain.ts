/** Rung 1: `node:http` + undici. Body read, JSON parsed, forwarded, answer written. */
import { createServer } from "node:http"
import { announce, forward } from "./common.ts"

const server = createServer({ keepAliveTimeout: 120_000, requestTimeout: 0 }, (req, res) => {
  const chunks: Array<Buffer> = []
  req.on("data", (chunk: Buffer) => chunks.push(chunk))
  req.on("end", () => {
    forward(JSON.parse(Buffer.concat(chunks).toString())).then((text) => {
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(text), "x-request-id": "req_x" })
      res.end(text)
    }, () => {
      res.writeHead(502)
      res.end()
    })
  })
})
server.listen(0, "127.0.0.1", () => announce(server))
