/** What the floor servers share: the upstream pool and the helper protocol of bench/processes.ts. */
import type { Server } from "node:http"
import type { AddressInfo } from "node:net"
import { Pool } from "undici"

/** The key the bench's ladder sends to every floor server (only shaped.ts checks it). */
export const FLOOR_KEY = "sk-mg-0123456789abcdef0123456789abcdef"

const base = new URL(process.argv[2]!)
/** The upstream scenario's path prefix (`/d0/n1`), before the vendor path. */
const prefix = base.pathname.replace(/\/$/, "")
const pool = new Pool(base.origin, { connections: 64 })

/** Forwards one chat body and reads the answer whole, as every rung does. */
export const forward = async (body: unknown): Promise<string> => {
  const answer = await pool.request({
    path: `${prefix}/v1/chat/completions`,
    method: "POST",
    headers: { "content-type": "application/json", authorization: "Bearer sk-bench-upstream" },
    body: JSON.stringify(body)
  })
  return answer.body.text()
}

/** Announces the port the way bench/processes.ts waits for, and exits when the bench goes away. */
export const announce = (server: Server) => {
  const { port } = server.address() as AddressInfo
  process.stdout.write(`listening on http://127.0.0.1:${port}\n`)
  process.stdin.on("end", () => process.exit(0))
  process.stdin.resume()
}
